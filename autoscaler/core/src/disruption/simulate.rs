//! Where the pods of removed nodes would go: the provisioning planner re-run on the cluster
//! without them (one piece of fit logic), and the cluster after they moved.

use std::borrow::{Borrow, Cow};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use crate::dra::allocate::{Allocator, ClaimRef, Inventory, reaches};
use crate::dra::{DeviceId, Dra, PodClaim, ResourceClaim};

use crate::model::{Node, Pod, PodKey, Snapshot};
use crate::plan::{Plan, Unschedulable};
use crate::provision::{PlanOptions, ShapeCache, plan_lent};

use super::candidates::movable;

/// Where the pods of `removed` nodes would go: the planner run on the cluster without them,
/// with no in-flight capacity (evicting onto capacity that may never arrive is unsafe) and,
/// unless `allow_new`, no NodePool to launch from. A pod the planner puts on a node that has
/// not initialized is listed unschedulable ([`UNINITIALIZED_TARGET`]): evicted pods go only to
/// initialized, schedulable nodes or to the command's own replacement. The room of pending
/// pods about to land on a node (`holds_on`) is taken.
///
/// `snap` is the planner's input for the time of the call: its nodes, DaemonSets and cluster
/// limits are moved into a [`bare`] snapshot, the removed nodes taken away, and all of it is
/// put back before this returns, so `snap` is as it was. This spares a copy of every node for each call, which was
/// a fifth of a simulated day on a cluster of thousands of nodes.
pub fn simulate(snap: &mut Snapshot, removed: &BTreeSet<usize>, allow_new: bool) -> Plan {
    let (holds, _) = pending_holds(snap);
    simulate_holding(snap, removed, allow_new, &holds)
}

/// [`simulate`] with the pods held on `snap`'s nodes already worked out ([`pending_holds`]),
/// for a caller that also needs them.
pub(super) fn simulate_holding(
    snap: &mut Snapshot,
    removed: &BTreeSet<usize>,
    allow_new: bool,
    holds: &[(usize, Pod)],
) -> Plan {
    on_bare(snap, |base, _, launchable| {
        plan_without(
            base,
            removed,
            holds,
            &mut Vec::new(),
            launchable,
            allow_new,
            None,
        )
    })
}

/// The pods held on `snap`'s nodes (indexes into them), as [`simulate`] holds them
/// (`holds_on`), with how many are nominations; the rest are pending pods the planner would
/// bind to a node that is up: Karpenter nominates such a node and leaves it alone while the
/// pod is on its way. `snap` is lent as to [`simulate`] and comes back as it was.
pub(super) fn pending_holds(snap: &mut Snapshot) -> (Vec<(usize, Pod)>, usize) {
    on_bare(snap, holds_on)
}

/// The pods held on `base`'s nodes: those nominated to a registered node's claim
/// ([`nominated_holds`]), then those the planner binds to a node that is up
/// ([`binds_pending`]); with how many of them are nominations.
fn holds_on(
    base: &mut Snapshot,
    snap: &Snapshot,
    launchable: &mut Vec<crate::model::Pool>,
) -> (Vec<(usize, Pod)>, usize) {
    let mut holds = nominated_holds(snap, &base.nodes);
    let nominated = holds.len();
    let pods = waiting_pods(snap, &base.nodes);
    let binding = binds_pending(base, pods, &snap.groups, &holds, launchable, None);
    holds.extend(binding);
    (holds, nominated)
}

/// Runs `f` on a [`bare`] snapshot holding `snap`'s nodes, DaemonSets and cluster limits
/// (moved, not copied, and put back after), with the NodePools a replacement may come from.
fn on_bare<T>(
    snap: &mut Snapshot,
    f: impl FnOnce(&mut Snapshot, &Snapshot, &mut Vec<crate::model::Pool>) -> T,
) -> T {
    let mut launchable = launchable_pools(&snap.pools);
    let mut base = bare(
        std::mem::take(&mut snap.nodes),
        std::mem::take(&mut snap.daemonsets),
        std::mem::take(&mut snap.cluster_limits),
        snap,
    );
    let out = f(&mut base, snap, &mut launchable);
    snap.nodes = base.nodes;
    snap.daemonsets = base.daemonsets;
    snap.cluster_limits = base.cluster_limits;
    out
}

