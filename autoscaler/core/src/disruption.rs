//! `plan_disruption`: which nodes to remove or replace, and why every other node stays.
//!
//! Utilization follows Cluster Autoscaler's definition (GPU nodes are measured on GPU-class
//! resources only; other nodes on max(cpu, memory)); consolidation follows the order empty →
//! delete → replace → multi-node. Whether pods fit elsewhere is decided by re-running the
//! provisioning planner ([`crate::provision`]) on the cluster without the candidate nodes, so
//! the fit rules exist once. Like the planner this is pure: the caller passes `now` and carries
//! [`DisruptionState`] from one call to the next.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::labels;
use crate::model::{
    BudgetValue, ConsolidationPolicy, DisruptionReason, Node, Pod, PodKey, Snapshot,
};
use crate::plan::{NewClaim, Plan};
use crate::provision::plan_provisioning;
use crate::resources::{is_gpu_class, names};

/// Annotation (pod or node) that forbids voluntary disruption (Karpenter's key).
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Pod annotation: `"false"` forbids eviction, `"true"` allows it despite local storage or no
/// controller (Cluster Autoscaler's key).
pub const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
/// Node annotation: `"true"` keeps Cluster Autoscaler (and us) from scaling the node down.
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Pod annotation that makes a pod costlier to disrupt.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Cluster-wide disruption settings (NodePools carry their own thresholds and budgets).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DisruptionConfig {
    /// Leave DaemonSet pods out of utilization (Cluster Autoscaler's
    /// `--ignore-daemonsets-utilization`).
    pub ignore_daemonset_utilization: bool,
    /// Leave mirror pods out of utilization (`--ignore-mirror-pods-utilization`).
    pub ignore_mirror_utilization: bool,
    /// No scale-down for this long after a scale-up (`--scale-down-delay-after-add`, 10m).
    pub delay_after_scale_up_s: i64,
    /// ... after a deletion (`--scale-down-delay-after-delete`, 0s).
    pub delay_after_delete_s: i64,
    /// ... after a failed deletion (`--scale-down-delay-after-failure`, 3m).
    pub delay_after_failure_s: i64,
    /// A command is re-validated this long after it was decided (15s).
    pub validation_delay_s: i64,
    /// Most candidates a multi-node consolidation considers.
    pub max_multi_node_candidates: usize,
    /// A spot node is replaced by a cheaper spot node only when at least this many spot
    /// instance types cheaper than it can hold its pods (Karpenter's figure, 15): with fewer,
    /// the replacement would likely be the type interrupted next.
    #[serde(default = "default_spot_to_spot_types")]
    pub min_spot_to_spot_types: usize,
}

fn default_spot_to_spot_types() -> usize {
    15
}

impl Default for DisruptionConfig {
    fn default() -> Self {
        DisruptionConfig {
            ignore_daemonset_utilization: false,
            ignore_mirror_utilization: false,
            delay_after_scale_up_s: 600,
            delay_after_delete_s: 0,
            delay_after_failure_s: 180,
            validation_delay_s: 15,
            max_multi_node_candidates: 100,
            min_spot_to_spot_types: default_spot_to_spot_types(),
        }
    }
}

/// What the caller keeps between calls.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DisruptionState {
    /// Since when each node has been a scale-down candidate.
    pub unneeded_since: BTreeMap<String, i64>,
    /// Last scale-up.
    pub last_scale_up: Option<i64>,
    /// Last successful node deletion.
    pub last_delete: Option<i64>,
    /// Last failed node deletion.
    pub last_failure: Option<i64>,
}

/// How a command disrupts its nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    /// Drain and delete; pods move to existing nodes.
    Delete,
    /// Launch the replacement first, then drain and delete.
    Replace,
}

/// One disruption decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// Why.
    pub reason: DisruptionReason,
    /// How.
    pub method: Method,
    /// The nodes to remove.
    pub nodes: Vec<String>,
    /// Pods that will be evicted.
    pub pods: Vec<PodKey>,
    /// The cheaper node to launch first, for [`Method::Replace`].
    pub replacement: Option<NewClaim>,
    /// Hourly saving.
    pub savings: f64,
    /// When it was decided; execution re-validates after [`DisruptionConfig::validation_delay_s`].
    pub decided_at: i64,
}

