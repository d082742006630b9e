//! Candidates: utilization as Cluster Autoscaler measures it, what blocks a node or pod
//! (do-not-disrupt, safe-to-evict, PDBs...), and phase 1 of planning, which picks the nodes
//! worth removing and orders them by savings per disruption cost.

use std::collections::HashMap;

use crate::labels;
use crate::model::{ConsolidationPolicy, Node, Pod, PodKey, Snapshot};
use crate::resources::{is_gpu_class, names};

use super::{
    Blocker, DO_NOT_DISRUPT, DisruptionConfig, DisruptionState, POD_DELETION_COST, Pass,
    SAFE_TO_EVICT, SCALE_DOWN_DISABLED, Verdict, VerdictKind, Wait,
};

/// Utilization of a node as Cluster Autoscaler measures it: on a node with GPU-class
/// allocatable, the highest ratio over GPU-class resources (fractional shares count as their
/// thousandths of a device); 0 on a node labelled as a GPU node whose GPUs are not allocatable
/// (as the Cluster Autoscaler computes it); elsewhere max(cpu, memory). DaemonSet and mirror pods are left out
/// of both sides when the matching option is on. Returns (utilization, is GPU node).
pub fn utilization(node: &Node, config: &DisruptionConfig) -> (f64, bool) {
    utilization_with_devices(node, None, config)
}

/// [`utilization`] of a node that may have DRA devices (`devices`: total and allocated, from
/// [`crate::dra::device_use`]).
pub fn utilization_with_devices(
    node: &Node,
    devices: Option<crate::dra::DeviceUse>,
    config: &DisruptionConfig,
) -> (f64, bool) {
    let (ratios, gpu) = utilization_by_resource_with_devices(node, devices, config);
    (ratios.iter().map(|(_, r)| *r).fold(0.0, f64::max), gpu)
}

/// Whether the node's labels say it has GPUs (the catalog's GPU count, GPU feature discovery's,
/// or GKE's accelerator label), whatever its allocatable shows.
fn labelled_gpu_node(node: &Node) -> bool {
    let count = [labels::GPU_COUNT, labels::NVIDIA_COUNT].iter().any(|k| {
        node.labels
            .get(*k)
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|c| c > 0)
    });
    count || node.labels.contains_key(labels::GKE_ACCELERATOR)
}

/// The name [`utilization_by_resource_with_devices`] gives the DRA devices' ratio.
pub const DRA_DEVICES: &str = "DRA devices";

/// The ratios [`utilization`] takes the highest of, by resource name (GPU-class resources on a
/// GPU node, else cpu and memory), and whether the node is a GPU node.
pub fn utilization_by_resource(
    node: &Node,
    config: &DisruptionConfig,
) -> (Vec<(String, f64)>, bool) {
    utilization_by_resource_with_devices(node, None, config)
}

/// [`utilization_by_resource`] counting DRA devices as the Cluster Autoscaler does: a node
/// with devices (`devices.total > 0`) is a GPU node, and its allocated devices over its total
/// are one more ratio ([`DRA_DEVICES`]).
pub fn utilization_by_resource_with_devices(
    node: &Node,
    devices: Option<crate::dra::DeviceUse>,
    config: &DisruptionConfig,
) -> (Vec<(String, f64)>, bool) {
    let (mut ratios, gpu) = utilization_without_devices(node, config);
    match devices.filter(|d| d.total > 0) {
        None => (ratios, gpu),
        Some(d) => {
            let r = (
                DRA_DEVICES.to_string(),
                f64::from(d.allocated) / f64::from(d.total),
            );
            if gpu {
                ratios.push(r);
                (ratios, true)
            } else {
                (vec![r], true)
            }
        }
    }
}

