//! `plan_disruption`: which nodes to remove or replace, and why every other node stays.
//!
//! Utilization follows Cluster Autoscaler's definition (GPU nodes are measured on GPU-class
//! resources only; other nodes on max(cpu, memory)); consolidation follows the order empty →
//! delete → replace → multi-node. Whether pods fit elsewhere is decided by re-running the
//! provisioning planner ([`crate::provision`]) on the cluster without the candidate nodes, so
//! the fit rules exist once. Like the planner this is pure: the caller passes `now` and carries
//! [`DisruptionState`] from one call to the next.
//!
//! One file per phase, in the order [`plan_disruption`] runs them: `candidates` (utilization,
//! blockers, the unneeded time), `budgets` (each NodePool's scale-down delays; NodePool budgets,
//! minNodes, cluster-wide minimums, PDBs and the parallelism limits as an allowance the later
//! phases draw on), `atomic` (atomic NodePools, removed whole or not at all), then one file per
//! consolidation method, `empty`, `delete`, `replace` and `multi_node`, each on the cluster as
//! the previous commands left it (`simulate` moves the pods), with `drift` (nodes that no
//! longer match their NodePool, one command per pass) between `empty` and `delete` as in
//! Karpenter, and `validation` for the re-check of a command before it runs.
//!
//! # The rules in detail
//!
//! `disruption::plan_disruption(&Snapshot, &DisruptionState, now, &DisruptionConfig)`: Cluster
//! Autoscaler's utilization (GPU nodes on GPU-class resources only, DaemonSet/mirror options),
//! unneeded-time tracking carried in `DisruptionState`, `consolidateAfter` counted from the node's
//! last pod event (`Node.last_pod_event`: the pod watch notes bindings, completions and deletions
//! per node and the controller writes them to the NodeClaim's `lastPodEventTime`, at most every 5
//! s, so they survive a restart; the simulator tracks them itself; a node that broke down, initialized
//! but no longer Ready, waits `scale_down_unready_s` instead, or stays when
//! `scale_down_unready_enabled` is off), each pool's scale-down delays on its own clock
//! (`DisruptionState::pools`, `cooldown`), then empty →
//! delete → replace (strictly cheaper: a replacement keeps only offerings priced below what it
//! replaces, so a capacity fallback cannot cost more; a spot node's replacement that can be spot
//! must be, and needs at least `DisruptionConfig::min_spot_to_spot_types` (15, Karpenter's figure)
//! spot types below the node's price, else the verdict says how many there were) → multi-node
//! (binary search over a prefix of at most 100 candidates). "Do the pods fit elsewhere" re-runs
//! `plan_provisioning` on the cluster without the candidates (one piece of fit logic), without
//! in-flight claims; a pod it puts on a Node that has not initialized makes the command fail
//! ("would schedule against an uninitialized node"), so evicted pods go only to initialized,
//! schedulable nodes or the command's own replacement. Safety: PDBs, `karpenter.sh/do-not-disrupt`
//! (`"true"`, or a Go duration such as `"30m"` protecting a pod until it has run that long, from
//! `Pod::started_at`, and a node until it has existed that long; any other value protects and the
//! verdict names it), `cluster-autoscaler.kubernetes.io/safe-to-evict`, `scale-down-disabled`, bare
//! pods, local storage, kube-system pods without a PDB, budgets (percent rounds up), minNodes,
//! booked ProvisioningRequest capacity, uninitialized nodes, MIG reconfiguration, and Cluster
//! Autoscaler's parallelism limits (nodes being removed at once, and of those the ones drained,
//! counting `DisruptionState::in_progress`). Every node gets a
//! verdict with a reason. `validate` re-checks a command after the validation delay.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::duration::default_seconds;

use crate::model::{DisruptionReason, Node, PodKey, Snapshot};
use crate::plan::{NewClaim, Plan};