/// The kind of a [`Verdict`]: what a caller (conditions, events, metrics) switches on, so it
/// never parses [`Verdict::reason`], which says the same in words with the numbers.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum VerdictKind {
    /// Chosen: an empty node, removed.
    Empty,
    /// Chosen: its pods fit elsewhere (deleted, replaced or consolidated with others).
    Underutilized,
    /// A candidate no command took and no rule named (not expected in a finished plan).
    #[default]
    Candidate,
    /// Below its threshold and unblocked, waiting out the pool's `unneededTime`.
    Unneeded,
    /// Below its threshold and unblocked, waiting out `consolidateAfter` since its last pod
    /// change (or its creation).
    ConsolidateAfter,
    /// A candidate while scale-down is paused after a scale-up, deletion or failure.
    Paused,
    /// No NodePool manages the node.
    NotManaged,
    /// The node is already being deleted.
    Deleting,
    /// Utilization above the pool's threshold.
    AboveThreshold,
    /// The pool consolidates only empty nodes, and this one runs pods.
    WhenEmptyOnly,
    /// `karpenter.sh/do-not-disrupt` on the node or one of its pods.
    DoNotDisrupt,
    /// `cluster-autoscaler.kubernetes.io/scale-down-disabled` on the node.
    ScaleDownDisabled,
    /// Capacity booked for a ProvisioningRequest.
    Booked,
    /// The node has not initialized.
    NotInitialized,
    /// A MIG reconfiguration is in progress.
    MigReconfiguring,
    /// A pod that may not be evicted: `safe-to-evict=false`, no controller, local storage,
    /// or a kube-system pod without a PodDisruptionBudget.
    NotEvictable,
    /// A PodDisruptionBudget allows too few disruptions.
    PdbBlocked,
    /// The pool's disruption budget is used up.
    BudgetExhausted,
    /// Removing the node would take the pool below `minNodes`.
    AtMinNodes,
    /// Its pods have nowhere to go (or no strictly cheaper replacement holds them).
    NoPlaceForPods,
}

impl VerdictKind {
    /// Whether the node is a scale-down candidate under this verdict: chosen, or below its
    /// threshold with nothing but time between it and a command.
    pub fn is_candidate(self) -> bool {
        matches!(
            self,
            VerdictKind::Empty
                | VerdictKind::Underutilized
                | VerdictKind::Candidate
                | VerdictKind::Unneeded
                | VerdictKind::ConsolidateAfter
                | VerdictKind::Paused
        )
    }
}

/// A wait that ends by time alone, in the caller's seconds: what a verdict's relative
/// durations ("3m of 10m") are counted from, for callers that must write a message that does
/// not change every round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    /// When the wait began (the node became unneeded, its pods last changed, the scale-up,
    /// the pod started).
    pub since: i64,
    /// When it ends.
    pub until: i64,
}

/// Why a node may not be disrupted: its kind, the words, and the wait when it lapses by time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    /// The kind.
    pub kind: VerdictKind,
    /// The words, naming the pod, PDB, budget or minimum.
    pub message: String,
    /// When the blocker lapses by time alone (a do-not-disrupt duration).
    pub wait: Option<Wait>,
}

impl Blocker {
    fn new(kind: VerdictKind, message: impl Into<String>) -> Self {
        Blocker {
            kind,
            message: message.into(),
            wait: None,
        }
    }
}

/// What happens to one node, for `explain` and events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Node name.
    pub node: String,
    /// Owning pool.
    pub pool: Option<String>,
    /// Utilization as Cluster Autoscaler measures it, when computed.
    pub utilization: Option<f64>,
    /// The threshold the utilization was compared with, when the node's pool has one.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// Whether a command removes it.
    pub disrupted: bool,
    /// Why it is removed, or why it stays.
    pub reason: String,
    /// The kind of `reason`.
    #[serde(default)]
    pub kind: VerdictKind,
    /// For a verdict that lapses by time alone, the wait.
    #[serde(default)]
    pub wait: Option<Wait>,
}

impl Verdict {
    fn set(&mut self, kind: VerdictKind, reason: impl Into<String>) {
        self.kind = kind;
        self.reason = reason.into();
        self.wait = None;
    }

    fn block(&mut self, b: Blocker) {
        self.kind = b.kind;
        self.reason = b.message;
        self.wait = b.wait;
    }
}

/// The result of [`plan_disruption`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DisruptionPlan {
    /// Commands, in the order they should run.
    pub commands: Vec<Command>,
    /// One verdict per node, by name.
    pub verdicts: Vec<Verdict>,
    /// State to pass to the next call.
    pub state: DisruptionState,
}

impl DisruptionPlan {
    /// A compact, stable text rendering for snapshot tests and `explain`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for c in &self.commands {
            s.push_str(&format!(
                "{:?} {:?} nodes=[{}] pods={} savings={:.3}",
                c.reason,
                c.method,
                c.nodes.join(","),
                c.pods.len(),
                c.savings
            ));
            if let Some(r) = &c.replacement {
                let t = r
                    .instance_types
                    .first()
                    .map_or("", |o| o.instance_type.as_str());
                s.push_str(&format!(" replacement={t}@{:.3}", r.price));
            }
            s.push('\n');
        }
        for v in &self.verdicts {
            if !v.disrupted {
                s.push_str(&format!("keep {}: {}\n", v.node, v.reason));
            }
        }
        s
    }
}