/// `snap`'s pending pods that no claim holds a nomination for and that might fit on one of
/// `nodes` as it is: the ones the scheduler may bind to a node that is up. A pod asking for
/// more of a resource than any such node has free is left out without planning it (the most
/// of each resource is taken over the nodes separately, so a pod left out fits none), which
/// spares planning a backlog waiting for new nodes at every pass.
fn waiting_pods<N: Borrow<Node>>(snap: &Snapshot, nodes: &[N]) -> Vec<Pod> {
    let mut waiting = snap
        .pending
        .iter()
        .filter(|p| !snap.nominated.contains_key(&p.key))
        .peekable();
    if waiting.peek().is_none() {
        return Vec::new();
    }
    let mut most = crate::resources::Resources::new();
    for n in nodes
        .iter()
        .map(Borrow::borrow)
        .filter(|n| n.initialized && n.ready)
    {
        let mut free = n.allocatable.clone();
        for p in &n.pods {
            free.sub(&p.requests);
        }
        most.max_assign(&free);
    }
    waiting
        .filter(|p| p.requests.fits(&most))
        .cloned()
        .collect()
}

/// Which of `pods` (pending, no nomination) the planner binds to an initialized, ready node of
/// `base` as it is (nothing removed, nothing launched, the pods `held` counted where they
/// are), with that node's index. Such a pod is about to take that room: a disruption that
/// moved other pods into it, or removed the node, would leave the pod to a new node. Karpenter
/// nominates those nodes for the pods and does not disrupt them; its consolidation simulations
/// carry every pending pod along. A pod that fits no node as it is fits none after a removal
/// either, so only pods with a place matter.
fn binds_pending(
    base: &mut Snapshot,
    mut pods: Vec<Pod>,
    groups: &BTreeMap<String, crate::model::Group>,
    held: &[(usize, Pod)],
    launchable: &mut Vec<crate::model::Pool>,
    shapes: Option<&mut ShapeCache>,
) -> Vec<(usize, Pod)> {
    if pods.is_empty() {
        return Vec::new();
    }
    // A gang still waiting for members is placed by no one: with its group (and its
    // minimum) the planner binds none of it.
    base.groups = groups.clone();
    let plan = plan_without(
        base,
        &BTreeSet::new(),
        held,
        &mut pods,
        launchable,
        false,
        shapes,
    );
    base.groups.clear();
    if plan.existing.is_empty() {
        return Vec::new();
    }
    let at = by_name(&base.nodes);
    let mut by_key: BTreeMap<PodKey, Pod> = pods.into_iter().map(|p| (p.key.clone(), p)).collect();
    plan.existing
        .iter()
        .filter_map(|placed| {
            let ni = *at.get(placed.target.as_str())?;
            Some((ni, by_key.remove(&placed.pod)?))
        })
        .collect()
}

/// What a simulation plans on: `nodes`, with `snap`'s DRA state, and nothing pending, in
/// flight, nominated, grouped, protected by a PDB, booked or launchable (the caller adds the
/// pools a replacement may come from).
fn bare(
    nodes: Vec<Node>,
    daemonsets: Vec<crate::model::DaemonSet>,
    cluster_limits: Vec<crate::model::ClusterLimit>,
    snap: &Snapshot,
) -> Snapshot {
    Snapshot {
        pending: vec![],
        nodes,
        in_flight: vec![],
        // No claim in flight here for a nomination to hold.
        nominated: BTreeMap::new(),
        daemonsets,
        pools: vec![],
        groups: BTreeMap::new(),
        pdbs: vec![],
        booked_nodes: BTreeSet::new(),
        // A replacement counts against the cluster-wide maximums like any new node.
        cluster_limits,
        // Claims allocated on a removed node are allocated again where their pods go.
        dra: snap.dra.clone(),
        // A replacement is planned as provisioning would plan it (Karpenter's consolidation
        // runs its scheduler under the same policy).
        min_values_policy: snap.min_values_policy,
    }
}