pub use crate::keys::{DO_NOT_DISRUPT, POD_DELETION_COST, SAFE_TO_EVICT, SCALE_DOWN_DISABLED};

/// Cluster-wide disruption settings (NodePools carry their own thresholds and budgets).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DisruptionConfig {
    /// Leave DaemonSet pods out of utilization (Cluster Autoscaler's
    /// `--ignore-daemonsets-utilization`).
    pub ignore_daemonset_utilization: bool,
    /// Leave mirror pods out of utilization (`--ignore-mirror-pods-utilization`).
    pub ignore_mirror_utilization: bool,
    /// No scale-down of a pool's nodes for this long after the pool scaled up
    /// (`--scale-down-delay-after-add`, 0s; the Cluster Autoscaler's 10m), unless the pool sets its own
    /// ([`crate::model::ScaleDownDelays`]).
    pub delay_after_scale_up_s: i64,
    /// ... after a deletion in the pool (`--scale-down-delay-after-delete`, 0s).
    pub delay_after_delete_s: i64,
    /// ... after a failed deletion in the pool (`--scale-down-delay-after-failure`, 3m).
    pub delay_after_failure_s: i64,
    /// Most nodes being removed at once, empty or drained, counting removals already under way
    /// ([`DisruptionState::in_progress`]); Cluster Autoscaler's `--max-scale-down-parallelism`.
    #[serde(default = "default_parallelism")]
    pub max_scale_down_parallelism: usize,
    /// Most nodes with pods to drain being removed at once (`--max-drain-parallelism`).
    #[serde(default = "default_parallelism")]
    pub max_drain_parallelism: usize,
    /// Whether nodes that broke down (initialized, `Ready` no longer `True`) may be scaled
    /// down (`--scale-down-unready-enabled`, true).
    #[serde(default = "default_true")]
    pub scale_down_unready_enabled: bool,
    /// How long such a node must stay unneeded before it goes, in place of the pool's
    /// `unneededTime` (`--scale-down-unready-time`, 20m).
    #[serde(default = "default_unready_s")]
    pub scale_down_unready_s: i64,
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

/// `--validation-delay`: a command is validated again this long after it was decided.
pub const DEFAULT_VALIDATION_DELAY: &str = "15s";
/// `--scale-down-delay-after-add`: none by default, where the Cluster Autoscaler waits 10
/// minutes. Per-node `consolidateAfter` and `unneededTime`, claims in flight and nominations
/// already keep new capacity from being taken for spare; a pool-wide pause after every launch
/// meant a pool with steady arrivals (the DLRM replay's CPU pool) never consolidated.
pub const DEFAULT_SCALE_DOWN_DELAY_AFTER_ADD: &str = "0s";
/// `--scale-down-delay-after-delete`.
pub const DEFAULT_SCALE_DOWN_DELAY_AFTER_DELETE: &str = "0s";
/// `--scale-down-delay-after-failure`.
pub const DEFAULT_SCALE_DOWN_DELAY_AFTER_FAILURE: &str = "3m";
/// `--scale-down-unready-time`.
pub const DEFAULT_SCALE_DOWN_UNREADY_TIME: &str = "20m";
/// `--max-scale-down-parallelism` and `--max-drain-parallelism`.
pub const DEFAULT_PARALLELISM: u32 = 10;
/// `--min-spot-to-spot-types` (Karpenter's figure).
pub const DEFAULT_MIN_SPOT_TO_SPOT_TYPES: u32 = 15;

fn default_spot_to_spot_types() -> usize {
    DEFAULT_MIN_SPOT_TO_SPOT_TYPES as usize
}

fn default_parallelism() -> usize {
    DEFAULT_PARALLELISM as usize
}

fn default_true() -> bool {
    true
}

fn default_unready_s() -> i64 {
    default_seconds(DEFAULT_SCALE_DOWN_UNREADY_TIME)
}