/// Utilization of a node as Cluster Autoscaler measures it: on a node with GPU-class
/// allocatable, the highest ratio over GPU-class resources (fractional shares count as their
/// thousandths of a device); elsewhere max(cpu, memory). DaemonSet and mirror pods are left out
/// of both sides when the matching option is on. Returns (utilization, is GPU node).
pub fn utilization(node: &Node, config: &DisruptionConfig) -> (f64, bool) {
    let (ratios, gpu) = utilization_by_resource(node, config);
    (ratios.iter().map(|(_, r)| *r).fold(0.0, f64::max), gpu)
}

/// The ratios [`utilization`] takes the highest of, by resource name (GPU-class resources on a
/// GPU node, else cpu and memory), and whether the node is a GPU node.
pub fn utilization_by_resource(
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
    if gpu_resources.is_empty() {
        let r = [names::CPU, names::MEMORY].map(|n| (n.to_string(), ratio(n)));
        (r.into(), false)
    } else {
        let r = gpu_resources.iter().map(|n| (n.to_string(), ratio(n)));
        (r.collect(), true)
    }
}

/// Pods that must move if the node goes: everything but DaemonSet and mirror pods.
fn movable(node: &Node) -> Vec<&Pod> {
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
            fmt_duration(until - now)
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
    match ann(SAFE_TO_EVICT) {
        Some("false") => return evict(format!("pod {} has {SAFE_TO_EVICT}=false", pod.key)),
        Some("true") => return None,
        _ => {}
    }
    if pod.owner_kind.is_none() {
        return evict(format!("pod {} has no controller", pod.key));
    }
    if pod.local_storage {
        return evict(format!("pod {} uses local storage", pod.key));
    }
    let pdbs: Vec<_> = snap
        .pdbs
        .iter()
        .filter(|b| b.namespace == pod.key.namespace && b.selector.matches(&pod.labels))
        .collect();
    if pod.key.namespace == "kube-system" && pdbs.is_empty() {
        return evict(format!(
            "kube-system pod {} has no PodDisruptionBudget",
            pod.key
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

/// Why a node may not be disrupted at `now`, ignoring thresholds and budgets.
pub fn node_blocker(node: &Node, snap: &Snapshot, now: i64) -> Option<String> {
    node_block(node, snap, now).map(|b| b.message)
}

/// [`node_blocker`] with the blocker's kind and wait.
pub fn node_block(node: &Node, snap: &Snapshot, now: i64) -> Option<Blocker> {
    use VerdictKind as K;
    let ann = |k: &str| node.annotations.get(k).map(String::as_str);
    if node.pool.is_none() {
        return Some(Blocker::new(K::NotManaged, "not managed by a NodePool"));
    }
    if node.deleting {
        return Some(Blocker::new(K::Deleting, "already being deleted"));
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
            "not initialized yet (device plugin or startup taints pending)",
        ));
    }
    if let Some(state) = node.labels.get(labels::NVIDIA_MIG_CONFIG_STATE)
        && (state == "pending" || state == "rebooting")
    {
        return Some(Blocker::new(
            K::MigReconfiguring,
            format!("MIG reconfiguration in progress ({state})"),
        ));
    }
    movable(node)
        .into_iter()
        .find_map(|p| pod_block(p, snap, now))
}

fn fmt_duration(s: i64) -> String {
    match (s / 60, s % 60) {
        (0, sec) => format!("{sec}s"),
        (m, 0) => format!("{m}m"),
        (m, sec) => format!("{m}m{sec}s"),
    }
}

/// Cost of disrupting a node's pods: one per pod, more for higher priority and deletion cost.
fn disruption_cost(node: &Node) -> f64 {
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

/// Budgets left per pool and reason, and minNodes headroom.
struct Allowance {
    /// (pool index, reason) -> nodes that may still be disrupted.
    budget: BTreeMap<(usize, DisruptionReason), i64>,
    /// Pool index -> nodes that may still be removed before minNodes.
    above_min: Vec<i64>,
    /// PDB index -> disruptions left.
    pdb_left: Vec<i64>,
}

impl Allowance {
    fn new(snap: &Snapshot) -> Self {
        let mut budget = BTreeMap::new();
        let mut above_min = Vec::new();
        for (pi, pool) in snap.pools.iter().enumerate() {
            let nodes: Vec<&Node> = snap
                .nodes
                .iter()
                .filter(|n| n.pool.as_deref() == Some(&pool.name))
                .collect();
            let total = nodes.len() as i64;
            let deleting = nodes.iter().filter(|n| n.deleting).count() as i64;
            for reason in [
                DisruptionReason::Empty,
                DisruptionReason::Underutilized,
                DisruptionReason::Drifted,
            ] {
                let allowed = pool
                    .disruption
                    .budgets
                    .iter()
                    .filter(|b| b.reasons.is_empty() || b.reasons.contains(&reason))
                    .map(|b| match b.nodes {
                        BudgetValue::Count(n) => i64::from(n),
                        // Percentages round up, as Karpenter does: 10% of 9 nodes is 1.
                        BudgetValue::Percent(p) => (total * i64::from(p) + 99) / 100,
                    })
                    .min()
                    .unwrap_or(i64::MAX);
                budget.insert((pi, reason), allowed.saturating_sub(deleting));
            }
            above_min.push(total - deleting - i64::from(pool.min_nodes));
        }
        let pdb_left = snap
            .pdbs
            .iter()
            .map(|b| i64::from(b.disruptions_allowed))
            .collect();
        Allowance {
            budget,
            above_min,
            pdb_left,
        }
    }

    /// Checks (and, when `take`, consumes) the allowance for removing `nodes`, replacing them
    /// with `added` new nodes in the same pools.
    fn admit(
        &mut self,
        snap: &Snapshot,
        nodes: &[&Node],
        reason: DisruptionReason,
        replaced: bool,
        take: bool,
    ) -> Result<(), Blocker> {
        let mut per_pool: BTreeMap<usize, i64> = BTreeMap::new();
        for n in nodes {
            if let Some(pi) = snap
                .pools
                .iter()
                .position(|p| Some(&p.name) == n.pool.as_ref())
            {
                *per_pool.entry(pi).or_default() += 1;
            }
        }
        for (pi, count) in &per_pool {
            let left = self.budget.get(&(*pi, reason)).copied().unwrap_or(i64::MAX);
            if *count > left {
                return Err(Blocker::new(
                    VerdictKind::BudgetExhausted,
                    format!(
                        "disruption budget of NodePool {} exhausted for {reason:?}",
                        snap.pools[*pi].name
                    ),
                ));
            }
            let removed = if replaced { count - 1 } else { *count };
            if removed > self.above_min[*pi] {
                return Err(Blocker::new(
                    VerdictKind::AtMinNodes,
                    format!(
                        "NodePool {} is at minNodes {}",
                        snap.pools[*pi].name, snap.pools[*pi].min_nodes
                    ),
                ));
            }
        }
        let mut pdb_use: BTreeMap<usize, i64> = BTreeMap::new();
        for n in nodes {
            for p in movable(n) {
                for (bi, b) in snap.pdbs.iter().enumerate() {
                    if b.namespace == p.key.namespace && b.selector.matches(&p.labels) {
                        *pdb_use.entry(bi).or_default() += 1;
                    }
                }
            }
        }
        for (bi, used) in &pdb_use {
            if *used > self.pdb_left[*bi] {
                let b = &snap.pdbs[*bi];
                return Err(Blocker::new(
                    VerdictKind::PdbBlocked,
                    format!(
                        "blocked by PDB {}/{} (allows {} more disruptions, needs {used})",
                        b.namespace,
                        b.name,
                        self.pdb_left[*bi].max(0)
                    ),
                ));
            }
        }
        if take {
            for (pi, count) in per_pool {
                for reason in [
                    DisruptionReason::Empty,
                    DisruptionReason::Underutilized,
                    DisruptionReason::Drifted,
                ] {
                    if let Some(left) = self.budget.get_mut(&(pi, reason)) {
                        *left -= count;
                    }
                }
                self.above_min[pi] -= if replaced { count - 1 } else { count };
            }
            for (bi, used) in pdb_use {
                self.pdb_left[bi] -= used;
            }
        }
        Ok(())
    }
}

/// Where the pods of `removed` nodes would go: the planner run on the cluster without them,
/// with no in-flight capacity (evicting onto capacity that may never arrive is unsafe) and,
/// unless `allow_new`, no NodePool to launch from. A pod the planner puts on a node that has
/// not initialized is listed unschedulable ([`UNINITIALIZED_TARGET`]): evicted pods go only to
/// initialized, schedulable nodes or to the command's own replacement.
pub fn simulate(
    snap: &Snapshot,
    nodes: &[Node],
    removed: &BTreeSet<usize>,
    allow_new: bool,
) -> Plan {
    let mut pending = Vec::new();
    for ri in removed {
        for p in movable(&nodes[*ri]) {
            let mut p = p.clone();
            p.group = None;
            pending.push(p);
        }
    }
    let sim = Snapshot {
        pending,
        nodes: nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| !removed.contains(i))
            .map(|(_, n)| n.clone())
            .collect(),
        in_flight: vec![],
        daemonsets: snap.daemonsets.clone(),
        pools: if allow_new {
            snap.pools.clone()
        } else {
            vec![]
        },
        groups: BTreeMap::new(),
        pdbs: vec![],
        booked_nodes: BTreeSet::new(),
    };
    let mut plan = plan_provisioning(&sim);
    refuse_uninitialized_targets(&mut plan, &sim.nodes);
    plan
}

/// Reason given to an evicted pod whose only place is a node that has not initialized.
pub const UNINITIALIZED_TARGET: &str = "would schedule against an uninitialized node";

/// Turns every placement of an evicted pod onto an uninitialized node into an unschedulable
/// pod: such a node may never come up (startup taints, device plugin), and a disruption must
/// not bet on it. Its NodeClaim is left out of the simulation, but its Node is not, so the
/// planner would otherwise count it as ordinary capacity (as Karpenter does, the command then
/// fails rather than being re-planned around the node).
fn refuse_uninitialized_targets(plan: &mut Plan, nodes: &[Node]) {
    let uninitialized: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| !n.initialized)
        .map(|n| n.name.as_str())
        .collect();
    if uninitialized.is_empty() {
        return;
    }
    let (refused, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut plan.existing)
        .into_iter()
        .partition(|p| uninitialized.contains(p.target.as_str()));
    plan.existing = kept;
    for p in refused {
        plan.unschedulable.push(crate::plan::Unschedulable {
            reason: format!("{UNINITIALIZED_TARGET} {}", p.target),
            pod: p.pod,
        });
    }
    plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
}

/// How a verdict names an evicted pod that cannot be placed.
fn nowhere_to_go(u: &crate::plan::Unschedulable) -> String {
    if u.reason.starts_with(UNINITIALIZED_TARGET) {
        format!("pod {} {}", u.pod, u.reason)
    } else {
        format!("pod {} has nowhere to go: {}", u.pod, u.reason)
    }
}

/// Moves the pods of `removed` onto their simulated nodes, and removes the nodes.
fn apply(nodes: &mut Vec<Node>, removed: &BTreeSet<usize>, plan: &Plan) {
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
            n.pods.push(pod.clone());
        }
    }
    let mut i = 0;
    nodes.retain(|_| {
        let keep = !removed.contains(&i);
        i += 1;
        keep
    });
}

