//! Explanations for the people on call: why a pod gets no node (every NodePool and instance
//! type it was considered for, and what refused each, with the values allowed), why a node
//! stays or goes (its disruption [`Verdict`]), and where a NodePool stands (usage against
//! limits, budgets, instance types left out and why).
//!
//! Nothing here decides anything: the planner and disruption compute these answers with the
//! rules they plan with (the pod's considerations are taken inside the planner, at the moment
//! it places the pod, against the pool usage of that moment), so an explanation says what the
//! controller does. `gpu-autoscaler explain` (live cluster) and `simulate --explain` render
//! them with the `render` methods, or as JSON: the types serialize in camelCase, and that shape
//! is documented as stable (fields are only ever added).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::disruption::{
    Command, DisruptionConfig, DisruptionState, Verdict, plan_disruption,
    utilization_by_resource_with_devices,
};
use crate::model::{BudgetValue, DisruptionReason, PodKey, Snapshot};
use crate::plan::Plan;
use crate::provision::{self, PlanOptions};

/// What kind of rule refused a pool or an instance type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RefusalKind {
    /// A taint of the pool the pod does not tolerate.
    Taint,
    /// A `PreferNoSchedule` taint the pod does not tolerate: used only when nothing else can
    /// take the pod.
    PreferNoSchedule,
    /// The pool's requirements, or the instance type's labels, against the pod's node
    /// selector and affinity.
    Requirements,
    /// No offering (zone, capacity type) both available and allowed.
    Offerings,
    /// The pool's GPU sharing: no fractional shares, or a sharing setting the GPU cannot take.
    Sharing,
    /// A host port the pod binds is taken by a DaemonSet.
    HostPort,
    /// The node would not hold the pod's requests.
    Resources,
    /// One more node of this type would exceed a limit of the pool.
    Limits,
    /// The fitting instance types span fewer values than the pool's `minValues`.
    MinValues,
    /// A GPU type for a pod that needs none, while a GPU-less type fits.
    GpuLastResort,
    /// The pod attaches more volumes of a CSI driver than nodes of this type do, as the
    /// CSINodes of the pool's existing nodes of the type show.
    VolumeLimits,
}

/// Why a pool or an instance type was refused: the kind, and the words with the values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The rule.
    pub kind: RefusalKind,
    /// What it says, with the values allowed and the values found.
    pub message: String,
}

impl Refusal {
    /// A refusal of `kind` saying `message`.
    pub fn new(kind: RefusalKind, message: impl Into<String>) -> Self {
        Refusal {
            kind,
            message: message.into(),
        }
    }
}

/// One instance type of a pool, as considered for a pod (or, for a pool, for one more node).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TypeConsidered {
    /// The instance type.
    pub instance_type: String,
    /// The cheapest acceptable offering's hourly price, when it was not refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// Why it was refused; absent when it fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
    /// Whether the pool itself leaves the type out (its requirements, offerings or GPU
    /// sharing), whatever the pod: no pod can get a node of it there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub excluded: bool,
}

/// One NodePool as considered for a pod.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolConsidered {
    /// The NodePool.
    pub pool: String,
    /// Its weight (higher weights are tried first).
    pub weight: i32,
    /// Why the pool as a whole was refused (its instance types are then not listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
    /// Under `--min-values-policy=BestEffort`, the pool's `minValues` the fitting instance
    /// types fall short of, in words: not a refusal, as a claim of the pool is launched with
    /// its `minValues` lowered to what they span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values_relaxed: Option<String>,
    /// Every instance type of the pool's catalog, in catalog order.
    pub instance_types: Vec<TypeConsidered>,
}

