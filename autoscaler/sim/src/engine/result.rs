//! What the engine measures for one policy: costs, GPU-hours, pending times, node and pod
//! churn, ProvisioningRequest outcomes and the time series the report charts.

use std::collections::BTreeMap;

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
}
