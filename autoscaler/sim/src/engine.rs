//! The discrete-event engine: a virtual clock, a binary heap of events, and the loops of the
//! controller (batch window, provisioning, disruption with validation), the cloud (launch
//! latency, registration, device plugin, capacity errors, spot interruptions), the
//! kube-scheduler and Kueue's ProvisioningRequest flow (`engine/requests.rs`), run for one policy.
//! Node lifecycle is in `engine/nodes.rs`, the kube-scheduler's passes in
//! `engine/scheduling.rs`, disruption decisions (carried out by the core's executor, as the
//! controller carries them out) in `engine/disruption.rs`, and what is measured (costs,
//! samples, the result) in `engine/result.rs`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::time::Instant;

use autoscaler_core::disruption::Check;
use autoscaler_core::model::{DaemonSet, PodKey, Pool, Snapshot};
use providers::UnavailableOfferings;
use providers::fake::FakeProvider;

use crate::baselines::Shape;
use crate::cluster::{Cluster, NodeId, PodId, PodPhase};
use crate::policy::{Asked, Ctx, Decision, Explained, LaunchSpec, Policy};
use crate::rng::Rng;
use crate::scenario::{ClusterConfig, ProvReqSpec};
use crate::scheduler::SelectorCache;
use crate::workload::Workload;

pub use result::{NodeRecord, PolicyResult, ProvReqStats, RequestRecord, Sample};

/// Seconds between metric samples.
pub const SAMPLE_S: i64 = 300;
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive(PodId),
    Complete(PodId, u32),
    Delete(PodId),
    Registered(NodeId),
    Initialized(NodeId),
    Interrupt(NodeId),
    Terminate(NodeId),
    SchedulePass,
    BatchCheck,
    Replan,
    /// The policy asked to plan again now ([`Policy::provision_wake`]).
    PolicyWake,
    /// `--enforce-node-group-min-size`: a round that plans with no pod pending too, every
    /// `--replan-interval`, so that the NodePools are brought up to their `minNodes`.
    MinNodesTick,
    DisruptTick,
    /// A disruption command's executor is stepped again.
    Step(u64),
    Sample,
    /// A ProvisioningRequest (by group) is created.
    ReqCreate(u32),
    /// A request without capacity is planned for again.
    ReqAttempt(u32),
    /// Kueue admits a Provisioned request's workload: its pods are created.
    ReqAdmit(u32),
    /// A Provisioned request's booking time is up.
    ReqExpire(u32),
}

/// Where a ProvisioningRequest is in its lifecycle (the controller's `provreq::State`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReqPhase {
    /// No capacity yet.
    Waiting,
    /// Capacity booked on nodes not all initialized yet.
    Launching,
    /// Provisioned: capacity booked until consumed or expired.
    Booked,
    /// Consumed, expired, revoked, or not served by the policy.
    Done,
}

/// How a request's booking ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReqEnd {
    /// Its pods bound (CapacityIsConsumed).
    Consumed,
    /// Its time ran out before the pods bound (CapacityReservationTimeExpired).
    Expired,
    /// A booked node was lost (CapacityRevoked).
    Revoked,
}

/// One ProvisioningRequest as the engine tracks it.
#[derive(Clone, Debug)]
struct Request {
    spec: ProvReqSpec,
    created: i64,
    phase: ReqPhase,
    /// Each booked node and the pods it holds for the request.
    booking: Vec<(NodeId, Vec<PodId>)>,
    /// How many places each entry of `booking` still holds once held (empty before).
    holding: Vec<u32>,
    /// Nodes launched for the current attempt (deleted on rollback).
    launched: Vec<NodeId>,
    provisioned_at: Option<i64>,
    admitted_at: Option<i64>,
    bound_at: Option<i64>,
    end: Option<ReqEnd>,
    attempts: u32,
    /// Whether the policy served it (false: pods created at arrival).
    served: bool,
}

/// A policy's disruption decision and its execution by the core's executor.
struct Pending {
    decision: Decision,
    /// The replacement node, once launched.
    replacement: Option<NodeId>,
    /// Whether the executor tainted the nodes (only then does abandoning untaint them).
    tainted: bool,
    job: autoscaler_core::disruption::execute::Job,
}

