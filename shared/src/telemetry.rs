//! JSON logs through tracing, one line per event; `RUST_LOG` filters, else the level of the
//! function's log configuration (`AWS_LAMBDA_LOG_LEVEL`, the template's `LogLevel`), else `info`.

use std::str::FromStr;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

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
    let lambda_level = std::env::var("AWS_LAMBDA_LOG_LEVEL").ok();
    let filter = EnvFilter::builder()
        .with_default_directive(default_level(lambda_level.as_deref()).into())
        .from_env_lossy();
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_target(false)
        .with_env_filter(filter)
        .try_init();
}

/// The level Lambda keeps (`TRACE` to `FATAL`, as its log configuration names them), so that
/// a `DEBUG` deployment gets our debug lines; `info` without one.
fn default_level(lambda_level: Option<&str>) -> LevelFilter {
    match lambda_level {
        Some(level) if level.eq_ignore_ascii_case("fatal") => LevelFilter::ERROR,
        Some(level) => LevelFilter::from_str(level).unwrap_or(LevelFilter::INFO),
        None => LevelFilter::INFO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambdas_log_level_is_the_default_filter() {
        assert_eq!(default_level(Some("DEBUG")), LevelFilter::DEBUG);
        assert_eq!(default_level(Some("WARN")), LevelFilter::WARN);
        assert_eq!(default_level(Some("FATAL")), LevelFilter::ERROR);
        assert_eq!(default_level(Some("loud")), LevelFilter::INFO);
        assert_eq!(default_level(None), LevelFilter::INFO);
    }
}