/// The NodePools a replacement may come from: an atomic pool's nodes come all together,
/// never as one replacement.
fn launchable_pools(pools: &[crate::model::Pool]) -> Vec<crate::model::Pool> {
    pools
        .iter()
        .filter(|p| p.atomic_nodes.is_none())
        .cloned()
        .collect()
}

/// The pending pods of `snap` nominated to a claim whose node has registered, with that node's
/// index in `nodes`: the scheduler is about to bind them there, so their room on it is taken
/// and evicted pods may not be planned into it.
fn nominated_holds(snap: &Snapshot, nodes: &[Node]) -> Vec<(usize, Pod)> {
    if snap.nominated.is_empty() {
        return Vec::new();
    }
    let by_claim: BTreeMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.claim.as_deref().map(|c| (c, i)))
        .collect();
    if by_claim.is_empty() {
        return Vec::new();
    }
    snap.pending
        .iter()
        .filter_map(|p| {
            let claim = snap.nominated.get(&p.key)?;
            by_claim.get(claim.as_str()).map(|i| (*i, p.clone()))
        })
        .collect()
}

/// Plans on `base` (no pending pod, no in-flight claim, no NodePool) without its nodes
/// `removed`, their movable pods pending with the pods `pending` (lent and given back as they
/// were), the pods `held` counted on the nodes they will take ([`nominated_holds`],
/// [`binds_pending`]), and `launchable` as its NodePools (their instance-type shapes from
/// `shapes` when given); then puts the nodes and pools back and clears the pods, leaving
/// `base` as it was.
///
/// Unless `allow_new`, nothing is launched: the pools are left out, except when a moved pod
/// has a hard topology spread over a key other than hostname. The pools' domains count for it
/// as they do when it is provisioned (Karpenter's consolidation simulates with them too):
/// without them, deleting the only node of a zone would move its pod into another zone, a
/// skew the planner itself would not have planned. Those simulations open no claim; a pod
/// that would need one is unschedulable.
fn plan_without(
    base: &mut Snapshot,
    removed: &BTreeSet<usize>,
    held: &[(usize, Pod)],
    pending: &mut Vec<Pod>,
    launchable: &mut Vec<crate::model::Pool>,
    allow_new: bool,
    shapes: Option<&mut ShapeCache>,
) -> Plan {
    debug_assert!(base.pending.is_empty(), "a simulation left pods pending");
    std::mem::swap(&mut base.pending, pending);
    let lent = base.pending.len();
    let len = base.nodes.len();
    for (ni, p) in held.iter().filter(|(ni, _)| *ni < len) {
        base.nodes[*ni].pods.push(p.clone());
    }
    // The devices held pods will take are taken, as their room is; where that cannot be
    // worked out, the node is refused to moved pods with claims (by node name: the indexes
    // shift once the removed nodes are taken out).
    let (held_dra, held_claims) = allocate_held(&base.dra, &base.nodes, held);
    let cluster_dra = held_dra.map(|d| std::mem::replace(&mut base.dra, Arc::new(d)));
    // Highest index first, so the indexes still to take do not move.
    // The caller's indexes come from the nodes the copy was made of.
    debug_assert!(removed.iter().all(|ri| *ri < len), "index out of the copy");
    let mut taken: Vec<(usize, Node)> = Vec::with_capacity(removed.len());
    for &ri in removed.iter().rev().filter(|ri| **ri < len) {
        taken.push((ri, base.nodes.remove(ri)));
    }
    taken.reverse();
    for (_, n) in &taken {
        for p in movable(n) {
            let mut p = p.clone();
            p.group = None;
            base.pending.push(p);
        }
    }
    // A spread's domains include the zones the pools offer; a `ScheduleAnyway` spread counts
    // too, as the planner holds it while it tries it. A pod with preferences the planner
    // relaxes needs the pools as well: without them it could not be placed even on a new
    // node, and would give up a preference that a new node would keep (the command is then
    // refused, as needing one, instead of moving the pod against its preference).
    let with_pools = allow_new
        || base.pending.iter().any(|p| {
            crate::provision::relaxable(p)
                || p.spread
                    .iter()
                    .any(|t| t.topology_key != crate::labels::HOSTNAME)
        });
    if with_pools {
        base.pools = std::mem::take(launchable);
    }
    let options = PlanOptions {
        max_new_claims: if allow_new { usize::MAX } else { 0 },
        ..PlanOptions::default()
    };
    // Only a simulation with pools has shapes to keep: one without would make the cache
    // build the launchable pools' shapes again at the next one with.
    let mut plan = match shapes {
        Some(cache) if with_pools => plan_lent(base, &options, Some(cache)),
        _ if with_pools => plan_lent(base, &options, None),
        _ => plan_lent(base, &PlanOptions::default(), None),
    };
    if !allow_new {
        for pod in std::mem::take(&mut plan.deferred) {
            plan.unschedulable.push(Unschedulable {
                pod,
                reason: NEEDS_A_NEW_NODE.into(),
                limited_by: Vec::new(),
            });
        }
    }
    refuse_uninitialized_targets(&mut plan, &base.nodes);
    refuse_held_devices(&mut plan, base, &held_claims);
    if let Some(d) = cluster_dra {
        base.dra = d;
    }
    if with_pools {
        *launchable = std::mem::take(&mut base.pools);
    }
    base.pending.truncate(lent);
    std::mem::swap(&mut base.pending, pending);
    for (ri, n) in taken {
        base.nodes.insert(ri, n);
    }
    // The held pods were pushed last onto their nodes: taken off in reverse.
    for (ni, _) in held.iter().rev().filter(|(ni, _)| *ni < len) {
        base.nodes[*ni].pods.pop();
    }
    plan
}

