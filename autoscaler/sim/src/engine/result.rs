//! What the engine measures for one policy: costs, GPU-hours, pending times, node and pod
//! churn, ProvisioningRequest outcomes and the time series the report charts.

use std::collections::BTreeMap;

use super::Engine;
use crate::cluster::{NodeId, NodeState, PodPhase};

/// ProvisioningRequest outcomes of one policy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProvReqStats {
    /// Whether the policy serves ProvisioningRequests at all (otherwise the pods were created
    /// at the request's arrival as an ordinary gang, and the counts below are zero).
    pub supported: bool,
    /// Requests created.
    pub requests: u64,
    /// Requests that reached Provisioned.
    pub provisioned: u64,
    /// Of those, bookings consumed by their pods.
    pub consumed: u64,
    /// Of those, bookings that expired before their pods bound.
    pub expired: u64,
    /// Of those, bookings revoked because a booked node was lost.
    pub revoked: u64,
    /// Requests never Provisioned by the end of the run.
    pub never_provisioned: u64,
    /// Seconds from creation to Provisioned, median over provisioned requests.
    pub to_provisioned_p50_s: f64,
    /// 95th percentile.
    pub to_provisioned_p95_s: f64,
    /// Every served request, in creation order of their groups.
    pub records: Vec<RequestRecord>,
}

/// What happened to one ProvisioningRequest (virtual seconds).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestRecord {
    /// Its name (the group's).
    pub name: String,
    /// Class, as scenarios name it.
    pub class: &'static str,
    /// Created.
    pub created: i64,
    /// Provisioned (every booked node initialized).
    pub provisioned_at: Option<i64>,
    /// Its pods created (Kueue admitted the workload).
    pub admitted_at: Option<i64>,
    /// Every pod bound at once, the first time.
    pub bound_at: Option<i64>,
    /// How the booking ended: `consumed`, `expired`, `revoked`, or `None` (not ended).
    pub end: Option<&'static str>,
    /// Per node launched for it (by the attempt that succeeded): when it was launched and
    /// when it was terminated, if it was.
    pub nodes: Vec<(i64, Option<i64>)>,
}

/// One node of a run as launched (existing nodes included, at time 0): what `bench fidelity`
/// compares with the NodeClaims the controller makes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeRecord {
    /// Its NodePool (empty for an existing node no NodePool manages).
    pub pool: String,
    /// Instance type.
    pub instance_type: String,
    /// Virtual second it was launched.
    pub launched_at: i64,
    /// Virtual second it was gone (terminated or lost), if it was.
    pub gone_at: Option<i64>,
}

/// One point of the time series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Virtual seconds.
    pub t: i64,
    /// Live nodes per instance type.
    pub nodes_by_type: BTreeMap<String, u32>,
    /// Pending pods.
    pub pending: u32,
    /// Requested / paid GPUs at that moment.
    pub gpu_allocation: f64,
    /// Cost so far, USD.
    pub cost: f64,
}

/// Everything measured for one policy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyResult {
    /// Policy name.
    pub name: String,
    /// What the policy is.
    pub description: String,
    /// USD.
    pub cost: f64,
    /// GPU-hours of the GPUs on nodes paid for.
    pub gpu_hours_paid: f64,
    /// GPU-hours pods held (shares, MIG slices and time-sliced replicas as fractions).
    pub gpu_hours_requested: f64,
    /// Of `gpu_hours_requested`, what was not thrown away by a later eviction of a job (the
    /// job's time bound before the eviction is run again).
    pub gpu_hours_useful: f64,
    /// GPU-hours of job work thrown away by evictions, to be run again.
    pub gpu_hours_rerun: f64,
    /// Of `gpu_hours_paid`, the GPUs of nodes not Ready yet: from the launch request until the
    /// device plugin advertised them (launch, registration, device plugin start).
    pub gpu_hours_booting: f64,
    /// Of `gpu_hours_paid`, the GPUs of Ready nodes that no pod held: paid minus booting minus
    /// requested (empty nodes waiting out their unneeded time, and room left on busy ones).
    pub gpu_hours_idle: f64,
    /// Of `gpu_hours_idle`, on Ready nodes where no pod held any GPU at all (the whole node
    /// idle: waiting out its unneeded time and `consolidateAfter`, or kept for pods to come);
    /// the rest is room left beside pods.
    pub gpu_hours_idle_empty: f64,
    /// useful / paid: work re-run after an eviction does not count, so disrupting more never
    /// looks more efficient.
    pub gpu_allocation: f64,
    /// Pending time percentiles (seconds) over pending episodes, unbound ones counted to the
    /// end of the run.
    pub pending_p50_s: f64,
    /// 95th percentile.
    pub pending_p95_s: f64,
    /// 99th percentile.
    pub pending_p99_s: f64,
    /// Nodes launched.
    pub nodes_launched: u64,
    /// Nodes terminated (disruption and interruptions).
    pub nodes_terminated: u64,
    /// Pods evicted (disruption and interruptions).
    pub pods_disrupted: u64,
    /// Of which by spot interruptions.
    pub pods_interrupted: u64,
    /// Safety violations (must be 0).
    pub safety_violations: u64,
    /// The first few violations, described.
    pub violation_examples: Vec<String>,
    /// Pods still pending at the end.
    pub pending_at_end: u64,
    /// A few of them, with how long they had been pending.
    pub pending_examples: Vec<String>,
    /// Pods created.
    pub pods_created: u64,
    /// Launches refused for lack of capacity.
    pub launch_failures: u64,
    /// Time series.
    pub samples: Vec<Sample>,
    /// USD paid per instance type over the run (what ranks the types of the report's node
    /// charts).
    pub cost_by_type: BTreeMap<String, f64>,
    /// Wall-clock seconds this policy took.
    pub wall_seconds: f64,
    /// ProvisioningRequest outcomes; `None` when the workload has no requests.
    pub provisioning_requests: Option<ProvReqStats>,
    /// The policy's answer to `simulate --explain`, when asked.
    pub explanation: Option<crate::policy::Explained>,
    /// What the model could not do, and what became of the pods concerned (for example
    /// karpenter-like's pods asking for MIG resources it does not know).
    pub notes: Vec<String>,
    /// Every node of the run, in launch order.
    pub node_records: Vec<NodeRecord>,
    /// Each pod ever bound (index into the workload's pods) and when it was first bound.
    pub first_bound: Vec<(usize, i64)>,
    /// Each pod ever bound and the node it was first bound to (index into `node_records`).
    pub first_node: Vec<(usize, usize)>,
}

