//! Tenants and roles: whose stacks a key sees and what it may do with them. Pure: the API
//! authenticates with a [`KeyRing`], handlers pass the [`Principal`]'s [`Scope`] down.
//!
//! - A **tenant** is one platform (one event) of a deployment; each stack records its tenant
//!   when it is created. A record written before tenants existed has none and belongs to
//!   [`TenantId::default`] (`default`), the one tenant of a single-key deployment.
//! - A **role** says what a key may do ([`Role::may`]); its **scope** is one tenant, or every
//!   tenant (`*`, operator and viewer keys only, for the people who run the cluster).
//! - Keys are configured as SHA-256 hashes, never in clear; a key that names a stack of
//!   another tenant gets the answer of a stack that does not exist.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The tenant of single-key deployments and of records written before tenants existed.
pub(crate) const DEFAULT_TENANT: &str = "default";
/// Longest tenant name: it is a label value and part of DynamoDB keys.
const MAX_TENANT_LEN: usize = 32;

/// A tenant's name: 1 to 32 lowercase letters, digits and `-`, starting with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    pub fn parse(name: &str) -> Result<Self, String> {
        let valid = !name.is_empty()
            && name.len() <= MAX_TENANT_LEN
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if valid {
            Ok(Self(name.to_owned()))
        } else {
            Err(format!(
                "tenant {name:?}: 1 to {MAX_TENANT_LEN} lowercase letters, digits and '-', starting with a letter or digit"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn is_default(&self) -> bool {
        self.0 == DEFAULT_TENANT
    }

    /// How a request's `Idempotency-Key` is stored: scoped by tenant, so that two platforms
    /// sending the same key get two stacks. `default`'s keys keep their bare form (claims made
    /// before tenants existed still match). The separator, U+001F, cannot occur in a header.
    pub(crate) fn scoped_idempotency_key(&self, key: &str) -> String {
        if self.is_default() {
            key.to_owned()
        } else {
            format!("{}\u{1f}{key}", self.0)
        }
    }
}

impl Default for TenantId {
    fn default() -> Self {
        Self(DEFAULT_TENANT.to_owned())
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for TenantId {
    type Error = String;
    fn try_from(value: String) -> Result<Self, String> {
        Self::parse(&value)
    }
}

impl From<TenantId> for String {
    fn from(id: TenantId) -> Self {
        id.0
    }
}

/// What a request does, as far as roles are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `POST /stacks`.
    Create,
    /// Get, status, list, health.
    Read,
    /// Renew and delete one stack.
    Change,
    /// Stats and history (what the dashboard charts).
    Observe,
    /// Start and read batch deletes.
    BatchDelete,
    /// Declare the images to pre-pull on the stack nodes.
    Prepare,
}

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A CTF platform's backend: create, read, renew and delete its tenant's stacks.
    Platform,
    /// The people running an event: the dashboard, stats, history, renew, delete and batch
    /// delete; no creates (stacks are the platform's to make).
    Operator,
    /// A read-only operator: the dashboard, stats, history and reads; changes nothing.
    Viewer,
    /// Platform and operator at once: the one key of a single-key deployment (`API_KEY`), and
    /// every request while keys are off (`API_KEY_ENABLED=false`).
    Owner,
}

impl Role {
    fn parse(name: &str) -> Result<Self, String> {
        match name {
            "platform" => Ok(Self::Platform),
            "operator" => Ok(Self::Operator),
            "viewer" => Ok(Self::Viewer),
            "owner" => Ok(Self::Owner),
            other => Err(format!("role {other:?}: expected platform, operator, viewer or owner")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Platform => "platform",
            Self::Operator => "operator",
            Self::Viewer => "viewer",
            Self::Owner => "owner",
        }
    }

    /// The one table of what each role may do.
    pub fn may(self, action: Action) -> bool {
        use Action::{BatchDelete, Change, Create, Observe, Prepare, Read};
        match self {
            Self::Owner => true,
            Self::Platform => matches!(action, Create | Read | Change),
            Self::Operator => matches!(action, Read | Change | Observe | BatchDelete | Prepare),
            Self::Viewer => matches!(action, Read | Observe),
        }
    }
}

/// Whose stacks a key sees.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Tenant(TenantId),
    /// Every tenant (jobs stored before tenants existed read as this).
    #[default]
    All,
}

impl Scope {
    pub(crate) fn covers(&self, tenant: &TenantId) -> bool {
        match self {
            Self::Tenant(own) => own == tenant,
            Self::All => true,
        }
    }

    /// The one tenant, if the scope is one.
    pub fn tenant(&self) -> Option<&TenantId> {
        match self {
            Self::Tenant(own) => Some(own),
            Self::All => None,
        }
    }
}

/// Who a request is: the role and scope of its key, the tenant its creates are for, and a
/// short id of the key that is safe to log (the first 12 hex digits of its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub role: Role,
    pub scope: Scope,
    /// Whose stacks its creates make (`default` for a key of every tenant).
    pub tenant: TenantId,
    pub key_id: String,
}

impl Principal {
    /// Every request while keys are off.
    pub fn unauthenticated() -> Self {
        Self {
            role: Role::Owner,
            scope: Scope::All,
            tenant: TenantId::default(),
            key_id: "none".to_owned(),
        }
    }

    pub fn may(&self, action: Action) -> bool {
        self.role.may(action)
    }

    /// The tenant a create by this key makes stacks for.
    pub fn tenant_for_create(&self) -> TenantId {
        self.tenant.clone()
    }
}

/// SHA-256 of a key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyHash([u8; 32]);

impl KeyHash {
    pub fn of(key: &str) -> Self {
        Self(Sha256::digest(key.as_bytes()).into())
    }

    fn parse(hex_digits: &str) -> Result<Self, String> {
        let mut bytes = [0_u8; 32];
        hex::decode_to_slice(hex_digits, &mut bytes)
            .map_err(|_| "expected the key's SHA-256 as 64 hex digits".to_owned())?;
        Ok(Self(bytes))
    }

    /// As `API_KEYS` lists it: 64 hex digits (what `printf %s "$key" | sha256sum` prints).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    fn key_id(&self) -> String {
        hex::encode(&self.0[..6])
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyHash({}…)", self.key_id())
    }
}

