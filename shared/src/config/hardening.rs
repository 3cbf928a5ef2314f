//! The operator's hardening settings: which capabilities every container loses
//! (`STACK_DROP_CAPABILITIES`), which ones a manifest may ask back (`STACK_ADD_BACK_CAPABILITIES`)
//! and the taint of dedicated stack nodes (`STACK_NODE_TAINT`). Parsed here; the validator
//! applies them.

use k8s_openapi::api::core::v1::Toleration;

use crate::kube_names::{is_label_value, is_qualified_name};

/// Always dropped, whatever the profile: raw sockets allow spoofing on the node network.
const ALWAYS_DROPPED: &str = "NET_RAW";

/// Pod Security `baseline`'s capabilities (the container runtime's default set without
/// `NET_RAW`). The stack namespace enforces baseline and the admission policy of
/// `functions/kubernetes-rbac.yaml` names this list: a pod adding anything else is refused by
/// the apiserver, so no other capability can be handed back.
pub(crate) const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Every Linux capability (`capability.h`, 6.x), as Kubernetes spells them: upper case,
/// without `CAP_`.
pub(crate) const LINUX_CAPABILITIES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// `STACK_DROP_CAPABILITIES`: what every container of every stack loses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DropCapabilities {
    /// Only `NET_RAW`: the runtime's other defaults stay (today's behaviour, which most
    /// challenge images expect: root that can chown, setuid, bind low ports).
    #[default]
    NetRaw,
    /// Every capability: a container keeps only what its manifest asks back from
    /// `STACK_ADD_BACK_CAPABILITIES`.
    All,
}

impl DropCapabilities {
    /// The container's forced `capabilities.drop`: `NET_RAW` stays listed under `ALL` too, so
    /// that it is dropped even if a later rule let a manifest add it back (the runtime applies
    /// individual drops after adds).
    pub fn forced(self) -> &'static [&'static str] {
        match self {
            DropCapabilities::NetRaw => &[ALWAYS_DROPPED],
            DropCapabilities::All => &["ALL", ALWAYS_DROPPED],
        }
    }
}

pub(super) fn parse_drop_capabilities(v: &str) -> Result<DropCapabilities, String> {
    match v.to_ascii_uppercase().as_str() {
        "NET_RAW" => Ok(DropCapabilities::NetRaw),
        "ALL" => Ok(DropCapabilities::All),
        _ => Err("expected NET_RAW or ALL".into()),
    }
}

/// `STACK_ADD_BACK_CAPABILITIES`'s default: the baseline set, which the runtime gives every
/// container anyway, so that under `NET_RAW` asking one back changes nothing and under `ALL`
/// a manifest may ask back what it needs of it.
pub(super) fn default_add_back() -> Vec<String> {
    BASELINE_CAPABILITIES.iter().map(|c| (*c).to_owned()).collect()
}

