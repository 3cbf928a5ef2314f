//! What a manifest may say in `securityContext`, pod-level and per container: only what makes
//! the container weaker than the forced settings already leave it (hardening authors can add to,
//! never subtract from). Every field of both types is named below (no `..`), so a new field in
//! an upgraded k8s-openapi fails to compile until it is decided. `harden` then merges what was
//! accepted with the forced settings.
//!
//! Accepted, each only at its tightening value: `runAsNonRoot: true`, a non-zero `runAsUser` and
//! `runAsGroup`, `readOnlyRootFilesystem: true`, `allowPrivilegeEscalation: false`,
//! `privileged: false`, `seccompProfile` and `appArmorProfile` of type `RuntimeDefault`,
//! `capabilities.drop` of any capability (or `ALL`), `capabilities.add` of the operator's
//! add-back list, `procMount: Default`; pod-level also a non-zero `fsGroup` and
//! `supplementalGroups`. They only add a group the author names to the container's processes
//! (and, for `fsGroup`, give the pod's own volumes to it): a stack has no host path or device,
//! so a group can only open files of its own image and volumes, which root in the container
//! could open anyway. Group 0 is refused: it is root's group, the opposite of what a non-root
//! user asks for. Everything else (`sysctls`, `seLinuxOptions`, `windowsOptions`, the change
//! policies, other profile types, ...) is refused.

use k8s_openapi::api::core::v1::{AppArmorProfile, Capabilities, PodSecurityContext, SeccompProfile, SecurityContext};

use super::Rejection;
use super::rejection::{forbid_any, forbid_if};
use crate::config::LINUX_CAPABILITIES;

/// Why a field that would not harden the stack is refused.
const NOT_HARDENING: &str = "only fields that harden the stack may be set (runAsNonRoot, runAsUser, runAsGroup, readOnlyRootFilesystem, capabilities.drop, ...)";

/// Highest user or group id the apiserver accepts.
const MAX_ID: i64 = i32::MAX as i64;

pub(super) fn check_pod(context: &PodSecurityContext) -> Result<(), Rejection> {
    const AT: &str = "spec.securityContext";
    let PodSecurityContext {
        app_armor_profile,
        fs_group,
        fs_group_change_policy,
        run_as_group,
        run_as_non_root,
        run_as_user,
        se_linux_change_policy,
        se_linux_options,
        seccomp_profile,
        supplemental_groups,
        supplemental_groups_policy,
        sysctls,
        windows_options,
    } = context;
    let not_tightening = [
        ("fsGroupChangePolicy", fs_group_change_policy.is_some()),
        ("seLinuxChangePolicy", se_linux_change_policy.is_some()),
        ("seLinuxOptions", se_linux_options.is_some()),
        ("supplementalGroupsPolicy", supplemental_groups_policy.is_some()),
        ("sysctls", sysctls.is_some()),
        ("windowsOptions", windows_options.is_some()),
    ];
    forbid_any(AT, &not_tightening, NOT_HARDENING)?;
    check_identity(AT, *run_as_non_root, *run_as_user, *run_as_group)?;
    check_id(&format!("{AT}.fsGroup"), *fs_group, "group")?;
    for (index, group) in supplemental_groups.iter().flatten().enumerate() {
        check_id(&format!("{AT}.supplementalGroups[{index}]"), Some(*group), "group")?;
    }
    check_profiles(AT, seccomp_profile.as_ref(), app_armor_profile.as_ref())
}

/// `at` is the container's `securityContext` path; `add_back` the operator's add-back list.
pub(super) fn check_container(context: &SecurityContext, at: &str, add_back: &[String]) -> Result<(), Rejection> {
    let SecurityContext {
        allow_privilege_escalation,
        app_armor_profile,
        capabilities,
        privileged,
        proc_mount,
        read_only_root_filesystem,
        run_as_group,
        run_as_non_root,
        run_as_user,
        se_linux_options,
        seccomp_profile,
        windows_options,
    } = context;
    forbid_if(
        *privileged == Some(true),
        format!("{at}.privileged"),
        "stacks are never privileged (only false is allowed)",
    )?;
    forbid_if(
        *allow_privilege_escalation == Some(true),
        format!("{at}.allowPrivilegeEscalation"),
        "it is forced to false (only false is allowed)",
    )?;
    if *read_only_root_filesystem == Some(false) {
        return Err(Rejection::new(
            format!("{at}.readOnlyRootFilesystem"),
            "may only be true (the root filesystem is writable by default)",
        ));
    }
    forbid_if(
        proc_mount.as_deref().is_some_and(|m| m != "Default"),
        format!("{at}.procMount"),
        "only Default is allowed: it would unmask /proc",
    )?;
    let not_tightening = [
        ("seLinuxOptions", se_linux_options.is_some()),
        ("windowsOptions", windows_options.is_some()),
    ];
    forbid_any(at, &not_tightening, NOT_HARDENING)?;
    check_identity(at, *run_as_non_root, *run_as_user, *run_as_group)?;
    check_profiles(at, seccomp_profile.as_ref(), app_armor_profile.as_ref())?;
    if let Some(capabilities) = capabilities {
        check_capabilities(capabilities, &format!("{at}.capabilities"), add_back)?;
    }
    Ok(())
}

