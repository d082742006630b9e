//! Policies: who decides what to launch and what to remove. This project's planner and
//! disruption ([`GpuAutoscaler`]) and the documented baselines in [`crate::baselines`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use autoscaler_core::disruption::execute::Order;
use autoscaler_core::disruption::{
    Check, Command, DisruptionCache, DisruptionConfig, DisruptionState, Method, VerdictKind,
    cooldown, plan_disruption_cached, validate_at,
};
use autoscaler_core::model::{DaemonSet, Pod, PodKey, Pool, Snapshot};
use autoscaler_core::provision::{
    DEFAULT_MAX_CLAIMS_PER_ROUND, PlanOptions, ShapeCache, plan_cached,
};
use autoscaler_core::requirements::Labels;
use providers::OfferingKey;

use crate::cluster::{Cluster, NodeId, NodePhase, PodId, PodPhase, SnapshotCache};
use crate::scenario::{ClusterConfig, ProvReqClass};
use crate::workload::Workload;

/// A node to launch.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchSpec {
    /// Pool index.
    pub pool: usize,
    /// Offerings in order of preference (the provider takes the first it can get).
    pub candidates: Vec<OfferingKey>,
    /// Pods the policy planned onto the node (nominated to it while it is in flight).
    pub pods: Vec<PodId>,
    /// Labels the node gets beyond its pool's `labels`: values the plan chose for labels the
    /// NodePool's requirements define itself (`team In [ml, research]`).
    pub labels: Labels,
}

/// A disruption decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Nodes to remove.
    pub nodes: Vec<NodeId>,
    /// Node to launch first, if replacing.
    pub replacement: Option<LaunchSpec>,
    /// Short reason for reports.
    pub reason: String,
    /// The core's command, for the core policy's validation.
    pub command: Option<Command>,
}

/// A ProvisioningRequest a policy is asked to find or launch capacity for.
pub struct RequestAsk<'a> {
    /// Its group in [`Workload::groups`].
    pub group: u32,
    /// Its class.
    pub class: ProvReqClass,
    /// Its pods as they will be created (ids and specs; they do not exist yet).
    pub pods: &'a [(PodId, Pod)],
}

/// A policy's answer to a [`RequestAsk`].
#[derive(Clone, Debug, PartialEq)]
pub enum RequestAnswer {
    /// The policy does not serve ProvisioningRequests: the engine creates the pods at once
    /// (Kueue without the admission check), as an ordinary gang.
    Unsupported,
    /// Not every pod can be placed now (why); the request is retried later.
    NoCapacity(String),
    /// Every pod has a place: on existing or in-flight nodes (`on`) and on new nodes to launch
    /// (`launch`, each with the pods planned onto it). `launch` is empty for check-capacity.
    Capacity {
        /// Pods per existing or in-flight node.
        on: Vec<(NodeId, Vec<PodId>)>,
        /// Nodes to launch, all or nothing.
        launch: Vec<LaunchSpec>,
    },
}

/// What a policy reads.
pub struct Ctx<'a> {
    /// The cluster.
    pub cluster: &'a Cluster,
    /// The workload (groups, PDBs).
    pub workload: &'a Workload,
    /// NodePools, with recently refused offerings marked unavailable.
    pub pools: &'a [Pool],
    /// DaemonSets.
    pub daemonsets: &'a [DaemonSet],
    /// Cluster settings.
    pub config: &'a ClusterConfig,
    /// Pods nominated to in-flight nodes.
    pub nominated: &'a HashMap<PodId, NodeId>,
    /// Node id by NodeClaim name.
    pub claims: &'a HashMap<String, NodeId>,
    /// Pod id by name.
    pub pod_ids: &'a HashMap<PodKey, PodId>,
    /// Offerings recently refused for lack of capacity.
    pub unavailable: &'a providers::UnavailableOfferings,
}

