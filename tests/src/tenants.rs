//! Three tenants and keys of every role, configured exactly as a deployment is
//! (`STACK_TENANTS`, `API_KEYS` with the keys' SHA-256), for the tenancy tests and benchmarks.

use stack_core::KeyHash;

/// One configured key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestKey {
    pub key: &'static str,
    pub role: &'static str,
    /// `*` for every tenant.
    pub tenant: &'static str,
}

impl TestKey {
    /// Whether this key sees stacks of `tenant`.
    pub fn sees(&self, tenant: &str) -> bool {
        self.tenant == "*" || self.tenant == tenant
    }

    pub fn may_create(&self) -> bool {
        matches!(self.role, "platform" | "owner")
    }

    pub fn may_change(&self) -> bool {
        matches!(self.role, "platform" | "operator" | "owner")
    }

    pub fn may_observe(&self) -> bool {
        matches!(self.role, "operator" | "viewer" | "owner")
    }

    pub fn may_batch_delete(&self) -> bool {
        matches!(self.role, "operator" | "owner")
    }
}

pub const TENANTS: [&str; 3] = ["ctf", "wargame", "uni"];

pub const CTF_PLATFORM: TestKey = key("ctf-platform-key-0001", "platform", "ctf");
/// A second key of the same platform: rotation keeps two valid at once.
pub const CTF_PLATFORM_NEXT: TestKey = key("ctf-platform-key-0002", "platform", "ctf");
pub const WARGAME_PLATFORM: TestKey = key("wargame-platform-key", "platform", "wargame");
pub const UNI_PLATFORM: TestKey = key("uni-platform-key-0001", "platform", "uni");
pub const CTF_OPERATOR: TestKey = key("ctf-operator-key-0001", "operator", "ctf");
pub const WARGAME_VIEWER: TestKey = key("wargame-viewer-key-01", "viewer", "wargame");
pub const ALL_OPERATOR: TestKey = key("cluster-operator-key1", "operator", "*");
pub const ALL_VIEWER: TestKey = key("cluster-viewer-key-01", "viewer", "*");

pub const KEYS: [TestKey; 8] = [
    CTF_PLATFORM,
    CTF_PLATFORM_NEXT,
    WARGAME_PLATFORM,
    UNI_PLATFORM,
    CTF_OPERATOR,
    WARGAME_VIEWER,
    ALL_OPERATOR,
    ALL_VIEWER,
];

const fn key(key: &'static str, role: &'static str, tenant: &'static str) -> TestKey {
    TestKey { key, role, tenant }
}

/// `API_KEYS` for `keys`.
pub fn api_keys(keys: &[TestKey]) -> String {
    keys.iter()
        .map(|k| format!("{}:{}:{}", k.role, k.tenant, KeyHash::of(k.key).to_hex()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The settings of a deployment with the three tenants (and `default`, the harness's own key's),
/// `limits` as `STACK_TENANTS` writes them (`ctf=3`).
pub fn settings(limits: &[(&str, u32)]) -> Vec<(String, String)> {
    let tenants: Vec<String> = TENANTS
        .iter()
        .chain(&["default"])
        .map(|t| match limits.iter().find(|(name, _)| name == t) {
            Some((_, limit)) => format!("{t}={limit}"),
            None => (*t).to_owned(),
        })
        .collect();
    vec![
        ("STACK_TENANTS".to_owned(), tenants.join(",")),
        ("API_KEYS".to_owned(), api_keys(&KEYS)),
    ]
}
