//! Reads, refreshed from the cluster. A read writes to DynamoDB only when something changed,
//! and removes stacks that turned out to be gone (they then answer 404); a stack it finds
//! failed loses its objects and answers as its tombstone (`failed`, with reason and message).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use super::capacity::Capacity;
use super::{StackError, Stacks, owned};
use crate::cluster::{IsolationReport, NodePortHolders, PORT_VIEW_MAX_AGE};
use crate::lifecycle::end::{RecordWrite, StackRemover};
use crate::lifecycle::views::{NodeView, PodView, ServiceView};
use crate::lifecycle::{Removal, Rules, StackObjects, Verdict, judge};
use crate::model::{Exposure, STACK_ID_LABEL, StackId, StackRecord, StackUsage};
use crate::prepull::Readiness;
use crate::store::{ListCursor, Manifest};
use crate::tenancy::{Scope, TenantId};

/// How many gone stacks a list removes at once.
const REMOVAL_CONCURRENCY: usize = 8;
/// Stacks read per BatchGetItem while filling a page: with their manifests (items of at most
/// 400 KB) an answer stays below its 16 MB cap, and little is read past a full page.
const PAGE_FETCH_STACKS: usize = 25;

/// One page of the stack list, oldest first.
#[derive(Debug)]
pub struct ListPage {
    pub stacks: Vec<StackRecord>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<ListCursor>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Stats {
    pub total_stacks: usize,
    pub active_stacks: usize,
    pub node_distribution: BTreeMap<String, usize>,
    /// Stacks per status (`{status: count}`, only statuses some stack has).
    pub status_counts: BTreeMap<String, usize>,
    pub used_node_ports: usize,
    pub reserved_cpu_milli: i64,
    pub reserved_memory_bytes: i64,
    /// Headroom: node ports and, per stack node, allocatable against reserved.
    pub capacity: Capacity,
    /// Whether the stacks' isolation is in place (`null` when it could not be checked).
    pub isolation: Option<IsolationReport>,
    /// For a key of one tenant: that tenant, its limit and the stacks it holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<TenantStats>,
    /// The pre-pulled images on the stack nodes (`null` when they could not be read).
    pub images: Option<Readiness>,
}

/// A tenant's share: the most stacks it may hold (`null`: no limit of its own) and how many
/// it holds now (failed stacks' tombstones hold none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TenantStats {
    #[schema(value_type = String)]
    pub name: TenantId,
    pub max_stacks: Option<u32>,
    pub stacks: usize,
}

impl Stats {
    /// Failed stacks' tombstones count in `total_stacks` and `status_counts` only: they hold
    /// no node, port or resources.
    pub fn of(records: &[StackUsage], capacity: Capacity) -> Self {
        let active: Vec<&StackUsage> = records.iter().filter(|r| r.status.is_active()).collect();
        let holding = || records.iter().filter(|r| !r.status.is_tombstone());
        let mut node_distribution = BTreeMap::new();
        for record in holding().filter(|r| !r.node_id.is_empty()) {
            *node_distribution.entry(record.node_id.clone()).or_insert(0) += 1;
        }
        let mut status_counts = BTreeMap::new();
        for record in records {
            *status_counts.entry(record.status.as_str().to_owned()).or_insert(0) += 1;
        }
        Stats {
            total_stacks: records.len(),
            active_stacks: active.len(),
            node_distribution,
            status_counts,
            used_node_ports: holding().map(|r| r.ports.len()).sum(),
            reserved_cpu_milli: active.iter().map(|r| r.requested_cpu_milli).sum(),
            reserved_memory_bytes: active.iter().map(|r| r.requested_memory_bytes).sum(),
            capacity,
            isolation: None,
            tenant: None,
            images: None,
        }
    }
}

impl Stacks {
    /// One stack with its manifest, refreshed: 2 DynamoDB reads in parallel (+1 write if
    /// changed), at most 3 cluster reads.
    pub async fn get(&self, id: &StackId, scope: &Scope) -> Result<StackRecord, StackError> {
        self.refresh(id, Manifest::Include, scope).await
    }

    /// One stack without its manifest (`pod_spec` empty), refreshed: what a status poll needs,
    /// for 1 DynamoDB read (+1 write if changed) and at most 3 cluster reads.
    pub async fn status(&self, id: &StackId, scope: &Scope) -> Result<StackRecord, StackError> {
        self.refresh(id, Manifest::Omit, scope).await
    }