impl Ctx<'_> {
    /// The controller's snapshot (pending pods included when asked).
    pub fn snapshot(&self, pending: bool) -> Snapshot {
        let mut snap = self
            .cluster
            .snapshot(self.pools, self.daemonsets, self.workload, pending);
        snap.nominated = self.nominations(pending);
        snap
    }

    /// The same snapshot, brought up to date in `cache` rather than built afresh.
    pub fn snapshot_in<'c>(&self, cache: &'c mut SnapshotCache, pending: bool) -> &'c Snapshot {
        cache.sync(
            self.cluster,
            self.pools,
            self.daemonsets,
            self.workload,
            pending,
        );
        cache.set_nominated(self.nominations(pending));
        let snap = cache.get();
        // Tests run unoptimized, so every end-to-end test checks the incremental snapshot
        // against a fresh one at each planner call.
        debug_assert!(
            *snap == self.snapshot(pending),
            "incremental snapshot drifted from the cluster"
        );
        snap
    }

    /// [`Snapshot::nominated`]: the pods nominated to nodes still in flight, by their claims
    /// (as the controller keeps them between rounds); none without pending pods.
    fn nominations(&self, pending: bool) -> BTreeMap<PodKey, String> {
        if !pending {
            return BTreeMap::new();
        }
        self.nominated
            .iter()
            .filter_map(|(p, n)| {
                let node = &self.cluster.nodes[*n];
                let pod = self.cluster.pods[*p].pod.as_ref()?;
                (node.phase != NodePhase::Ready).then(|| (pod.key.clone(), node.claim.clone()))
            })
            .collect()
    }
}

/// What `simulate --explain` asks about: `pod/NAME` or `node/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    /// A pod of the workload, by name.
    Pod(String),
    /// A node, by name.
    Node(String),
}

impl Asked {
    /// Parses `pod/NAME` or `node/NAME`.
    ///
    /// # Errors
    /// [`crate::SimError::BadOption`] naming `--explain` and the expected forms.
    pub fn parse(text: &str) -> Result<Asked, crate::SimError> {
        match text.split_once('/') {
            Some(("pod", n)) if !n.is_empty() => Ok(Asked::Pod(n.to_string())),
            Some(("node", n)) if !n.is_empty() => Ok(Asked::Node(n.to_string())),
            _ => Err(crate::SimError::BadOption {
                option: "--explain".into(),
                why: format!("{text:?}: expected pod/NAME or node/NAME"),
            }),
        }
    }
}

/// A policy's answer to an [`Asked`], from the core's explanations.
#[derive(Clone, Debug, PartialEq)]
pub enum Explained {
    /// A pod: its outcome and every pool and instance type considered.
    Pod(autoscaler_core::explain::PodExplanation),
    /// A node: its disruption verdict.
    Node(autoscaler_core::explain::NodeExplanation),
    /// Nothing to explain, and why (no such object then, or a policy without explanations).
    Missing(String),
}

impl Explained {
    /// Plain text, as `gpu-autoscaler explain` prints it.
    pub fn render(&self) -> String {
        match self {
            Explained::Pod(e) => e.render(),
            Explained::Node(e) => e.render(),
            Explained::Missing(why) => format!("{why}\n"),
        }
    }
}

