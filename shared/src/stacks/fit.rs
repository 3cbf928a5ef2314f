//! Whether any stack node could ever run a hardened stack pod (pure), decided before anything
//! is created: a pod no stack node can take is the manifest's fault, a 400 naming the field,
//! not a `503 cluster saturated` the platform retries forever. What the validator can decide
//! from the manifest alone it decides; this is what depends on the stack nodes (those labelled
//! `role=<STACK_NODE_ROLE>`, Ready or not, cordoned or not: they may come back).
//!
//! - No stack node at all: nothing is decided. That is the operator's problem (or, under
//!   `wait`, the autoscaler's first node), and stays a 503.
//! - `STACK_ON_UNSCHEDULABLE=fail` (a fixed set of nodes): required node affinity must match a
//!   current stack node, one of those must be able to allocate the pod's CPU and memory, and,
//!   for `hostUsers: false`, one of those must have a runtime with user namespaces. A node
//!   that joins later (an operator adding one) makes the manifest good from then on; until
//!   then it could only be retried in vain, which is what a 400 stops. (The caller looks at the
//!   nodes again before refusing, so a node that just joined counts.)
//! - `STACK_ON_UNSCHEDULABLE=wait` (an autoscaled group): a new node may be larger, in another
//!   zone or of another instance type or image, so size, labels and runtime are not judged;
//!   only what no new node can change is: its name. A term that requires `metadata.name` or
//!   `kubernetes.io/hostname` to be one of given values (`In`, or `DoesNotExist`/`Gt`/`Lt` on
//!   the hostname) can only match a node that exists, because a new node's name is the
//!   cloud's choice, never the manifest's.
//!
//! Not judged: taints (they only ever keep every manifest off a node, so they are the
//! operator's; the taint of dedicated stack nodes, `STACK_NODE_TAINT`, is tolerated by every
//! stack pod, and `StackNode` carries no taints, so a tainted stack node stays a candidate),
//! ephemeral storage (the per-stack budget gives every pod about the same
//! amount, so a node too small for one is too small for all), and what pods already use on
//! the node (they end). Allocatable that a node does not report is not judged either.

mod node_affinity;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec};

use crate::cluster::StackNode;
use crate::config::OnUnschedulable;
use crate::quantity::{format_bytes, format_cpu_milli};
use crate::validate::{HardenedPod, NODE_NAME_FIELD, Rejection, term_can_match};

const TERMS: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
const RESOURCES: &str = "spec.containers[*].resources";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Refuses `pod` when no stack node among `nodes` could ever run it (see the module header).
pub(crate) fn check(
    pod: &HardenedPod,
    nodes: &[StackNode],
    on_unschedulable: OnUnschedulable,
    node_role: &str,
) -> Result<(), Rejection> {
    let Some(spec) = pod.pod.spec.as_ref() else {
        return Ok(());
    };
    if nodes.is_empty() {
        return Ok(());
    }
    let counted = format!("nodes with role={node_role}: {}", nodes.len());
    let placeable: Vec<&StackNode> = nodes
        .iter()
        .filter(|n| node_affinity::matches(spec, &n.labels, &n.name))
        .collect();
    let unmatched = |why: &str| {
        let path = if node_affinity::required_terms(spec).is_some() {
            TERMS
        } else {
            "spec.nodeSelector"
        };
        Rejection::new(path, format!("match no stack node{why} ({counted})"))
    };
    match on_unschedulable {
        OnUnschedulable::Fail => {
            if placeable.is_empty() {
                return Err(unmatched(""));
            }
            let fitting = fitting(pod, &placeable, &counted)?;
            check_user_namespaces(spec, &fitting, &counted)
        }
        OnUnschedulable::Wait => {
            if placeable.is_empty() && !a_new_node_could_match(spec, node_role) {
                return Err(unmatched(
                    ", and no node added later could: they require node names or hostnames no stack node has",
                ));
            }
            Ok(())
        }
    }
}