/// The cluster a pass simulates on, as one owned snapshot of every node kept between its
/// simulations: each [`SimBase::simulate`] takes the removed nodes out, plans, and puts them
/// back. Copying every node for each candidate (and freeing the copies) was half of the cost
/// of a disruption pass over a few thousand nodes. The caller says when the nodes it passes
/// may have changed ([`SimBase::invalidate`]); the copy is then brought up to date node by
/// node, so that a caller planning every few seconds ([`super::DisruptionCache`]) copies only
/// the nodes that changed since its last pass.
#[derive(Default)]
pub(super) struct SimBase {
    /// The snapshot with every node and no pending pod; `None` until the first simulation.
    base: Option<Snapshot>,
    /// Whether `base` is known to hold what the caller passes now.
    current: bool,
    /// The NodePools a replacement may come from, while they are not in `base`.
    launchable: Vec<crate::model::Pool>,
    /// Pending pods nominated to a registered node's claim, and pending pods the planner binds
    /// to a node that is up ([`binds_pending`]), with the node's index, worked out when the
    /// copy is brought up to date.
    holds: Vec<(usize, Pod)>,
    /// How many of `holds` come from nominations; the rest are [`binds_pending`]'s.
    nominated: usize,
    /// The pending pods [`binds_pending`] binds to a node that is up in this pass, by the
    /// node's name: worked out once, at the pass's first look (the nodes they name are kept
    /// by the pass, so no command removes them, and their room stays held while other
    /// commands move pods around them). `None` until then. Working it out again after each
    /// command could move a pod onto a node the pass had not kept.
    binding: Option<Vec<(String, Pod)>>,
    /// The launchable pools' instance-type shapes, lent by the caller's
    /// [`super::DisruptionCache`] for the pass, so that each simulation that may launch a
    /// replacement does not build them again.
    pub(super) shapes: ShapeCache,
    /// Plans already made on the copy as it is, by the nodes removed and whether a
    /// replacement may launch; emptied whenever the copy, its holds or its launchable pools
    /// change. A simulation depends on nothing else (no clock), so a pass over an unchanged
    /// cluster (a node whose pods had nowhere to go is looked at again when its unneeded time
    /// would end) reuses the answers instead of planning them again: that was 40 % of the
    /// simulated openb replay.
    memo: std::collections::HashMap<(Vec<usize>, bool), Plan>,
}