/// A comma-separated list of baseline capabilities, or `none`.
pub(super) fn parse_add_back(v: &str) -> Result<Vec<String>, String> {
    if v.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut names = Vec::new();
    for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let name = name.to_ascii_uppercase();
        let name = name.strip_prefix("CAP_").unwrap_or(&name).to_owned();
        if name == ALWAYS_DROPPED {
            return Err(format!("{ALWAYS_DROPPED} is always dropped"));
        }
        if !BASELINE_CAPABILITIES.contains(&name.as_str()) {
            return Err(format!(
                "{name} is not one of Pod Security baseline's capabilities ({}), which the namespace's admission refuses",
                BASELINE_CAPABILITIES.join(",")
            ));
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// `STACK_NODE_TAINT`: the taint the operator puts on stack nodes so that nothing else is
/// scheduled beside participants' shells; every stack pod is given the matching toleration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTaint {
    pub key: String,
    /// None: a taint without value (`key:NoSchedule`), tolerated with `Exists`.
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl NodeTaint {
    /// The toleration every stack pod (and the pre-pull's) gets: any value of the key when the
    /// taint has none, forever (no `tolerationSeconds`) under `NoExecute`.
    pub(crate) fn toleration(&self) -> Toleration {
        Toleration {
            key: Some(self.key.clone()),
            operator: Some(if self.value.is_some() { "Equal" } else { "Exists" }.into()),
            value: self.value.clone(),
            effect: Some(self.effect.clone()),
            toleration_seconds: None,
        }
    }
}

/// kubectl taint's syntax: `key=value:Effect` or `key:Effect`.
pub(super) fn parse_node_taint(v: &str) -> Result<NodeTaint, String> {
    const SYNTAX: &str = "expected key=value:Effect or key:Effect (Effect NoSchedule, PreferNoSchedule or NoExecute)";
    let (key_value, effect) = v.rsplit_once(':').ok_or(SYNTAX)?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(SYNTAX.into());
    }
    let (key, value) = match key_value.split_once('=') {
        Some((key, value)) => (key, Some(value)),
        None => (key_value, None),
    };
    if !is_qualified_name(key) {
        return Err(format!(
            "{key:?} is not a taint key (a label key such as example.com/stacks)"
        ));
    }
    if let Some(value) = value
        && !is_label_value(value)
    {
        return Err(format!(
            "{value:?} is not a taint value (at most 63 letters, digits, '-', '_', '.')"
        ));
    }
    Ok(NodeTaint {
        key: key.to_owned(),
        value: value.filter(|v| !v.is_empty()).map(str::to_owned),
        effect: effect.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_profile_is_net_raw_or_all_and_keeps_net_raw() {
        assert_eq!(parse_drop_capabilities("net_raw"), Ok(DropCapabilities::NetRaw));
        assert_eq!(parse_drop_capabilities("ALL"), Ok(DropCapabilities::All));
        assert!(parse_drop_capabilities("SYS_ADMIN").is_err());
        assert_eq!(DropCapabilities::NetRaw.forced(), ["NET_RAW"]);
        assert_eq!(DropCapabilities::All.forced(), ["ALL", "NET_RAW"]);
    }

    #[test]
    fn add_back_names_only_baseline_capabilities() {
        assert_eq!(
            parse_add_back("chown, CAP_SETUID,SETGID,CHOWN"),
            Ok(vec!["CHOWN".to_owned(), "SETUID".to_owned(), "SETGID".to_owned()])
        );
        assert_eq!(parse_add_back("none"), Ok(Vec::new()));
        let raw = parse_add_back("CHOWN,NET_RAW").unwrap_err();
        assert!(raw.contains("NET_RAW is always dropped"), "{raw}");
        let admin = parse_add_back("SYS_ADMIN").unwrap_err();
        assert!(
            admin.starts_with("SYS_ADMIN is not one of Pod Security baseline's"),
            "{admin}"
        );
        assert_eq!(default_add_back().len(), BASELINE_CAPABILITIES.len());
        assert!(BASELINE_CAPABILITIES.iter().all(|c| LINUX_CAPABILITIES.contains(c)));
        assert!(!BASELINE_CAPABILITIES.contains(&ALWAYS_DROPPED));
    }

    #[test]
    fn node_taints_read_as_kubectl_taint_writes_them() {
        assert_eq!(
            parse_node_taint("example.com/stacks=ctf:NoSchedule"),
            Ok(NodeTaint {
                key: "example.com/stacks".into(),
                value: Some("ctf".into()),
                effect: "NoSchedule".into()
            })
        );
        assert_eq!(
            parse_node_taint("dedicated:NoExecute"),
            Ok(NodeTaint {
                key: "dedicated".into(),
                value: None,
                effect: "NoExecute".into()
            })
        );
        for bad in [
            "dedicated",
            "dedicated=stack",
            "dedicated=stack:Never",
            ":NoSchedule",
            "Bad Key=x:NoSchedule",
            "-x.com/k=v:NoSchedule",
            "k=v w:NoSchedule",
            "k=-v:NoSchedule",
        ] {
            assert!(parse_node_taint(bad).is_err(), "{bad}");
        }
    }
}