/// Plans disruption. Never fails; every node gets a [`Verdict`].
///
/// `state` comes from the previous call's [`DisruptionPlan::state`]; `now` is seconds on the
/// caller's clock.
pub fn plan_disruption(
    snap: &Snapshot,
    state: &DisruptionState,
    now: i64,
    config: &DisruptionConfig,
) -> DisruptionPlan {
    let mut out = DisruptionPlan {
        state: state.clone(),
        ..Default::default()
    };
    out.state.unneeded_since.clear();
    let mut verdict: BTreeMap<String, Verdict> = BTreeMap::new();
    let pool_of = |n: &Node| {
        snap.pools
            .iter()
            .position(|p| Some(&p.name) == n.pool.as_ref())
    };

    // 1. Candidates: below threshold (or empty), unneeded for long enough, not blocked.
    let mut candidates: Vec<usize> = Vec::new();
    for (ni, n) in snap.nodes.iter().enumerate() {
        let (util, gpu) = utilization(n, config);
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
        let Some(pi) = pool_of(n) else {
            v.set(VerdictKind::NotManaged, "not managed by a NodePool");
            verdict.insert(n.name.clone(), v);
            continue;
        };
        let policy = &snap.pools[pi].disruption;
        let empty = movable(n).is_empty();
        let threshold = if gpu {
            policy.gpu_utilization_threshold
        } else {
            policy.utilization_threshold
        };
        v.threshold = Some(threshold);
        // A booked node's phantom pods make it look busy: the booking is why it stays.
        if snap.booked_nodes.contains(&n.name) {
            v.block(booked());
            verdict.insert(n.name.clone(), v);
            continue;
        }
        let below = empty || util <= threshold;
        if !below {
            v.set(
                VerdictKind::AboveThreshold,
                format!(
                    "{} utilization {util:.2} above threshold {threshold:.2}",
                    if gpu { "GPU" } else { "cpu/memory" }
                ),
            );
            verdict.insert(n.name.clone(), v);
            continue;
        }
        if !empty && policy.consolidation_policy == ConsolidationPolicy::WhenEmpty {
            v.set(
                VerdictKind::WhenEmptyOnly,
                "NodePool consolidates only empty nodes",
            );
            verdict.insert(n.name.clone(), v);
            continue;
        }
        if let Some(b) = node_block(n, snap, now) {
            v.block(b);
            verdict.insert(n.name.clone(), v);
            continue;
        }
        let since = state.unneeded_since.get(&n.name).copied().unwrap_or(now);
        out.state.unneeded_since.insert(n.name.clone(), since);
        let wait = policy.unneeded_s.max(0);
        if now - since < wait {
            v.set(
                VerdictKind::Unneeded,
                format!(
                    "unneeded for {} of {}",
                    fmt_duration(now - since),
                    fmt_duration(wait)
                ),
            );
            v.wait = Some(Wait {
                since,
                until: since + wait,
            });
            verdict.insert(n.name.clone(), v);
            continue;
        }
        // Karpenter's consolidateAfter: the node's pods have not changed for that long.
        let stable_since = n
            .last_pod_event
            .map_or(n.created_at, |t| t.max(n.created_at));
        if now - stable_since < policy.consolidate_after_s {
            let reason = if stable_since > n.created_at {
                format!(
                    "a pod was bound or removed {} ago (consolidateAfter {})",
                    fmt_duration(now - stable_since),
                    fmt_duration(policy.consolidate_after_s)
                )
            } else {
                format!(
                    "younger than consolidateAfter {}",
                    fmt_duration(policy.consolidate_after_s)
                )
            };
            v.set(VerdictKind::ConsolidateAfter, reason);
            v.wait = Some(Wait {
                since: stable_since,
                until: stable_since + policy.consolidate_after_s,
            });
            verdict.insert(n.name.clone(), v);
            continue;
        }
        v.set(VerdictKind::Candidate, "candidate");
        verdict.insert(n.name.clone(), v);
        candidates.push(ni);
    }

    // 2. Global delays (Cluster Autoscaler's scale-down-delay-after-*).
    let delays = [
        (
            state.last_scale_up,
            config.delay_after_scale_up_s,
            "a scale-up",
        ),
        (state.last_delete, config.delay_after_delete_s, "a deletion"),
        (
            state.last_failure,
            config.delay_after_failure_s,
            "a failed deletion",
        ),
    ];
    for (at, delay, what) in delays {
        if let Some(t) = at
            && now < t + delay
        {
            for ni in &candidates {
                let v = verdict
                    .get_mut(&snap.nodes[*ni].name)
                    .expect("verdict exists");
                v.set(
                    VerdictKind::Paused,
                    format!(
                        "scale-down paused for {} after {what}",
                        fmt_duration(t + delay - now)
                    ),
                );
                v.wait = Some(Wait {
                    since: t,
                    until: t + delay,
                });
            }
            out.verdicts = verdict.into_values().collect();
            return out;
        }
    }

    // Order: savings per disruption cost, then name.
    candidates.sort_by(|a, b| {
        let (na, nb) = (&snap.nodes[*a], &snap.nodes[*b]);
        let sa = na.price.unwrap_or(0.0) / disruption_cost(na);
        let sb = nb.price.unwrap_or(0.0) / disruption_cost(nb);
        sb.total_cmp(&sa).then_with(|| na.name.cmp(&nb.name))
    });
    let mut allowance = Allowance::new(snap);
    let mut work: Vec<Node> = snap.nodes.clone();
    let mut gone: BTreeSet<String> = BTreeSet::new();
    let index_in = |work: &Vec<Node>, name: &str| work.iter().position(|n| n.name == name);

    // 3. Empty nodes: one command.
    let mut empties = Vec::new();
    for ni in &candidates {
        let n = &snap.nodes[*ni];
        if !movable(n).is_empty() {
            continue;
        }
        match allowance.admit(snap, &[n], DisruptionReason::Empty, false, true) {
            Ok(()) => empties.push(n.name.clone()),
            Err(e) => verdict.get_mut(&n.name).expect("verdict").block(e),
        }
    }
    if !empties.is_empty() {
        let savings = empties
            .iter()
            .filter_map(|name| {
                snap.nodes
                    .iter()
                    .find(|n| &n.name == name)
                    .and_then(|n| n.price)
            })
            .sum();
        for name in &empties {
            let v = verdict.get_mut(name).expect("verdict");
            v.disrupted = true;
            v.set(VerdictKind::Empty, "empty");
            gone.insert(name.clone());
        }
        let removed: BTreeSet<usize> = empties.iter().filter_map(|n| index_in(&work, n)).collect();
        apply(&mut work, &removed, &Plan::default());
        out.commands.push(Command {
            reason: DisruptionReason::Empty,
            method: Method::Delete,
            nodes: empties,
            pods: vec![],
            replacement: None,
            savings,
            decided_at: now,
        });
    }

    // 4. Delete, then replace, one node at a time, each on the cluster as the previous left it.
    let mut leftovers = Vec::new();
    for ni in &candidates {
        let n = &snap.nodes[*ni];
        // Empty nodes were settled in step 3, within the Empty budget.
        if gone.contains(&n.name) || movable(n).is_empty() {
            continue;
        }
        let Some(wi) = index_in(&work, &n.name) else {
            continue;
        };
        // The node as earlier commands left it (it may have received pods).
        let current = work[wi].clone();
        let n = &current;
        let removed = BTreeSet::from([wi]);
        let plan = simulate(snap, &work, &removed, false);
        if plan.unschedulable.is_empty() {
            if let Err(e) =
                allowance.admit(snap, &[n], DisruptionReason::Underutilized, false, true)
            {
                verdict.get_mut(&n.name).expect("verdict").block(e);
                continue;
            }
            let pods = movable(n).iter().map(|p| p.key.clone()).collect();
            apply(&mut work, &removed, &plan);
            gone.insert(n.name.clone());
            let v = verdict.get_mut(&n.name).expect("verdict");
            v.disrupted = true;
            v.set(
                VerdictKind::Underutilized,
                "underutilized: its pods fit on other nodes",
            );
            out.commands.push(Command {
                reason: DisruptionReason::Underutilized,
                method: Method::Delete,
                nodes: vec![n.name.clone()],
                pods,
                replacement: None,
                savings: n.price.unwrap_or(0.0),
                decided_at: now,
            });
            continue;
        }
        let plan = simulate(snap, &work, &removed, true);
        let price = n.price.unwrap_or(0.0);
        let mut replacement = (plan.unschedulable.is_empty()
            && plan.new_claims.len() == 1
            && plan.new_claims[0].price < price)
            .then(|| cheaper_only(snap, plan.new_claims[0].clone(), price))
            .flatten();
        if is_spot(n)
            && let Some(claim) = replacement.take()
        {
            match spot_to_spot(snap, claim, config.min_spot_to_spot_types) {
                Ok(claim) => replacement = Some(claim),
                Err(why) => {
                    let v = verdict.get_mut(&n.name).expect("verdict");
                    v.set(VerdictKind::NoPlaceForPods, why);
                    leftovers.push(n.name.clone());
                    continue;
                }
            }
        }
        match replacement {
            Some(claim) => {
                if let Err(e) =
                    allowance.admit(snap, &[n], DisruptionReason::Underutilized, true, true)
                {
                    verdict.get_mut(&n.name).expect("verdict").block(e);
                    continue;
                }
                let pods = movable(n).iter().map(|p| p.key.clone()).collect();
                apply(&mut work, &removed, &plan);
                gone.insert(n.name.clone());
                let v = verdict.get_mut(&n.name).expect("verdict");
                v.disrupted = true;
                v.set(
                    VerdictKind::Underutilized,
                    format!(
                        "underutilized: replaced by a cheaper node ({:.3} < {price:.3} per hour)",
                        claim.price
                    ),
                );
                out.commands.push(Command {
                    reason: DisruptionReason::Underutilized,
                    method: Method::Replace,
                    nodes: vec![n.name.clone()],
                    pods,
                    savings: price - claim.price,
                    replacement: Some(claim),
                    decided_at: now,
                });
            }
            None => {
                let why = plan
                    .unschedulable
                    .first()
                    .map(nowhere_to_go)
                    .unwrap_or_else(|| "no strictly cheaper replacement".into());
                let v = verdict.get_mut(&n.name).expect("verdict");
                v.set(VerdictKind::NoPlaceForPods, why);
                leftovers.push(n.name.clone());
            }
        }
    }

    // 5. Multi-node: the longest prefix of the leftovers (at most 100) whose pods fit on the
    // rest plus at most one new node cheaper than the prefix, by binary search on its length.
    leftovers.truncate(config.max_multi_node_candidates);
    if leftovers.len() >= 2 {
        let try_prefix = |k: usize, work: &Vec<Node>| -> Option<(BTreeSet<usize>, Plan, f64)> {
            let removed: BTreeSet<usize> = leftovers[..k]
                .iter()
                .filter_map(|name| index_in(work, name))
                .collect();
            let mut plan = simulate(snap, work, &removed, true);
            let cost: f64 = removed.iter().map(|i| work[*i].price.unwrap_or(0.0)).sum();
            if !(plan.unschedulable.is_empty()
                && plan.new_claims.len() <= 1
                && plan.new_cost() < cost)
            {
                return None;
            }
            if let Some(c) = plan.new_claims.pop() {
                plan.new_claims.push(cheaper_only(snap, c, cost)?);
            }
            Some((removed, plan, cost))
        };
        let (mut lo, mut hi) = (2usize, leftovers.len());
        let mut best = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            match try_prefix(mid, &work) {
                Some(found) => {
                    best = Some((mid, found));
                    lo = mid + 1;
                }
                None => hi = mid - 1,
            }
        }
        if let Some((k, (removed, plan, cost))) = best {
            let current: Vec<Node> = removed.iter().map(|i| work[*i].clone()).collect();
            let nodes: Vec<&Node> = current.iter().collect();
            let replaced = !plan.new_claims.is_empty();
            match allowance.admit(
                snap,
                &nodes,
                DisruptionReason::Underutilized,
                replaced,
                true,
            ) {
                Ok(()) => {
                    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
                    let pods = nodes
                        .iter()
                        .flat_map(|n| movable(n))
                        .map(|p| p.key.clone())
                        .collect();
                    for name in &names {
                        let v = verdict.get_mut(name).expect("verdict");
                        v.disrupted = true;
                        v.set(
                            VerdictKind::Underutilized,
                            format!("underutilized: consolidated with {} other nodes", k - 1),
                        );
                    }
                    apply(&mut work, &removed, &plan);
                    out.commands.push(Command {
                        reason: DisruptionReason::Underutilized,
                        method: if replaced {
                            Method::Replace
                        } else {
                            Method::Delete
                        },
                        nodes: names,
                        pods,
                        savings: cost - plan.new_cost(),
                        replacement: plan.new_claims.first().cloned(),
                        decided_at: now,
                    });
                }
                Err(e) => {
                    for n in nodes {
                        verdict.get_mut(&n.name).expect("verdict").block(e.clone());
                    }
                }
            }
        }
    }
    out.verdicts = verdict.into_values().collect();
    out
}