/// How many plans [`SimBase`] keeps before it starts again: bounds its memory on a large
/// cluster that stays unchanged while multi-node consolidation tries many sets.
const MEMO_MAX: usize = 4096;

impl SimBase {
    /// The nodes (or anything else of the snapshot) may have changed: the next simulation
    /// compares the copy with them first.
    pub(super) fn invalidate(&mut self) {
        self.current = false;
    }

    /// A new pass, on a snapshot whose pending pods may differ from the last pass's.
    pub(super) fn start_pass(&mut self) {
        self.current = false;
        self.binding = None;
    }

    /// The registered nodes of `nodes` pending pods would be bound to, by name, with the pod
    /// ([`binds_pending`]); the pods are counted there in this pass's simulations.
    pub(super) fn pending_targets<N: Borrow<Node>>(
        &mut self,
        snap: &Snapshot,
        nodes: &[N],
    ) -> Vec<(String, PodKey)> {
        let mut waiting = None;
        if self.binding.is_none() {
            let pods = waiting_pods(snap, nodes);
            if pods.is_empty() {
                self.binding = Some(Vec::new());
                return Vec::new();
            }
            waiting = Some(pods);
        }
        self.bring_up_to_date_with(snap, nodes, waiting);
        self.binding
            .iter()
            .flatten()
            .map(|(node, p)| (node.clone(), p.key.clone()))
            .collect()
    }

    /// Brings the copy up to date with `nodes` and `snap` when it may not be, and puts the
    /// pods held on its nodes where they are now (the nodes may have moved in it).
    fn bring_up_to_date<N: Borrow<Node>>(&mut self, snap: &Snapshot, nodes: &[N]) {
        self.bring_up_to_date_with(snap, nodes, None);
    }

    /// [`Self::bring_up_to_date`], given the pass's [`waiting_pods`] when the caller has them.
    fn bring_up_to_date_with<N: Borrow<Node>>(
        &mut self,
        snap: &Snapshot,
        nodes: &[N],
        waiting: Option<Vec<Pod>>,
    ) {
        if self.current {
            return;
        }
        let mut changed = self.catch_up(snap, nodes);
        let base = self.base.as_mut().expect("caught up");
        let mut holds = nominated_holds(snap, &base.nodes);
        let nominated = holds.len();
        if self.binding.is_none() {
            let pods = waiting.unwrap_or_else(|| waiting_pods(snap, &base.nodes));
            let placed = binds_pending(
                base,
                pods,
                &snap.groups,
                &holds,
                &mut self.launchable,
                Some(&mut self.shapes),
            );
            self.binding = Some(
                placed
                    .into_iter()
                    .map(|(ni, p)| (base.nodes[ni].name.clone(), p))
                    .collect(),
            );
        }
        let at = by_name(&base.nodes);
        holds.extend(
            self.binding
                .iter()
                .flatten()
                .filter_map(|(node, p)| Some((*at.get(node.as_str())?, p.clone()))),
        );
        if holds != self.holds || nominated != self.nominated {
            self.holds = holds;
            self.nominated = nominated;
            changed = true;
        }
        if changed {
            self.memo.clear();
        }
        self.current = true;
    }