fn check_identity(at: &str, non_root: Option<bool>, user: Option<i64>, group: Option<i64>) -> Result<(), Rejection> {
    if non_root == Some(false) {
        return Err(Rejection::new(
            format!("{at}.runAsNonRoot"),
            "may only be true (false asks for nothing and could undo a pod-level true)",
        ));
    }
    check_id(&format!("{at}.runAsUser"), user, "user")?;
    check_id(&format!("{at}.runAsGroup"), group, "group")
}

/// A user or group id other than root's.
fn check_id(path: &str, id: Option<i64>, kind: &str) -> Result<(), Rejection> {
    match id {
        Some(0) => Err(Rejection::forbidden_because(
            path,
            &format!("0 is root's {kind}; only a non-zero id hardens the stack"),
        )),
        Some(id) if !(1..=MAX_ID).contains(&id) => Err(Rejection::new(path, format!("must be between 1 and {MAX_ID}"))),
        _ => Ok(()),
    }
}

/// Seccomp: `RuntimeDefault` is what `harden` forces; `Unconfined` and `Localhost` (a profile
/// of the node's choosing) would replace it. AppArmor: the runtime's default profile confines;
/// `Unconfined` and `Localhost` are the node's business. (A node without AppArmor fails a pod
/// that asks for any profile.)
fn check_profiles(
    at: &str,
    seccomp: Option<&SeccompProfile>,
    app_armor: Option<&AppArmorProfile>,
) -> Result<(), Rejection> {
    let profiles = [
        (
            "seccompProfile",
            seccomp.map(|p| (&p.type_, &p.localhost_profile)),
            "must be RuntimeDefault (it is forced)",
        ),
        (
            "appArmorProfile",
            app_armor.map(|p| (&p.type_, &p.localhost_profile)),
            "must be RuntimeDefault",
        ),
    ];
    for (field, profile, problem) in profiles {
        if let Some((type_, localhost_profile)) = profile
            && (type_ != "RuntimeDefault" || localhost_profile.is_some())
        {
            return Err(Rejection::new(format!("{at}.{field}.type"), problem));
        }
    }
    Ok(())
}