impl Default for DisruptionConfig {
    /// The controller's flag defaults, read from the texts and numbers its flags use (the
    /// `DEFAULT_*` constants of this module), so the two agree by construction.
    fn default() -> Self {
        DisruptionConfig {
            ignore_daemonset_utilization: false,
            ignore_mirror_utilization: false,
            delay_after_scale_up_s: default_seconds(DEFAULT_SCALE_DOWN_DELAY_AFTER_ADD),
            delay_after_delete_s: default_seconds(DEFAULT_SCALE_DOWN_DELAY_AFTER_DELETE),
            delay_after_failure_s: default_seconds(DEFAULT_SCALE_DOWN_DELAY_AFTER_FAILURE),
            validation_delay_s: default_seconds(DEFAULT_VALIDATION_DELAY),
            max_multi_node_candidates: 100,
            min_spot_to_spot_types: default_spot_to_spot_types(),
            max_scale_down_parallelism: default_parallelism(),
            max_drain_parallelism: default_parallelism(),
            scale_down_unready_enabled: true,
            scale_down_unready_s: default_unready_s(),
        }
    }
}

/// What the caller keeps between calls.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DisruptionState {
    /// Since when each node has been a scale-down candidate.
    pub unneeded_since: BTreeMap<String, i64>,
    /// Per NodePool, its last scale-up, deletion and failed deletion: each pool's scale-down
    /// delays run on its own clock ([`DisruptionState::scaled_up`] and the like record them).
    #[serde(default)]
    pub pools: BTreeMap<String, PoolEvents>,
    /// Removals already under way, which the parallelism limits count. The caller sets it
    /// before each call; [`plan_disruption`] only reads it.
    #[serde(default)]
    pub in_progress: InProgress,
}

/// When a NodePool last scaled up, deleted a node, or failed to (seconds on the caller's clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolEvents {
    /// Last scale-up (a node launched for pending pods or a ProvisioningRequest).
    pub last_scale_up: Option<i64>,
    /// Last successful node deletion.
    pub last_delete: Option<i64>,
    /// Last failed node deletion.
    pub last_failure: Option<i64>,
    /// Failed deletions in a row the cluster could not get past (`execute::Step::stuck`),
    /// since the last successful deletion or the last failure of a command the cluster
    /// outgrew. The delay after a failure doubles with each after the first, up to
    /// [`MAX_FAILURE_DELAY_S`]: a replacement that can never come up (a broken image behind a
    /// drift) is retried ever less often, not launched and thrown away every delay for ever.
    #[serde(default)]
    pub failures_in_row: u32,
}

/// The longest delay after failed deletions in a row (or the configured delay, if longer).
pub const MAX_FAILURE_DELAY_S: i64 = 3600;

/// Node removals the caller is already performing, for the parallelism limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InProgress {
    /// Nodes being removed (empty or drained).
    pub nodes: usize,
    /// Of those, nodes with pods to drain.
    pub drains: usize,
}

impl DisruptionState {
    /// Records a scale-up of `pool` at `now`.
    pub fn scaled_up(&mut self, pool: &str, now: i64) {
        self.pools
            .entry(pool.to_string())
            .or_default()
            .last_scale_up = Some(now);
    }

    /// Records the deletion of a node of `pool` at `now` (which ends a run of failures).
    pub fn deleted(&mut self, pool: &str, now: i64) {
        let e = self.pools.entry(pool.to_string()).or_default();
        e.last_delete = Some(now);
        e.failures_in_row = 0;
    }

    /// Records a failed deletion of a node of `pool` at `now`: `stuck` when the cluster could
    /// not carry the command out (`execute::Step::stuck`), which lengthens the delay after
    /// each in a row; otherwise the command was outgrown, and the delay is the configured one.
    pub fn failed(&mut self, pool: &str, now: i64, stuck: bool) {
        let e = self.pools.entry(pool.to_string()).or_default();
        e.last_failure = Some(now);
        e.failures_in_row = if stuck {
            e.failures_in_row.saturating_add(1)
        } else {
            1
        };
    }
}