/// A provisioning and disruption policy.
pub trait Policy {
    /// Name as reported.
    fn name(&self) -> &'static str;
    /// One line saying what the policy is (and, for baselines, that it is a model).
    fn description(&self) -> &'static str;
    /// Nodes to launch for the pending pods; new-node placements of pods go in
    /// [`LaunchSpec::pods`], and placements on in-flight nodes in the returned map.
    fn provision(&mut self, ctx: &Ctx, now: i64) -> (Vec<LaunchSpec>, Vec<(PodId, NodeId)>);
    /// Disruption decisions, and the latest time until which, if the cluster does not change,
    /// calling again is pointless.
    fn disrupt(&mut self, ctx: &Ctx, now: i64) -> (Vec<Decision>, i64);
    /// Whether a decision still holds at `check`: after the validation delay, or once the
    /// replacement launched first is up (the core's [`Check`]; only commands carried out in
    /// [`autoscaler_core::disruption::execute::Order::ReplaceFirst`] are checked then).
    fn validate(&mut self, ctx: &Ctx, decision: &Decision, now: i64, check: Check) -> bool;
    /// The nodes of `decision` to go on with, when it may go on with fewer than it names
    /// (the core's [`autoscaler_core::disruption::narrow_empty`], the Karpenter models'
    /// emptiness validation), asked before it is validated; the default (the Cluster
    /// Autoscaler models) never narrows.
    fn narrow(&mut self, _ctx: &Ctx, _decision: &Decision) -> Option<Vec<String>> {
        None
    }
    /// Capacity for a ProvisioningRequest; the default serves none ([`RequestAnswer::Unsupported`]).
    fn provision_request(&mut self, _ctx: &Ctx, _ask: &RequestAsk, _now: i64) -> RequestAnswer {
        RequestAnswer::Unsupported
    }
    /// Why `asked` is where it is at `now`, as `gpu-autoscaler explain` would say; the
    /// default (the baselines, which are models) has no explanations.
    fn explain(&mut self, _ctx: &Ctx, _now: i64, _asked: &Asked) -> Explained {
        Explained::Missing(format!(
            "{} is a model of another autoscaler: explanations come from gpu-autoscaler's \
             planner",
            self.name()
        ))
    }
    /// After [`Policy::provision`]: when the policy wants to be asked again although nothing
    /// changes (a model that scales up only on its own loop's ticks); the default never.
    fn provision_wake(&mut self) -> Option<i64> {
        None
    }
    /// Lines the report prints under the policy's figures: what the model could not do and
    /// what became of the pods concerned, as the run ends with `cluster`; the default none.
    fn notes(&self, _cluster: &Cluster) -> Vec<String> {
        vec![]
    }
    /// A node of NodePool `pool` was launched at `now`.
    fn on_scale_up(&mut self, pool: &str, now: i64);
    /// Nodes of NodePool `pool` were deleted at `now`.
    fn on_delete(&mut self, pool: &str, now: i64);
    /// A disruption gave up on nodes of NodePool `pool` it had started to remove (a failed
    /// deletion) at `now`; `stuck` when the cluster could not carry it out
    /// (`execute::Step::stuck`). The default ignores it.
    fn on_failure(&mut self, _pool: &str, _now: i64, _stuck: bool) {}
    /// When a decision with a replacement taints its nodes: the default is this controller's
    /// order (the replacement first, validated again once it is up, then the taint); a model
    /// of another autoscaler answers with that autoscaler's.
    fn replacement_order(&self) -> Order {
        Order::ReplaceFirst
    }
}

/// This project's planner ([`autoscaler_core::provision::plan_provisioning`]) and disruption ([`plan_disruption`]),
/// driven as the controller drives them.
pub struct GpuAutoscaler {
    state: DisruptionState,
    pub(crate) config: DisruptionConfig,
    cache: SnapshotCache,
    /// The planner's instance-type shapes, kept while the pools do not change.
    shapes: ShapeCache,
    /// What disruption passes derive from the pools alone, kept while they do not change.
    disruption: DisruptionCache,
    /// The last disruption pass: when, and the nodes whose unneeded time it started again
    /// because their pods had nowhere to go (see [`Policy::disrupt`] here).
    last_pass: Option<(i64, Vec<String>)>,
}

impl GpuAutoscaler {
    /// A policy with the scenario's disruption settings (the controller's defaults unless
    /// the scenario sets them).
    pub fn new(cfg: &ClusterConfig) -> Self {
        GpuAutoscaler {
            state: DisruptionState::default(),
            config: cfg.disruption.clone(),
            cache: SnapshotCache::default(),
            shapes: ShapeCache::default(),
            disruption: DisruptionCache::default(),
            last_pass: None,
        }
    }
}

/// The offerings a planned claim is launched on, in the order the controller tries them: the
/// core's [`autoscaler_core::offerings::candidates`] of the claim's launch requirements over its
/// pool's instance types, minus the offerings recently refused.
pub fn claim_candidates(
    ctx: &Ctx,
    claim: &autoscaler_core::plan::NewClaim,
    now: i64,
) -> Vec<OfferingKey> {
    let Some(pool) = ctx.pools.iter().find(|p| p.name == claim.pool) else {
        return vec![];
    };
    let requirements = autoscaler_core::offerings::launch_requirements(claim);
    autoscaler_core::offerings::candidates(
        &requirements,
        &pool.instance_types,
        ctx.unavailable,
        now,
    )
    .into_iter()
    .map(|(k, _)| k)
    .collect()
}

fn pool_index(pools: &[Pool], name: &str) -> usize {
    pools.iter().position(|p| p.name == name).unwrap_or(0)
}