    /// [`simulate`] on the kept copy of `nodes` (and of `snap`'s other fields), brought up to
    /// date first when it may not be.
    pub(super) fn simulate<N: Borrow<Node>>(
        &mut self,
        snap: &Snapshot,
        nodes: &[N],
        removed: &BTreeSet<usize>,
        allow_new: bool,
    ) -> Plan {
        self.bring_up_to_date(snap, nodes);
        let key = (removed.iter().copied().collect::<Vec<_>>(), allow_new);
        if let Some(plan) = self.memo.get(&key) {
            return plan.clone();
        }
        let base = self.base.as_mut().expect("caught up");
        let plan = plan_without(
            base,
            removed,
            &self.holds,
            &mut Vec::new(),
            &mut self.launchable,
            allow_new,
            Some(&mut self.shapes),
        );
        if self.memo.len() >= MEMO_MAX {
            self.memo.clear();
        }
        self.memo.insert(key, plan.clone());
        plan
    }

    /// Makes the copy equal to `nodes` and `snap`: copies only what differs from it. Whether
    /// anything differed (the launchable pools included).
    fn catch_up<N: Borrow<Node>>(&mut self, snap: &Snapshot, nodes: &[N]) -> bool {
        let mut changed = false;
        let launchable = snap.pools.iter().filter(|p| p.atomic_nodes.is_none());
        let same_launchable = self.launchable.len() == launchable.clone().count()
            && self
                .launchable
                .iter()
                .zip(launchable)
                .all(|(a, b)| crate::provision::same_pool(a, b));
        if !same_launchable {
            self.launchable = launchable_pools(&snap.pools);
            changed = true;
        }
        let Some(base) = self.base.as_mut() else {
            self.base = Some(bare(
                nodes.iter().map(|n| n.borrow().clone()).collect(),
                snap.daemonsets.clone(),
                snap.cluster_limits.clone(),
                snap,
            ));
            return true;
        };
        let aligned = base.nodes.len() == nodes.len()
            && base
                .nodes
                .iter()
                .zip(nodes)
                .all(|(kept, n)| kept.name == n.borrow().name);
        if aligned {
            for (kept, n) in base.nodes.iter_mut().zip(nodes) {
                let n = n.borrow();
                if !same_node(kept, n) {
                    kept.clone_from(n);
                    changed = true;
                }
            }
        } else {
            changed = true;
            // Nodes came or went: each kept copy is found by name, so that one node gone from
            // the middle does not make every node after it be copied again.
            let at = by_name(&base.nodes);
            let found: Vec<Option<usize>> = nodes
                .iter()
                .map(|n| at.get(n.borrow().name.as_str()).copied())
                .collect();
            let mut old: Vec<Option<Node>> = std::mem::take(&mut base.nodes)
                .into_iter()
                .map(Some)
                .collect();
            base.nodes = nodes
                .iter()
                .zip(found)
                .map(|(n, j)| {
                    let n = n.borrow();
                    match j.and_then(|j| old[j].take()) {
                        Some(kept) if same_node(&kept, n) => kept,
                        _ => n.clone(),
                    }
                })
                .collect();
        }
        if base.daemonsets != snap.daemonsets {
            base.daemonsets.clone_from(&snap.daemonsets);
            changed = true;
        }
        if base.cluster_limits != snap.cluster_limits {
            base.cluster_limits.clone_from(&snap.cluster_limits);
            changed = true;
        }
        if base.dra != snap.dra {
            base.dra.clone_from(&snap.dra);
            changed = true;
        }
        changed
    }
}

/// Each node's index in `nodes`, by name.
fn by_name(nodes: &[Node]) -> std::collections::HashMap<&str, usize> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect()
}