fn utilization_without_devices(
    node: &Node,
    config: &DisruptionConfig,
) -> (Vec<(String, f64)>, bool) {
    let ignored = |p: &Pod| {
        (config.ignore_daemonset_utilization && p.is_daemonset())
            || (config.ignore_mirror_utilization && p.mirror)
    };
    let gpu_resources: Vec<&str> = node
        .allocatable
        .extended
        .iter()
        .filter(|(k, v)| is_gpu_class(k) && **v > 0)
        .map(|(k, _)| k.as_str())
        .collect();
    let ratio = |name: &str| -> f64 {
        let mut used = 0.0;
        let mut excluded = 0.0;
        for p in &node.pods {
            let mut amount = p.requests.get(name) as f64;
            if let Some(s) = &p.gpu_share
                && s.resource == name
            {
                amount += f64::from(s.milli) / 1000.0;
            }
            if ignored(p) {
                excluded += amount;
            } else {
                used += amount;
            }
        }
        let denom = node.allocatable.get(name) as f64 - excluded;
        if denom <= 0.0 { 0.0 } else { used / denom }
    };
    if gpu_resources.is_empty() && labelled_gpu_node(node) {
        // The Cluster Autoscaler's rule: a GPU node whose GPUs are not allocatable (yet, or
        // any more: the device plugin is down) has GPU utilization 0, not its cpu/memory's.
        let resource = match node
            .labels
            .get(labels::GPU_MANUFACTURER)
            .map(String::as_str)
        {
            Some("amd") => names::AMD_GPU,
            _ => names::NVIDIA_GPU,
        };
        (vec![(resource.to_string(), 0.0)], true)
    } else if gpu_resources.is_empty() {
        let r = [names::CPU, names::MEMORY].map(|n| (n.to_string(), ratio(n)));
        (r.into(), false)
    } else {
        let r = gpu_resources.iter().map(|n| (n.to_string(), ratio(n)));
        (r.collect(), true)
    }
}

/// Pods that must move if the node goes: everything but DaemonSet and mirror pods.
pub(super) fn movable(node: &Node) -> Vec<&Pod> {
    node.pods
        .iter()
        .filter(|p| !p.is_daemonset() && !p.mirror)
        .collect()
}

/// Whole seconds (rounded up) of a `karpenter.sh/do-not-disrupt` duration, in the project's
/// one duration grammar ([`crate::duration`]: `30m`, `1h30m`, `1.5h`; Karpenter reads the
/// annotation as a Go duration, whose common forms this accepts), or Go's bare `0`. `None` for
/// anything else.
fn annotation_seconds(text: &str) -> Option<i64> {
    if text == "0" {
        return Some(0);
    }
    let d = crate::duration::parse(text, crate::duration::Bare::Refused).ok()?;
    i64::try_from(d.as_secs())
        .ok()
        .map(|s| s + i64::from(d.subsec_nanos() > 0))
}

/// Why a `karpenter.sh/do-not-disrupt` value on a pod or node (`who`) still protects it at
/// `now`, if it does. `"true"` protects for good; a duration (`"30m"`) protects until the pod
/// has run (or the node has existed) that long, counted from `since` (`None`: not started,
/// so the whole duration is still ahead); a value that is neither protects as `"true"` would,
/// and the reason names it.
fn do_not_disrupt(who: &str, value: &str, since: Option<i64>, now: i64) -> Option<Blocker> {
    let kind = VerdictKind::DoNotDisrupt;
    if value == "true" {
        return Some(Blocker::new(kind, format!("{who} has {DO_NOT_DISRUPT}")));
    }
    if value == "false" || value.is_empty() {
        return None;
    }
    let Some(secs) = annotation_seconds(value) else {
        return Some(Blocker::new(
            kind,
            format!(
                "{who} has {DO_NOT_DISRUPT}={value:?}, neither \"true\" nor a duration; it \
                 protects as \"true\" would"
            ),
        ));
    };
    let start = since.unwrap_or(now);
    let until = start.saturating_add(secs);
    (now < until).then(|| Blocker {
        kind,
        message: format!(
            "{who} has {DO_NOT_DISRUPT}={value} ({} left)",
            crate::duration::format(until - now)
        ),
        wait: Some(Wait {
            since: start,
            until,
        }),
    })
}

/// Why the pod's `karpenter.sh/do-not-disrupt` annotation still protects it at `now`, if it
/// does.
pub fn pod_protection(pod: &Pod, now: i64) -> Option<String> {
    pod_protection_block(pod, now).map(|b| b.message)
}

