//! JSON logs through tracing, one line per event; `RUST_LOG` filters (default `info`).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; call once at start-up.
pub fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_target(false)
        .with_env_filter(filter)
        .try_init();
}