/// Keeps only the offerings of a replacement priced below `below` (what the replaced nodes
/// cost), so that whichever one the launch falls back to when cheaper ones are out of capacity,
/// the replacement is still strictly cheaper. The cheapest option is below by construction, so
/// the claim's price and GPU count do not change. `None` when what is left no longer meets the
/// pool's `minValues`.
fn cheaper_only(snap: &Snapshot, mut claim: NewClaim, below: f64) -> Option<NewClaim> {
    for o in &mut claim.instance_types {
        o.offerings.retain(|(_, _, p)| *p < below);
    }
    claim.instance_types.retain(|o| !o.offerings.is_empty());
    let pool = snap.pools.iter().find(|p| p.name == claim.pool)?;
    crate::provision::claim_meets_min_values(pool, &claim).then_some(claim)
}

/// Whether a node runs on spot capacity.
fn is_spot(n: &Node) -> bool {
    n.labels.get(labels::CAPACITY_TYPE).map(String::as_str)
        == Some(crate::instance::CapacityType::Spot.as_str())
}

/// The replacement for one spot node, as Karpenter's spot-to-spot consolidation allows it:
/// when the replacement could launch as spot it must (its on-demand offerings are dropped),
/// and then at least `min_types` instance types must offer spot below the node's price, so
/// the launch has room to pick a type that is not the next to be interrupted. A replacement
/// with only on-demand offerings is an ordinary (strictly cheaper) replacement.
fn spot_to_spot(
    snap: &Snapshot,
    mut claim: NewClaim,
    min_types: usize,
) -> Result<NewClaim, String> {
    let spot = crate::instance::CapacityType::Spot;
    if !claim
        .instance_types
        .iter()
        .any(|o| o.offerings.iter().any(|x| x.1 == spot))
    {
        return Ok(claim);
    }
    for o in &mut claim.instance_types {
        o.offerings.retain(|x| x.1 == spot);
        if let Some(first) = o.offerings.first() {
            o.price = first.2;
        }
    }
    claim.instance_types.retain(|o| !o.offerings.is_empty());
    claim.instance_types.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
    });
    if let Ok(c) = crate::requirements::Constraint::from_operator(
        labels::CAPACITY_TYPE,
        crate::requirements::Operator::In,
        &[spot.as_str().to_string()],
    ) {
        claim.requirements.add_constraint(labels::CAPACITY_TYPE, c);
    }
    let count = claim.instance_types.len();
    if count < min_types {
        return Err(format!(
            "spot-to-spot replacement needs at least {min_types} cheaper spot instance types \
             that fit its pods; only {count} found"
        ));
    }
    if let Some(first) = claim.instance_types.first() {
        claim.price = first.price;
    }
    let pool = snap.pools.iter().find(|p| p.name == claim.pool);
    if pool.is_some_and(|p| !crate::provision::claim_meets_min_values(p, &claim)) {
        return Err("spot-to-spot replacement would not meet the NodePool's minValues".into());
    }
    Ok(claim)
}