/// The `q` quantile of `sorted` (nearest rank; 0 when empty).
pub(super) fn percentile(sorted: &[i64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
}

/// The cost of every node launched so far, kept up from sample to sample: summing every node
/// ever launched at each sample made a run's samples quadratic in its launches (a tenth of
/// the karpenter-like openb replay). Equal to [`Engine::cost_until`] up to rounding (the sum
/// is taken in another order); only the report's charts read it.
#[derive(Debug, Default)]
pub(super) struct CostTally {
    /// Nodes `0..seen` are counted below.
    seen: usize,
    /// Nodes whose cost may still grow (live, or gone after the last sample).
    open: Vec<NodeId>,
    /// Cost and GPU-seconds of the nodes gone by the last sample.
    settled: (f64, f64),
}

impl CostTally {
    /// Cost and GPU-seconds of `nodes` until `t`, which never decreases from call to call.
    fn until(&mut self, nodes: &[NodeState], t: i64) -> (f64, f64) {
        self.open.extend(self.seen..nodes.len());
        self.seen = nodes.len();
        let mut growing = (0.0, 0.0);
        let settled = &mut self.settled;
        self.open.retain(|&id| {
            let n = &nodes[id];
            let end = n.gone_at.unwrap_or(t).min(t);
            let secs = (end - n.launched_at).max(0) as f64;
            let add = (n.price * secs / 3600.0, f64::from(n.gpus) * secs);
            let over = n.gone_at.is_some_and(|g| g <= t);
            let sum = if over { &mut *settled } else { &mut growing };
            sum.0 += add.0;
            sum.1 += add.1;
            !over
        });
        (settled.0 + growing.0, settled.1 + growing.1)
    }
}

/// Costs as time goes, the samples the report charts, and the result once the run ends.
impl Engine<'_> {
    pub(super) fn paid_gpus_now(&self) -> f64 {
        self.cluster
            .live_nodes
            .iter()
            .map(|n| f64::from(self.cluster.nodes[*n].gpus))
            .sum()
    }

    /// Per node ever launched: it, the seconds it was up until `t` and their cost.
    pub(super) fn node_costs(&self, t: i64) -> impl Iterator<Item = (&NodeState, f64, f64)> {
        self.cluster.nodes.iter().map(move |n| {
            let end = n.gone_at.unwrap_or(t).min(t);
            let secs = (end - n.launched_at).max(0) as f64;
            (n, secs, n.price * secs / 3600.0)
        })
    }

    pub(super) fn cost_until(&self, t: i64) -> (f64, f64) {
        let mut cost = 0.0;
        let mut gpu_s = 0.0;
        for (n, secs, c) in self.node_costs(t) {
            cost += c;
            gpu_s += f64::from(n.gpus) * secs;
        }
        (cost, gpu_s)
    }

    /// GPU-seconds paid until `t` on nodes before they were Ready.
    pub(super) fn booting_gpu_s(&self, t: i64) -> f64 {
        self.cluster
            .nodes
            .iter()
            .map(|n| {
                let end = n.gone_at.unwrap_or(t).min(t);
                let up = n.ready_at.unwrap_or(end).min(end);
                f64::from(n.gpus) * (up - n.launched_at).max(0) as f64
            })
            .sum()
    }

    /// GPU-seconds paid until `t` on Ready nodes while no pod held any of their GPUs.
    pub(super) fn empty_gpu_s(&self, t: i64) -> f64 {
        self.cluster
            .nodes
            .iter()
            .filter(|n| n.gpus > 0)
            .filter_map(|n| {
                let end = n.gone_at.unwrap_or(t).min(t);
                let ready = n.ready_at?.min(end);
                let open = if n.gpu_pods > 0 {
                    (end - n.gpu_busy_since).max(0)
                } else {
                    0
                };
                let empty = (end - ready - n.gpu_busy_s - open).max(0);
                Some(f64::from(n.gpus) * empty as f64)
            })
            .sum()
    }

    pub(super) fn cost_by_type(&self, t: i64) -> BTreeMap<String, f64> {
        let mut by_type = BTreeMap::new();
        for (n, _, c) in self.node_costs(t) {
            *by_type.entry(n.instance_type.clone()).or_insert(0.0) += c;
        }
        by_type
    }

    pub(super) fn sample(&mut self) {
        let mut by_type = BTreeMap::new();
        let mut held = 0.0;
        for n in &self.cluster.live_nodes {
            *by_type
                .entry(self.cluster.nodes[*n].instance_type.clone())
                .or_insert(0) += 1;
            for p in &self.cluster.nodes[*n].pods {
                held += self.cluster.pods[*p].gpu_equiv;
            }
        }
        let paid = self.paid_gpus_now();
        self.samples.push(Sample {
            t: self.now,
            nodes_by_type: by_type,
            pending: self.cluster.pending.len() as u32,
            gpu_allocation: if paid > 0.0 { held / paid } else { 0.0 },
            cost: self.tally.until(&self.cluster.nodes, self.now).0,
        });
    }

    pub(super) fn finish(mut self, wall: f64) -> PolicyResult {
        let end = self.horizon;
        let provreq = self.request_stats();
        for (i, st) in self.cluster.pods.iter().enumerate() {
            match st.phase {
                PodPhase::Bound { since, .. } => {
                    self.gpu_requested_s += st.gpu_equiv * (end - since) as f64;
                }
                PodPhase::Pending { since } => self.pending_samples.push(end - since),
                _ => {}
            }
            let _ = i;
        }
        self.sample();
        let (cost, gpu_s) = self.cost_until(end);
        let mut s = std::mem::take(&mut self.pending_samples);
        s.sort_unstable();
        let paid_h = gpu_s / 3600.0;
        let req_h = self.gpu_requested_s / 3600.0;
        let rerun_h = self.gpu_rerun_s / 3600.0;
        let useful_h = (req_h - rerun_h).max(0.0);
        let booting_h = self.booting_gpu_s(end) / 3600.0;
        let idle_h = (paid_h - booting_h - req_h).max(0.0);
        let idle_empty_h = (self.empty_gpu_s(end) / 3600.0).min(idle_h);
        let cost_by_type = self.cost_by_type(end);
        let notes = self.policy.notes(&self.cluster);
        let node_records = self
            .cluster
            .nodes
            .iter()
            .map(|n| NodeRecord {
                pool: n.pool_name.clone(),
                instance_type: n.instance_type.clone(),
                launched_at: n.launched_at,
                gone_at: n.gone_at,
            })
            .collect();
        let first_bound = self.cluster.first_bound.clone().into_iter().collect();
        let first_node = self.cluster.first_node.clone().into_iter().collect();
        PolicyResult {
            name: self.policy.name().to_string(),
            description: self.policy.description().to_string(),
            cost,
            gpu_hours_paid: paid_h,
            gpu_hours_requested: req_h,
            gpu_hours_useful: useful_h,
            gpu_hours_rerun: rerun_h,
            gpu_hours_booting: booting_h,
            gpu_hours_idle: idle_h,
            gpu_hours_idle_empty: idle_empty_h,
            gpu_allocation: if paid_h > 0.0 { useful_h / paid_h } else { 0.0 },
            pending_p50_s: percentile(&s, 0.50),
            pending_p95_s: percentile(&s, 0.95),
            pending_p99_s: percentile(&s, 0.99),
            nodes_launched: self.nodes_launched,
            nodes_terminated: self.nodes_terminated,
            pods_disrupted: self.pods_disrupted,
            pods_interrupted: self.pods_interrupted,
            safety_violations: self.violations,
            violation_examples: self.violation_examples,
            pending_at_end: self.cluster.pending.len() as u64,
            pending_examples: self
                .cluster
                .pending
                .iter()
                .take(5)
                .map(|p| {
                    let since = match self.cluster.pods[*p].phase {
                        PodPhase::Pending { since } => since,
                        _ => end,
                    };
                    format!(
                        "{} (pending {}s{})",
                        self.cluster.pod(*p).key,
                        end - since,
                        if self.nominated.contains_key(p) {
                            ", nominated to a node in flight"
                        } else {
                            ""
                        }
                    )
                })
                .collect(),
            pods_created: self.pods_created,
            launch_failures: self.launch_failures,
            provisioning_requests: provreq,
            cost_by_type,
            explanation: self.explained.take(),
            notes,
            node_records,
            first_bound,
            first_node,
            samples: self.samples,
            wall_seconds: wall,
        }
    }
}