    /// Only a stack `scope` covers is read from the cluster (or removed if gone): another
    /// tenant's answers 404 before anything else happens.
    async fn refresh(&self, id: &StackId, manifest: Manifest, scope: &Scope) -> Result<StackRecord, StackError> {
        let record = owned(self.store.get_stack(id, manifest).await?, scope)?;
        let service = async {
            match record.service() {
                Some(name) => self.cluster.get_service(name).await,
                None => Ok(None),
            }
        };
        let (pod, service, holders) = tokio::join!(
            self.cluster.get_pod(&record.pod_id),
            service,
            self.node_port_holders_for(std::slice::from_ref(&record))
        );
        let (pod, service) = (pod?, service?);
        let node_name = pod.as_ref().and_then(|p| p.spec.as_ref()?.node_name.clone());
        let node = match node_name {
            Some(name) => self.cluster.get_node(&name).await?,
            None => None,
        };
        let (pod, service) = (pod.as_ref().map(PodView::of), service.as_ref().map(ServiceView::of));
        let node = node.as_ref().and_then(NodeView::of);
        let objects = StackObjects {
            pod: pod.as_ref(),
            service: service.as_ref(),
            node: node.as_ref(),
            node_port_holders: holders.as_deref(),
        };
        self.settle(record, objects, Timestamp::now())
            .await?
            .ok_or(StackError::NotFound)
    }