/// Re-checks a command against the cluster as it is now, `validation_delay_s` after it was
/// decided. `Err` says why it no longer holds; the caller then drops it.
pub fn validate(
    command: &Command,
    snap: &Snapshot,
    now: i64,
    config: &DisruptionConfig,
) -> Result<(), String> {
    if now < command.decided_at + config.validation_delay_s {
        return Err(format!(
            "validation delay not over ({}s left)",
            command.decided_at + config.validation_delay_s - now
        ));
    }
    let mut removed = BTreeSet::new();
    for name in &command.nodes {
        let Some(i) = snap.nodes.iter().position(|n| &n.name == name) else {
            return Err(format!("node {name} is gone"));
        };
        let n = &snap.nodes[i];
        if let Some(b) = node_blocker(n, snap, now) {
            return Err(format!("node {name}: {b}"));
        }
        if command.reason == DisruptionReason::Empty && !movable(n).is_empty() {
            return Err(format!("node {name} is no longer empty"));
        }
        removed.insert(i);
    }
    let nodes: Vec<&Node> = removed.iter().map(|i| &snap.nodes[*i]).collect();
    Allowance::new(snap)
        .admit(
            snap,
            &nodes,
            command.reason,
            command.method == Method::Replace,
            false,
        )
        .map_err(|b| b.message)?;
    if command.reason == DisruptionReason::Empty {
        return Ok(());
    }
    let plan = simulate(
        snap,
        &snap.nodes,
        &removed,
        command.method == Method::Replace,
    );
    if let Some(u) = plan.unschedulable.first() {
        return Err(nowhere_to_go(u));
    }
    let cost: f64 = nodes.iter().map(|n| n.price.unwrap_or(0.0)).sum();
    if command.method == Method::Replace && (plan.new_claims.len() > 1 || plan.new_cost() >= cost) {
        return Err("replacement is no longer strictly cheaper".into());
    }
    if command.method == Method::Delete && !plan.new_claims.is_empty() {
        return Err("pods no longer fit on the remaining nodes".into());
    }
    Ok(())
}