fn pod_protection_block(pod: &Pod, now: i64) -> Option<Blocker> {
    let v = pod.annotations.get(DO_NOT_DISRUPT)?;
    do_not_disrupt(&format!("pod {}", pod.key), v, pod.started_at, now)
}

/// Why a pod blocks the disruption of its node at `now`, if it does.
pub fn pod_blocker(pod: &Pod, snap: &Snapshot, now: i64) -> Option<String> {
    pod_block(pod, snap, now).map(|b| b.message)
}

/// [`pod_blocker`] with the blocker's kind and wait.
pub fn pod_block(pod: &Pod, snap: &Snapshot, now: i64) -> Option<Blocker> {
    let ann = |k: &str| pod.annotations.get(k).map(String::as_str);
    if let Some(why) = pod_protection_block(pod, now) {
        return Some(why);
    }
    let evict = |m: String| Some(Blocker::new(VerdictKind::NotEvictable, m));
    // `safe-to-evict=true` waives the Cluster Autoscaler's own rules (no controller, local
    // storage, kube-system without a budget), not PodDisruptionBudgets: the eviction API
    // enforces those whatever the pod says.
    let safe = match ann(SAFE_TO_EVICT) {
        Some("false") => return evict(format!("pod {} has {SAFE_TO_EVICT}=false", pod.key)),
        Some("true") => true,
        _ => false,
    };
    if !safe && pod.owner_kind.is_none() {
        return evict(format!("pod {} has no controller", pod.key));
    }
    if !safe && pod.local_storage {
        return evict(format!("pod {} uses local storage", pod.key));
    }
    if !safe && pod.key.namespace == "kube-system" && !snap.pdbs.iter().any(|b| pdb_selects(b, pod))
    {
        return evict(format!(
            "kube-system pod {} has no PodDisruptionBudget",
            pod.key
        ));
    }
    pdb_block(pod, snap)
}

/// Whether PodDisruptionBudget `b` selects `pod`.
pub(super) fn pdb_selects(b: &crate::model::Pdb, pod: &Pod) -> bool {
    b.namespace == pod.key.namespace && b.selector.matches(&pod.labels)
}

/// What keeps `pod` on its node by PodDisruptionBudget: more than one selects it, or one that
/// selects it allows no disruption now.
fn pdb_block(pod: &Pod, snap: &Snapshot) -> Option<Blocker> {
    let pdbs: Vec<_> = snap.pdbs.iter().filter(|b| pdb_selects(b, pod)).collect();
    if let [a, b, ..] = pdbs.as_slice() {
        // The eviction API refuses a pod more than one budget selects.
        return Some(Blocker::new(
            VerdictKind::PdbBlocked,
            format!(
                "pod {} is selected by more than one PDB ({}/{} and {}/{}): the eviction API refuses it",
                pod.key, a.namespace, a.name, b.namespace, b.name
            ),
        ));
    }
    if let Some(b) = pdbs.iter().find(|b| b.disruptions_allowed <= 0) {
        return Some(Blocker::new(
            VerdictKind::PdbBlocked,
            format!(
                "blocked by PDB {}/{} (allows {} disruptions)",
                b.namespace, b.name, b.disruptions_allowed
            ),
        ));
    }
    None
}

fn booked() -> Blocker {
    Blocker::new(
        VerdictKind::Booked,
        "capacity booked for a ProvisioningRequest",
    )
}

/// The pending pods of [`Snapshot::nominated`] by the claim they are nominated to (the first
/// by key when several are), so that each node's check is one lookup: a backlog can nominate
/// a hundred thousand pods. With them, when the caller worked them out, the nodes the
/// planner would bind pending pods to.
pub(super) struct Nominations<'a> {
    by_claim: HashMap<&'a str, &'a PodKey>,
    /// Node name to the first pending pod (by key) the planner binds to it.
    binding: HashMap<String, PodKey>,
}

impl<'a> Nominations<'a> {
    /// The index of `snap`'s nominations.
    pub(super) fn of(snap: &'a Snapshot) -> Self {
        let mut by_claim = HashMap::new();
        for (pod, claim) in &snap.nominated {
            by_claim.entry(claim.as_str()).or_insert(pod);
        }
        Nominations {
            by_claim,
            binding: HashMap::new(),
        }
    }