/// Why a NodePool's scale-down is paused at `now`, if it is: the event (`"a scale-up"`, `"a
/// deletion"`, `"a failed deletion"`) whose delay ends last, and the wait. The pool's own
/// delays ([`crate::model::ScaleDownDelays`]) override `config`'s; the delay after a failure
/// doubles per failure in a row after the first ([`PoolEvents::failures_in_row`]).
pub fn cooldown(
    delays: &crate::model::ScaleDownDelays,
    events: &PoolEvents,
    config: &DisruptionConfig,
    now: i64,
) -> Option<(&'static str, Wait)> {
    [
        (
            "a scale-up",
            wait_after(
                events.last_scale_up,
                delays.after_add_s.unwrap_or(config.delay_after_scale_up_s),
                now,
            ),
        ),
        (
            "a deletion",
            wait_after(
                events.last_delete,
                delays.after_delete_s.unwrap_or(config.delay_after_delete_s),
                now,
            ),
        ),
        (
            "a failed deletion",
            failure_pause(delays, events, config, now),
        ),
    ]
    .into_iter()
    .filter_map(|(what, wait)| Some((what, wait?)))
    .max_by_key(|(_, w)| w.until)
}

/// The wait `delay` after the event at `at`, if it is still on at `now`.
fn wait_after(at: Option<i64>, delay: i64, now: i64) -> Option<Wait> {
    let since = at?;
    let until = since.saturating_add(delay.max(0));
    (now < until).then_some(Wait { since, until })
}

/// Whether drift of a NodePool's nodes waits at `now` after failed deletions in the pool, and
/// until when: only the delay after a failure ([`cooldown`]'s third, doubling per failure in a
/// row) holds drift back, since drift is no scale-down; without it a drift replacement that
/// can never come up (a broken image) would be launched again at every pass after each
/// failure.
pub fn failure_pause(
    delays: &crate::model::ScaleDownDelays,
    events: &PoolEvents,
    config: &DisruptionConfig,
    now: i64,
) -> Option<Wait> {
    let delay = failure_delay(
        delays
            .after_failure_s
            .unwrap_or(config.delay_after_failure_s),
        events.failures_in_row,
    );
    wait_after(events.last_failure, delay, now)
}

