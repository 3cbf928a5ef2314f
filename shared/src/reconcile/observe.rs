//! Reading everything one pass needs with a constant number of (paginated) calls.

use super::plan::Snapshot;
use crate::cluster::{Cluster, ClusterError};
use crate::lifecycle::views::{NodeView, PodView, ServiceView};
use crate::store::{Manifest, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("reading the store: {0}")]
    Store(#[from] StoreError),
    #[error("listing the cluster: {0}")]
    Cluster(#[from] ClusterError),
}

/// Records (and jobs) first, then our pods and services, then nodes. The API creates pod and
/// service before the record, so any listed record's objects existed before they were listed;
/// any node a listed pod is bound to existed before the node list. A missing object is then
/// really gone, not merely created after its list call.
pub async fn observe(store: &Store, cluster: &Cluster) -> Result<Snapshot, ObserveError> {
    let (listing, jobs, claims) = tokio::try_join!(
        store.list_stacks(Manifest::Omit),
        store.list_unfinished_jobs(),
        store.list_idempotency_claims()
    )?;
    // Projected page by page: full pods of thousands of stacks would not fit a small Lambda.
    let (pods, services) = tokio::try_join!(
        cluster.list_stack_pods_as(|pod| PodView::of(&pod)),
        cluster.list_stack_services_as(|service| ServiceView::of(&service))
    )?;
    let nodes = cluster.list_nodes().await?;
    Ok(Snapshot {
        records: listing.records,
        unreadable: listing.unreadable.into_iter().map(|item| item.sk).collect(),
        pods,
        services,
        nodes: nodes.iter().filter_map(NodeView::of).collect(),
        jobs,
        claims,
    })
}