    /// Adds the nodes pending pods would be bound to (node name, pod).
    pub(super) fn binding(&mut self, targets: Vec<(String, PodKey)>) {
        for (node, pod) in targets {
            match self.binding.entry(node) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    if pod < *e.get() {
                        e.insert(pod);
                    }
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(pod);
                }
            }
        }
    }

    /// Why `node` stays for a pending pod nominated to its claim, or one the planner would bind
    /// to it, if one is: Karpenter does not disrupt a node the scheduler is about to bind a pod
    /// to (its provisioner nominates the nodes it plans pending pods onto), as the node would
    /// look empty (or emptier) only until the pod lands.
    fn block(&self, node: &Node) -> Option<Blocker> {
        if let Some(pod) = node.claim.as_deref().and_then(|c| self.by_claim.get(c)) {
            return Some(Blocker::new(
                VerdictKind::Nominated,
                format!("pending pod {pod} is nominated to it"),
            ));
        }
        let pod = self.binding.get(&node.name)?;
        Some(Blocker::new(
            VerdictKind::Nominated,
            format!("pending pod {pod} would be scheduled on it"),
        ))
    }
}

/// Why a node may not be disrupted at `now`, ignoring thresholds and budgets.
pub fn node_blocker(node: &Node, snap: &Snapshot, now: i64) -> Option<String> {
    node_block(node, snap, now).map(|b| b.message)
}

/// [`node_blocker`] with the blocker's kind and wait.
pub fn node_block(node: &Node, snap: &Snapshot, now: i64) -> Option<Blocker> {
    node_block_in(node, snap, &Nominations::of(snap), now)
}

/// [`node_block`] with `snap`'s nominations indexed once by the caller.
pub(super) fn node_block_in(
    node: &Node,
    snap: &Snapshot,
    nominations: &Nominations<'_>,
    now: i64,
) -> Option<Blocker> {
    use VerdictKind as K;
    let ann = |k: &str| node.annotations.get(k).map(String::as_str);
    if node.pool.is_none() {
        return Some(Blocker::new(K::NotManaged, "not managed by a NodePool"));
    }
    if node.deleting {
        return Some(Blocker::new(K::Deleting, "already being deleted"));
    }
    // A Cluster Autoscaler taint past its deletion window is a leftover: the node is an
    // ordinary candidate, as in the Cluster Autoscaler.
    if let Some(t) = crate::keys::foreign_removal(&node.taints, Some(now)) {
        return Some(Blocker::new(
            K::Deleting,
            format!("being removed by another autoscaler (taint {})", t.key),
        ));
    }
    if let Some(v) = ann(DO_NOT_DISRUPT)
        && let Some(why) = do_not_disrupt("node", v, Some(node.created_at), now)
    {
        return Some(why);
    }
    if ann(SCALE_DOWN_DISABLED) == Some("true") {
        return Some(Blocker::new(
            K::ScaleDownDisabled,
            format!("node has {SCALE_DOWN_DISABLED}"),
        ));
    }
    if snap.booked_nodes.contains(&node.name) {
        return Some(booked());
    }
    if !node.initialized {
        return Some(Blocker::new(
            K::NotInitialized,
            "not initialized yet (device plugin, startup or readiness taints pending, or no NodeClaim records it yet)",
        ));
    }
    if let Some(b) = nominations.block(node) {
        return Some(b);
    }
    if let Some(state) = node.labels.get(labels::NVIDIA_MIG_CONFIG_STATE)
        && (state == "pending" || state == "rebooting")
    {
        return Some(Blocker::new(
            K::MigReconfiguring,
            format!("MIG reconfiguration in progress ({state})"),
        ));
    }
    // A DaemonSet or mirror pod is not evicted, but its do-not-disrupt still keeps the node,
    // as in Karpenter: whoever set it wants the node kept. A DaemonSet pod that does not
    // tolerate the disruption taint is one Karpenter would evict, so a budget that allows it
    // no disruption keeps the node too (its candidates with fully blocking PDBs on DaemonSet
    // pods); one that tolerates everything, as node agents do, is not Karpenter's to evict,
    // and a mirror pod is the kubelet's: no budget holds those.
    if let Some(b) = node
        .pods
        .iter()
        .filter(|p| p.is_daemonset() || p.mirror)
        .find_map(|p| {
            pod_protection_block(p, now).or_else(|| {
                (p.is_daemonset() && !p.mirror && !p.tolerates_disruption_taint())
                    .then(|| pdb_block(p, snap))
                    .flatten()
            })
        })
    {
        return Some(b);
    }
    movable(node)
        .into_iter()
        .find_map(|p| pod_block(p, snap, now))
}