    /// Up to `limit` stacks with their manifests after `after`, oldest first, refreshed with a
    /// constant number of cluster calls. The page also ends before its stacks' `weigh`t would
    /// pass `max_bytes` (it always holds at least one), so a response stays bounded whatever
    /// the manifests are; `next` then resumes after its last stack.
    pub async fn list_page(
        &self,
        scope: &Scope,
        after: Option<&ListCursor>,
        limit: usize,
        max_bytes: usize,
        weigh: impl Fn(&StackRecord) -> usize,
    ) -> Result<ListPage, StackError> {
        let (keys, more) = self.store.list_stack_keys(after, limit).await?;
        let mut page = Vec::new();
        let mut bytes = 0_usize;
        let mut last = None;
        let mut full = false;
        'chunks: for chunk in keys.chunks(PAGE_FETCH_STACKS) {
            let ids: Vec<StackId> = chunk.iter().map(|k| k.stack_id().clone()).collect();
            let mut records = self.store.get_stacks(&ids).await?.into_iter().peekable();
            for key in chunk {
                // A key without a stack was deleted after the index was read: skipped.
                if let Some(record) = records.next_if(|r| &r.stack_id == key.stack_id())
                    && scope.covers(&record.tenant)
                {
                    let weight = weigh(&record);
                    if !page.is_empty() && bytes.saturating_add(weight) > max_bytes {
                        full = true;
                        break 'chunks;
                    }
                    bytes = bytes.saturating_add(weight);
                    page.push(record);
                }
                last = Some(key);
            }
        }
        let next = if full || more { last.cloned() } else { None };
        Ok(ListPage {
            stacks: self.refreshed(page).await?,
            next,
        })
    }

    /// `records` brought in line with the cluster (gone ones removed), reading only their own
    /// pods and services (selected by stack id, [`Cluster::list_pods_of`]) and the node list:
    /// at most 2 calls per 250 records + 1, whatever else the namespace holds. The cluster is
    /// read after the records: a record is written after its pod and service, so a stack whose
    /// record was read is never mistaken for gone because its pod was listed too early.
    ///
    /// [`Cluster::list_pods_of`]: crate::cluster::Cluster::list_pods_of
    async fn refreshed(&self, records: Vec<StackRecord>) -> Result<Vec<StackRecord>, StackError> {
        if records.is_empty() {
            return Ok(records);
        }
        let ids: Vec<StackId> = records.iter().map(|r| r.stack_id.clone()).collect();
        let (listed, holders) = tokio::join!(
            async {
                tokio::try_join!(
                    self.cluster.list_pods_of(&ids),
                    self.cluster.list_services_of(&ids),
                    self.cluster.list_nodes(),
                )
            },
            self.node_port_holders_for(&records)
        );
        let (pods, services, nodes) = listed?;
        let pods: HashMap<&str, PodView> = pods
            .iter()
            .filter_map(|p| Some((stack_label(&p.metadata)?, PodView::of(p))))
            .collect();
        let services: HashMap<&str, ServiceView> = services
            .iter()
            .filter_map(|s| Some((stack_label(&s.metadata)?, ServiceView::of(s))))
            .collect();
        let by_name: HashMap<String, NodeView> = nodes
            .iter()
            .filter_map(NodeView::of)
            .map(|n| (n.name.clone(), n))
            .collect();
        let now = Timestamp::now();
        let settled: Vec<Result<Option<StackRecord>, StackError>> = stream::iter(records)
            .map(|record| {
                let pod = pods.get(record.stack_id.as_str());
                let node = pod.and_then(|p| by_name.get(p.scheduling.node()?));
                let objects = StackObjects {
                    pod,
                    service: services.get(record.stack_id.as_str()),
                    node,
                    node_port_holders: holders.as_deref(),
                };
                self.settle(record, objects, now)
            })
            .buffered(REMOVAL_CONCURRENCY)
            .collect()
            .await;
        settled.into_iter().filter_map(Result::transpose).collect()
    }

    /// Which Service holds each node port, for judging `records`: `None` when none of them
    /// is a live hostport stack, or the Services cannot be read (no port is then judged taken).
    /// The process's view serves for [`PORT_VIEW_MAX_AGE`]; a port it shows taken is read
    /// again before a stack fails for it, since a stack may since have been given the port of
    /// a Service deleted meanwhile (the picker hands out the least-used ports first).
    async fn node_port_holders_for(&self, records: &[StackRecord]) -> Option<Arc<NodePortHolders>> {
        let hostport: Vec<&StackRecord> = records
            .iter()
            .filter(|r| r.exposure == Exposure::HostPort && !r.status.is_tombstone())
            .collect();
        if hostport.is_empty() {
            return None;
        }
        match self.viewed_node_port_holders(PORT_VIEW_MAX_AGE).await {
            Some(holders) if hostport.iter().any(|r| holders.taken(&r.ports).is_some()) => {
                self.viewed_node_port_holders(Duration::ZERO).await
            }
            viewed => viewed,
        }
    }

    /// [`Cluster::node_port_holders`], `None` when they cannot be read: what judges or
    /// counts them goes on without.
    ///
    /// [`Cluster::node_port_holders`]: crate::cluster::Cluster::node_port_holders
    pub(super) async fn viewed_node_port_holders(&self, max_age: Duration) -> Option<Arc<NodePortHolders>> {
        self.cluster
            .node_port_holders(max_age)
            .await
            .inspect_err(|err| tracing::warn!(error = %err, "the cluster's node ports could not be read"))
            .ok()
    }

    /// Counts and headroom: the `usage` index (what each stack holds, about 200 bytes a stack,
    /// never the records) read in 16 concurrent queries ([`Store::list_stack_usage`]), and one
    /// node list: 0.3 s at 10,000 stacks against 0.8 s for the records (`bench-dashboard`).
    /// The cluster's Services are listed at most every 30 s per process, for the ports their
    /// node ports hold (`capacity.node_ports.held_elsewhere`).
    ///
    /// [`Store::list_stack_usage`]: crate::store::Store::list_stack_usage
    ///
    /// Freshness: the counts are the records' as last observed, not refreshed here, and the
    /// index follows the records within a moment. A create or delete shows about at once; a
    /// status change or a vanished pod shows once a read of that stack, a list page holding
    /// it or the reconciler's next pass (every minute) has seen it. Refreshing here would list
    /// every pod and service of the namespace on each call (the dashboard polls every few
    /// seconds): 8.6 s per call at 10,000 stacks (`bench-dashboard`, README).
    ///
    /// A key of one tenant sees its own stacks only: they are read from the records (the
    /// index does not say whose a stack is), and `capacity.node_ports.free` is the room left
    /// to it (in the cluster and within its limit), not what other tenants hold.
    pub async fn stats(&self, scope: &Scope) -> Result<Stats, StackError> {
        let (all, nodes, cluster) = self.usage_and_capacity().await?;
        let mut stats = match scope.tenant() {
            None => Stats::of(&all, cluster),
            Some(tenant) => {
                let listing = self.store.list_stacks(Manifest::Omit).await?;
                let own: Vec<StackUsage> = listing
                    .records
                    .iter()
                    .filter(|r| &r.tenant == tenant)
                    .map(StackUsage::from)
                    .collect();
                let mut capacity = Capacity::of(&own, &nodes, self.cluster.port_policy(), None);
                capacity.node_ports.held_elsewhere = cluster.node_ports.held_elsewhere;
                let limit = self.config.tenants.limit(tenant);
                let holding = own.iter().filter(|r| !r.status.is_tombstone()).count();
                capacity.node_ports.free = cluster.node_ports.free.min(capacity.node_ports.free);
                if let Some(limit) = limit {
                    let left = u32::try_from(holding).map_or(0, |held| limit.saturating_sub(held));
                    capacity.node_ports.free = capacity.node_ports.free.min(left);
                }
                let mut stats = Stats::of(&own, capacity);
                stats.tenant = Some(TenantStats {
                    name: tenant.clone(),
                    max_stacks: limit,
                    stacks: holding,
                });
                stats
            }
        };
        // The counts stay readable while these cannot be read; the dashboard says "unknown".
        let (isolation, images) = tokio::join!(self.cluster.isolation(), self.prepull.readiness(scope, &nodes));
        stats.isolation = isolation
            .inspect_err(|err| tracing::warn!(error = %err, "the isolation could not be checked for /stats"))
            .ok();
        stats.images = images
            .inspect_err(|err| tracing::warn!(error = %err, "the pre-pulled images could not be read for /stats"))
            .ok();
        Ok(stats)
    }

    /// What every stack holds (the `usage` index), the node list, and the cluster's capacity
    /// from them and the process's view of the Services' node ports: where `/stats` and
    /// `/preflight` start.
    pub(super) async fn usage_and_capacity(&self) -> Result<(Vec<StackUsage>, Vec<Node>, Capacity), StackError> {
        let (listed, holders) = tokio::join!(
            async {
                tokio::try_join!(
                    async { self.store.list_stack_usage().await.map_err(StackError::from) },
                    async { self.cluster.list_nodes().await.map_err(StackError::from) },
                )
            },
            self.viewed_node_port_holders(PORT_VIEW_MAX_AGE)
        );
        let (usage, nodes) = listed?;
        let capacity = Capacity::of(&usage, &nodes, self.cluster.port_policy(), holders.as_deref());
        Ok((usage, nodes, capacity))
    }

    /// Brings the record in line with what the cluster shows: `None` if the stack is gone
    /// (its remains are removed), else the record, written back only if it changed. A stack
    /// found failed loses its objects and answers as its tombstone.
    async fn settle(
        &self,
        mut record: StackRecord,
        objects: StackObjects<'_>,
        now: Timestamp,
    ) -> Result<Option<StackRecord>, StackError> {
        match judge(&record, objects, now, &Rules::of(&self.config)) {
            Verdict::End { reason, mark } if reason.keeps_record() => {
                let failure = mark.as_ref().and_then(|m| m.failure.as_ref());
                tracing::info!(stack_id = %record.stack_id, reason = ?failure.map(|f| f.reason), "stack failed, removing its objects");
                self.remove(&Removal::of(record.clone(), reason, mark.clone())).await?;
                if let Some(mark) = mark {
                    mark.apply_to(&mut record, now);
                }
                Ok(Some(record))
            }
            Verdict::End { reason, mark } => {
                tracing::info!(stack_id = %record.stack_id, ?reason, "stack is gone, removing its remains");
                self.remove(&Removal::of(record, reason, mark)).await?;
                Ok(None)
            }
            Verdict::Keep => Ok(Some(record)),
            Verdict::Update(observed) => match self.write_observed(&record.stack_id, &observed, now).await? {
                RecordWrite::Written => {
                    observed.apply_to(&mut record, now);
                    Ok(Some(record))
                }
                RecordWrite::Gone => Ok(None),
            },
        }
    }
}

