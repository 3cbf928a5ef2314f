//! A valid [`StackRecord`] for tests, changed field by field
//! (`StackRecord::test().status(StackStatus::Creating)`), so a test names only what it is about.

use jiff::Timestamp;

use crate::model::{Exposure, FailureReason, PortMapping, Protocol, StackId, StackRecord, StackStatus};

impl StackRecord {
    /// A running stack with a fresh id in namespace `stacks`, not yet placed on a node, no
    /// ports, no requests, every time at the Unix epoch.
    pub fn test() -> Self {
        let id = StackId::generate();
        Self {
            pod_id: id.pod_name(),
            service_name: id.service_name(),
            stack_id: id,
            namespace: "stacks".into(),
            node_id: String::new(),
            node_public_ip: None,
            pod_spec: String::new(),
            ports: Vec::new(),
            exposure: Exposure::NodePort,
            status: StackStatus::Running,
            ttl_expires_at: Timestamp::UNIX_EPOCH,
            created_at: Timestamp::UNIX_EPOCH,
            updated_at: Timestamp::UNIX_EPOCH,
            requested_cpu_milli: 0,
            requested_memory_bytes: 0,
            idempotency_key: None,
            reason: None,
            message: None,
            failed_at: None,
            labels: None,
            tenant: crate::tenancy::TenantId::default(),
        }
    }

    /// The id, and the pod and service names that follow from it.
    pub fn id(mut self, id: StackId) -> Self {
        self.pod_id = id.pod_name();
        self.stack_id = id;
        let exposure = self.exposure;
        self.exposure(exposure)
    }

    /// The exposure mode, and the service name that follows from it (none for hostport).
    pub fn exposure(mut self, exposure: Exposure) -> Self {
        self.exposure = exposure;
        self.service_name = match exposure {
            Exposure::NodePort => self.stack_id.service_name(),
            Exposure::HostPort => String::new(),
        };
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = namespace.to_owned();
        self
    }

    pub fn node(mut self, node_id: &str) -> Self {
        self.node_id = node_id.to_owned();
        self
    }

    pub fn public_ip(mut self, ip: &str) -> Self {
        self.node_public_ip = Some(ip.to_owned());
        self
    }

    pub fn ports(mut self, ports: Vec<PortMapping>) -> Self {
        self.ports = ports;
        self
    }

    /// `count` TCP ports, container port 80, on node ports `first`, `first + 1`, ...
    pub fn tcp_ports(self, first: u16, count: u16) -> Self {
        self.ports(
            (first..first + count)
                .map(|node_port| PortMapping {
                    container_port: 80,
                    protocol: Protocol::Tcp,
                    node_port,
                })
                .collect(),
        )
    }

    pub fn status(mut self, status: StackStatus) -> Self {
        self.status = status;
        self
    }

    /// Created (and last updated) at `at`.
    pub fn created_at(mut self, at: Timestamp) -> Self {
        self.created_at = at;
        self.updated_at = at;
        self
    }

    pub fn ttl_expires_at(mut self, at: Timestamp) -> Self {
        self.ttl_expires_at = at;
        self
    }

    pub fn requests(mut self, cpu_milli: i64, memory_bytes: i64) -> Self {
        self.requested_cpu_milli = cpu_milli;
        self.requested_memory_bytes = memory_bytes;
        self
    }

    /// Failed at `at` for `reason`: a tombstone.
    pub fn failed(mut self, reason: FailureReason, message: &str, at: Timestamp) -> Self {
        self.status = StackStatus::Failed;
        self.reason = Some(reason);
        self.message = Some(message.to_owned());
        self.failed_at = Some(at);
        self
    }
}

/// `len` characters of printable ASCII without `"` and `\` (safe in a double-quoted YAML
/// scalar), drawn from `seed` by xorshift: text that barely compresses (about 6.5 bits a byte).
pub fn noise(len: usize, seed: u64) -> String {
    let alphabet: Vec<char> = (b' '..=b'~')
        .filter(|b| !matches!(b, b'"' | b'\\'))
        .map(char::from)
        .collect();
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            alphabet[(state % alphabet.len() as u64) as usize]
        })
        .collect()
}