impl Policy for GpuAutoscaler {
    fn name(&self) -> &'static str {
        "gpu-autoscaler"
    }

    fn description(&self) -> &'static str {
        "this project's planner (plan_provisioning) and disruption (plan_disruption + validate), \
         on the controller's cadence"
    }

    fn provision(&mut self, ctx: &Ctx, now: i64) -> (Vec<LaunchSpec>, Vec<(PodId, NodeId)>) {
        let snap = ctx.snapshot_in(&mut self.cache, true);
        // The controller's slice per round; the pods past it are planned at the next re-plan.
        let options = PlanOptions {
            max_new_claims: DEFAULT_MAX_CLAIMS_PER_ROUND,
            // The simulated cluster has no cache to lag, so every round may bring the pools up
            // to their minNodes (the controller does it once per re-plan interval).
            min_nodes: ctx.config.enforce_min_nodes.then_some(now),
            ..PlanOptions::default()
        };
        let plan = plan_cached(snap, &options, &mut self.shapes);
        if std::env::var_os("SIM_DEBUG").is_some() {
            eprintln!(
                "t={now} pending={} nodes={} in_flight={} -> existing={} in_flight={} new={} unschedulable={}",
                snap.pending.len(),
                snap.nodes.len(),
                snap.in_flight.len(),
                plan.existing.len(),
                plan.in_flight.len(),
                plan.new_claims.len(),
                plan.unschedulable.len()
            );
            for c in &plan.new_claims {
                let types: Vec<&str> = c
                    .instance_types
                    .iter()
                    .take(5)
                    .map(|o| &*o.instance_type)
                    .collect();
                let pods: Vec<&str> = c.pods.iter().take(8).map(|k| k.name.as_str()).collect();
                eprintln!(
                    "  new {} {} pods={} for_pods={}",
                    c.pool,
                    types.join(","),
                    c.pods.len(),
                    pods.join(",")
                );
            }
        }
        let mut specs = Vec::new();
        for c in &plan.new_claims {
            specs.push(LaunchSpec {
                pool: pool_index(ctx.pools, &c.pool),
                candidates: claim_candidates(ctx, c, now),
                pods: c
                    .pods
                    .iter()
                    .filter_map(|k| ctx.pod_ids.get(k).copied())
                    .collect(),
                labels: c.labels.clone(),
            });
        }
        let noms = plan
            .in_flight
            .iter()
            .filter_map(|p| Some((*ctx.pod_ids.get(&p.pod)?, *ctx.claims.get(&p.target)?)))
            .collect();
        (specs, noms)
    }

    /// As the controller's request loop: the request's pods as one all-or-nothing group against
    /// the full snapshot (other bookings held), check-capacity with no NodePool so that only
    /// existing and in-flight capacity can answer.
    fn provision_request(&mut self, ctx: &Ctx, ask: &RequestAsk, now: i64) -> RequestAnswer {
        let group = &ctx.workload.groups[ask.group as usize].name;
        let (plan, why) = autoscaler_core::provreq::plan(
            ctx.snapshot_in(&mut self.cache, false),
            group,
            ask.pods.iter().map(|(_, p)| p.clone()).collect(),
            ask.class == ProvReqClass::CheckCapacity,
        );
        if let Some(why) = why {
            return RequestAnswer::NoCapacity(why);
        }
        let id = |name: &str| {
            ask.pods
                .iter()
                .find(|(_, p)| p.key.name == name)
                .map(|(i, _)| *i)
        };
        let mut on: BTreeMap<NodeId, Vec<PodId>> = BTreeMap::new();
        let existing = plan
            .existing
            .iter()
            .map(|p| (node_by_name(ctx.cluster, &p.target), &p.pod));
        let in_flight = plan
            .in_flight
            .iter()
            .map(|p| (ctx.claims.get(&p.target).copied(), &p.pod));
        for (node, pod) in existing.chain(in_flight) {
            match (node, id(&pod.name)) {
                (Some(n), Some(i)) => on.entry(n).or_default().push(i),
                _ => {
                    return RequestAnswer::NoCapacity(format!(
                        "pod {} was planned onto a node that is gone",
                        pod.name
                    ));
                }
            }
        }
        let launch = plan
            .new_claims
            .iter()
            .map(|c| LaunchSpec {
                pool: pool_index(ctx.pools, &c.pool),
                candidates: claim_candidates(ctx, c, now),
                pods: c.pods.iter().filter_map(|k| id(&k.name)).collect(),
                labels: c.labels.clone(),
            })
            .collect();
        RequestAnswer::Capacity {
            on: on.into_iter().collect(),
            launch,
        }
    }

    fn explain(&mut self, ctx: &Ctx, now: i64, asked: &Asked) -> Explained {
        use autoscaler_core::explain::{self, Outcome, PodExplanation};
        match asked {
            Asked::Pod(name) => {
                // `NS/NAME`, or a bare name when one namespace has it (scenario pods all live
                // in one; a replayed cluster may need the namespace).
                let found = match name.split_once('/') {
                    Some((namespace, n)) => ctx
                        .pod_ids
                        .get(&PodKey {
                            namespace: namespace.to_string(),
                            name: n.to_string(),
                        })
                        .copied(),
                    None => {
                        let mut hits = ctx.pod_ids.iter().filter(|(k, _)| k.name == *name);
                        match (hits.next(), hits.next()) {
                            (Some((_, &id)), None) => Some(id),
                            (Some(_), Some(_)) => {
                                return Explained::Missing(format!(
                                    "pod {name} exists in several namespaces: ask for NAMESPACE/{name}"
                                ));
                            }
                            _ => None,
                        }
                    }
                };
                let Some(id) = found else {
                    return Explained::Missing(format!("no pod {name} in the workload"));
                };
                let key = ctx.workload.materialize(id).key;
                let done = |outcome| {
                    Explained::Pod(PodExplanation {
                        pod: key.clone(),
                        outcome,
                        pools: vec![],
                        hints: vec![],
                        given_up: vec![],
                    })
                };
                match &ctx.cluster.pods[id].phase {
                    PodPhase::Waiting => {
                        Explained::Missing(format!("pod {name} does not exist yet at t={now}s"))
                    }
                    PodPhase::Done => done(Outcome::Finished {
                        phase: "Succeeded".into(),
                    }),
                    PodPhase::Bound { node, .. } => done(Outcome::Bound {
                        node: ctx.cluster.nodes[*node].name.clone(),
                    }),
                    PodPhase::Pending { .. } => {
                        let snap = ctx.snapshot(true);
                        explain::explain_pod(&snap, &key).map_or_else(
                            || Explained::Missing(format!("pod {name} is not planned for")),
                            Explained::Pod,
                        )
                    }
                }
            }
            Asked::Node(name) => {
                let snap = ctx.snapshot(false);
                explain::explain_node(&snap, &self.state, now, &self.config, name).map_or_else(
                    || Explained::Missing(format!("no node {name} at t={now}s")),
                    Explained::Node,
                )
            }
        }
    }

    fn disrupt(&mut self, ctx: &Ctx, now: i64) -> (Vec<Decision>, i64) {
        // The engine skips passes that could not decide anything new, but the controller runs
        // one every interval, and each starts again the unneeded time of a node whose pods have
        // nowhere to go. The pass at the last tick skipped saw what the last pass saw (a change
        // would have woken the engine), so those nodes' unneeded time starts from that tick.
        let tick = now - ctx.config.cadence.disruption_interval_s;
        if let Some((prev, reset)) = self.last_pass.take()
            && tick > prev
        {
            for name in reset {
                if let Some(since) = self.state.unneeded_since.get_mut(&name)
                    && *since == prev
                {
                    *since = tick;
                }
            }
        }
        let snap = ctx.snapshot_in(&mut self.cache, false);
        let plan =
            plan_disruption_cached(snap, &self.state, now, &self.config, &mut self.disruption);
        self.state = plan.state.clone();
        let reset = plan
            .verdicts
            .iter()
            .filter(|v| {
                !v.disrupted
                    && matches!(
                        v.kind,
                        VerdictKind::NoPlaceForPods | VerdictKind::AboveThreshold
                    )
                    && self.state.unneeded_since.get(&v.node) == Some(&now)
            })
            .map(|v| v.node.clone())
            .collect();
        self.last_pass = Some((now, reset));
        // A blocker that lapses by time alone (a do-not-disrupt duration) ends a wait too.
        let lapses = plan
            .verdicts
            .iter()
            .filter_map(|v| v.wait.as_ref().map(|w| w.until))
            .filter(|t| *t > now)
            .min()
            .unwrap_or(i64::MAX);
        let mut out = Vec::new();
        for cmd in plan.commands {
            let nodes: Vec<NodeId> = cmd
                .nodes
                .iter()
                .filter_map(|n| node_by_name(ctx.cluster, n))
                .collect();
            let replacement = cmd.replacement.as_ref().map(|c| LaunchSpec {
                pool: pool_index(ctx.pools, &c.pool),
                candidates: claim_candidates(ctx, c, now),
                pods: vec![],
                labels: c.labels.clone(),
            });
            out.push(Decision {
                nodes,
                replacement,
                reason: format!(
                    "{:?} {}",
                    cmd.reason,
                    if cmd.method == Method::Replace {
                        "replace"
                    } else {
                        "delete"
                    }
                ),
                command: Some(cmd),
            });
        }
        (
            out,
            next_wake(snap, &self.state, &self.config, now).min(lapses),
        )
    }

    fn validate(&mut self, ctx: &Ctx, decision: &Decision, now: i64, check: Check) -> bool {
        let Some(cmd) = &decision.command else {
            return false;
        };
        ctx.snapshot_in(&mut self.cache, false);
        validate_at(check, cmd, self.cache.get_mut(), now, &self.config).is_ok()
    }

    fn narrow(&mut self, ctx: &Ctx, decision: &Decision) -> Option<Vec<String>> {
        let cmd = decision
            .command
            .as_ref()
            .filter(|c| c.reason == autoscaler_core::model::DisruptionReason::Empty)?;
        ctx.snapshot_in(&mut self.cache, false);
        autoscaler_core::disruption::narrow_empty(cmd, self.cache.get_mut())
    }

    fn on_scale_up(&mut self, pool: &str, now: i64) {
        self.state.scaled_up(pool, now);
    }

    fn on_delete(&mut self, pool: &str, now: i64) {
        self.state.deleted(pool, now);
    }

    fn on_failure(&mut self, pool: &str, now: i64, stuck: bool) {
        self.state.failed(pool, now, stuck);
    }
}