/// Where a pod is, or what the planner does for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Outcome {
    /// Bound to a node already.
    #[serde(rename_all = "camelCase")]
    Bound {
        /// The node.
        node: String,
    },
    /// Finished (phase `Succeeded` or `Failed`): nothing to place.
    #[serde(rename_all = "camelCase")]
    Finished {
        /// The pod's phase.
        phase: String,
    },
    /// Fits an existing node (the scheduler places it; nothing is launched).
    #[serde(rename_all = "camelCase")]
    ExistingNode {
        /// The node.
        node: String,
    },
    /// Waits for a NodeClaim in flight (launched, not yet initialized).
    #[serde(rename_all = "camelCase")]
    InFlightClaim {
        /// The NodeClaim.
        claim: String,
    },
    /// Gets a new NodeClaim at the next planning round.
    #[serde(rename_all = "camelCase")]
    NewClaim {
        /// Its NodePool.
        pool: String,
        /// Its acceptable instance types, cheapest first.
        instance_types: Vec<String>,
        /// The cheapest one's hourly price.
        price: f64,
        /// Other pending pods planned onto the same NodeClaim. A pod that needs no GPU on a
        /// GPU type rides in the room a GPU node planned for such pods leaves.
        #[serde(default)]
        other_pods: usize,
        /// The NodePool's `minValues` the NodeClaim asks for fewer values of, with the number
        /// it asks for (`--min-values-policy=BestEffort`, [`crate::plan::NewClaim::min_values_relaxed`]).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        min_values_relaxed: BTreeMap<String, u32>,
    },
    /// Cannot be helped; the reason its `NotTriggerScaleUp` event gives.
    #[serde(rename_all = "camelCase")]
    Unschedulable {
        /// The planner's reason.
        reason: String,
    },
}

/// Why a pod is pending, or where it goes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// The pod.
    pub pod: PodKey,
    /// Where it is or goes.
    pub outcome: Outcome,
    /// Every NodePool, in the order the planner tries them (weight, then name), with each
    /// instance type and what refused it. Empty for a bound pod.
    pub pools: Vec<PoolConsidered>,
    /// Selector values no instance type carries, with the value probably meant ("did you
    /// mean").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<String>,
    /// The preferences (preferred pod affinity and anti-affinity, `ScheduleAnyway` spreads)
    /// the planner gave up for the outcome, in the order it gave them up (for an unschedulable
    /// pod: those it was tried without too); empty when it held every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub given_up: Vec<String>,
}

/// Why a pending pod of `snapshot` gets what it gets: the plan's outcome for it and every pool
/// and instance type considered, as the planner saw them when it placed the pod. `None` when
/// the pod is not among the snapshot's pending pods.
pub fn explain_pod(snapshot: &Snapshot, pod: &PodKey) -> Option<PodExplanation> {
    let i = snapshot.pending.iter().position(|p| &p.key == pod)?;
    let (plan, pools, given_up) = provision::plan_explained(snapshot, &PlanOptions::default(), i);
    let vocabulary = crate::vocabulary::Vocabulary::of_pools(&snapshot.pools);
    let mut hints: Vec<String> = Vec::new();
    for term in &snapshot.pending[i].node_selector.terms {
        for h in vocabulary.unknown_values(term) {
            if !hints.contains(&h) {
                hints.push(h);
            }
        }
    }
    Some(PodExplanation {
        pod: pod.clone(),
        outcome: outcome_of(&plan, pod),
        pools,
        hints,
        given_up,
    })
}

fn outcome_of(plan: &Plan, pod: &PodKey) -> Outcome {
    if let Some(p) = plan.existing.iter().find(|p| &p.pod == pod) {
        return Outcome::ExistingNode {
            node: p.target.clone(),
        };
    }
    if let Some(p) = plan.in_flight.iter().find(|p| &p.pod == pod) {
        return Outcome::InFlightClaim {
            claim: p.target.clone(),
        };
    }
    if let Some(c) = plan.new_claims.iter().find(|c| c.pods.contains(pod)) {
        return Outcome::NewClaim {
            pool: c.pool.clone(),
            instance_types: c
                .instance_types
                .iter()
                .map(|o| o.instance_type.to_string())
                .collect(),
            price: c.price,
            other_pods: c.pods.len().saturating_sub(1),
            min_values_relaxed: c.min_values_relaxed.clone(),
        };
    }
    Outcome::Unschedulable {
        reason: plan
            .unschedulable
            .iter()
            .find(|u| &u.pod == pod)
            .map_or_else(|| "not placed".into(), |u| u.reason.clone()),
    }
}

