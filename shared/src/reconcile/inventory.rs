//! The inventory of one pass: everything the plan needs, read with a constant number of
//! (paginated) calls.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use super::plan::{Inventory, TenantHolds};
use crate::cluster::{Cluster, ClusterError, pod_images};
use crate::lifecycle::views::{NodeView, PodView, ServiceView};
use crate::model::Exposure;
use crate::store::{Manifest, Store, StoreError};
use crate::tenancy::Tenants;

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("reading the store: {0}")]
    Store(#[from] StoreError),
    #[error("listing the cluster: {0}")]
    Cluster(#[from] ClusterError),
}

/// What the pre-pull's share of the pass reads from the same lists: the images the stack pods
/// run, and the nodes as listed (taints and all).
pub(crate) struct ForPrepull {
    pub images_in_use: BTreeSet<String>,
    pub nodes: Vec<Node>,
}

/// Records (and jobs) first, then our pods and services (and, with hostport stacks, every
/// Service's node ports), then nodes. The API creates pod and
/// service before the record, so any listed record's objects existed before they were listed;
/// any node a listed pod is bound to existed before the node list. A missing object is then
/// really gone, not merely created after its list call.
///
/// Holds are read before the records: a create writes its hold before its record, so a
/// listed hold whose record is missing is a create in flight (young) or dead (old), never a
/// record listed too early.
pub(crate) async fn take_inventory(
    store: &Store,
    cluster: &Cluster,
    tenants: &Tenants,
) -> Result<(Inventory, ForPrepull), InventoryError> {
    let limited = tenants
        .iter()
        .filter(|(_, limit)| limit.is_some())
        .map(|(tenant, _)| tenant);
    let held = futures::future::try_join_all(limited.map(|tenant| async move {
        // The counter before the holds: the recount's condition relies on it.
        let counter = store.tenant_held(tenant).await?;
        let holds = store.list_tenant_holds(tenant).await?;
        Ok::<_, StoreError>(TenantHolds {
            tenant: tenant.clone(),
            counter,
            holds,
        })
    }))
    .await?;
    let (listing, jobs, claims) = tokio::try_join!(
        store.list_stacks(Manifest::Omit),
        store.list_unfinished_jobs(),
        store.list_idempotency_claims()
    )?;
    // Projected page by page: full pods of thousands of stacks would not fit a small Lambda.
    let mut images_in_use = BTreeSet::new();
    let (pods, services, node_port_holders) = tokio::try_join!(
        cluster.list_stack_pods_as(|pod| {
            images_in_use.extend(pod_images(&pod).cloned());
            PodView::of(&pod)
        }),
        cluster.list_stack_services_as(|service| ServiceView::of(&service)),
        async {
            // Only a hostport stack's port can be taken (a Service holds its own).
            if listing.records.iter().any(|r| r.exposure == Exposure::HostPort) {
                cluster.node_port_holders(Duration::ZERO).await
            } else {
                Ok(Arc::default())
            }
        }
    )?;
    let nodes = cluster.list_nodes().await?;
    let inventory = Inventory {
        records: listing.records,
        unreadable: listing.unreadable.into_iter().map(|item| item.sk).collect(),
        pods,
        services,
        nodes: nodes.iter().filter_map(NodeView::of).collect(),
        node_port_holders,
        jobs,
        claims,
        held,
    };
    Ok((inventory, ForPrepull { images_in_use, nodes }))
}