/// One policy's simulation.
pub struct Engine<'a> {
    cfg: &'a ClusterConfig,
    workload: &'a Workload,
    pools: &'a [Pool],
    daemonsets: &'a [DaemonSet],
    shapes: &'a [Shape],
    policy: Box<dyn Policy + 'a>,
    cluster: Cluster,
    provider: FakeProvider,
    unavailable: UnavailableOfferings,
    rng_launch: Rng,
    rng_ice: Rng,
    rng_spot: Rng,
    queue: BinaryHeap<Reverse<(i64, u64, Ev)>>,
    seq: u64,
    now: i64,
    horizon: i64,
    pod_ids: HashMap<PodKey, PodId>,
    claims: HashMap<String, NodeId>,
    nominated: HashMap<PodId, NodeId>,
    batch: Option<(i64, i64)>,
    batch_scheduled: bool,
    replan_scheduled: bool,
    /// The earliest [`Ev::PolicyWake`] queued.
    policy_wake: Option<i64>,
    pass_scheduled: bool,
    pass_all: bool,
    pass_new: Vec<PodId>,
    seen_unschedulable: HashSet<PodId>,
    decisions: BTreeMap<u64, Pending>,
    next_decision: u64,
    version: u64,
    disrupt_version: u64,
    disrupt_wake: i64,
    /// Run every disruption pass ([`crate::RunOptions::every_pass`]).
    every_pass: bool,
    selectors: SelectorCache,
    /// ProvisioningRequests by group.
    requests: BTreeMap<u32, Request>,
    // Metrics.
    pending_samples: Vec<i64>,
    gpu_requested_s: f64,
    /// GPU-seconds of job work thrown away by evictions (the job runs again from the start).
    gpu_rerun_s: f64,
    nodes_launched: u64,
    nodes_terminated: u64,
    pods_disrupted: u64,
    pods_interrupted: u64,
    violations: u64,
    violation_examples: Vec<String>,
    launch_failures: u64,
    pods_created: u64,
    samples: Vec<Sample>,
    /// The cost so far, kept up as the samples are taken.
    tally: result::CostTally,
    /// What to explain, and when (`None`: at the end of the run).
    explain: Option<(Option<i64>, Asked)>,
    explained: Option<Explained>,
}