/// One resource's utilization on a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUse {
    /// The resource.
    pub resource: String,
    /// Requested over allocatable, as disruption measures it.
    pub ratio: f64,
}

/// The disruption command a node is part of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandSummary {
    /// Why (`Empty`, `Underutilized`).
    pub reason: DisruptionReason,
    /// `Delete` or `Replace`.
    pub method: String,
    /// Every node the command removes.
    pub nodes: Vec<String>,
    /// Pods it evicts.
    pub pods: usize,
    /// The replacement's cheapest instance type, for a replacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// Hourly saving.
    pub savings: f64,
}

impl CommandSummary {
    fn of(c: &Command) -> Self {
        CommandSummary {
            reason: c.reason,
            method: format!("{:?}", c.method),
            nodes: c.nodes.clone(),
            pods: c.pods.len(),
            replacement: c
                .replacement
                .as_ref()
                .and_then(|r| r.instance_types.first())
                .map(|o| o.instance_type.to_string()),
            savings: c.savings,
        }
    }
}

/// Why a node stays, or why it was chosen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    /// The disruption verdict: kind, words, threshold, wait.
    pub verdict: Verdict,
    /// Utilization per resource (the verdict's utilization is the highest).
    pub utilization: Vec<ResourceUse>,
    /// The command removing it, when chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandSummary>,
}

/// The disruption verdict of node `name` in a [`plan_disruption`] run on `snapshot` with
/// `state` at `now`. `None` when the snapshot has no such node.
pub fn explain_node(
    snapshot: &Snapshot,
    state: &DisruptionState,
    now: i64,
    config: &DisruptionConfig,
    name: &str,
) -> Option<NodeExplanation> {
    let node = snapshot.nodes.iter().find(|n| n.name == name)?;
    let plan = plan_disruption(snapshot, state, now, config);
    let verdict = plan.verdicts.into_iter().find(|v| v.node == name)?;
    let devices = crate::dra::device_use(&snapshot.dra).get(name).copied();
    let utilization = utilization_by_resource_with_devices(node, devices, config)
        .0
        .into_iter()
        .map(|(resource, ratio)| ResourceUse { resource, ratio })
        .collect();
    let command = plan
        .commands
        .iter()
        .find(|c| c.nodes.iter().any(|n| n == name))
        .map(CommandSummary::of);
    Some(NodeExplanation {
        verdict,
        utilization,
        command,
    })
}

/// One limit of a pool against its usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitUse {
    /// `nodes`, a resource name, or `gpu/<model>` for a per-model GPU limit.
    pub name: String,
    /// In use (existing nodes and claims in flight), in Kubernetes notation.
    pub used: String,
    /// The limit.
    pub limit: String,
    /// Whether not even the pool's smallest node fits under it any more.
    pub reached: bool,
}

/// One disruption budget of a pool, as it stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetUse {
    /// The budget as written (`10%`, `0`).
    pub nodes: String,
    /// The reasons it applies to; empty for all.
    pub reasons: Vec<DisruptionReason>,
    /// Nodes it allows disrupted at once, for the pool's count of initialized nodes.
    pub allows: i64,
    /// Initialized nodes of the pool disrupted now (being deleted, or not ready), which it
    /// counts against.
    pub in_use: i64,
    /// When it opens (a cron schedule, UTC), for a scheduled budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// How long it stays open after each time its schedule fires, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<i64>,
    /// Whether it is in force now: always for an unscheduled budget; an inactive one limits
    /// nothing.
    pub active: bool,
}

/// One node of a pool and its verdict, in brief.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeBrief {
    /// The node.
    pub node: String,
    /// Whether a command removes it.
    pub disrupted: bool,
    /// The verdict's kind.
    pub kind: crate::disruption::VerdictKind,
    /// The verdict's words.
    pub reason: String,
}

