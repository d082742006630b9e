//! The snapshot the controller would build, kept between planner calls and brought up to date
//! node by node ([`SnapshotCache`]).

use std::collections::BTreeMap;

use autoscaler_core::model::{DaemonSet, InFlightClaim, Node, Pod, PodKey, Pool, Snapshot};
use autoscaler_core::taints::Taint;

use super::{Cluster, NodeId, NodePhase, NodeState, PodId};
use crate::workload::Workload;

/// What a node's entries in the snapshot were built from: if none of it changed, the entries
/// are still exact (everything else they hold is fixed at launch).
#[derive(Clone, Debug, PartialEq)]
struct NodeKey {
    phase: NodePhase,
    cordoned: bool,
    deleting: bool,
    taints: Vec<Taint>,
    ds_pods: usize,
    pods: Vec<PodId>,
    last_pod_change: i64,
    hold_version: u64,
}

impl NodeKey {
    fn of(n: &NodeState) -> Self {
        NodeKey {
            phase: n.phase,
            cordoned: n.cordoned,
            deleting: n.deleting,
            taints: n.taints.clone(),
            ds_pods: n.ds_pods.len(),
            pods: n.pods.clone(),
            last_pod_change: n.last_pod_change,
            hold_version: n.hold_version,
        }
    }

    /// Whether the entry holds or held phantoms: such entries (a few nodes, for minutes) are
    /// rebuilt rather than patched.
    fn booked(&self, n: &NodeState) -> bool {
        self.hold_version != n.hold_version || !n.held.is_empty()
    }

    /// Compares without building a key: this runs for every live node at every planner call.
    fn matches(&self, n: &NodeState) -> bool {
        self.last_pod_change == n.last_pod_change
            && self.hold_version == n.hold_version
            && self.phase == n.phase
            && self.cordoned == n.cordoned
            && self.deleting == n.deleting
            && self.ds_pods == n.ds_pods.len()
            && self.taints == n.taints
            && self.pods == n.pods
    }
}

/// The controller's snapshot, kept between planner calls and brought up to date in place.
///
/// Building the snapshot afresh cloned every bound pod at every provisioning batch, disruption
/// pass and validation, which was most of the simulator's time at 100,000 pods. The planner
/// only reads the snapshot, so its nodes and in-flight claims are kept, and a node's entries
/// are refreshed only when what they were built from ([`NodeKey`]) changed, cloning just the
/// newly bound pods. The result equals [`Cluster::snapshot`] exactly.
#[derive(Clone, Debug, Default)]
pub struct SnapshotCache {
    snap: Snapshot,
    /// Node id and key of each entry of `snap.nodes`, in the same order.
    nodes: Vec<(NodeId, NodeKey)>,
    /// Node id and key of each entry of `snap.in_flight`, in the same order.
    in_flight: Vec<(NodeId, NodeKey)>,
}

impl SnapshotCache {
    /// Brings the snapshot up to date with `cluster` and returns it; equal to
    /// `cluster.snapshot(pools, daemonsets, workload, include_pending)`.
    pub fn sync(
        &mut self,
        cluster: &Cluster,
        pools: &[Pool],
        daemonsets: &[DaemonSet],
        workload: &Workload,
        include_pending: bool,
    ) -> &Snapshot {
        cluster.fill_small_parts(&mut self.snap, pools, daemonsets, workload, include_pending);
        let live = &cluster.live_nodes;
        self.snap.nodes = Self::merge(
            std::mem::take(&mut self.snap.nodes),
            &mut self.nodes,
            live.iter()
                .copied()
                .filter(|n| cluster.nodes[*n].registered()),
            cluster,
        );
        self.snap.in_flight = Self::merge(
            std::mem::take(&mut self.snap.in_flight),
            &mut self.in_flight,
            live.iter()
                .copied()
                .filter(|n| cluster.nodes[*n].phase != NodePhase::Ready),
            cluster,
        );
        &self.snap
    }

    /// Replaces the snapshot's [`Snapshot::nominated`] (kept by the engine, not the cluster).
    pub fn set_nominated(&mut self, nominated: BTreeMap<PodKey, String>) {
        self.snap.nominated = nominated;
    }

    /// The snapshot as of the last sync.
    pub fn get(&self) -> &Snapshot {
        &self.snap
    }

    /// The snapshot as of the last sync, to lend to a function that changes it and puts it back
    /// as it was (`autoscaler_core::disruption::validate`): the next sync reuses its entries by
    /// position, so one left changed would drift from the cluster.
    pub fn get_mut(&mut self) -> &mut Snapshot {
        &mut self.snap
    }