impl<'a> Engine<'a> {
    /// An engine for `policy` over `workload`, until `horizon` virtual seconds.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: &'a ClusterConfig,
        catalog: Vec<autoscaler_core::InstanceType>,
        pools: &'a [Pool],
        daemonsets: &'a [DaemonSet],
        shapes: &'a [Shape],
        workload: &'a Workload,
        policy: Box<dyn Policy + 'a>,
        seed: u64,
        horizon: i64,
    ) -> Self {
        let provider = FakeProvider::new(catalog);
        for k in &cfg.ice_offerings {
            provider.fail_offering(k.clone());
        }
        let mut e = Engine {
            cfg,
            workload,
            pools,
            daemonsets,
            shapes,
            policy,
            cluster: Cluster {
                limits: cfg.cluster_limits.clone(),
                device_classes: cfg.device_classes.clone(),
                ..Cluster::new(workload)
            },
            provider,
            unavailable: UnavailableOfferings::default(),
            rng_launch: Rng::derive(seed, "launch"),
            rng_ice: Rng::derive(seed, "ice"),
            rng_spot: Rng::derive(seed, "spot"),
            queue: BinaryHeap::new(),
            seq: 0,
            now: 0,
            horizon,
            pod_ids: workload
                .pods
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let ns = &workload.templates[p.template as usize].key.namespace;
                    (
                        PodKey {
                            namespace: ns.clone(),
                            name: p.name.clone(),
                        },
                        i,
                    )
                })
                .collect(),
            claims: HashMap::new(),
            nominated: HashMap::new(),
            batch: None,
            batch_scheduled: false,
            replan_scheduled: false,
            policy_wake: None,
            pass_scheduled: false,
            pass_all: false,
            pass_new: Vec::new(),
            seen_unschedulable: HashSet::new(),
            decisions: BTreeMap::new(),
            next_decision: 0,
            version: 0,
            disrupt_version: u64::MAX,
            disrupt_wake: 0,
            every_pass: false,
            selectors: SelectorCache::default(),
            requests: BTreeMap::new(),
            pending_samples: Vec::new(),
            gpu_requested_s: 0.0,
            gpu_rerun_s: 0.0,
            nodes_launched: 0,
            nodes_terminated: 0,
            pods_disrupted: 0,
            pods_interrupted: 0,
            violations: 0,
            violation_examples: Vec::new(),
            launch_failures: 0,
            pods_created: 0,
            samples: Vec::new(),
            tally: result::CostTally::default(),
            explain: None,
            explained: None,
        };
        e.seed_existing();
        for (i, p) in workload.pods.iter().enumerate() {
            let request = p
                .group
                .is_some_and(|g| workload.groups[g as usize].provisioning_request.is_some());
            if p.arrival < horizon && !request && p.start_on.is_none() {
                e.push(p.arrival, Ev::Arrive(i));
            }
        }
        for (g, group) in workload.groups.iter().enumerate() {
            let Some(first) = group.members.first() else {
                continue;
            };
            let created = workload.pods[*first as usize].arrival;
            if group.provisioning_request.is_some() && created < horizon {
                e.push(created, Ev::ReqCreate(g as u32));
            }
        }
        e.push(cfg.cadence.disruption_interval_s, Ev::DisruptTick);
        if cfg.enforce_min_nodes && e.pools.iter().any(|p| p.min_nodes > 0) {
            e.push(0, Ev::MinNodesTick);
        }
        e.push(0, Ev::Sample);
        e
    }

    /// The controller's snapshot at time 0, once the existing nodes are registered with their
    /// pods and the pods created at time 0 have arrived, before anything is scheduled or
    /// planned: the state every run starts from.
    pub fn initial_snapshot(mut self) -> Snapshot {
        while let Some(Reverse((0, _, ev))) = self.queue.pop() {
            if let Ev::Arrive(i) = ev {
                let pod = self.workload.materialize(i);
                self.cluster.arrive(i, pod, 0);
            }
        }
        self.cluster
            .snapshot(self.pools, self.daemonsets, self.workload, true)
    }

    fn push(&mut self, t: i64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, ev)));
    }

    fn violation(&mut self, what: String) {
        self.violations += 1;
        if self.violation_examples.len() < 10 {
            self.violation_examples
                .push(format!("t={}s {}: {what}", self.now, self.policy.name()));
        }
    }

    /// Runs every disruption pass ([`crate::RunOptions::every_pass`]).
    pub fn every_pass(mut self) -> Self {
        self.every_pass = true;
        self
    }

    /// Asks the policy to explain `asked` at virtual time `at` (the end of the run when
    /// `None` or past it): the answer is [`PolicyResult::explanation`].
    pub fn explain_at(mut self, asked: Asked, at: Option<i64>) -> Self {
        self.explain = Some((at, asked));
        self
    }

    /// The policy's explanation of the object asked about, as the cluster is now.
    fn take_explanation(&mut self) {
        let Some((_, asked)) = self.explain.take() else {
            return;
        };
        let pools = self.pools_now();
        let mut taken = std::mem::replace(&mut self.policy, Box::new(Noop));
        let answer = {
            let ctx = Ctx {
                pools: &pools,
                ..self.ctx()
            };
            taken.explain(&ctx, self.now, &asked)
        };
        self.policy = taken;
        self.explained = Some(answer);
    }

    /// Runs to the horizon; `progress` gets the fraction of virtual time done.
    pub fn run(mut self, progress: &mut dyn FnMut(f64)) -> PolicyResult {
        let start = Instant::now();
        let mut last_report = 0i64;
        while let Some(Reverse((t, _, ev))) = self.queue.pop() {
            if t > self.horizon {
                break;
            }
            // The cluster as every event up to `at` left it.
            if let Some((Some(at), _)) = &self.explain
                && t > *at
            {
                self.now = *at;
                self.take_explanation();
            }
            self.now = t;
            if t - last_report > self.horizon / 100 {
                last_report = t;
                progress(t as f64 / self.horizon as f64);
            }
            self.handle(ev);
        }
        self.now = self.horizon;
        self.take_explanation();
        progress(1.0);
        self.finish(start.elapsed().as_secs_f64())
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            cluster: &self.cluster,
            workload: self.workload,
            pools: self.pools,
            daemonsets: self.daemonsets,
            config: self.cfg,
            nominated: &self.nominated,
            claims: &self.claims,
            pod_ids: &self.pod_ids,
            unavailable: &self.unavailable,
        }
    }

    fn changed(&mut self) {
        self.version += 1;
    }

    fn request_pass(&mut self, all: bool) {
        self.pass_all |= all;
        if !self.pass_scheduled {
            self.pass_scheduled = true;
            self.push(self.now, Ev::SchedulePass);
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Arrive(i) => {
                let pod = self.workload.materialize(i);
                self.cluster.arrive(i, pod, self.now);
                self.pods_created += 1;
                if let Some(d) = self.workload.pods[i].delete_at {
                    self.push(d.max(self.now), Ev::Delete(i));
                }
                self.pass_new.push(i);
                self.request_pass(false);
                self.changed();
            }
            Ev::Complete(i, generation) => {
                if self.cluster.pods[i].generation == generation
                    && matches!(self.cluster.pods[i].phase, PodPhase::Bound { .. })
                {
                    self.remove_pod(i);
                }
            }
            Ev::Delete(i) => self.remove_pod(i),
            Ev::Registered(n) => self.register(n),
            Ev::Initialized(n) => self.initialize(n),
            Ev::Interrupt(n) => self.interrupt(n),
            Ev::Terminate(n) => self.terminate(n),
            Ev::SchedulePass => {
                self.pass_scheduled = false;
                self.schedule_pass();
            }
            Ev::BatchCheck => {
                self.batch_scheduled = false;
                self.batch_check();
            }
            Ev::Replan => {
                self.replan_scheduled = false;
                if self.unhelped_pending() {
                    self.trigger_batch();
                }
            }
            Ev::PolicyWake => {
                if self.policy_wake == Some(self.now) {
                    self.policy_wake = None;
                }
                if self.unhelped_pending() {
                    self.provision();
                }
            }
            Ev::MinNodesTick if self.pass_scheduled => {
                // Pods created at this very second are seen by the scheduler first, as a
                // batch check waits for them: a pod it binds is no pod to launch for.
                self.push(self.now, Ev::MinNodesTick);
            }
            Ev::MinNodesTick => {
                self.provision_round(true);
                self.push(self.now + self.cfg.cadence.replan_s, Ev::MinNodesTick);
            }
            Ev::DisruptTick => {
                self.disrupt_tick();
                self.push(
                    self.now + self.cfg.cadence.disruption_interval_s,
                    Ev::DisruptTick,
                );
            }
            Ev::Step(d) => self.step_job(d),
            Ev::Sample => {
                self.sample();
                self.push(self.now + SAMPLE_S, Ev::Sample);
            }
            Ev::ReqCreate(g) => self.request_create(g),
            Ev::ReqAttempt(g) => self.request_attempt(g),
            Ev::ReqAdmit(g) => self.request_admit(g),
            Ev::ReqExpire(g) => self.request_expire(g),
        }
    }

    fn unhelped_pending(&self) -> bool {
        self.cluster.pending.iter().any(|p| {
            !self.nominated.contains_key(p)
                && !self.workload.pods[*p]
                    .group
                    .is_some_and(|g| self.cluster.live_bookings.contains(&g))
        })
    }

    /// Completion or deletion: the pod leaves for good.
    fn remove_pod(&mut self, i: PodId) {
        if let PodPhase::Bound { since, .. } = self.cluster.pods[i].phase {
            self.gpu_requested_s += self.cluster.pods[i].gpu_equiv * (self.now - since) as f64;
            self.request_pass(true);
        }
        if let PodPhase::Pending { since } = self.cluster.pods[i].phase {
            self.pending_samples.push(self.now - since);
        }
        self.cluster.finish(i, self.now);
        self.nominated.remove(&i);
        self.seen_unschedulable.remove(&i);
        self.changed();
    }

    /// Evicts a bound pod back to pending (a gang restarts as a whole).
    fn evict(&mut self, i: PodId) -> u64 {
        let mut evicted = 0;
        let gang = self.workload.pods[i]
            .group
            .filter(|g| self.workload.groups[*g as usize].coscheduled());
        let members: Vec<PodId> = match gang {
            Some(g) => self.workload.groups[g as usize]
                .members
                .iter()
                .map(|m| *m as usize)
                .collect(),
            None => vec![i],
        };
        for m in members {
            if let PodPhase::Bound { since, .. } = self.cluster.pods[m].phase {
                let held = self.cluster.pods[m].gpu_equiv * (self.now - since) as f64;
                self.gpu_requested_s += held;
                // A job restarts from the beginning; a service's time served is not lost.
                if self.workload.pods[m].runtime.is_some() {
                    self.gpu_rerun_s += held;
                }
                self.cluster.make_pending(m, self.now);
                self.seen_unschedulable.remove(&m);
                self.pass_new.push(m);
                evicted += 1;
            }
        }
        self.request_pass(true);
        self.changed();
        evicted
    }

    fn trigger_batch(&mut self) {
        match &mut self.batch {
            None => self.batch = Some((self.now, self.now)),
            Some((_, last)) => *last = self.now,
        }
        if !self.batch_scheduled {
            self.batch_scheduled = true;
            self.push(self.now + self.cfg.cadence.batch_idle_s, Ev::BatchCheck);
        }
    }

    fn batch_check(&mut self) {
        let Some((start, last)) = self.batch else {
            return;
        };
        if self.pass_scheduled {
            // Pods created at this very second are seen by the scheduler first: a pod arriving
            // exactly `batch_idle_s` after the last one still belongs to the batch.
            self.batch_scheduled = true;
            self.push(self.now, Ev::BatchCheck);
            return;
        }
        let due_idle = last + self.cfg.cadence.batch_idle_s;
        let due_max = start + self.cfg.cadence.batch_max_s;
        if self.now >= due_idle || self.now >= due_max {
            self.batch = None;
            self.provision();
        } else {
            self.batch_scheduled = true;
            self.push(due_idle.min(due_max), Ev::BatchCheck);
        }
    }

    fn provision(&mut self) {
        self.provision_round(false);
    }

    /// A provisioning round; with no pod pending, only when it brings the pools up to their
    /// `minNodes` (`warm`).
    fn provision_round(&mut self, warm: bool) {
        if self.cluster.pending.is_empty() && !warm {
            return;
        }
        self.unavailable.prune(self.now);
        let pools = self.pools_now();
        // The policy is taken out for the call so the context can borrow the rest of self.
        let mut taken = std::mem::replace(&mut self.policy, Box::new(Noop));
        let (specs, noms) = {
            let ctx = Ctx {
                pools: &pools,
                ..self.ctx()
            };
            taken.provision(&ctx, self.now)
        };
        if let Some(t) = taken.provision_wake()
            && t > self.now
            && self.policy_wake.is_none_or(|w| w <= self.now || t < w)
        {
            self.policy_wake = Some(t);
            self.push(t, Ev::PolicyWake);
        }
        self.policy = taken;
        for (p, n) in noms {
            self.nominated.insert(p, n);
        }
        let mut failed = false;
        for spec in specs {
            match self.launch(&spec) {
                Some(n) => {
                    for p in &spec.pods {
                        self.nominated.insert(*p, n);
                    }
                }
                None => failed = true,
            }
        }
        if (failed || self.unhelped_pending()) && !self.replan_scheduled {
            self.replan_scheduled = true;
            // Pods still pending are planned again every `--replan-interval`, as the
            // controller's batcher does.
            let delay = if failed {
                self.cfg.cadence.batch_idle_s
            } else {
                self.cfg.cadence.replan_s
            };
            self.push(self.now + delay, Ev::Replan);
        }
    }

    /// The pools with offerings in the insufficient-capacity cache marked unavailable (the
    /// scenario's own, lent, while nothing is).
    fn pools_now(&self) -> std::borrow::Cow<'a, [Pool]> {
        if self.unavailable.active(self.now).next().is_none() {
            // Lent, not copied: copying every pool's labels and requirements for each pass
            // was a twelfth of a replay.
            return std::borrow::Cow::Borrowed(self.pools);
        }
        let mut cache: Vec<(
            *const Vec<autoscaler_core::InstanceType>,
            std::sync::Arc<Vec<_>>,
        )> = Vec::new();
        self.pools
            .iter()
            .map(|p| {
                let key = std::sync::Arc::as_ptr(&p.instance_types);
                let types = match cache.iter().find(|(k, _)| *k == key) {
                    Some((_, v)) => v.clone(),
                    None => {
                        let mut v = (*p.instance_types).clone();
                        self.unavailable.apply(&mut v, self.now);
                        let v = std::sync::Arc::new(v);
                        cache.push((key, v.clone()));
                        v
                    }
                };
                Pool {
                    instance_types: types,
                    ..p.clone()
                }
            })
            .collect::<Vec<_>>()
            .into()
    }
}

mod disruption;
mod nodes;
mod requests;
mod result;
mod scheduling;

/// A policy that does nothing, parked in the engine while the real one is borrowed out.
struct Noop;

impl Policy for Noop {
    fn name(&self) -> &'static str {
        "noop"
    }
    fn description(&self) -> &'static str {
        "does nothing"
    }
    fn provision(&mut self, _: &Ctx, _: i64) -> (Vec<LaunchSpec>, Vec<(PodId, NodeId)>) {
        (vec![], vec![])
    }
    fn disrupt(&mut self, _: &Ctx, _: i64) -> (Vec<Decision>, i64) {
        (vec![], i64::MAX)
    }
    fn validate(&mut self, _: &Ctx, _: &Decision, _: i64, _: Check) -> bool {
        false
    }
    fn on_scale_up(&mut self, _: &str, _: i64) {}
    fn on_delete(&mut self, _: &str, _: i64) {}
}