/// The configured keys (`API_KEYS`, and the single-key `API_KEY`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRing {
    keys: Vec<(KeyHash, Principal)>,
}

impl KeyRing {
    /// `API_KEYS`: entries `role:tenant:sha256` separated by commas or whitespace (`tenant`
    /// `*` for an operator or viewer of every tenant); `API_KEY`: one key in clear, the
    /// owner of the `default` tenant (single-key deployments, as before tenants existed).
    pub fn parse(entries: Option<&str>, single_key: Option<&str>, tenants: &Tenants) -> Result<Self, Vec<String>> {
        let mut ring = Self::default();
        let mut problems = Vec::new();
        for entry in entries
            .unwrap_or_default()
            .split([',', ' ', '\n', '\t'])
            .filter(|e| !e.is_empty())
        {
            match parse_entry(entry, tenants) {
                Ok((hash, principal)) => ring.add(hash, principal, &mut problems),
                Err(why) => problems.push(format!("API_KEYS: {why}")),
            }
        }
        if let Some(key) = single_key {
            let tenant = TenantId::default();
            if tenants.contains(&tenant) {
                let hash = KeyHash::of(key);
                let principal = principal(Role::Owner, tenant, tenants, &hash);
                ring.add(hash, principal, &mut problems);
            } else {
                problems.push(format!(
                    "API_KEY: its tenant `{DEFAULT_TENANT}` is not in STACK_TENANTS (use API_KEYS)"
                ));
            }
        }
        if problems.is_empty() { Ok(ring) } else { Err(problems) }
    }