/// `a == b`, asking first what most often differs between passes (the name, when a node came
/// or went before it; the pods, when one was bound or left).
fn same_node(a: &Node, b: &Node) -> bool {
    a.name == b.name
        && a.pods.len() == b.pods.len()
        && a.last_pod_event == b.last_pod_event
        && a == b
}

/// Reason given to an evicted pod whose only place is a node that has not initialized.
pub const UNINITIALIZED_TARGET: &str = "would schedule against an uninitialized node";
/// Reason given to an evicted pod that only a new node would hold, in a simulation that
/// launches none.
pub const NEEDS_A_NEW_NODE: &str = "would need a new node";
/// Reason given to an evicted pod whose only place is a node that is not ready.
pub const UNREADY_TARGET: &str = "would schedule against a node that is not ready";

/// Turns every placement of an evicted pod onto an uninitialized or unready node into an
/// unschedulable pod: such a node may never come up (startup taints, device plugin) or come
/// back, and a disruption must not bet on it. Its NodeClaim is left out of the simulation, but
/// its Node is not; the planner tries such nodes after every node that is up, so a pod lands on
/// one only when no healthy node holds it, and the command then fails (as in Karpenter).
fn refuse_uninitialized_targets(plan: &mut Plan, nodes: &[Node]) {
    let refused_targets: BTreeMap<&str, &str> = nodes
        .iter()
        .filter_map(|n| {
            let why = if !n.initialized {
                UNINITIALIZED_TARGET
            } else if !n.ready {
                UNREADY_TARGET
            } else {
                return None;
            };
            Some((n.name.as_str(), why))
        })
        .collect();
    if refused_targets.is_empty() {
        return;
    }
    let (refused, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut plan.existing)
        .into_iter()
        .partition(|p| refused_targets.contains_key(p.target.as_str()));
    plan.existing = kept;
    for p in refused {
        plan.unschedulable.push(crate::plan::Unschedulable {
            reason: format!("{} {}", refused_targets[p.target.as_str()], p.target),
            pod: p.pod,
            limited_by: Vec::new(),
        });
    }
    plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
}

/// The pods `held` on `nodes` whose claims are not allocated yet, given devices on their
/// node as the scheduler will give them: `dra` with a claim object per such claim, allocated
/// there (`None` when there is none), so that a simulation counts those devices taken and a
/// moved pod gets only what is left. A held pod with an unallocated shared claim (other pods,
/// moved ones among them, would have to follow its allocation) or whose claims find no devices
/// on its node is listed instead, by node name, for [`refuse_held_devices`].
fn allocate_held(
    dra: &Dra,
    nodes: &[Node],
    held: &[(usize, Pod)],
) -> (Option<Dra>, BTreeMap<String, PodKey>) {
    let mut refused = BTreeMap::new();
    let mut made: Vec<ResourceClaim> = Vec::new();
    let mut taken: Option<HashSet<DeviceId>> = None;
    for (ni, p) in held.iter().filter(|(ni, _)| *ni < nodes.len()) {
        let open: Vec<&PodClaim> = p.claims.iter().filter(|c| c.allocation.is_none()).collect();
        if open.is_empty() {
            continue;
        }
        let node = &nodes[*ni];
        if open.iter().any(|c| c.shared_name().is_some()) {
            refused.insert(node.name.clone(), p.key.clone());
            continue;
        }
        let taken = taken.get_or_insert_with(|| {
            dra.claims
                .iter()
                .filter_map(|c| c.allocation.as_ref())
                .flat_map(|a| a.devices.iter().map(|d| d.device.clone()))
                .collect()
        });
        let inv = Inventory::new(
            dra.slices
                .iter()
                .filter(|s| reaches(s, &node.name, &node.labels)),
        );
        let refs: Vec<ClaimRef<'_>> = open
            .iter()
            .map(|c| ClaimRef {
                name: &c.name,
                spec: &c.spec,
            })
            .collect();
        let got = Allocator::new(&dra.classes).allocate_with(
            &node.name,
            &inv,
            &|id| taken.contains(id),
            &refs,
        );
        let Ok(allocations) = got else {
            refused.insert(node.name.clone(), p.key.clone());
            continue;
        };
        for (c, a) in open.iter().zip(allocations) {
            taken.extend(a.devices.iter().map(|d| d.device.clone()));
            made.push(ResourceClaim {
                namespace: p.key.namespace.clone(),
                // A claim not made yet gets a name no object can have (`:` is not allowed in
                // one), so that it never stands in for a real claim below.
                name: c
                    .claim_name()
                    .map_or_else(|| format!("{}:{}", p.key.name, c.name), str::to_string),
                spec: c.spec.clone(),
                allocation: Some(a),
                reserved_for: vec![p.key.clone()],
            });
        }
    }
    if made.is_empty() {
        return (None, refused);
    }
    let mut with_held = dra.clone();
    // A template's claim that exists already is replaced by its allocated copy.
    with_held.claims.retain(|c| {
        !made
            .iter()
            .any(|m| m.namespace == c.namespace && m.name == c.name)
    });
    with_held.claims.extend(made);
    (Some(with_held), refused)
}