/// The delay after the last of `failures` failed deletions in a row: `base`, doubled for each
/// failure after the first, up to [`MAX_FAILURE_DELAY_S`] (or `base`, if longer).
fn failure_delay(base: i64, failures: u32) -> i64 {
    let base = base.max(0);
    let doublings = failures.saturating_sub(1).min(30);
    base.saturating_mul(1_i64 << doublings)
        .min(MAX_FAILURE_DELAY_S.max(base))
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
    /// A candidate while its pool's scale-down is paused after a scale-up, deletion or
    /// failure.
    Paused,
    /// Below its threshold and unblocked, not ready: waiting out `--scale-down-unready-time`.
    UnreadyUnneeded,
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
    /// A pending pod is nominated to the node: the scheduler is about to bind it there.
    Nominated,
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
    /// Removing the node would take the cluster below a cluster-wide minimum
    /// (`--cores-total`, `--memory-total`, `--gpu-total` MIN).
    AtClusterMinimum,
    /// The node's NodePool is atomic and scales down only as a whole: another of its nodes
    /// stays, or their pods do not fit elsewhere together.
    AtomicPool,
    /// Its pods have nowhere to go (or no strictly cheaper replacement holds them).
    NoPlaceForPods,
    /// Not ready, and `--scale-down-unready-enabled` is off.
    NotReady,
    /// Drifted from its NodePool ([`Drift`]): chosen by the drift phase, or, when not
    /// disrupted, waiting for a later pass (one drift command per pass). A drifted node kept
    /// by a blocker has that blocker's kind, its words saying it drifted.
    Drifted,
    /// As many removals as `--max-scale-down-parallelism` or `--max-drain-parallelism`
    /// allow are under way or decided.
    ParallelismLimit,
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
                | VerdictKind::UnreadyUnneeded
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
                let t = r.instance_types.first().map_or("", |o| &*o.instance_type);
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

mod atomic;
mod budgets;
mod candidates;
mod delete;
mod drift;
mod empty;
pub mod execute;
mod expiry;
mod grace;
mod multi_node;
mod replace;
mod simulate;
mod validation;

use budgets::Allowance;
pub use budgets::{budget_allows, budget_nodes, budget_standing};
use candidates::Nominations;
pub use candidates::{
    DRA_DEVICES, node_block, node_blocker, pod_block, pod_blocker, pod_protection, utilization,
    utilization_by_resource, utilization_by_resource_with_devices, utilization_with_devices,
};
pub use drift::{Drift, DriftReason, Drifted, drift_of, drifted, requirements_drift};
pub use expiry::{Expired, expired};
pub use grace::{
    CRITICAL_PRIORITY_CLASSES, DEFAULT_POD_GRACE_S, DrainStep, DrainTier, MIN_DELETE_GRACE_S,
    deadline_reached, drain_step, termination_deadline,
};
pub use simulate::{UNINITIALIZED_TARGET, UNREADY_TARGET, simulate};
pub use validation::{Check, narrow_empty, validate, validate_at};

/// Plans disruption. Never fails; every node gets a [`Verdict`].
///
/// `state` comes from the previous call's [`DisruptionPlan::state`]; `now` is seconds on the
/// caller's clock. The phases run in order, each on the cluster as the previous left it.
pub fn plan_disruption(
    snap: &Snapshot,
    state: &DisruptionState,
    now: i64,
    config: &DisruptionConfig,
) -> DisruptionPlan {
    plan_disruption_cached(snap, state, now, config, &mut DisruptionCache::default())
}

/// What a caller that plans disruption again and again keeps between passes: what the pass
/// derives from the NodePools alone (the right-sizing screen's instance types, cheapest first,
/// and the shapes its simulations plan replacements with), and the copy of the cluster its
/// simulations plan on.
///
/// Exact, not approximate: the pools are compared with those it was built from in full (a
/// catalog they share by pointer), and it is built again on any difference; each node of the
/// copy is compared with the snapshot's and copied again when it differs in any field. So a
/// plan made with the cache equals one made without. It holds one copy of the snapshot's
/// nodes between passes.
#[derive(Default)]
pub struct DisruptionCache {
    built_from: Option<Vec<crate::model::Pool>>,
    cheap_types: std::sync::Arc<Vec<candidates::CheapType>>,
    /// The copy of the cluster the simulations plan on (with the shapes a simulation that
    /// may launch a replacement plans with), brought up to date at each pass by copying only
    /// the nodes that changed: copying every node at each pass was a tenth of ours' openb
    /// replay.
    sim: simulate::SimBase,
}

impl DisruptionCache {
    /// The right-sizing screen's instance types for `snap`'s pools, built when they changed.
    fn cheap_types(&mut self, snap: &Snapshot) -> std::sync::Arc<Vec<candidates::CheapType>> {
        let same = self
            .built_from
            .as_ref()
            .is_some_and(|pools| crate::provision::same_pools(pools, &snap.pools));
        if !same {
            self.cheap_types = std::sync::Arc::new(candidates::cheap_types(snap));
            self.built_from = Some(snap.pools.clone());
        }
        self.cheap_types.clone()
    }
}

/// [`plan_disruption`] with what `cache` kept from earlier passes (the same plan, less work
/// for a caller that plans every few seconds: building the right-sizing screen for each pass
/// was a tenth of a simulated openb replay).
pub fn plan_disruption_cached(
    snap: &Snapshot,
    state: &DisruptionState,
    now: i64,
    config: &DisruptionConfig,
    cache: &mut DisruptionCache,
) -> DisruptionPlan {
    let snap = &*crate::zone_ids::resolve(snap);
    let mut pass = Pass::new(snap, state, now, config);
    pass.cheap_types = Some(cache.cheap_types(snap));
    let mut sim = std::mem::take(&mut cache.sim);
    sim.start_pass();
    pass.sim = std::cell::RefCell::new(sim);
    let candidates = pass.candidates(state);
    let mut candidates = pass.paused(state, candidates);
    pass.order(&mut candidates);
    pass.atomic(&mut candidates);
    pass.empty(&candidates);
    pass.drift();
    let leftovers = pass.one_at_a_time(&candidates);
    pass.multi_node(leftovers);
    cache.sim = std::mem::take(pass.sim.get_mut());
    pass.finish()
}

/// One verdict per node, found by name: kept in the snapshot's order with a list of the names
/// sorted once, which borrows the names instead of copying each into a map's key (that map
/// was a tenth of a pass over a few thousand nodes).
#[derive(Default)]
struct Verdicts<'a> {
    list: Vec<Verdict>,
    /// Per name, the index in `list` of its verdict, sorted by name once [`Verdicts::index`]
    /// has run.
    by_name: Vec<(&'a str, usize)>,
}

impl<'a> Verdicts<'a> {
    fn push(&mut self, name: &'a str, v: Verdict) {
        self.by_name.push((name, self.list.len()));
        self.list.push(v);
    }

    /// Sorts the names, after the last push: one verdict per name, the last one pushed (node
    /// names are unique in a cluster; a map would also keep the last).
    fn index(&mut self) {
        self.by_name.sort_by(|a, b| a.0.cmp(b.0));
        self.by_name.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = later.1;
            }
            same
        });
    }

    fn position(&self, name: &str) -> Option<usize> {
        let i = self
            .by_name
            .binary_search_by(|(n, _)| (*n).cmp(name))
            .ok()?;
        Some(self.by_name[i].1)
    }

    fn get(&self, name: &str) -> Option<&Verdict> {
        self.position(name).map(|i| &self.list[i])
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Verdict> {
        self.position(name).map(|i| &mut self.list[i])
    }

    /// The verdicts, by node name.
    fn into_sorted(self) -> Vec<Verdict> {
        let mut list: Vec<Option<Verdict>> = self.list.into_iter().map(Some).collect();
        self.by_name
            .iter()
            .filter_map(|(_, i)| list[*i].take())
            .collect()
    }
}