    /// The entries for `wanted` (ascending node ids), moving unchanged ones over from `old`
    /// (also ascending), refreshing changed ones in place and building new ones; `keys` is
    /// replaced by the new keys.
    fn merge<T: Entry>(
        old: Vec<T>,
        keys: &mut Vec<(NodeId, NodeKey)>,
        wanted: impl Iterator<Item = NodeId>,
        cluster: &Cluster,
    ) -> Vec<T> {
        let wanted: Vec<NodeId> = wanted.collect();
        // Mostly the same nodes as at the last sync: then the entries are patched where they
        // are, instead of every entry being moved to a new list.
        if wanted.len() == keys.len() && wanted.iter().zip(keys.iter()).all(|(w, (id, _))| w == id)
        {
            let mut entries = old;
            for (entry, (ni, key)) in entries.iter_mut().zip(keys.iter_mut()) {
                catch_up(entry, key, cluster, *ni);
            }
            return entries;
        }
        let old_keys = std::mem::take(keys);
        let mut old = old.into_iter().zip(old_keys).peekable();
        let mut out = Vec::with_capacity(old.len());
        for ni in wanted {
            while old.next_if(|(_, (id, _))| *id < ni).is_some() {}
            match old.next_if(|(_, (id, _))| *id == ni) {
                Some((mut entry, (_, mut key))) => {
                    catch_up(&mut entry, &mut key, cluster, ni);
                    out.push(entry);
                    keys.push((ni, key));
                }
                None => {
                    out.push(T::build(cluster, ni));
                    keys.push((ni, NodeKey::of(&cluster.nodes[ni])));
                }
            }
        }
        out
    }
}

/// Brings node `ni`'s entry, built when the node looked like `key`, up to date, and `key` with
/// it; an entry whose node did not change is left as it is.
fn catch_up<T: Entry>(entry: &mut T, key: &mut NodeKey, cluster: &Cluster, ni: NodeId) {
    let n = &cluster.nodes[ni];
    if !key.matches(n) {
        entry.refresh(cluster, ni, key);
        *key = NodeKey::of(n);
    }
}

/// A per-node entry of the snapshot ([`Node`] or [`InFlightClaim`]).
trait Entry: Sized {
    /// The entry for node `ni`, built from scratch.
    fn build(c: &Cluster, ni: NodeId) -> Self;
    /// Brings an entry built when the node looked like `old` up to date, touching only what
    /// can change after launch.
    fn refresh(&mut self, c: &Cluster, ni: NodeId, old: &NodeKey);
}

impl Entry for Node {
    fn build(c: &Cluster, ni: NodeId) -> Self {
        c.core_node(ni)
    }

    fn refresh(&mut self, c: &Cluster, ni: NodeId, old: &NodeKey) {
        let n = &c.nodes[ni];
        if old.booked(n) {
            *self = c.core_node(ni);
            return;
        }
        if self.taints != n.taints {
            self.taints = n.taints.clone();
        }
        if old.phase != n.phase {
            self.allocatable = n.effective_allocatable();
            self.initialized = n.phase == NodePhase::Ready;
        }
        self.unschedulable = n.cordoned;
        self.deleting = n.deleting;
        self.last_pod_event = Some(n.last_pod_change);
        c.refresh_pods(&mut self.pods, ni, old);
    }
}

impl Entry for InFlightClaim {
    fn build(c: &Cluster, ni: NodeId) -> Self {
        c.in_flight_claim(ni)
    }

    fn refresh(&mut self, c: &Cluster, ni: NodeId, old: &NodeKey) {
        if old.booked(&c.nodes[ni]) {
            *self = c.in_flight_claim(ni);
        } else if c.nodes[ni].registered() {
            c.refresh_pods(&mut self.pods, ni, old);
        } else {
            self.pods.clear();
        }
    }
}

impl Cluster {
    /// Brings `pods`, built by [`Cluster::node_pods`] when the node looked like `old`, up to
    /// date. Unbinding keeps the order of the others and binding appends, so the pods still
    /// bound are moved over and only newly bound ones are cloned; any other change is still
    /// handled correctly, by cloning whatever does not line up.
    fn refresh_pods(&self, pods: &mut Vec<Pod>, ni: NodeId, old: &NodeKey) {
        let n = &self.nodes[ni];
        let ds = n.ds_pods.len();
        if old.ds_pods != ds || pods.len() != ds + old.pods.len() {
            *pods = self.node_pods(ni);
            return;
        }
        let mut previous = std::mem::take(pods).into_iter();
        let mut out = Vec::with_capacity(ds + n.pods.len());
        out.extend(previous.by_ref().take(ds));
        let mut next = 0;
        for (id, pod) in old.pods.iter().zip(previous) {
            if n.pods.get(next) == Some(id) {
                out.push(pod);
                next += 1;
            }
        }
        out.extend(n.pods[next..].iter().map(|p| self.pod(*p).clone()));
        *pods = out;
    }
}