/// Turns every placement of a pod with DRA claims onto a node where a held pod with claims
/// waits whose devices [`allocate_held`] could not work out (`waiting`, by node name) into an
/// unschedulable pod: the moved pod could be given the devices that pod needs. Leaving such
/// nodes to pods without claims is the safe side (it holds back a consolidation only while
/// the pod waits).
fn refuse_held_devices(plan: &mut Plan, base: &Snapshot, waiting: &BTreeMap<String, PodKey>) {
    if waiting.is_empty() || plan.existing.is_empty() {
        return;
    }
    let claiming: BTreeSet<&PodKey> = base
        .pending
        .iter()
        .filter(|p| !p.claims.is_empty())
        .map(|p| &p.key)
        .collect();
    let (refused, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut plan.existing)
        .into_iter()
        .partition(|p| claiming.contains(&p.pod) && waiting.contains_key(p.target.as_str()));
    plan.existing = kept;
    for p in refused {
        plan.unschedulable.push(Unschedulable {
            reason: format!(
                "{HELD_DEVICES} {} for pending pod {}",
                p.target,
                waiting[p.target.as_str()]
            ),
            pod: p.pod,
            limited_by: Vec::new(),
        });
    }
    plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
}

/// Reason given to a pod with DRA claims whose only place is a node where a pending pod with
/// claims is held.
pub const HELD_DEVICES: &str = "would take devices held on";

/// How a verdict names an evicted pod that cannot be placed.
pub(super) fn nowhere_to_go(u: &crate::plan::Unschedulable) -> String {
    if u.reason.starts_with(UNINITIALIZED_TARGET) || u.reason.starts_with(UNREADY_TARGET) {
        format!("pod {} {}", u.pod, u.reason)
    } else {
        format!("pod {} has nowhere to go: {}", u.pod, u.reason)
    }
}

/// Moves the pods of `removed` onto their simulated nodes, and removes the nodes.
pub(super) fn apply(nodes: &mut Vec<Cow<'_, Node>>, removed: &BTreeSet<usize>, plan: &Plan) {
    let moving: BTreeMap<PodKey, Pod> = removed
        .iter()
        .flat_map(|ri| movable(&nodes[*ri]).into_iter().cloned())
        .map(|p| (p.key.clone(), p))
        .collect();
    for placement in &plan.existing {
        if let (Some(pod), Some(n)) = (
            moving.get(&placement.pod),
            nodes.iter_mut().find(|n| n.name == placement.target),
        ) {
            n.to_mut().pods.push(pod.clone());
        }
    }
    let mut i = 0;
    nodes.retain(|_| {
        let keep = !removed.contains(&i);
        i += 1;
        keep
    });
}