    fn add(&mut self, hash: KeyHash, principal: Principal, problems: &mut Vec<String>) {
        if self.keys.iter().any(|(known, _)| *known == hash) {
            problems.push(format!("API_KEYS: key {} is listed twice", principal.key_id));
            return;
        }
        self.keys.push((hash, principal));
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Who `presented` is, if it is one of the keys. Compares against every key in constant
    /// time, so the time taken tells nothing about which key came close.
    pub fn identify(&self, presented: &str) -> Option<&Principal> {
        let hash = KeyHash::of(presented);
        let mut found = None;
        for (known, principal) in &self.keys {
            if bool::from(known.0.ct_eq(&hash.0)) {
                found = Some(principal);
            }
        }
        found
    }
}

fn parse_entry(entry: &str, tenants: &Tenants) -> Result<(KeyHash, Principal), String> {
    let mut parts = entry.splitn(3, ':');
    let (Some(role), Some(tenant), Some(hash)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("{entry:?}: expected role:tenant:sha256"));
    };
    let role = Role::parse(role)?;
    let hash = KeyHash::parse(hash).map_err(|why| format!("{role}:{tenant}: {why}", role = role.as_str()))?;
    if tenant == "*" {
        if !matches!(role, Role::Operator | Role::Viewer) {
            return Err(format!(
                "{}:*: only operator and viewer keys may see every tenant",
                role.as_str()
            ));
        }
        let principal = Principal {
            role,
            scope: Scope::All,
            tenant: TenantId::default(),
            key_id: hash.key_id(),
        };
        return Ok((hash, principal));
    }
    let tenant = TenantId::parse(tenant)?;
    if !tenants.contains(&tenant) {
        return Err(format!("tenant `{tenant}` is not in STACK_TENANTS"));
    }
    let principal = principal(role, tenant, tenants, &hash);
    Ok((hash, principal))
}

/// A key of `tenant`. In a deployment of one tenant it sees everything there is (the same
/// stacks), which lets stats and history take their deployment-wide path.
fn principal(role: Role, tenant: TenantId, tenants: &Tenants, hash: &KeyHash) -> Principal {
    let scope = if tenants.limits.len() == 1 {
        Scope::All
    } else {
        Scope::Tenant(tenant.clone())
    };
    Principal {
        role,
        scope,
        tenant,
        key_id: hash.key_id(),
    }
}

/// The deployment's tenants and the most stacks each may hold at once (`STACK_TENANTS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenants {
    limits: BTreeMap<TenantId, Option<u32>>,
}

impl Default for Tenants {
    /// One tenant, `default`, without a limit of its own.
    fn default() -> Self {
        Self {
            limits: BTreeMap::from([(TenantId::default(), None)]),
        }
    }
}

impl Tenants {
    /// `name` or `name=max_stacks`, separated by commas or whitespace: `ctf=500,wargame`.
    pub fn parse(value: &str) -> Result<Self, String> {
        let mut limits = BTreeMap::new();
        for entry in value.split([',', ' ', '\n', '\t']).filter(|e| !e.is_empty()) {
            let (name, limit) = match entry.split_once('=') {
                Some((name, limit)) => {
                    let limit = limit
                        .parse::<u32>()
                        .map_err(|_| format!("{entry:?}: the limit must be a whole number"))?;
                    (name, Some(limit))
                }
                None => (entry, None),
            };
            if limits.insert(TenantId::parse(name)?, limit).is_some() {
                return Err(format!("tenant `{name}` is listed twice"));
            }
        }
        if limits.is_empty() {
            return Err("no tenant listed".to_owned());
        }
        Ok(Self { limits })
    }

    pub fn contains(&self, tenant: &TenantId) -> bool {
        self.limits.contains_key(tenant)
    }