/// Cost of disrupting a node's pods: one per pod, more for higher priority and deletion cost.
pub(super) fn disruption_cost(node: &Node) -> f64 {
    movable(node)
        .iter()
        .map(|p| {
            let deletion: f64 = p
                .annotations
                .get(POD_DELETION_COST)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
            1.0 + (f64::from(p.priority) / 2f64.powi(25)).clamp(-0.5, 4.0)
                + (deletion / 2f64.powi(27)).clamp(-0.5, 4.0)
        })
        .sum::<f64>()
        .max(0.1)
}

impl Pass<'_> {
    /// Phase 1: the nodes below their threshold (or empty), unneeded for long enough and not
    /// blocked. Every node gets a verdict; unneeded times go into the next state.
    pub(super) fn candidates(&mut self, state: &DisruptionState) -> Vec<usize> {
        let snap = self.snap;
        let mut candidates: Vec<usize> = Vec::new();
        let devices = crate::dra::device_use(&snap.dra);
        for (ni, n) in snap.nodes.iter().enumerate() {
            let (util, gpu) =
                utilization_with_devices(n, devices.get(n.name.as_str()).copied(), self.config);
            let mut v = Verdict {
                node: n.name.clone(),
                pool: n.pool.clone(),
                utilization: Some(util),
                threshold: None,
                disrupted: false,
                reason: String::new(),
                kind: VerdictKind::Candidate,
                wait: None,
            };
            match self.why_not_candidate(n, &mut v, gpu, state) {
                Some(why) => v.block(why),
                None => {
                    candidates.push(ni);
                    v.set(VerdictKind::Candidate, "candidate");
                }
            }
            self.verdict.push(&n.name, v);
        }
        self.verdict.index();
        candidates
    }

    /// Why node `n` (its verdict `v` holding the utilization, a GPU node when `gpu`) is not a
    /// candidate, if it is not; the threshold it was measured against goes into `v`. A node
    /// past the blockers has its unneeded time recorded.
    fn why_not_candidate(
        &mut self,
        n: &Node,
        v: &mut Verdict,
        gpu: bool,
        state: &DisruptionState,
    ) -> Option<Blocker> {
        use VerdictKind as K;
        let (snap, now) = (self.snap, self.now);
        let util = v.utilization.unwrap_or(0.0);
        let Some(pi) = snap
            .pools
            .iter()
            .position(|p| Some(&p.name) == n.pool.as_ref())
        else {
            return Some(Blocker::new(K::NotManaged, "not managed by a NodePool"));
        };
        let policy = &snap.pools[pi].disruption;
        let empty = movable(n).is_empty();
        let threshold = policy.threshold(gpu);
        v.threshold = Some(threshold);
        // A booked node's phantom pods make it look busy: the booking is why it stays.
        if snap.booked_nodes.contains(&n.name) {
            return Some(booked());
        }
        // Cluster Autoscaler's `--scale-down-unready-enabled`: a node that broke down after it
        // started is left alone when it is off.
        // A GPU node whose GPUs are not allocatable (its device plugin died) is as broken as
        // one not ready: the Cluster Autoscaler counts it unready and waits its unready time.
        let no_devices = gpu && !n.allocatable.has_gpu_class();
        let broken = n.initialized && (!n.ready || no_devices);
        if broken && !self.config.scale_down_unready_enabled {
            return Some(Blocker::new(
                K::NotReady,
                if no_devices {
                    "its GPUs are not allocatable (device plugin down), and scale-down of unready nodes is off (--scale-down-unready-enabled)"
                } else {
                    "not ready, and scale-down of unready nodes is off (--scale-down-unready-enabled)"
                },
            ));
        }
        let below = empty || util < threshold;
        let above = self
            .above_words
            .entry((gpu, util.to_bits(), threshold.to_bits()))
            .or_insert_with(|| {
                format!(
                    "{} utilization {util:.2} {} threshold {threshold:.2}",
                    if gpu { "GPU" } else { "cpu/memory" },
                    // A node goes only strictly below its threshold, as in the Cluster
                    // Autoscaler ("below which a node can be considered for scale down").
                    if util == threshold { "at" } else { "above" }
                )
            })
            .clone();
        // Right-sizing: above the threshold, still a candidate when a type cheap enough could
        // hold its pods (the simulation decides whether one does).
        let savings = policy.right_size_savings;
        let right_size = !below
            && !gpu
            && savings > 0.0
            && policy.consolidation_policy == ConsolidationPolicy::WhenEmptyOrUnderutilized
            && n.price
                .is_some_and(|p| self.cheaper_type_could_hold(n, p * (1.0 - savings)));
        if !below && !right_size {
            return Some(Blocker::new(K::AboveThreshold, above));
        }
        if !empty && policy.consolidation_policy == ConsolidationPolicy::WhenEmpty {
            return Some(Blocker::new(
                K::WhenEmptyOnly,
                "NodePool consolidates only empty nodes",
            ));
        }
        if !self.binding_known {
            self.binding_known = true;
            let binding = self.sim.get_mut().pending_targets(snap, &self.work);
            self.nominations.binding(binding);
        }
        if let Some(b) = node_block_in(n, snap, &self.nominations, now) {
            return Some(b);
        }
        let since = state.unneeded_since.get(&n.name).copied().unwrap_or(now);
        self.out.state.unneeded_since.insert(n.name.clone(), since);
        let right_sizing;
        // An unready node waits `--scale-down-unready-time` instead of the pool's unneededTime.
        let (wait, kind, what) = if broken {
            (
                self.config.scale_down_unready_s.max(0),
                K::UnreadyUnneeded,
                if no_devices {
                    "unneeded with no allocatable GPU"
                } else {
                    "not ready and unneeded"
                },
            )
        } else if right_size {
            right_sizing = format!(
                "{above}, but a node {:.0} % cheaper may hold its pods: right-sizing candidate",
                savings * 100.0
            );
            (policy.unneeded_s.max(0), K::Unneeded, right_sizing.as_str())
        } else {
            (policy.unneeded_s.max(0), K::Unneeded, "unneeded")
        };
        if now - since < wait {
            return Some(Blocker {
                kind,
                message: format!(
                    "{what} for {} of {}",
                    crate::duration::format(now - since),
                    crate::duration::format(wait)
                ),
                wait: Some(Wait {
                    since,
                    until: since + wait,
                }),
            });
        }
        // Karpenter's consolidateAfter: the node's pods have not changed for that long.
        let stable_since = n.stable_since();
        if policy.consolidate_after_s == i64::MAX {
            // `consolidateAfter: Never`: no wait ends it.
            return Some(Blocker::new(
                K::ConsolidateAfter,
                "NodePool consolidateAfter is Never",
            ));
        }
        if now - stable_since < policy.consolidate_after_s {
            let message = if stable_since > n.created_at {
                format!(
                    "a pod was bound or removed {} ago (consolidateAfter {})",
                    crate::duration::format(now - stable_since),
                    crate::duration::format(policy.consolidate_after_s)
                )
            } else {
                format!(
                    "younger than consolidateAfter {}",
                    crate::duration::format(policy.consolidate_after_s)
                )
            };
            return Some(Blocker {
                kind: K::ConsolidateAfter,
                message,
                wait: Some(Wait {
                    since: stable_since,
                    until: stable_since.saturating_add(policy.consolidate_after_s),
                }),
            });
        }
        if right_size {
            self.right_size.insert(n.name.clone(), (savings, above));
        }
        None
    }

    /// Whether some instance type of some NodePool, at an offering its pool allows priced at
    /// most `bound`, has the cpu and memory for the movable pods of `n` (and GPUs if they use
    /// any). A necessary condition for a right-sizing replacement, cheap next to simulating
    /// one for every node above its threshold in every pass.
    fn cheaper_type_could_hold(&self, n: &Node, bound: f64) -> bool {
        let pods = movable(n);
        if pods.is_empty() {
            return true;
        }
        let mut cpu = 0;
        let mut memory = 0;
        let mut gpu = false;
        for p in &pods {
            cpu += p.requests.get(names::CPU);
            memory += p.requests.get(names::MEMORY);
            gpu |= p.gpu_share.is_some()
                || p.requests
                    .extended
                    .iter()
                    .any(|(k, v)| is_gpu_class(k) && *v > 0);
        }
        self.cheap_types
            .as_deref()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .take_while(|t| t.price <= bound)
            .any(|t| t.cpu >= cpu && t.memory >= memory && (t.gpu || !gpu))
    }
}