/// Where a NodePool stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolExplanation {
    /// The NodePool.
    pub pool: String,
    /// Its weight.
    pub weight: i32,
    /// Nodes counted against its limits (existing nodes and claims in flight).
    pub nodes: i64,
    /// What it uses, per resource, in Kubernetes notation.
    pub usage: BTreeMap<String, String>,
    /// Each limit against its usage.
    pub limits: Vec<LimitUse>,
    /// `minNodes`.
    pub min_nodes: u32,
    /// Each disruption budget.
    pub budgets: Vec<BudgetUse>,
    /// Every instance type of its catalog: the price of one more node, or why none can be
    /// launched (left out by the pool's requirements, offerings or GPU sharing, or a limit).
    pub instance_types: Vec<TypeConsidered>,
    /// Its nodes' disruption verdicts.
    pub node_verdicts: Vec<NodeBrief>,
}

/// Where NodePool `name` of `snapshot` stands, with its nodes' verdicts taken from
/// `verdicts` (a [`plan_disruption`] run on the same snapshot at `now`). `None` when the
/// snapshot has no such pool (an invalid NodePool is left out of snapshots).
pub fn explain_pool(
    snapshot: &Snapshot,
    name: &str,
    verdicts: &[Verdict],
    now: i64,
) -> Option<PoolExplanation> {
    let pool = snapshot.pools.iter().find(|p| p.name == name)?;
    let (usage, limits, nodes, instance_types) = provision::pool_standing(snapshot, name)?;
    let (total, deleting) = crate::disruption::budget_standing(
        snapshot
            .nodes
            .iter()
            .filter(|n| n.pool.as_deref() == Some(name)),
        now,
    );
    let budgets = pool
        .disruption
        .budgets
        .iter()
        .map(|b| BudgetUse {
            nodes: match b.nodes {
                BudgetValue::Count(n) => n.to_string(),
                BudgetValue::Percent(p) => format!("{p}%"),
            },
            reasons: b.reasons.clone(),
            allows: crate::disruption::budget_nodes(b, total),
            in_use: deleting,
            schedule: b.schedule.as_ref().map(|s| s.cron.to_string()),
            duration_s: b.schedule.as_ref().map(|s| s.duration_s),
            active: b.active_at(now),
        })
        .collect();
    let mut node_verdicts: Vec<NodeBrief> = verdicts
        .iter()
        .filter(|v| v.pool.as_deref() == Some(name))
        .map(|v| NodeBrief {
            node: v.node.clone(),
            disrupted: v.disrupted,
            kind: v.kind,
            reason: v.reason.clone(),
        })
        .collect();
    node_verdicts.sort_by(|a, b| a.node.cmp(&b.node));
    Some(PoolExplanation {
        pool: pool.name.clone(),
        weight: pool.weight,
        nodes,
        usage,
        limits,
        min_nodes: pool.min_nodes,
        budgets,
        instance_types,
        node_verdicts,
    })
}

/// Most names a text line lists before saying how many more there are.
pub const NAMES_SHOWN: usize = 8;

/// Instance types grouped by what was said of them, in first-seen order: one text line per
/// message rather than per type (a catalog has hundreds).
fn grouped(types: &[TypeConsidered]) -> Vec<(String, Vec<&str>)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for t in types {
        let key = match (&t.refused, t.price) {
            (Some(r), _) if t.excluded => {
                format!("left out by the NodePool ({:?}): {}", r.kind, r.message)
            }
            (Some(r), _) => format!("refused ({:?}): {}", r.kind, r.message),
            (None, Some(p)) => format!("fits, from {p:.3}/h"),
            (None, None) => "fits".to_string(),
        };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, names)) => names.push(&t.instance_type),
            None => out.push((key, vec![&t.instance_type])),
        }
    }
    out
}