/// One planning pass: what the phases of [`plan_disruption`] share.
struct Pass<'a> {
    snap: &'a Snapshot,
    now: i64,
    config: &'a DisruptionConfig,
    out: DisruptionPlan,
    /// One verdict per node, by name.
    verdict: Verdicts<'a>,
    /// Budgets, minNodes and PDBs left.
    allowance: Allowance,
    /// The cluster as the commands so far leave it: each node borrowed until a command changes
    /// it, as a copy of every node each round dominated the planning of large clusters.
    work: Vec<Cow<'a, Node>>,
    /// Nodes the commands so far remove.
    gone: BTreeSet<String>,
    /// The snapshot's nominations, indexed by claim; with the nodes pending pods would be
    /// bound to once `binding_known`.
    nominations: Nominations<'a>,
    /// Whether `nominations` has the nodes pending pods would be bound to: worked out when
    /// the first node gets that far among the checks, as most passes of a busy cluster have
    /// no node below its threshold and need not plan the pending pods at all.
    binding_known: bool,
    /// The working cluster copied once for the simulations, until a command changes it.
    sim: std::cell::RefCell<simulate::SimBase>,
    /// Candidates above their threshold, only for right-sizing: the fraction a replacement
    /// must save, and the utilization against the threshold, for the verdict.
    right_size: BTreeMap<String, (f64, String)>,
    /// Every pool's instance types for the right-sizing screen, from the caller's
    /// [`DisruptionCache`].
    cheap_types: Option<std::sync::Arc<Vec<candidates::CheapType>>>,
    /// "utilization above threshold" words by (GPU, utilization bits, threshold bits): most
    /// nodes of a pass are above their threshold and share a handful of figures, and writing
    /// two floats out for each was a twentieth of a simulated day.
    above_words: BTreeMap<(bool, u64, u64), String>,
}