/// The fraction a replacement of `n` must save: its pool's right-sizing savings when the node
/// is above its utilization threshold, 0 below it (or outside any pool).
pub(super) fn right_size_savings(
    n: &Node,
    snap: &Snapshot,
    devices: Option<crate::dra::DeviceUse>,
    config: &DisruptionConfig,
) -> f64 {
    let Some(pool) = snap.pools.iter().find(|p| Some(&p.name) == n.pool.as_ref()) else {
        return 0.0;
    };
    let policy = &pool.disruption;
    let (util, gpu) = utilization_with_devices(n, devices, config);
    if gpu || movable(n).is_empty() || util <= policy.threshold(gpu) {
        0.0
    } else {
        policy.right_size_savings
    }
}

/// One instance type as [`Pass::cheaper_type_could_hold`] screens it: the cheapest offering
/// its NodePool allows, and its allocatable cpu and memory.
pub(super) struct CheapType {
    price: f64,
    cpu: i64,
    memory: i64,
    gpu: bool,
}

/// Every NodePool's instance types that its requirements allow, cheapest first.
pub(super) fn cheap_types(snap: &Snapshot) -> Vec<CheapType> {
    let mut out = Vec::new();
    for pool in &snap.pools {
        let zone = pool.requirements.get(labels::ZONE);
        let capacity = pool.requirements.get(labels::CAPACITY_TYPE);
        for t in pool.instance_types.iter() {
            // Keys the type's labels do not carry (zone, capacity type, the pool's own labels)
            // are left to the simulation: this screen may only let too much through.
            let refused = pool.requirements.iter().any(|(k, c)| {
                t.labels
                    .get(k)
                    .is_some_and(|v| !c.matches(Some(v.as_str())))
            });
            if refused {
                continue;
            }
            let price = t
                .offerings
                .iter()
                .filter(|o| zone.is_none_or(|c| c.matches(Some(&o.zone))))
                .filter(|o| capacity.is_none_or(|c| c.matches(Some(o.capacity_type.as_str()))))
                .map(|o| o.price)
                .min_by(f64::total_cmp);
            if let Some(price) = price {
                let a = t.allocatable();
                out.push(CheapType {
                    price,
                    cpu: a.get(names::CPU),
                    memory: a.get(names::MEMORY),
                    gpu: t.gpu_count() > 0,
                });
            }
        }
    }
    out.sort_by(|a, b| a.price.total_cmp(&b.price));
    out
}

impl Pass<'_> {
    /// Orders candidates by savings per disruption cost, then name.
    pub(super) fn order(&self, candidates: &mut [usize]) {
        let snap = self.snap;
        candidates.sort_by(|a, b| {
            let (na, nb) = (&snap.nodes[*a], &snap.nodes[*b]);
            let sa = na.price.unwrap_or(0.0) / disruption_cost(na);
            let sb = nb.price.unwrap_or(0.0) / disruption_cost(nb);
            sb.total_cmp(&sa).then_with(|| na.name.cmp(&nb.name))
        });
    }
}
