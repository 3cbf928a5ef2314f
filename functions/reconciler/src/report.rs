//! How a pass's summary leaves the process: a structured log line, the handler's answer
//! and an Embedded Metric Format line that CloudWatch turns into metrics.

use jiff::Timestamp;
use stack_core::Summary;

pub fn log(s: &Summary) {
    tracing::info!(
        lease_held = s.lease_held,
        scanned = s.scanned,
        expired = s.counts.expired,
        drift = s.counts.drift,
        orphans = s.counts.orphans,
        status_updates = s.counts.status_updates,
        jobs = s.counts.jobs,
        failures = s.counts.failures,
        remaining = s.counts.remaining,
        duration_ms = s.duration_ms,
        "reconcile pass finished"
    );
}

pub fn summary_line(s: &Summary) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Writes the EMF document as one stdout line: in Lambda, stdout goes to CloudWatch Logs,
/// which extracts the metrics.
pub fn emit_emf(s: &Summary, at: Timestamp) {
    use std::io::Write;
    let mut line = s.emf(at).to_string();
    line.push('\n');
    if let Err(err) = std::io::stdout().lock().write_all(line.as_bytes()) {
        tracing::warn!(error = %err, "could not write the metrics line");
    }
}
