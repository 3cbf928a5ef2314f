use std::collections::HashSet;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("object not found")]
    NotFound,
    /// Quota exhausted or no node can take the pod: the caller may retry later.
    #[error("cluster saturated: {0}")]
    Saturated(String),
    /// Admission refused the object (LimitRange, Pod Security, validation): the input is at fault.
    #[error("{0}")]
    Rejected(String),
    /// The object changed since it was read: read it again and redo the change.
    #[error("the object changed meanwhile")]
    Conflict,
    #[error("no available nodeport")]
    NodePortsExhausted,
    /// A guard rail the exposure mode needs is missing: the operator must act.
    #[error("{0}")]
    Unguarded(String),
    /// The apiserver is unreachable, slow, throttling or failing: worth trying again later.
    #[error("kubernetes {operation} unavailable")]
    Unavailable {
        operation: &'static str,
        #[source]
        source: kube::Error,
    },
    /// Any other apiserver answer: our defect or configuration (RBAC denied, a malformed object).
    #[error("kubernetes {operation} failed")]
    Api {
        operation: &'static str,
        #[source]
        source: kube::Error,
    },
    /// An answer that does not decode as what was asked for: our defect or a server mismatch.
    #[error("kubernetes {operation} answered what does not decode")]
    Undecodable {
        operation: &'static str,
        #[source]
        source: ProtobufError,
    },
    /// An object the apiserver returned lacks what it always carries.
    #[error("kubernetes returned an incomplete object: {0}")]
    Incomplete(&'static str),
    #[error("kubernetes client setup failed: {0}")]
    Setup(String),
    /// The task that carried a write ended without its answer (a panic, the runtime stopping).
    #[error("kubernetes {operation} interrupted")]
    Interrupted {
        operation: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Why a protobuf answer did not decode.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("not in the Kubernetes protobuf envelope")]
    NoEnvelope,
    #[error(transparent)]
    Decode(#[from] prost::DecodeError),
}

impl ClusterError {
    /// Sorts an apiserver error into what the caller must tell its client.
    pub(crate) fn from_kube(operation: &'static str, err: kube::Error) -> Self {
        if is_transient(&err) {
            return ClusterError::Unavailable { operation, source: err };
        }
        let kube::Error::Api(status) = &err else {
            return ClusterError::Api { operation, source: err };
        };
        let forbidden = status.code == 403;
        if status.code == 404 {
            ClusterError::NotFound
        } else if forbidden && status.message.contains("exceeded quota") {
            ClusterError::Saturated(status.message.clone())
        } else if forbidden && status.message.contains("is forbidden: User") {
            // RBAC denial: our configuration, not the caller's input.
            ClusterError::Api { operation, source: err }
        } else if forbidden || status.code == 422 || status.code == 400 {
            ClusterError::Rejected(status.message.clone())
        } else {
            ClusterError::Api { operation, source: err }
        }
    }

    /// RBAC refused the call: the functions' rights (`functions/kubernetes-rbac.yaml`) lack it.
    pub(crate) fn is_rbac_denial(&self) -> bool {
        matches!(self, ClusterError::Api { source: kube::Error::Api(status), .. } if status.code == 403)
    }

    /// A dependency problem that may pass: the client is told to retry (503).
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, ClusterError::Unavailable { .. } | ClusterError::Conflict)
    }
}

/// Connection failures, timeouts, throttling (429) and server errors (5xx) may pass.
fn is_transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code == 429 || (500..=599).contains(&status.code),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Node ports the apiserver refused as "already allocated" in a service create error.
pub(crate) fn taken_node_ports(err: &kube::Error) -> Option<HashSet<u16>> {
    let kube::Error::Api(status) = err else { return None };
    if status.code != 422 || !status.message.contains("already allocated") {
        return None;
    }
    let from_causes: HashSet<u16> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .filter(|c| c.field.ends_with(".nodePort") && c.message.contains("already allocated"))
        .filter_map(|c| first_number_after(&c.message, "Invalid value: "))
        .collect();
    if !from_causes.is_empty() {
        return Some(from_causes);
    }
    // Fall back to the message: `spec.ports[0].nodePort: Invalid value: 31001: provided port is already allocated`.
    Some(
        status
            .message
            .split("Invalid value: ")
            .skip(1)
            .filter_map(|part| part.split(':').next()?.trim().parse().ok())
            .collect(),
    )
}

fn first_number_after(text: &str, marker: &str) -> Option<u16> {
    let rest = text.split(marker).nth(1).unwrap_or(text);
    let digits: String = rest
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, "").with_code(code).boxed())
    }

    #[test]
    fn admission_errors_are_sorted_for_the_client() {
        let quota = "pods \"stack-1\" is forbidden: exceeded quota: q, requested: cpu=2, used: cpu=1, limited: cpu=2";
        assert!(matches!(
            ClusterError::from_kube("create pod", api_error(403, quota)),
            ClusterError::Saturated(_)
        ));
        let limit = "pods \"stack-1\" is forbidden: maximum cpu usage per Container is 1, but limit is 2";
        assert!(matches!(
            ClusterError::from_kube("create pod", api_error(403, limit)),
            ClusterError::Rejected(_)
        ));
        let rbac = "pods is forbidden: User \"x\" cannot create resource \"pods\"";
        assert!(matches!(
            ClusterError::from_kube("create pod", api_error(403, rbac)),
            ClusterError::Api { .. }
        ));
        assert!(matches!(
            ClusterError::from_kube("get pod", api_error(404, "not found")),
            ClusterError::NotFound
        ));
        assert!(matches!(
            ClusterError::from_kube("get pod", api_error(409, "conflict")),
            ClusterError::Api { .. }
        ));
    }

    #[test]
    fn a_struggling_apiserver_is_transient() {
        for code in [429, 500, 503, 504] {
            let err = ClusterError::from_kube("get pod", api_error(code, "busy"));
            assert!(err.is_transient(), "{code}: {err:?}");
        }
        let timed_out = kube::Error::Service(Box::new(std::io::Error::from(std::io::ErrorKind::TimedOut)));
        assert!(ClusterError::from_kube("delete service", timed_out).is_transient());
        let rbac = "pods is forbidden: User \"x\" cannot create resource \"pods\"";
        assert!(!ClusterError::from_kube("create pod", api_error(403, rbac)).is_transient());
        let undecodable = kube::Error::SerdeError(serde_json::from_str::<u8>("x").unwrap_err());
        assert!(!ClusterError::from_kube("get pod", undecodable).is_transient());
    }

    #[test]
    fn taken_ports_are_read_from_the_message() {
        let msg = "Service \"svc\" is invalid: [spec.ports[0].nodePort: Invalid value: 31001: provided port is already allocated, spec.ports[2].nodePort: Invalid value: 31500: provided port is already allocated]";
        assert_eq!(
            taken_node_ports(&api_error(422, msg)),
            Some(HashSet::from([31001, 31500]))
        );
        assert_eq!(
            taken_node_ports(&api_error(422, "spec.ports[0].port: Invalid value")),
            None
        );
        assert_eq!(taken_node_ports(&api_error(409, msg)), None);
    }
}
