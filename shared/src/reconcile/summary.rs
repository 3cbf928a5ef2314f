//! What a pass did, as the handler's answer, one log line and CloudWatch metrics (pure).

use jiff::Timestamp;
use serde::Serialize;

use crate::history::PassCounts;
use serde_json::{Map, Value, json};

/// CloudWatch namespace of the reconciler's metrics.
pub(crate) const METRIC_NAMESPACE: &str = "StackProvisioner";
/// Dimension value telling the reconciler's metrics apart from the API's.
const FUNCTION_DIMENSION: &str = "reconciler";

/// One pass: whether it ran, what it looked at, what it did and how long it took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// False when another invocation held the lease and this one did nothing.
    pub lease_held: bool,
    /// Stack records looked at.
    pub scanned: usize,
    #[serde(flatten)]
    pub counts: PassCounts,
    pub duration_ms: u64,
}

impl Summary {
    /// The answer of a pass that found the lease taken.
    pub fn skipped(duration_ms: u64) -> Self {
        Self {
            lease_held: false,
            duration_ms,
            ..Self::default()
        }
    }

    /// `(metric name, value, unit)` in a fixed order.
    fn metrics(&self) -> [(&'static str, u64, &'static str); 10] {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        [
            ("Scanned", count(self.scanned), "Count"),
            ("Expired", count(self.counts.expired), "Count"),
            ("Drift", count(self.counts.drift), "Count"),
            ("Orphans", count(self.counts.orphans), "Count"),
            ("StatusUpdates", count(self.counts.status_updates), "Count"),
            ("Jobs", count(self.counts.jobs), "Count"),
            ("Failures", count(self.counts.failures), "Count"),
            ("Remaining", count(self.counts.remaining), "Count"),
            ("Skipped", u64::from(!self.lease_held), "Count"),
            ("DurationMs", self.duration_ms, "Milliseconds"),
        ]
    }

    /// The CloudWatch Embedded Metric Format document for this pass; printed as one stdout
    /// line, CloudWatch Logs turns it into metrics without any API call.
    pub fn emf(&self, at: Timestamp) -> Value {
        let metrics = self.metrics();
        let definitions: Vec<Value> = metrics
            .iter()
            .map(|(name, _, unit)| json!({ "Name": name, "Unit": unit }))
            .collect();
        let mut document = Map::new();
        document.insert(
            "_aws".into(),
            json!({
                "Timestamp": at.as_millisecond(),
                "CloudWatchMetrics": [{
                    "Namespace": METRIC_NAMESPACE,
                    "Dimensions": [["Function"]],
                    "Metrics": definitions,
                }],
            }),
        );
        document.insert("Function".into(), json!(FUNCTION_DIMENSION));
        for (name, value, _) in metrics {
            document.insert(name.into(), json!(value));
        }
        Value::Object(document)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Summary {
        Summary {
            lease_held: true,
            scanned: 120,
            counts: PassCounts {
                expired: 3,
                drift: 2,
                orphans: 1,
                status_updates: 7,
                jobs: 1,
                failures: 4,
                remaining: 5,
            },
            duration_ms: 1234,
        }
    }

    #[test]
    fn summary_json_names_every_count() {
        assert_eq!(
            serde_json::to_value(sample()).unwrap(),
            json!({
                "lease_held": true,
                "scanned": 120,
                "expired": 3,
                "drift": 2,
                "orphans": 1,
                "status_updates": 7,
                "jobs": 1,
                "failures": 4,
                "remaining": 5,
                "duration_ms": 1234,
            })
        );
        assert_eq!(
            serde_json::to_value(Summary::skipped(9)).unwrap()["lease_held"],
            json!(false)
        );
    }

    /// `field` of every metric the EMF directive declares, in order.
    fn metric_fields<'a>(directive: &'a Value, field: &str) -> Vec<&'a str> {
        directive["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[field].as_str().unwrap())
            .collect()
    }

    #[test]
    fn emf_document_declares_and_carries_every_metric() {
        let at: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let doc = sample().emf(at);
        let directive = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(doc["_aws"]["Timestamp"], json!(1_893_456_000_000_i64));
        assert_eq!(directive["Namespace"], json!("StackProvisioner"));
        assert_eq!(directive["Dimensions"], json!([["Function"]]));
        assert_eq!(doc["Function"], json!("reconciler"));
        let declared = metric_fields(directive, "Name");
        for name in declared.iter() {
            assert!(doc[name].is_u64(), "{name} declared but has no value");
        }
        for (name, want) in [
            ("Expired", 3),
            ("Drift", 2),
            ("Orphans", 1),
            ("StatusUpdates", 7),
            ("Failures", 4),
            ("Remaining", 5),
            ("DurationMs", 1234),
            ("Skipped", 0),
        ] {
            assert!(declared.contains(&name), "{name} not declared");
            assert_eq!(doc[name], json!(want), "{name}");
        }
        let units = metric_fields(directive, "Unit");
        assert_eq!(units.iter().filter(|u| **u == "Milliseconds").count(), 1);
        assert_eq!(Summary::skipped(3).emf(at)["Skipped"], json!(1));
    }
}