    /// The most stacks `tenant` may hold at once, if it has a limit.
    pub fn limit(&self, tenant: &TenantId) -> Option<u32> {
        self.limits.get(tenant).copied().flatten()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&TenantId, Option<u32>)> {
        self.limits.iter().map(|(tenant, limit)| (tenant, *limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_hex(key: &str) -> String {
        KeyHash::of(key).to_hex()
    }

    fn tenants() -> Tenants {
        Tenants::parse("ctf=3,wargame,default").unwrap()
    }

    #[test]
    fn tenant_names_are_short_lowercase_labels() {
        assert!(TenantId::parse("ctf-2026").is_ok());
        for bad in ["", "CTF", "-ctf", "a_b", "ctf#1", &"a".repeat(33)] {
            assert!(TenantId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(TenantId::default().is_default());
    }

    #[test]
    fn idempotency_keys_of_two_tenants_never_meet() {
        let (ctf, other) = (TenantId::parse("ctf").unwrap(), TenantId::parse("other").unwrap());
        assert_ne!(ctf.scoped_idempotency_key("k"), other.scoped_idempotency_key("k"));
        assert_ne!(
            ctf.scoped_idempotency_key("k"),
            TenantId::default().scoped_idempotency_key("ctf k")
        );
        assert_eq!(TenantId::default().scoped_idempotency_key("k"), "k");
    }

    #[test]
    fn each_role_may_do_what_the_table_says() {
        use Action::*;
        let all = [Create, Read, Change, Observe, BatchDelete, Prepare];
        let allowed = |role: Role| all.iter().filter(|a| role.may(**a)).copied().collect::<Vec<_>>();
        assert_eq!(allowed(Role::Platform), [Create, Read, Change]);
        assert_eq!(allowed(Role::Operator), [Read, Change, Observe, BatchDelete, Prepare]);
        assert_eq!(allowed(Role::Viewer), [Read, Observe]);
        assert_eq!(allowed(Role::Owner), all);
    }

    #[test]
    fn keys_are_identified_by_their_hash_with_their_role_and_scope() {
        let entries = format!(
            "platform:ctf:{}, platform:ctf:{}\noperator:*:{} viewer:wargame:{}",
            hash_hex("ctf-old"),
            hash_hex("ctf-new"),
            hash_hex("ops"),
            hash_hex("watch")
        );
        let ring = KeyRing::parse(Some(&entries), Some("legacy"), &tenants()).unwrap();
        let ctf = Scope::Tenant(TenantId::parse("ctf").unwrap());
        // Two keys of one tenant are valid at once: rotation without downtime.
        for key in ["ctf-old", "ctf-new"] {
            let who = ring.identify(key).unwrap();
            assert_eq!((who.role, &who.scope), (Role::Platform, &ctf));
        }
        assert_eq!(ring.identify("ops").unwrap().scope, Scope::All);
        assert_eq!(ring.identify("watch").unwrap().role, Role::Viewer);
        let legacy = ring.identify("legacy").unwrap();
        assert_eq!(
            (legacy.role, legacy.tenant_for_create()),
            (Role::Owner, TenantId::default())
        );
        assert_eq!(legacy.scope, Scope::Tenant(TenantId::default()));
        // A deployment of one tenant: its keys see all there is.
        let single = KeyRing::parse(None, Some("k"), &Tenants::default()).unwrap();
        let owner = single.identify("k").unwrap();
        assert_eq!((&owner.scope, &owner.tenant), (&Scope::All, &TenantId::default()));
        assert!(ring.identify("ctf-ol").is_none());
        assert!(ring.identify("").is_none());
        // The logged id is the hash's prefix, never the key.
        assert_eq!(ring.identify("ops").unwrap().key_id, hash_hex("ops")[..12]);
    }

    #[test]
    fn bad_key_entries_are_named() {
        let problems = |entries: &str| KeyRing::parse(Some(entries), None, &tenants()).unwrap_err().join("; ");
        let hash = hash_hex("k");
        assert!(problems(&format!("admin:ctf:{hash}")).contains("role \"admin\""));
        assert!(problems(&format!("platform:*:{hash}")).contains("only operator and viewer"));
        assert!(problems(&format!("platform:other:{hash}")).contains("`other` is not in STACK_TENANTS"));
        assert!(problems("platform:ctf:secret-in-clear").contains("64 hex digits"));
        assert!(problems("platform-ctf").contains("role:tenant:sha256"));
        assert!(problems(&format!("platform:ctf:{hash},viewer:ctf:{hash}")).contains("listed twice"));
        let no_default = Tenants::parse("ctf").unwrap();
        assert!(KeyRing::parse(None, Some("k"), &no_default).unwrap_err()[0].contains("API_KEY"));
    }

    #[test]
    fn tenants_carry_optional_limits() {
        let tenants = tenants();
        let ctf = TenantId::parse("ctf").unwrap();
        assert_eq!(tenants.limit(&ctf), Some(3));
        assert_eq!(tenants.limit(&TenantId::parse("wargame").unwrap()), None);
        assert!(!tenants.contains(&TenantId::parse("other").unwrap()));
        assert!(Tenants::parse("ctf=many").is_err());
        assert!(Tenants::parse("ctf,ctf").is_err());
        assert!(Tenants::parse(" ").is_err());
        assert!(Tenants::default().contains(&TenantId::default()));
    }

    #[test]
    fn scopes_cover_their_tenant_or_all() {
        let ctf = TenantId::parse("ctf").unwrap();
        assert!(Scope::Tenant(ctf.clone()).covers(&ctf));
        assert!(!Scope::Tenant(ctf.clone()).covers(&TenantId::default()));
        assert!(Scope::All.covers(&ctf));
    }
}