impl<'a> Pass<'a> {
    fn new(
        snap: &'a Snapshot,
        state: &DisruptionState,
        now: i64,
        config: &'a DisruptionConfig,
    ) -> Self {
        let mut out = DisruptionPlan {
            state: state.clone(),
            ..Default::default()
        };
        out.state.unneeded_since.clear();
        Pass {
            snap,
            now,
            config,
            out,
            verdict: Verdicts::default(),
            allowance: Allowance::new(snap, config, &state.in_progress, now),
            work: snap.nodes.iter().map(Cow::Borrowed).collect(),
            gone: BTreeSet::new(),
            nominations: Nominations::of(snap),
            binding_known: false,
            sim: Default::default(),
            right_size: BTreeMap::new(),
            cheap_types: None,
            above_words: BTreeMap::new(),
        }
    }

    /// The index of a node in the working cluster.
    fn index(&self, name: &str) -> Option<usize> {
        self.work.iter().position(|n| n.name == name)
    }

    /// The indexes in the working cluster of the nodes named, found in one walk over it (a
    /// command of thousands of empty nodes would otherwise walk it once per node).
    fn indices<'n>(&self, names: impl IntoIterator<Item = &'n str>) -> BTreeSet<usize> {
        let wanted: BTreeSet<&str> = names.into_iter().collect();
        self.work
            .iter()
            .enumerate()
            .filter(|(_, n)| wanted.contains(n.name.as_str()))
            .map(|(i, _)| i)
            .collect()
    }

    /// Where the pods of the working cluster's nodes `removed` would go ([`simulate::simulate`]).
    fn simulate(&self, removed: &BTreeSet<usize>, allow_new: bool) -> Plan {
        self.sim
            .borrow_mut()
            .simulate(self.snap, &self.work, removed, allow_new)
    }

    /// Moves the pods of `removed` where `plan` puts them and takes those nodes out of the
    /// working cluster.
    fn apply(&mut self, removed: &BTreeSet<usize>, plan: &Plan) {
        simulate::apply(&mut self.work, removed, plan);
        self.sim.get_mut().invalidate();
    }

    /// Gives a node that stays the blocker why.
    fn keep(&mut self, name: &str, why: Blocker) {
        self.verdict.get_mut(name).expect("verdict").block(why);
    }

    /// Marks a node disrupted, of `kind`, for `reason`.
    fn disrupt(&mut self, name: &str, kind: VerdictKind, reason: String) {
        let v = self.verdict.get_mut(name).expect("verdict");
        v.disrupted = true;
        v.set(kind, reason);
    }

    fn finish(mut self) -> DisruptionPlan {
        self.out.verdicts = self.verdict.into_sorted();
        // A node is unneeded only while its pods have somewhere to go, as the Cluster
        // Autoscaler counts it: one whose simulation found no place (or no cheaper node, when
        // right-sizing) starts its unneeded time again, rather than going the moment room
        // appears after having waited with nowhere to go.
        for v in &self.out.verdicts {
            let unhelped = matches!(
                v.kind,
                VerdictKind::NoPlaceForPods | VerdictKind::AboveThreshold
            );
            if !v.disrupted
                && unhelped
                && let Some(since) = self.out.state.unneeded_since.get_mut(&v.node)
            {
                *since = self.now;
            }
        }
        self.out
    }
}