/// The `placeable` nodes that can allocate the pod's CPU and memory requests (as the
/// scheduler's NodeResourcesFit counts them on an empty node); refused when there is none.
fn fitting<'n>(pod: &HardenedPod, placeable: &[&'n StackNode], counted: &str) -> Result<Vec<&'n StackNode>, Rejection> {
    let (cpu, memory) = (pod.requested_cpu_milli, pod.requested_memory_bytes);
    let fits = |allocatable: Option<i64>, asked: i64| allocatable.is_none_or(|a| asked <= a);
    let fitting: Vec<&StackNode> = placeable
        .iter()
        .copied()
        .filter(|n| fits(n.allocatable_cpu_milli, cpu) && fits(n.allocatable_memory_bytes, memory))
        .collect();
    if !fitting.is_empty() {
        return Ok(fitting);
    }
    // The largest a placeable node offers, when every one of them reports it.
    let largest = |of: fn(&StackNode) -> Option<i64>| {
        placeable
            .iter()
            .map(|n| of(n))
            .collect::<Option<Vec<i64>>>()
            .and_then(|all| all.into_iter().max())
    };
    let too_large = |name: &str, asked: String, most: String| {
        Rejection::new(
            RESOURCES,
            format!(
                "request {asked} of {name} in total, more than any stack node it may run on can allocate (at most {most}; {counted})"
            ),
        )
    };
    if let Some(most) = largest(|n| n.allocatable_cpu_milli).filter(|most| cpu > *most) {
        return Err(too_large("cpu", format_cpu_milli(cpu), format_cpu_milli(most)));
    }
    if let Some(most) = largest(|n| n.allocatable_memory_bytes).filter(|most| memory > *most) {
        return Err(too_large("memory", format_bytes(memory), format_bytes(most)));
    }
    Err(Rejection::new(
        RESOURCES,
        format!(
            "request {} of cpu and {} of memory in total, which no stack node it may run on can allocate together ({counted})",
            format_cpu_milli(cpu),
            format_bytes(memory)
        ),
    ))
}

/// `hostUsers: false` needs the node's runtime to support user namespaces; elsewhere the
/// kubelet fails the pod's sandbox at every try (`GetOrCreateUserNamespaceMappings`), so it
/// never starts. Judged for the default runtime handler only: a RuntimeClass's handler is not
/// known here.
fn check_user_namespaces(spec: &PodSpec, fitting: &[&StackNode], counted: &str) -> Result<(), Rejection> {
    let wants = spec.host_users == Some(false) && spec.runtime_class_name.is_none();
    if wants && !fitting.iter().any(|n| n.user_namespaces) {
        return Err(Rejection::new(
            "spec.hostUsers",
            format!(
                "false needs user namespaces, which the container runtime of no stack node it may run on supports ({counted})"
            ),
        ));
    }
    Ok(())
}

/// Whether a node yet to be added could match a required term: its name and hostname are
/// none the manifest can know, so it satisfies `NotIn` (and `Exists` on the hostname) on them
/// and nothing else; any other label it may have as the term wants.
fn a_new_node_could_match(spec: &PodSpec, node_role: &str) -> bool {
    let Some(terms) = node_affinity::required_terms(spec) else {
        return true;
    };
    terms.iter().any(|term| {
        let expressions = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        let is_hostname = |r: &&NodeSelectorRequirement| r.key == HOSTNAME_LABEL;
        let name_ok = fields.iter().all(|r| r.key == NODE_NAME_FIELD && r.operator == "NotIn");
        let hostname_ok = expressions
            .iter()
            .filter(is_hostname)
            .all(|r| matches!(r.operator.as_str(), "NotIn" | "Exists"));
        let rest: Vec<NodeSelectorRequirement> = expressions.iter().filter(|r| !is_hostname(r)).cloned().collect();
        let rest_ok = rest.is_empty()
            || term_can_match(
                &NodeSelectorTerm {
                    match_expressions: Some(rest),
                    match_fields: None,
                },
                node_role,
            );
        !(expressions.is_empty() && fields.is_empty()) && name_ok && hostname_ok && rest_ok
    })
}

#[cfg(test)]
mod tests;