/// Any capability may be dropped, `ALL` included; only the operator's add-back list may be
/// added (the runtime applies drops of `ALL` first, then adds, then single drops, so an add
/// can undo an `ALL` drop, never a forced single one).
fn check_capabilities(capabilities: &Capabilities, at: &str, add_back: &[String]) -> Result<(), Rejection> {
    let Capabilities { add, drop } = capabilities;
    for (index, name) in drop.iter().flatten().enumerate() {
        if name != "ALL" && !LINUX_CAPABILITIES.contains(&name.as_str()) {
            return Err(Rejection::new(
                format!("{at}.drop[{index}]"),
                format!("{name:?} is not a capability: write ALL or a name such as CHOWN (upper case, without CAP_)"),
            ));
        }
    }
    for (index, name) in add.iter().flatten().enumerate() {
        if !add_back.contains(name) {
            let allowed = if add_back.is_empty() {
                "none may be added".to_owned()
            } else {
                format!("only {} may be added", add_back.join(", "))
            };
            return Err(Rejection::forbidden_because(
                format!("{at}.add[{index}]"),
                &format!("{name:?} is not in the operator's add-back list ({allowed})"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn container(value: Value) -> Result<(), Rejection> {
        let context: SecurityContext = serde_json::from_value(value).expect("a SecurityContext");
        check_container(&context, "sc", &["CHOWN".to_owned(), "SETUID".to_owned()])
    }

    fn pod(value: Value) -> Result<(), Rejection> {
        let context: PodSecurityContext = serde_json::from_value(value).expect("a PodSecurityContext");
        check_pod(&context)
    }

    #[test]
    fn tightening_container_fields_are_accepted() {
        for accepted in [
            json!({}),
            json!({"runAsNonRoot": true}),
            json!({"runAsUser": 1000, "runAsGroup": 1000}),
            json!({"runAsUser": 2_147_483_647}),
            json!({"readOnlyRootFilesystem": true}),
            json!({"allowPrivilegeEscalation": false, "privileged": false}),
            json!({"seccompProfile": {"type": "RuntimeDefault"}}),
            json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
            json!({"capabilities": {"drop": ["ALL"]}}),
            json!({"capabilities": {"drop": ["NET_ADMIN", "SYS_PTRACE", "CHECKPOINT_RESTORE"]}}),
            json!({"capabilities": {"drop": ["ALL"], "add": ["CHOWN", "SETUID"]}}),
            json!({"procMount": "Default"}),
        ] {
            if let Err(r) = container(accepted.clone()) {
                panic!("{accepted} was refused: {r}");
            }
        }
    }

    #[test]
    fn loosening_or_unknown_container_fields_are_refused_by_path() {
        for (refused, path) in [
            (json!({"privileged": true}), "sc.privileged"),
            (json!({"allowPrivilegeEscalation": true}), "sc.allowPrivilegeEscalation"),
            (json!({"readOnlyRootFilesystem": false}), "sc.readOnlyRootFilesystem"),
            (json!({"runAsNonRoot": false}), "sc.runAsNonRoot"),
            (json!({"runAsUser": 0}), "sc.runAsUser"),
            (json!({"runAsUser": -1}), "sc.runAsUser"),
            (json!({"runAsUser": 2_147_483_648_i64}), "sc.runAsUser"),
            (json!({"runAsGroup": 0}), "sc.runAsGroup"),
            (json!({"procMount": "Unmasked"}), "sc.procMount"),
            (json!({"seLinuxOptions": {"type": "spc_t"}}), "sc.seLinuxOptions"),
            (json!({"windowsOptions": {"hostProcess": true}}), "sc.windowsOptions"),
            (
                json!({"seccompProfile": {"type": "Unconfined"}}),
                "sc.seccompProfile.type",
            ),
            (
                json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "x.json"}}),
                "sc.seccompProfile.type",
            ),
            (
                json!({"appArmorProfile": {"type": "Unconfined"}}),
                "sc.appArmorProfile.type",
            ),
            (
                json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}),
                "sc.appArmorProfile.type",
            ),
            (json!({"capabilities": {"add": ["NET_RAW"]}}), "sc.capabilities.add[0]"),
            (
                json!({"capabilities": {"add": ["CHOWN", "SYS_ADMIN"]}}),
                "sc.capabilities.add[1]",
            ),
            (json!({"capabilities": {"add": ["ALL"]}}), "sc.capabilities.add[0]"),
            (
                json!({"capabilities": {"drop": ["CAP_CHOWN"]}}),
                "sc.capabilities.drop[0]",
            ),
            (json!({"capabilities": {"drop": ["all"]}}), "sc.capabilities.drop[0]"),
        ] {
            match container(refused.clone()) {
                Ok(()) => panic!("{refused} was accepted"),
                Err(r) => assert_eq!(r.path, path, "{refused}: {r}"),
            }
        }
    }

    #[test]
    fn an_empty_add_back_list_refuses_every_add() {
        let context: SecurityContext = serde_json::from_value(json!({"capabilities": {"add": ["CHOWN"]}})).unwrap();
        let r = check_container(&context, "sc", &[]).unwrap_err();
        assert_eq!(r.path, "sc.capabilities.add[0]");
        assert!(r.problem.contains("none may be added"), "{r}");
    }

    #[test]
    fn tightening_pod_fields_are_accepted() {
        for accepted in [
            json!({}),
            json!({"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 3000}),
            json!({"fsGroup": 2000, "supplementalGroups": [4000, 5000]}),
            json!({"seccompProfile": {"type": "RuntimeDefault"}}),
            json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
        ] {
            if let Err(r) = pod(accepted.clone()) {
                panic!("{accepted} was refused: {r}");
            }
        }
    }

    #[test]
    fn loosening_or_unknown_pod_fields_are_refused_by_path() {
        const AT: &str = "spec.securityContext";
        for (refused, field) in [
            (json!({"runAsNonRoot": false}), "runAsNonRoot"),
            (json!({"runAsUser": 0}), "runAsUser"),
            (json!({"runAsGroup": 0}), "runAsGroup"),
            (json!({"fsGroup": 0}), "fsGroup"),
            (json!({"supplementalGroups": [10, 0]}), "supplementalGroups[1]"),
            (
                json!({"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]}),
                "sysctls",
            ),
            (json!({"seLinuxOptions": {"level": "s0"}}), "seLinuxOptions"),
            (json!({"seLinuxChangePolicy": "Recursive"}), "seLinuxChangePolicy"),
            (json!({"windowsOptions": {"runAsUserName": "x"}}), "windowsOptions"),
            (json!({"fsGroupChangePolicy": "Always"}), "fsGroupChangePolicy"),
            (
                json!({"supplementalGroupsPolicy": "Strict"}),
                "supplementalGroupsPolicy",
            ),
            (json!({"seccompProfile": {"type": "Unconfined"}}), "seccompProfile.type"),
            (
                json!({"appArmorProfile": {"type": "Unconfined"}}),
                "appArmorProfile.type",
            ),
        ] {
            match pod(refused.clone()) {
                Ok(()) => panic!("{refused} was accepted"),
                Err(r) => assert_eq!(r.path, format!("{AT}.{field}"), "{refused}: {r}"),
            }
        }
    }
}