fn stack_label(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<&str> {
    meta.labels.as_ref()?.get(STACK_ID_LABEL).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::PortPolicy;
    use crate::model::{Exposure, FailureReason, StackStatus};

    fn usage(node: &str, status: StackStatus, ports: u16) -> StackUsage {
        let mut record = StackRecord::test()
            .node(node)
            .status(status)
            .tcp_ports(31001, ports)
            .requests(250, 1 << 20);
        if status == StackStatus::Failed {
            record = record.failed(FailureReason::ImageNotFound, "not found", Timestamp::UNIX_EPOCH);
        }
        StackUsage::from(&record)
    }

    fn stats(records: &[StackUsage]) -> Stats {
        let settings = PortPolicy {
            exposure: Exposure::NodePort,
            range: (31001, 31010),
            node_role: "stack".into(),
        };
        Stats::of(records, Capacity::of(records, &[], &settings, None))
    }

    #[test]
    fn stats_count_a_failed_stacks_tombstone_but_no_port_node_or_resources() {
        let live = [
            usage("a", StackStatus::Running, 2),
            usage("b", StackStatus::Creating, 1),
        ];
        let mut all = live.to_vec();
        all.push(usage("a", StackStatus::Failed, 3));
        all.push(usage("", StackStatus::Failed, 1));
        let (with, without) = (stats(&all), stats(&live));
        assert_eq!((with.total_stacks, without.total_stacks), (4, 2));
        assert_eq!(with.status_counts.get("failed"), Some(&2));
        assert_eq!(with.active_stacks, 2);
        assert_eq!(with.used_node_ports, 3);
        assert_eq!(with.node_distribution, without.node_distribution);
        assert_eq!(
            (with.reserved_cpu_milli, with.reserved_memory_bytes),
            (without.reserved_cpu_milli, without.reserved_memory_bytes)
        );
        assert_eq!(with.capacity, without.capacity);
    }
}
