//! Why a manifest was refused: the offending field's path and the problem with it.

use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodSpec};

/// Longest problem text kept; serde errors can quote whole input strings.
const MAX_PROBLEM_CHARS: usize = 300;

/// A refused manifest. `Display` is `"<field path> <problem>"`, e.g.
/// `spec.containers[0].securityContext is forbidden`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} {problem}")]
pub struct Rejection {
    /// Dotted path of the field, `[i]` for list items (`spec.volumes[1].hostPath`), or
    /// `manifest` / `target_port` when no single field is at fault.
    pub path: String,
    pub problem: String,
}

impl Rejection {
    pub fn new(path: impl Into<String>, problem: impl Into<String>) -> Self {
        let mut problem = problem.into();
        if let Some((cut, _)) = problem.char_indices().nth(MAX_PROBLEM_CHARS) {
            problem.truncate(cut);
            problem.push('…');
        }
        Self {
            path: path.into(),
            problem,
        }
    }

    /// The field is present but may not be.
    pub fn forbidden(path: impl Into<String>) -> Self {
        Self::new(path, "is forbidden")
    }

    /// The field is forbidden, with the reason a manifest author needs to fix it.
    pub(crate) fn forbidden_because(path: impl Into<String>, why: &str) -> Self {
        Self::new(path, format!("is forbidden: {why}"))
    }

    pub fn required(path: impl Into<String>) -> Self {
        Self::new(path, "is required")
    }
}

/// The validator's most common rule: a field that must not be `set`, refused with `why`.
pub(crate) fn forbid_if(set: bool, path: impl Into<String>, why: &str) -> Result<(), Rejection> {
    if set {
        return Err(Rejection::forbidden_because(path, why));
    }
    Ok(())
}

/// [`forbid_if`] for each `(field, set)` under `at`: the first field set is refused with `why`.
pub(crate) fn forbid_any(at: &str, fields: &[(&str, bool)], why: &str) -> Result<(), Rejection> {
    fields
        .iter()
        .try_for_each(|&(field, set)| forbid_if(set, format!("{at}.{field}"), why))
}

/// Which container list a container is in, and where; displays as its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ContainerPath {
    pub init: bool,
    pub index: usize,
}

impl ContainerPath {
    pub(super) fn field(self, field: &str) -> String {
        format!("{self}.{field}")
    }

    /// Every container of the pod with its path, init containers first (the order they start
    /// in, so the first rejection names the container that would fail first).
    pub(super) fn every(spec: &PodSpec) -> impl Iterator<Item = (Self, &Container)> {
        let inits = spec.init_containers.iter().flatten().enumerate();
        let apps = spec.containers.iter().enumerate();
        inits
            .map(|(index, c)| (Self { init: true, index }, c))
            .chain(apps.map(|(index, c)| (Self { init: false, index }, c)))
    }
}

impl fmt::Display for ContainerPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = if self.init { "initContainers" } else { "containers" };
        write!(f, "spec.{list}[{}]", self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_path_then_problem() {
        let r = Rejection::forbidden(ContainerPath { init: false, index: 0 }.field("securityContext"));
        assert_eq!(r.to_string(), "spec.containers[0].securityContext is forbidden");
        let init = ContainerPath { init: true, index: 2 };
        assert_eq!(init.field("ports"), "spec.initContainers[2].ports");
    }

    #[test]
    fn long_problems_are_cut() {
        let r = Rejection::new("manifest", "x".repeat(10_000));
        assert_eq!(r.problem.chars().count(), MAX_PROBLEM_CHARS + 1);
        assert!(r.problem.ends_with('…'));
    }
}
