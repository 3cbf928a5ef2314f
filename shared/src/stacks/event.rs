//! `POST /preflight`: the room an event's stacks would meet now, gathered for
//! [`forecast`](super::forecast) (the decision, pure). Reads the `usage` index and the node
//! list, as `/stats` does, and the tenant's counter.

use k8s_openapi::api::core::v1::Node;

use super::capacity::{Capacity, NodeCapacity};
use super::forecast::{Expected, Forecast, NodeRoom, Resources, Room, forecast};
use super::{StackError, Stacks};
use crate::cluster::{image_names, is_schedulable_stack_node, pod_images};
use crate::model::{StackId, TargetPort};
use crate::quantity::parse_bytes;
use crate::tenancy::{Scope, TenantId};
use crate::validate;

/// Most kinds of stack one preflight names.
pub(crate) const MAX_PREFLIGHT_KINDS: usize = 100;
/// Most stacks one preflight counts, all kinds together (ten times the largest deployment
/// measured; it bounds the placement's work).
pub(crate) const MAX_PREFLIGHT_COUNT: u32 = 100_000;

/// Stacks of one manifest an event expects, as a create would send it.
#[derive(Debug, Clone)]
pub struct ExpectedStacks {
    pub count: u32,
    pub manifest: String,
    pub target_ports: Vec<TargetPort>,
}

/// What the operator expects of an event.
#[derive(Debug, Clone, Default)]
pub struct EventPlan {
    pub stacks: Vec<ExpectedStacks>,
    /// The window the stacks will be created in (the opening minutes).
    pub opening_seconds: Option<f64>,
    /// For a key of every tenant: the tenant whose limit to check.
    pub tenant: Option<TenantId>,
}

impl Stacks {
    /// Go or no-go for `plan` (each manifest validated as a create would: a bad one is a 400
    /// naming it).
    pub async fn preflight(&self, plan: &EventPlan, scope: &Scope) -> Result<Forecast, StackError> {
        if plan.stacks.is_empty() || plan.stacks.len() > MAX_PREFLIGHT_KINDS {
            return Err(StackError::Invalid(format!(
                "stacks: 1 to {MAX_PREFLIGHT_KINDS} kinds of stack"
            )));
        }
        let total: u64 = plan.stacks.iter().map(|s| u64::from(s.count)).sum();
        if total > u64::from(MAX_PREFLIGHT_COUNT) {
            return Err(StackError::Invalid(format!(
                "stacks: {total} stacks in all, at most {MAX_PREFLIGHT_COUNT}"
            )));
        }
        let mut expected = Vec::with_capacity(plan.stacks.len());
        for (index, stacks) in plan.stacks.iter().enumerate() {
            expected.push(self.expected(index, stacks).await?);
        }
        let (_, nodes, capacity) = self.usage_and_capacity().await?;
        let role = &self.cluster.port_policy().node_role;
        let rooms = nodes
            .iter()
            .filter(|node| is_schedulable_stack_node(node, role))
            .filter_map(|node| node_room(node, &capacity))
            .collect();
        let tenant = match scope.tenant().or(plan.tenant.as_ref()) {
            Some(tenant) => match self.config.tenants.limit(tenant) {
                Some(limit) => Some((
                    tenant.to_string(),
                    limit,
                    self.store.tenant_held(tenant).await?.unwrap_or(0),
                )),
                None => None,
            },
            None => None,
        };
        let room = Room {
            node_ports_free: capacity.node_ports.free,
            nodes: rooms,
            tenant,
            create_rate: self.config.create_rate,
            opening_seconds: plan.opening_seconds,
        };
        Ok(forecast(&expected, &room))
    }

    async fn expected(&self, index: usize, stacks: &ExpectedStacks) -> Result<Expected, StackError> {
        if stacks.count == 0 || stacks.count > MAX_PREFLIGHT_COUNT {
            return Err(StackError::Invalid(format!(
                "stacks[{index}].count: 1 to {MAX_PREFLIGHT_COUNT}"
            )));
        }
        let hardened = validate::validate(
            &stacks.manifest,
            &stacks.target_ports,
            &StackId::generate(),
            &self.config.validation,
        )
        .map_err(|rejection| StackError::Invalid(format!("stacks[{index}]: invalid pod spec: {rejection}")))?;
        let hardened = self.with_runtime_overhead(hardened).await?;
        Ok(Expected {
            count: stacks.count,
            each: Resources::of_one_stack(hardened.requested_cpu_milli, hardened.requested_memory_bytes),
            ports: u32::try_from(stacks.target_ports.len()).unwrap_or(u32::MAX),
            images: pod_images(&hardened.pod).cloned().collect(),
        })
    }
}

/// What `node` has left: allocatable less what our stacks on it reserve (other pods' requests
/// are not read: the stack nodes are the stacks').
fn node_room(node: &Node, capacity: &Capacity) -> Option<NodeRoom> {
    let name = node.metadata.name.clone()?;
    let used = capacity.nodes.get(&name).cloned().unwrap_or_default();
    let status = node.status.as_ref();
    let pods = status
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get("pods"))
        // A quantity like any other (kwok's nodes say `1k`).
        .and_then(|q| parse_bytes(&q.0).ok())
        .unwrap_or(0);
    let images = image_names(node);
    let NodeCapacity {
        allocatable_cpu_milli,
        allocatable_memory_bytes,
        reserved_cpu_milli,
        reserved_memory_bytes,
        stacks,
        ..
    } = used;
    Some(NodeRoom {
        name,
        left: Resources {
            cpu_milli: allocatable_cpu_milli - reserved_cpu_milli,
            memory_bytes: allocatable_memory_bytes - reserved_memory_bytes,
            pods: pods - i64::try_from(stacks).unwrap_or(i64::MAX),
        },
        images,
    })
}
