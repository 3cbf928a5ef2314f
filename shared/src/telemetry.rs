//! JSON logs through tracing, one line per event; `RUST_LOG` filters (default `info`).

use tracing_subscriber::EnvFilter;

/// An error and its causes on one line, `a: b: c`: the cause often holds the words that
/// explain (the apiserver's, the SDK's).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(error) = cause {
        text.push_str(": ");
        text.push_str(&error.to_string());
        cause = error.source();
    }
    text
}

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