/// The node called `name`, if it is live.
pub fn node_by_name(cluster: &Cluster, name: &str) -> Option<NodeId> {
    cluster
        .live_nodes
        .iter()
        .copied()
        .find(|n| cluster.nodes[*n].name == name)
}

/// The next time at which an unchanged cluster could get a different disruption plan: a
/// node's unneeded timer or consolidateAfter (from its last pod change) running out, or a
/// scale-down delay ending; [`Policy::disrupt`] adds the verdicts' own waits (a do-not-disrupt
/// duration). Skipping calls before then changes no decision; what a skipped pass would have
/// written (an unneeded time started again) is made up for at the next call.
fn next_wake(snap: &Snapshot, state: &DisruptionState, cfg: &DisruptionConfig, now: i64) -> i64 {
    let mut wake = i64::MAX;
    let mut consider = |t: i64| {
        if t > now {
            wake = wake.min(t);
        }
    };
    let pools: BTreeMap<&str, &Pool> = snap.pools.iter().map(|p| (p.name.as_str(), p)).collect();
    let unneeded: BTreeSet<&String> = state.unneeded_since.keys().collect();
    for n in &snap.nodes {
        let Some(p) = n.pool.as_deref().and_then(|p| pools.get(p)) else {
            continue;
        };
        if let Some(since) = state.unneeded_since.get(&n.name) {
            consider(since.saturating_add(p.disruption.unneeded_s));
        }
        // consolidateAfter counts from the node's last pod change: a node emptied after its
        // unneeded time ran out becomes a candidate then, with nothing else changing.
        consider(
            n.stable_since()
                .saturating_add(p.disruption.consolidate_after_s),
        );
        let _ = &unneeded;
    }
    // Each pool's scale-down delays end when `cooldown` says; an unchanged cluster can get a
    // different plan then.
    for p in &snap.pools {
        if let Some(events) = state.pools.get(&p.name)
            && let Some((_, w)) = cooldown(&p.disruption.delays, events, cfg, now)
        {
            consider(w.until);
        }
    }
    wake
}

/// Whether a node is a disruption target at all (managed, initialized, not being removed).
pub fn disruptable(cluster: &Cluster, n: NodeId) -> bool {
    let node = &cluster.nodes[n];
    // An existing node no NodePool manages is never a candidate.
    node.pool.is_some() && node.phase == NodePhase::Ready && !node.deleting && !node.cordoned
}
