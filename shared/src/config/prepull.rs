//! What the pre-pull keeps on the stack nodes (`prepull`): the images an operator lists ahead
//! of an event, where its DaemonSet lives, and how long an image of ended stacks stays.

use std::time::Duration;

use super::{Reader, parse_duration};

/// `STACK_PREPULL_*`: the pre-pull's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepullPolicy {
    /// `STACK_PREPULL_IMAGES`: images kept on every stack node whatever is declared or running.
    pub images: Vec<String>,
    /// `STACK_PREPULL_NAMESPACE`: the namespace of the pre-pull DaemonSet, and nothing else.
    pub namespace: String,
    /// `STACK_PREPULL_HELPER_IMAGE`: a static busybox whose `sleep` holds each image in use
    /// (copied into the pod, so a challenge image needs no shell, no `sleep`, no `true`).
    pub helper_image: String,
    /// `STACK_PREPULL_KEEP`: how long an image seen in stacks stays after the last of them ended.
    pub keep: Duration,
    /// `STACK_PREPULL_IN_USE`: keep the images of running stacks on every node (on by default).
    pub in_use: bool,
}

impl PrepullPolicy {
    pub(super) fn read<F: Fn(&str) -> Option<String>>(env: &mut Reader<'_, F>) -> Self {
        Self {
            images: env.list("STACK_PREPULL_IMAGES").unwrap_or_default(),
            namespace: env
                .string("STACK_PREPULL_NAMESPACE")
                .unwrap_or_else(|| "stack-prepull".into()),
            helper_image: env
                .string("STACK_PREPULL_HELPER_IMAGE")
                .unwrap_or_else(|| "public.ecr.aws/docker/library/busybox:1.37.0".into()),
            // A whole event day: an image of a challenge nobody opened for a while is still
            // there when the next team does.
            keep: env.parse("STACK_PREPULL_KEEP", Duration::from_secs(12 * 3600), parse_duration),
            in_use: env.parse("STACK_PREPULL_IN_USE", true, super::parse_bool),
        }
    }
}
