//! The overhead of the RuntimeClass every stack runs under (`STACK_RUNTIME_CLASS`), read once
//! per process: a stack's reserved CPU and memory (its record, `/stats`, preflight) are then
//! what the scheduler counts, the sandbox's own share included.

use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;

use super::{Cluster, ClusterError};
use crate::model::PodOverhead;
use crate::quantity::{parse_bytes, parse_cpu_milli};

impl Cluster {
    /// The `overhead.podFixed` of RuntimeClass `class` (none: zero). A class the cluster lacks
    /// is the operator's to fix, as a missing guard rail is; a failed read is tried again by
    /// the next caller.
    pub(crate) async fn runtime_overhead(&self, class: &str) -> Result<PodOverhead, ClusterError> {
        self.runtime_overhead
            .get_or_try_init(|| async {
                let found = Api::<RuntimeClass>::all(self.client.clone())
                    .get_opt(class)
                    .await
                    .map_err(|e| ClusterError::from_kube("get runtime class", e))?
                    .ok_or_else(|| {
                        ClusterError::Unguarded(format!(
                            "STACK_RUNTIME_CLASS names {class}, a RuntimeClass the cluster does not have"
                        ))
                    })?;
                overhead_of(&found).map_err(|why| ClusterError::Unguarded(format!("RuntimeClass {class}: {why}")))
            })
            .await
            .copied()
    }
}

/// What `class` adds to each pod: its `overhead.podFixed` CPU and memory.
fn overhead_of(class: &RuntimeClass) -> Result<PodOverhead, String> {
    let fixed = class.overhead.as_ref().and_then(|o| o.pod_fixed.as_ref());
    let amount = |name: &str, parse: fn(&str) -> Result<i64, crate::quantity::QuantityError>| {
        fixed
            .and_then(|f| f.get(name))
            .map(|q| parse(&q.0).map_err(|e| format!("overhead {name} {:?} {e}", q.0)))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    Ok(PodOverhead {
        cpu_milli: amount("cpu", parse_cpu_milli)?,
        memory_bytes: amount("memory", parse_bytes)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(overhead: serde_json::Value) -> RuntimeClass {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gvisor"}, "handler": "runsc", "overhead": overhead
        }))
        .unwrap()
    }

    #[test]
    fn the_overhead_is_the_pod_fixed_cpu_and_memory_and_none_is_zero() {
        let gvisor = class(serde_json::json!({"podFixed": {"cpu": "50m", "memory": "32Mi"}}));
        assert_eq!(
            overhead_of(&gvisor),
            Ok(PodOverhead {
                cpu_milli: 50,
                memory_bytes: 32 << 20
            })
        );
        let memory_only = class(serde_json::json!({"podFixed": {"memory": "1Gi"}}));
        assert_eq!(
            overhead_of(&memory_only).map(|o| (o.cpu_milli, o.memory_bytes)),
            Ok((0, 1 << 30))
        );
        assert_eq!(overhead_of(&class(serde_json::json!(null))), Ok(PodOverhead::default()));
        let wrong = class(serde_json::json!({"podFixed": {"cpu": "lots"}}));
        assert!(overhead_of(&wrong).is_err_and(|why| why.contains("cpu")));
    }
}
