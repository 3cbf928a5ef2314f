//! What the pre-pull remembers between passes, kept in its DaemonSet's annotation (pure): the
//! images an operator declared, the images seen in stacks and when, and the images that cannot
//! be pulled.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::model::{Failure, FailureReason};

/// How long an image that cannot be pulled stays out before it is tried again: a missing tag
/// is shown, not retried forever, yet a registry fixed by its owner is seen within the hour.
pub(crate) const FAILED_RETRY: Duration = Duration::from_secs(3600);
/// Whose list a key of every tenant declares.
pub(crate) const EVERY_TENANT: &str = "*";
/// How stale a last-seen time may get before it is written again: the DaemonSet is not
/// rewritten every pass for a clock that moved.
const SEEN_REFRESH: SignedDuration = SignedDuration::from_secs(300);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PrepullState {
    /// `PUT /prepull`'s lists, by who declared them: a tenant's name, or [`EVERY_TENANT`].
    #[serde(default)]
    pub declared: BTreeMap<String, BTreeSet<String>>,
    /// Images of stacks, with when they were last seen in one.
    #[serde(default)]
    pub seen: BTreeMap<String, Timestamp>,
    /// Images no node can pull, left out of the DaemonSet until [`FAILED_RETRY`] has passed
    /// or they are declared again.
    #[serde(default)]
    pub failed: BTreeMap<String, ImageFailure>,
}

/// Why an image cannot be pulled, as the first node that tried says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ImageFailure {
    pub node: String,
    /// `image_not_found`, `image_pull_denied` or `invalid_image_name`.
    #[schema(value_type = String)]
    pub reason: FailureReason,
    pub message: String,
    #[schema(value_type = String)]
    pub at: Timestamp,
}

impl ImageFailure {
    pub(crate) fn new(node: &str, failure: Failure, at: Timestamp) -> Self {
        Self {
            node: node.to_owned(),
            reason: failure.reason,
            message: failure.message,
            at,
        }
    }
}

impl PrepullState {
    /// `who`'s new list replaces its previous one (other tenants' lists stay): what it names is
    /// tried again even if it failed before, and a failure of an image nobody wants any more is
    /// forgotten.
    pub(crate) fn declare(&mut self, who: &str, images: BTreeSet<String>) {
        if images.is_empty() {
            self.declared.remove(who);
        } else {
            self.declared.insert(who.to_owned(), images);
        }
        let declared: BTreeSet<&String> = self.declared.values().flatten().collect();
        let mut retried = self.declared.get(who).cloned().unwrap_or_default();
        retried.retain(|image| self.failed.contains_key(image));
        self.failed
            .retain(|image, _| !retried.contains(image) && (declared.contains(image) || self.seen.contains_key(image)));
    }

    /// The images `who` declared.
    pub(crate) fn declared_by(&self, who: &str) -> BTreeSet<String> {
        self.declared.get(who).cloned().unwrap_or_default()
    }

    /// Stacks run `in_use` now; an image not seen for `keep` is let go.
    pub(crate) fn observe(&mut self, in_use: &BTreeSet<String>, now: Timestamp, keep: Duration) {
        for image in in_use {
            let last = self.seen.entry(image.clone()).or_insert(now);
            if now.duration_since(*last) > SEEN_REFRESH {
                *last = now;
            }
        }
        let keep = SignedDuration::try_from(keep).unwrap_or(SignedDuration::MAX);
        self.seen.retain(|_, last| now.duration_since(*last) <= keep);
        let retry = SignedDuration::try_from(FAILED_RETRY).unwrap_or(SignedDuration::MAX);
        self.failed.retain(|_, failure| now.duration_since(failure.at) <= retry);
    }

    pub(crate) fn record_failure(&mut self, image: &str, failure: ImageFailure) {
        self.failed.entry(image.to_owned()).or_insert(failure);
    }

    /// What the DaemonSet holds: the configured, declared and seen images, less those failed.
    pub(crate) fn wanted(&self, configured: &[String]) -> BTreeSet<String> {
        configured
            .iter()
            .chain(self.declared.values().flatten())
            .chain(self.seen.keys())
            .filter(|image| !self.failed.contains_key(*image))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(images: &[&str]) -> BTreeSet<String> {
        images.iter().map(|s| (*s).to_owned()).collect()
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("timestamp")
    }

    fn not_found(at: Timestamp) -> ImageFailure {
        ImageFailure::new(
            "node-1",
            Failure::new(FailureReason::ImageNotFound, "manifest unknown"),
            at,
        )
    }

    #[test]
    fn configured_declared_and_seen_images_are_wanted_until_one_fails() {
        let mut state = PrepullState::default();
        state.declare("ctf", set(&["r/web:1", "r/pwn:1"]));
        state.observe(&set(&["r/crypto:1"]), at(0), Duration::from_secs(60));
        let configured = ["r/base:1".to_owned()];
        assert_eq!(
            state.wanted(&configured),
            set(&["r/base:1", "r/crypto:1", "r/pwn:1", "r/web:1"])
        );
        state.record_failure("r/pwn:1", not_found(at(1)));
        assert_eq!(state.wanted(&configured), set(&["r/base:1", "r/crypto:1", "r/web:1"]));
    }

    #[test]
    fn a_failed_image_comes_back_when_declared_again_or_after_an_hour() {
        let mut state = PrepullState::default();
        state.declare("ctf", set(&["r/pwn:1"]));
        state.record_failure("r/pwn:1", not_found(at(0)));
        state.observe(&BTreeSet::new(), at(60), Duration::from_secs(60));
        assert!(state.wanted(&[]).is_empty(), "still failed a minute later");
        state.declare("ctf", set(&["r/pwn:1"]));
        assert_eq!(state.wanted(&[]), set(&["r/pwn:1"]));
        state.record_failure("r/pwn:1", not_found(at(70)));
        state.declare("ctf", set(&["r/web:1"]));
        assert!(state.failed.is_empty(), "no longer declared: its failure is forgotten");

        state.declare("ctf", set(&["r/pwn:1"]));
        state.record_failure("r/pwn:1", not_found(at(0)));
        state.observe(&BTreeSet::new(), at(3601), Duration::from_secs(60));
        assert_eq!(state.wanted(&[]), set(&["r/pwn:1"]), "tried again after the hour");
    }

    #[test]
    fn an_image_of_ended_stacks_stays_for_the_keep_time_then_goes() {
        let mut state = PrepullState::default();
        state.observe(&set(&["r/web:1"]), at(0), Duration::from_secs(600));
        state.observe(&BTreeSet::new(), at(600), Duration::from_secs(600));
        assert_eq!(state.wanted(&[]), set(&["r/web:1"]));
        state.observe(&BTreeSet::new(), at(601), Duration::from_secs(600));
        assert!(state.wanted(&[]).is_empty());
    }

    #[test]
    fn each_tenant_declares_its_own_list_and_the_nodes_get_them_all() {
        let mut state = PrepullState::default();
        state.declare("ctf", set(&["r/web:1"]));
        state.declare(EVERY_TENANT, set(&["r/base:1"]));
        state.declare("wargame", set(&["r/pwn:1", "r/web:1"]));
        assert_eq!(state.wanted(&[]), set(&["r/base:1", "r/pwn:1", "r/web:1"]));
        state.record_failure("r/pwn:1", not_found(at(0)));
        state.declare("ctf", BTreeSet::new());
        assert_eq!(state.declared_by("ctf"), BTreeSet::new());
        assert!(state.failed.contains_key("r/pwn:1"), "another tenant's failure stays");
        assert_eq!(state.wanted(&[]), set(&["r/base:1", "r/web:1"]));
    }
}