/// `list` joined with commas, at most [`NAMES_SHOWN`] of it, then how many more.
pub fn names(list: &[&str]) -> String {
    let mut s = list
        .iter()
        .take(NAMES_SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > NAMES_SHOWN {
        let _ = write!(s, " and {} more", list.len() - NAMES_SHOWN);
    }
    s
}

fn render_types(out: &mut String, types: &[TypeConsidered], indent: &str) {
    // Fitting types first, what the pool leaves out whatever the pod last.
    let mut groups = grouped(types);
    groups.sort_by_key(|(k, _)| {
        if k.starts_with("fits") {
            0
        } else if k.starts_with("left out") {
            2
        } else {
            1
        }
    });
    for (what, list) in groups {
        let _ = writeln!(out, "{indent}{}: {what}", names(&list));
    }
}

/// The `minValues` a new NodeClaim was planned below, as a clause of its outcome line; empty
/// when there are none.
fn relaxed_words(relaxed: &BTreeMap<String, u32>) -> String {
    if relaxed.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = relaxed
        .iter()
        .map(|(key, n)| format!("{key} to {n}"))
        .collect();
    format!(
        "; minValues relaxed (--min-values-policy=BestEffort): {}",
        parts.join(", ")
    )
}

impl PodExplanation {
    /// Plain text for a terminal: the outcome, then each pool with its instance types grouped
    /// by what refused them, then the hints.
    pub fn render(&self) -> String {
        let mut out = format!("Pod {}\n", self.pod);
        let _ = match &self.outcome {
            Outcome::Bound { node } => writeln!(out, "  bound to node {node}"),
            Outcome::Finished { phase } => {
                writeln!(out, "  finished (phase {phase}); nothing to place")
            }
            Outcome::ExistingNode { node } => writeln!(
                out,
                "  pending; fits existing node {node} (the scheduler places it; nothing to launch)"
            ),
            Outcome::InFlightClaim { claim } => writeln!(
                out,
                "  pending; waits for NodeClaim {claim} (launched, not yet initialized)"
            ),
            Outcome::NewClaim {
                pool,
                instance_types,
                price,
                other_pods,
                min_values_relaxed,
            } => writeln!(
                out,
                "  pending; gets a new NodeClaim of NodePool {pool} at the next planning round \
                 (instance types {}; from {price:.3}/h{}){}",
                names(
                    &instance_types
                        .iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                ),
                match other_pods {
                    0 => String::new(),
                    1 => "; shared with 1 other pending pod".to_string(),
                    n => format!("; shared with {n} other pending pods"),
                },
                relaxed_words(min_values_relaxed)
            ),
            Outcome::Unschedulable { reason } => {
                writeln!(out, "  pending; no node can be launched for it: {reason}")
            }
        };
        let placed = !matches!(self.outcome, Outcome::Unschedulable { .. });
        for g in &self.given_up {
            let _ = if placed {
                writeln!(out, "  gave up its {g}")
            } else {
                writeln!(out, "  tried without its {g} too")
            };
        }
        if !self.pools.is_empty() {
            out.push_str("NodePools considered (highest weight first):\n");
        }
        for p in &self.pools {
            let _ = write!(out, "  {} (weight {})", p.pool, p.weight);
            match (&p.refused, &p.min_values_relaxed) {
                (Some(r), _) => {
                    let _ = writeln!(out, ": refused ({:?}): {}", r.kind, r.message);
                }
                (None, Some(why)) => {
                    let _ = writeln!(out, ": minValues relaxed (BestEffort): {why}");
                }
                (None, None) => {
                    out.push('\n');
                }
            }
            render_types(&mut out, &p.instance_types, "    ");
        }
        for h in &self.hints {
            let _ = writeln!(out, "Hint: {h}");
        }
        out
    }
}

impl NodeExplanation {
    /// Plain text: the verdict with its kind, the utilization against the threshold, the wait
    /// and the command.
    pub fn render(&self) -> String {
        let v = &self.verdict;
        let mut out = format!("Node {}", v.node);
        let _ = match &v.pool {
            Some(p) => writeln!(out, " (NodePool {p})"),
            None => writeln!(out, " (no NodePool manages it)"),
        };
        let _ = writeln!(
            out,
            "  verdict: {} ({:?}): {}",
            if v.disrupted {
                "chosen for removal"
            } else if v.kind.is_candidate() {
                "a scale-down candidate"
            } else {
                "kept"
            },
            v.kind,
            v.reason
        );
        if !self.utilization.is_empty() {
            let parts: Vec<String> = self
                .utilization
                .iter()
                .map(|u| format!("{} {:.2}", u.resource, u.ratio))
                .collect();
            let _ = write!(out, "  utilization: {}", parts.join(", "));
            let _ = match v.threshold {
                Some(t) => writeln!(out, " against threshold {t:.2}"),
                None => writeln!(out),
            };
        }
        if let Some(w) = v.wait {
            let _ = writeln!(
                out,
                "  waits from {} until {} (seconds since the epoch)",
                w.since, w.until
            );
        }
        if let Some(c) = &self.command {
            let _ = write!(
                out,
                "  command: {:?} {} of [{}], {} pods to move, saving {:.3}/h",
                c.reason,
                c.method,
                c.nodes.join(", "),
                c.pods,
                c.savings
            );
            let _ = match &c.replacement {
                Some(r) => writeln!(out, ", replaced by {r}"),
                None => writeln!(out),
            };
        }
        out
    }
}

impl PoolExplanation {
    /// Plain text: usage against limits, budgets, instance types grouped by what refused them,
    /// and the nodes' verdicts.
    pub fn render(&self) -> String {
        let mut out = format!("NodePool {} (weight {})\n", self.pool, self.weight);
        let _ = writeln!(
            out,
            "  nodes: {} (existing and in flight), minNodes {}",
            self.nodes, self.min_nodes
        );
        if self.limits.is_empty() {
            out.push_str("  limits: none\n");
        } else {
            out.push_str("  limits:\n");
        }
        for l in &self.limits {
            let _ = writeln!(
                out,
                "    {}: {} of {}{}",
                l.name,
                l.used,
                l.limit,
                if l.reached { " (reached)" } else { "" }
            );
        }
        if !self.usage.is_empty() {
            let parts: Vec<String> = self.usage.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(out, "  usage: {}", parts.join(", "));
        }
        out.push_str("  disruption budgets:\n");
        for b in &self.budgets {
            let reasons = if b.reasons.is_empty() {
                "all reasons".to_string()
            } else {
                b.reasons
                    .iter()
                    .map(|r| format!("{r:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let window = match (&b.schedule, b.duration_s) {
                (Some(s), Some(d)) => format!(
                    " from {s:?} (UTC) for {}, {}",
                    crate::duration::format(d),
                    if b.active {
                        "active now"
                    } else {
                        "inactive now"
                    }
                ),
                _ => String::new(),
            };
            // A closed window's count would read as a limit it does not set.
            let effect = if b.active {
                format!("allows {} node(s) at once", b.allows)
            } else {
                "limits nothing".to_string()
            };
            let _ = writeln!(
                out,
                "    {} ({reasons}){window}: {effect}, {} being deleted",
                b.nodes, b.in_use
            );
        }
        let fit = self
            .instance_types
            .iter()
            .filter(|t| t.refused.is_none())
            .count();
        let _ = writeln!(
            out,
            "  instance types ({fit} of {} can launch one more node):",
            self.instance_types.len()
        );
        render_types(&mut out, &self.instance_types, "    ");
        if !self.node_verdicts.is_empty() {
            out.push_str("  nodes:\n");
        }
        for n in &self.node_verdicts {
            let _ = writeln!(
                out,
                "    {}: {} ({:?}): {}",
                n.node,
                if n.disrupted {
                    "chosen"
                } else if n.kind.is_candidate() {
                    "candidate"
                } else {
                    "kept"
                },
                n.kind,
                n.reason
            );
        }
        out
    }
}

#[cfg(test)]
mod tests;
