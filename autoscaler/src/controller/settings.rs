//! `gpu-autoscaler run` options.

use std::net::SocketAddr;
use std::time::Duration;

use autoscaler_core::cadence;
use autoscaler_core::disruption::{self, execute};
use clap::{Args, ValueEnum};

/// Parses a flag's duration in the core's one grammar ([`autoscaler_core::duration`]): `250ms`,
/// `90s`, `1h30m`, `1.5h`, `2d`, or a bare number of seconds; at most ten years.
///
/// # Errors
/// The core's message naming the bad value (the same one NodePools and scenarios give).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    use autoscaler_core::duration::{Bare, parse};
    parse(s.trim(), Bare::Seconds).map_err(|e| e.to_string())
}

/// Parses a duration that must not be zero: the period of a loop (zero would spin a core or
/// call the API server without pause) or a timeout that would always have passed.
///
/// # Errors
/// As [`parse_duration`], or a message saying zero is refused.
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be longer than zero"));
    }
    Ok(d)
}

/// Taints given on the command line ([`parse_taints`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Taints(pub Vec<k8s_openapi::api::core::v1::Taint>);

/// Parses the kubelet's `--register-with-taints` form: comma-separated `key[=value]:Effect`,
/// the effect one of `NoSchedule`, `PreferNoSchedule`, `NoExecute`; empty for none.
///
/// # Errors
/// A message naming the bad entry and what was expected.
pub fn parse_taints(s: &str) -> Result<Taints, String> {
    let mut out = Vec::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad =
            |why: &str| format!("invalid taint {entry:?}: {why} (expected key[=value]:Effect)");
        let (kv, effect) = entry.rsplit_once(':').ok_or_else(|| bad("no effect"))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(bad(
                "the effect is not NoSchedule, PreferNoSchedule or NoExecute",
            ));
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (kv, None),
        };
        if key.is_empty() {
            return Err(bad("no key"));
        }
        nodepools::names::check_qualified_name(key).map_err(|e| bad(&format!("key: {e}")))?;
        if let Some(v) = &value {
            nodepools::names::check_label_value(v).map_err(|e| bad(&format!("value: {e}")))?;
        }
        out.push(k8s_openapi::api::core::v1::Taint {
            key: key.to_string(),
            value,
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(Taints(out))
}

/// Parses a fraction in (0, 1].
///
/// # Errors
/// A message naming the bad value.
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!(
            "invalid fraction {s:?} (expected a number in (0, 1])"
        )),
    }
}

/// Parses a percentage in [0, 100].
///
/// # Errors
/// A message naming the bad value.
pub fn parse_percentage(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "invalid percentage {s:?} (expected a number in [0, 100])"
        )),
    }
}

/// Which cloud provider to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProviderKind {
    /// Machines as Kubernetes objects (Node + KwokInstance), booted by the controller.
    Kwok,
    /// The in-memory fake (instances never register; for smoke tests of the wiring).
    Fake,
    /// AWS EC2 (`--aws-config`, `--endpoint-url`; `--region` names the AWS region).
    Aws,
    /// Google Compute Engine (`--gcp-config`, `--project`, `--zone`, `--endpoint-url`;
    /// `--region` names the GCP region).
    Gcp,
}

/// How planning treats pods' preferences (`--preference-policy`, Karpenter's flag of that
/// name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PreferencePolicy {
    /// Held as required while a node can meet them, and given up one at a time for the pods
    /// none can (as Karpenter relaxes them).
    Respect,
    /// Dropped: preferred node affinity, preferred pod affinity and anti-affinity and
    /// `ScheduleAnyway` topology spreads count for nothing, in provisioning and in
    /// consolidation.
    Ignore,
}

/// What planning does when a NodePool's `minValues` cannot be met (`--min-values-policy`,
/// Karpenter's flag of that name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MinValuesPolicy {
    /// The NodePool opens no NodeClaim: the pods go to another NodePool or wait with the
    /// reason.
    Strict,
    /// The NodeClaim is launched with the instance types there are, its `minValues` lowered
    /// to the values they span and annotated as relaxed.
    #[value(alias = "besteffort")]
    BestEffort,
}

impl MinValuesPolicy {
    /// The core's policy of the same name.
    pub fn to_core(self) -> autoscaler_core::model::MinValuesPolicy {
        match self {
            MinValuesPolicy::Strict => autoscaler_core::model::MinValuesPolicy::Strict,
            MinValuesPolicy::BestEffort => autoscaler_core::model::MinValuesPolicy::BestEffort,
        }
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Options of `gpu-autoscaler run`. Durations take `500ms`, `90s`, `1h30m`, `1.5h`, `2d` or a
/// number of seconds, at most ten years.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Cloud provider.
    #[arg(long, value_enum, default_value = "kwok")]
    pub provider: ProviderKind,
    /// Which embedded catalog the kwok and fake providers offer (`aws` or `gcp`).
    #[arg(long, default_value = "aws")]
    pub catalog: String,
    /// The kwok and fake providers offer the instance types of this file instead of an
    /// embedded catalog: `gpu-autoscaler catalog --json` output (capacity, allocatable,
    /// offerings and prices per type) or a catalog YAML file. `--region` still filters it.
    #[arg(long)]
    pub catalog_file: Option<std::path::PathBuf>,
    /// Only offer instance types of this region (e.g. `us-east-1`); empty offers every region
    /// of the catalog.
    #[arg(long, default_value = "")]
    pub region: String,
    /// Cluster name: the tag on every instance, so garbage collection only touches ours.
    #[arg(long, default_value = "default")]
    pub cluster_name: String,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else kube-system).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub namespace: String,
    /// This replica's identity in leader election and events (default: $POD_NAME, else
    /// hostname-pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Elect a leader through a Lease; only the leader acts.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "gpu-autoscaler")]
    pub lease_name: String,
    /// Lease validity after a renewal.
    #[arg(long, default_value = "15s", value_parser = parse_positive_duration)]
    pub lease_duration: Duration,
    /// How often to acquire or renew the lease (shorter than `--lease-duration`).
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration)]
    pub lease_retry: Duration,
    /// Unschedulable pods younger than this (from their creation) are not acted on yet, as
    /// the Cluster Autoscaler's flag of the same name: a burst of pods that the scheduler
    /// might still place elsewhere does not launch nodes. Off (0s) by default.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub new_pod_scale_up_delay: Duration,
    /// Close a batch of unschedulable pods after this long without a new one.
    #[arg(long, default_value = cadence::DEFAULT_BATCH_IDLE, value_parser = parse_duration)]
    pub batch_idle: Duration,
    /// Close a batch after this long in all.
    #[arg(long, default_value = cadence::DEFAULT_BATCH_MAX, value_parser = parse_duration)]
    pub batch_max: Duration,
    /// Plan pods that are still pending again this long after the last round, so that changes
    /// no pod event announces (a NodePool or PodGroup edited, room freed) reach them.
    #[arg(long, default_value = cadence::DEFAULT_REPLAN_INTERVAL, value_parser = parse_duration)]
    pub replan_interval: Duration,
    /// Delete a launched NodeClaim whose Node has not registered after this long.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub registration_timeout: Duration,
    /// Delete a launched NodeClaim whose Node has not initialized after this long.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub initialization_timeout: Duration,
    /// How often disruption is planned.
    #[arg(long, default_value = cadence::DEFAULT_DISRUPTION_INTERVAL, value_parser = parse_duration)]
    pub disruption_interval: Duration,
    /// How often the leader writes the cluster status summary, the ConfigMap
    /// `gpu-autoscaler-status` in `--namespace` (`0s`: never).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub status_configmap_interval: Duration,
    /// A disruption decision is re-validated this long after it was made.
    #[arg(long, default_value = disruption::DEFAULT_VALIDATION_DELAY, value_parser = parse_duration)]
    pub validation_delay: Duration,
    /// A spot node is replaced by a cheaper spot node only when at least this many cheaper
    /// instance types could hold its pods (Karpenter's spot-to-spot rule, 15): with fewer, the
    /// replacement is likely the type interrupted next. 1 allows any cheaper spot type.
    #[arg(long, default_value_t = disruption::DEFAULT_MIN_SPOT_TO_SPOT_TYPES, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub min_spot_to_spot_types: u32,
    /// No scale-down of a NodePool's nodes this long after the pool scaled up (none by
    /// default; the Cluster Autoscaler waits 10m). Counted per pool (the Cluster Autoscaler's
    /// `--scale-down-delay-type-local`); a NodePool's `spec.disruption.scaleDownDelayAfterAdd`
    /// overrides it.
    #[arg(long, default_value = disruption::DEFAULT_SCALE_DOWN_DELAY_AFTER_ADD, value_parser = parse_duration)]
    pub scale_down_delay_after_add: Duration,
    /// No scale-down of a NodePool's nodes this long after one of them was deleted (per pool;
    /// `scaleDownDelayAfterDelete` overrides it).
    #[arg(long, default_value = disruption::DEFAULT_SCALE_DOWN_DELAY_AFTER_DELETE, value_parser = parse_duration)]
    pub scale_down_delay_after_delete: Duration,
    /// No scale-down or drift of a NodePool's nodes this long after a failed disruption in the
    /// pool (per pool; `scaleDownDelayAfterFailure` overrides it), doubled for each further
    /// failure in a row the cluster could not get past (a replacement that never came up, a
    /// drain that timed out) up to an hour (or this, if longer), until a deletion in the pool
    /// succeeds: a drift replacement that can never come up is not launched again every few
    /// minutes.
    #[arg(long, default_value = disruption::DEFAULT_SCALE_DOWN_DELAY_AFTER_FAILURE, value_parser = parse_duration)]
    pub scale_down_delay_after_failure: Duration,
    /// Most nodes being removed at once, empty or drained, across the cluster (the Cluster
    /// Autoscaler's flag and default).
    #[arg(long, default_value_t = disruption::DEFAULT_PARALLELISM, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_scale_down_parallelism: u32,
    /// Most nodes with pods to drain being removed at once. The Cluster Autoscaler's default is
    /// 1 (one non-empty node at a time); this one is 10, so that multi-node consolidation
    /// (Karpenter's) can remove several nodes in one command. 1 gives the Cluster Autoscaler's
    /// pace.
    #[arg(long, default_value_t = disruption::DEFAULT_PARALLELISM, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_drain_parallelism: u32,
    /// Scale down nodes that broke down (initialized, `Ready` no longer `True`) once they have
    /// been unneeded for `--scale-down-unready-time`; `false` leaves them alone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub scale_down_unready_enabled: bool,
    /// How long a node that is not ready must be unneeded before it is removed (in place of
    /// its pool's `unneededTime`).
    #[arg(long, default_value = disruption::DEFAULT_SCALE_DOWN_UNREADY_TIME, value_parser = parse_duration)]
    pub scale_down_unready_time: Duration,
    /// Scaling halts (no launch, no new disruption) while more than this percentage of the
    /// registered nodes, and more than `--ok-total-unready-count` nodes, are unready after they
    /// started; it resumes when they recover.
    #[arg(long, default_value_t = 45.0, value_parser = parse_percentage)]
    pub max_total_unready_percentage: f64,
    /// See `--max-total-unready-percentage`: this many unready nodes never halt scaling.
    #[arg(long, default_value_t = 3)]
    pub ok_total_unready_count: u32,
    /// The Cluster Autoscaler's extra wait for GPU pods: while the oldest unschedulable pod
    /// requesting a GPU-class resource is younger than this, no GPU pod is acted on, so GPU
    /// pods created together are planned together (the Cluster Autoscaler waits 30s, fixed).
    /// Off (0s) by default; pods without GPUs are never held by it.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub gpu_pod_scale_up_delay: Duration,
    /// Launch nodes to bring every NodePool up to its `minNodes`, pending pods or not (warm
    /// capacity), as the Cluster Autoscaler's flag of the same name. The missing nodes are
    /// NodeClaims without pods listing every instance type of the pool within its limits,
    /// cheapest first; the nodes pods need count first, and limits (the pool's and the
    /// cluster-wide ones) are kept. Checked every `--replan-interval`. Off by default: `minNodes`
    /// then only holds scale-down.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub enforce_node_group_min_size: bool,
    /// Leave DaemonSet pods out of a node's utilization (Cluster Autoscaler's
    /// `--ignore-daemonsets-utilization`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub ignore_daemonsets_utilization: bool,
    /// Leave mirror (static) pods out of a node's utilization (Cluster Autoscaler's
    /// `--ignore-mirror-pods-utilization`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub ignore_mirror_pods_utilization: bool,
    /// A replacement node must initialize within this long, or the replace is dropped.
    #[arg(long, default_value = execute::DEFAULT_REPLACEMENT_TIMEOUT, value_parser = parse_duration)]
    pub replacement_timeout: Duration,
    /// How often an optional API not served yet (ProvisioningRequest, Volcano or Kubernetes
    /// PodGroup) is asked again, so installing its CRD later needs no restart.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub optional_api_recheck: Duration,
    /// Disruption: how long pods may take to leave once evictions started (PodDisruptionBudgets
    /// refusing, slow termination) before the nodes are untainted and the attempt counts as a
    /// failed deletion.
    #[arg(long, default_value = execute::DEFAULT_DRAIN_TIMEOUT, value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// How often instances and claims are garbage-collected.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub gc_interval: Duration,
    /// An instance without a NodeClaim is terminated after this long.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub gc_grace: Duration,
    /// Cloud calls per second (token bucket).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub cloud_qps: u32,
    /// How often the reconcile loop runs.
    #[arg(long, default_value = "250ms", value_parser = parse_positive_duration)]
    pub loop_interval: Duration,
    /// `/healthz` fails once the leader has completed no reconcile round for this long (the
    /// loop is stuck), so the kubelet restarts the pod; followers are always healthy.
    #[arg(long, default_value = "5m", value_parser = parse_positive_duration)]
    pub stall_timeout: Duration,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Pods' preferences (preferred node affinity, preferred pod affinity and anti-affinity,
    /// `ScheduleAnyway` topology spreads): `respect` them where a node can meet them, or
    /// `ignore` them in provisioning and consolidation alike (Karpenter's
    /// `--preference-policy=Ignore`; its spelling is taken too).
    #[arg(long, value_enum, default_value = "respect", ignore_case = true)]
    pub preference_policy: PreferencePolicy,
    /// A NodePool's `minValues` its fitting instance types cannot meet: `strict` opens no
    /// NodeClaim there (the pods go elsewhere or wait with the reason); `best-effort` launches
    /// with the types there are, the NodeClaim's `minValues` lowered to what they span and
    /// annotated `karpenter.sh/nodeclaim-min-values-relaxed: "true"`, in provisioning and
    /// consolidation alike (Karpenter's `--min-values-policy`; its spelling, `Strict` and
    /// `BestEffort`, is taken too).
    #[arg(long, value_enum, default_value = "strict", ignore_case = true)]
    pub min_values_policy: MinValuesPolicy,
    /// ProvisioningRequests: how long provisioned capacity stays booked for its pods, unless
    /// the request's `BookingDurationSeconds` parameter says otherwise.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub provreq_booking: Duration,
    /// ProvisioningRequests: how long after creation a request is retried before it fails,
    /// unless its `ValidUntilSeconds` parameter says otherwise.
    #[arg(long, default_value = "168h", value_parser = parse_duration)]
    pub provreq_deadline: Duration,
    /// ProvisioningRequests: first retry delay without capacity (doubling up to
    /// `--provreq-retry-max`).
    #[arg(long, default_value = cadence::DEFAULT_PROVREQ_RETRY, value_parser = parse_duration)]
    pub provreq_retry: Duration,
    /// ProvisioningRequests: longest retry delay.
    #[arg(long, default_value = cadence::DEFAULT_PROVREQ_RETRY_MAX, value_parser = parse_duration)]
    pub provreq_retry_max: Duration,
    /// ProvisioningRequests: delete terminal requests (Failed, BookingExpired,
    /// CapacityRevoked) this long after they ended; `0s` leaves them to their owner.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub provreq_retention: Duration,
    /// Most NodeClaims one provisioning round plans and writes; pods that would need more stay
    /// pending and are planned again in the next round, at once. A backlog then gets its
    /// first nodes after one slice is planned and written (as the Cluster Autoscaler's
    /// `--max-nodes-per-scaleup`, 1000, this bounds latency, not the rate of scale-up). A
    /// gang's or atomic scale-up's claims are never split. A round of 2,048 pods or more, with
    /// no more pods than this limit, whose pods fall into independent parts (no NodePool or node
    /// in common; no topology spread, pod affinity, gang or DRA claim) is planned a part per
    /// core, to the plan one core makes.
    #[arg(long, default_value_t = autoscaler_core::provision::DEFAULT_MAX_CLAIMS_PER_ROUND as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_claims_per_round: u64,
    /// ProvisioningRequests: most pods one request may ask for (all pod sets together);
    /// larger requests fail with `InvalidRequest` before any pod is built.
    #[arg(long, default_value_t = autoscaler_core::provreq::MAX_PODS, value_parser = clap::value_parser!(u64).range(1..))]
    pub provreq_max_pods: u64,
    /// kwok: launch to Node registration.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub kwok_register_delay: Duration,
    /// kwok: registration to Ready.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub kwok_ready_delay: Duration,
    /// kwok: Ready to GPU allocatable (the device plugin starting).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub kwok_gpu_delay: Duration,
    /// kwok: how long a launch call takes (cloud API latency).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub kwok_launch_latency: Duration,
    /// kwok: the share of each GPU-class resource (after the NodePool's GPU sharing) its Nodes
    /// advertise, in (0, 1], rounded down to at least one device; below 1 emulates a device
    /// plugin configured otherwise than the NodePool.
    #[arg(long, default_value_t = 1.0, value_parser = parse_fraction)]
    pub kwok_register_gpu_fraction: f64,
    /// kwok: taints every Node registers with besides its NodeClaim's, in the kubelet's
    /// `--register-with-taints` form (`key[=value]:Effect`, comma-separated); nothing removes
    /// them. Emulates node agents that taint a starting node (a Node Readiness Controller's
    /// `readiness.k8s.io/` taints).
    #[arg(long, default_value = "", value_parser = parse_taints)]
    pub kwok_register_with_taints: Taints,
    /// kwok: emulated cloud faults per call, e.g. `all=0.3` or `ice=0.1,429=0.1,5xx=0.05,timeout=0.05`
    /// (see `providers::faults`). A test and benchmark knob, hidden from `--help`.
    #[arg(long, default_value = "", hide = true)]
    pub kwok_faults: providers::faults::CloudFaultRates,
    /// kwok: seed of the emulated cloud faults (hidden, as `--kwok-faults`).
    #[arg(long, default_value_t = 0, hide = true)]
    pub kwok_fault_seed: u64,
    /// A Node advertising fewer devices than its NodeClaim was launched for (GPU-class
    /// resources, and extended resources its pods asked for) gets this long after registration
    /// before the claim is marked `ResourceMismatch`.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub device_plugin_timeout: Duration,
    /// An instance type whose node came up with fewer devices is kept out of its NodePool's
    /// plans this long (renewed while such a claim exists).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub resource_mismatch_ttl: Duration,
    /// Launches a pending pod may cause without binding before it causes no more until the
    /// back-off has passed (0: no limit).
    #[arg(long, default_value_t = 1)]
    pub max_launches_per_pod: u32,
    /// The wait after a pod's launches reached `--max-launches-per-pod`, counted from the
    /// last; doubled for every further launch, up to one hour (or this, if longer). Also a
    /// NodePool's wait for warm launches (`--enforce-node-group-min-size`) after a warm node
    /// did not register or initialize in time (or its launch was refused other than for
    /// capacity), doubled the same way per such failure in a row.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub launch_backoff: Duration,
    /// Cluster-wide limits (the Cluster Autoscaler's totals).
    #[command(flatten)]
    pub limits: ClusterLimitArgs,
    /// AWS provider options (with `--provider aws`).
    #[command(flatten)]
    pub aws: crate::aws::AwsArgs,
    /// GCP provider options (with `--provider gcp`).
    #[command(flatten)]
    pub gcp: crate::gcp::GcpArgs,
}

impl RunArgs {
    /// Refuses flags that parse one by one but not together.
    ///
    /// # Errors
    /// [`super::error::Error::Config`] naming the flags.
    pub fn check(&self) -> Result<(), super::error::Error> {
        // A lease renewed less often than it lasts lapses between renewals, and another
        // replica takes it: leadership would flap.
        if self.lease_retry >= self.lease_duration {
            return Err(super::error::Error::Config(format!(
                "--lease-retry {:?} must be shorter than --lease-duration {:?}",
                self.lease_retry, self.lease_duration
            )));
        }
        Ok(())
    }

    /// The loop timings these flags give, in whole seconds (what the simulator's scenarios
    /// default to).
    pub fn cadence(&self) -> cadence::Cadence {
        let s = whole_seconds;
        cadence::Cadence {
            batch_idle_s: s(self.batch_idle),
            batch_max_s: s(self.batch_max),
            replan_s: s(self.replan_interval),
            disruption_interval_s: s(self.disruption_interval),
            provreq_retry_s: s(self.provreq_retry),
            provreq_retry_max_s: s(self.provreq_retry_max),
        }
    }

    /// How long a disruption's replacement and drain may take (`--replacement-timeout`,
    /// `--drain-timeout`), in whole seconds.
    pub fn disruption_timeouts(&self) -> execute::Timeouts {
        let s = whole_seconds;
        execute::Timeouts {
            replacement_s: s(self.replacement_timeout),
            drain_s: s(self.drain_timeout),
        }
    }

    /// The core's disruption settings these flags give (the scale-down delays, validation
    /// delay, utilization options, spot-to-spot minimum, parallelism limits and unready-node
    /// removal); `run` and `explain` plan with the same.
    pub fn disruption_config(&self) -> autoscaler_core::DisruptionConfig {
        let s = whole_seconds;
        autoscaler_core::DisruptionConfig {
            delay_after_scale_up_s: s(self.scale_down_delay_after_add),
            delay_after_delete_s: s(self.scale_down_delay_after_delete),
            delay_after_failure_s: s(self.scale_down_delay_after_failure),
            validation_delay_s: s(self.validation_delay),
            ignore_daemonset_utilization: self.ignore_daemonsets_utilization,
            ignore_mirror_utilization: self.ignore_mirror_pods_utilization,
            min_spot_to_spot_types: self.min_spot_to_spot_types as usize,
            max_scale_down_parallelism: self.max_scale_down_parallelism as usize,
            max_drain_parallelism: self.max_drain_parallelism as usize,
            scale_down_unready_enabled: self.scale_down_unready_enabled,
            scale_down_unready_s: s(self.scale_down_unready_time),
            ..autoscaler_core::DisruptionConfig::default()
        }
    }
}

/// A flag's duration in the whole seconds the core counts in, rounded up: a wait or a delay is
/// never shorter than asked (`--validation-delay=500ms` is one second, not none).
pub fn whole_seconds(d: Duration) -> i64 {
    let up = u64::from(d.subsec_nanos() > 0);
    i64::try_from(d.as_secs().saturating_add(up)).unwrap_or(i64::MAX)
}

/// Cluster-wide limits, in the Cluster Autoscaler's flags and units, counted over every node of
/// the cluster (managed by a NodePool or not), every NodeClaim being launched and every planned
/// one. A pod held back by a maximum gets a `LimitReached` event naming the limit and the
/// numbers. The minimums keep disruption from removing nodes below them (as the Cluster
/// Autoscaler's do); they launch nothing.
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct ClusterLimitArgs {
    /// Most nodes in the cluster, all NodePools and unmanaged nodes together (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_nodes_total: u32,
    /// `MIN:MAX` cores in the cluster: no launch beyond MAX, no disruption below MIN.
    #[arg(long, value_parser = autoscaler_core::quota::parse_min_max)]
    pub cores_total: Option<(u64, u64)>,
    /// `MIN:MAX` GiB of memory in the cluster: no launch beyond MAX, no disruption below MIN.
    #[arg(long, value_parser = autoscaler_core::quota::parse_min_max)]
    pub memory_total: Option<(u64, u64)>,
    /// `MODEL:MIN:MAX` physical GPUs of one model in the cluster (the catalog's model name,
    /// `H100`, `A100`, `L4`; any case); repeat the flag for several models.
    #[arg(long, value_parser = autoscaler_core::quota::parse_gpu_total)]
    pub gpu_total: Vec<(String, u64, u64)>,
}

impl ClusterLimitArgs {
    /// The flags as one cluster-wide limit named `cluster limit`, or `None` when no flag is set.
    pub fn to_core(&self) -> Option<autoscaler_core::model::ClusterLimit> {
        autoscaler_core::quota::Totals {
            max_nodes: self.max_nodes_total,
            cores: self.cores_total,
            memory_gib: self.memory_total,
            gpus: self.gpu_total.clone(),
        }
        .to_limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--preference-policy` takes Karpenter's spelling (`Ignore`) as well as ours, and nothing
    /// else.
    #[test]
    fn preference_policy_takes_karpenters_spelling() {
        use clap::Parser;
        let policy = |v: &str| {
            Cli::try_parse_from(["x", &format!("--preference-policy={v}")])
                .map(|c| c.run.preference_policy)
        };
        assert_eq!(policy("Ignore").ok(), Some(PreferencePolicy::Ignore));
        assert_eq!(policy("respect").ok(), Some(PreferencePolicy::Respect));
        assert!(policy("maybe").is_err());
        let defaults = Cli::try_parse_from(["x"]).expect("defaults parse").run;
        assert_eq!(defaults.preference_policy, PreferencePolicy::Respect);
    }

    /// `--min-values-policy` takes Karpenter's spelling (`Strict`, `BestEffort`) as well as
    /// ours, and nothing else; `strict` by default.
    #[test]
    fn min_values_policy_takes_karpenters_spelling() {
        use clap::Parser;
        let policy = |v: &str| {
            Cli::try_parse_from(["x", &format!("--min-values-policy={v}")])
                .map(|c| c.run.min_values_policy)
        };
        for v in ["BestEffort", "best-effort", "besteffort"] {
            assert_eq!(policy(v).ok(), Some(MinValuesPolicy::BestEffort), "{v}");
        }
        assert_eq!(policy("Strict").ok(), Some(MinValuesPolicy::Strict));
        assert_eq!(policy("strict").ok(), Some(MinValuesPolicy::Strict));
        assert!(policy("lenient").is_err());
        let defaults = Cli::try_parse_from(["x"]).expect("defaults parse").run;
        assert_eq!(defaults.min_values_policy, MinValuesPolicy::Strict);
        assert_eq!(
            MinValuesPolicy::BestEffort.to_core(),
            autoscaler_core::model::MinValuesPolicy::BestEffort
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn sub_second_delays_round_up_to_the_cores_whole_seconds() {
        use clap::Parser;
        assert_eq!(whole_seconds(Duration::from_millis(500)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(15)), 15);
        assert_eq!(whole_seconds(Duration::from_millis(15_001)), 16);
        assert_eq!(whole_seconds(Duration::ZERO), 0);
        assert_eq!(whole_seconds(Duration::MAX), i64::MAX);
        let args = Cli::try_parse_from(["x", "--validation-delay=500ms", "--drain-timeout=1500ms"])
            .expect("parses")
            .run;
        assert_eq!(args.disruption_config().validation_delay_s, 1);
        assert_eq!(args.disruption_timeouts().drain_s, 2);
    }

    #[test]
    fn absurd_durations_are_clean_errors() {
        use clap::Parser;
        for (flag, why) in [
            ("--batch-idle=1e23", "expected a number with a unit"),
            (
                "--lease-duration=99999999999999999h",
                "longer than 10 years",
            ),
            ("--gc-grace=inf", "expected a number with a unit"),
            ("--loop-interval=-1s", "negative duration"),
            ("--loop-interval=0s", "--loop-interval"),
            ("--lease-retry=0", "\"0\": must be longer than zero"),
            ("--lease-duration=0ms", "must be longer than zero"),
            ("--stall-timeout=0s", "must be longer than zero"),
            ("--cloud-qps=0", "0 is not in 1.."),
            ("--max-claims-per-round=0", "0 is not in 1.."),
        ] {
            let e = Cli::try_parse_from(["x", flag])
                .err()
                .expect(flag)
                .to_string();
            assert!(e.contains(why), "{flag}: {e}");
        }
    }

    #[test]
    fn a_lease_renewed_less_often_than_it_lasts_is_refused() {
        use clap::Parser;
        let args = Cli::try_parse_from(["x", "--lease-duration=1s", "--lease-retry=10s"])
            .expect("each flag parses")
            .run;
        let e = args
            .check()
            .expect_err("retry longer than the lease")
            .to_string();
        assert!(
            e.contains("--lease-retry 10s must be shorter than --lease-duration 1s"),
            "{e}"
        );
        let defaults = Cli::try_parse_from(["x"]).expect("defaults parse").run;
        assert!(defaults.check().is_ok());
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    /// One default per setting: the flags' defaults, the core's `Default` impls and a
    /// scenario's defaults (the simulator's `ClusterConfig`) are the same values, because the
    /// flags and the impls read the same core constants and the scenario starts from the impls.
    #[test]
    fn defaults_agree_across_flags_core_and_scenarios() {
        use clap::Parser;
        let flags = Cli::try_parse_from(["x"]).expect("defaults parse").run;
        let scenario = autoscaler_sim::scenario::ClusterConfig::default();
        let core = autoscaler_core::DisruptionConfig::default();
        assert_eq!(flags.disruption_config(), core);
        assert_eq!(scenario.disruption, core);
        assert_eq!(flags.disruption_timeouts(), execute::Timeouts::default());
        assert_eq!(scenario.disruption_timeouts, execute::Timeouts::default());
        assert_eq!(flags.cadence(), cadence::Cadence::default());
        assert_eq!(scenario.cadence, cadence::Cadence::default());
        assert_eq!(
            flags.provreq_max_pods,
            crate::controller::provreq::Settings::default().max_pods
        );
        let batch = crate::controller::batcher::BatchConfig::default();
        assert_eq!(
            (batch.idle_ms, batch.max_ms, batch.replan_ms),
            (
                flags.batch_idle.as_millis() as u64,
                flags.batch_max.as_millis() as u64,
                flags.replan_interval.as_millis() as u64
            )
        );
        // The figures users read in the docs.
        assert_eq!(
            (
                core.validation_delay_s,
                core.delay_after_scale_up_s,
                core.delay_after_failure_s
            ),
            (15, 0, 180)
        );
    }

    #[test]
    fn disruption_flags_parse_with_cluster_autoscalers_defaults() {
        use clap::Parser;
        let d = Cli::try_parse_from(["x"]).expect("defaults parse").run;
        assert!(!d.ignore_daemonsets_utilization && !d.ignore_mirror_pods_utilization);
        assert_eq!(d.drain_timeout, Duration::from_secs(600));
        assert_eq!(d.optional_api_recheck, Duration::from_secs(60));
        let s = Cli::try_parse_from([
            "x",
            "--ignore-daemonsets-utilization=true",
            "--ignore-mirror-pods-utilization",
            "true",
            "--drain-timeout=30s",
        ])
        .expect("flags parse")
        .run;
        assert!(s.ignore_daemonsets_utilization && s.ignore_mirror_pods_utilization);
        assert_eq!(s.drain_timeout, Duration::from_secs(30));
        assert!(Cli::try_parse_from(["x", "--ignore-daemonsets-utilization=maybe"]).is_err());
    }

    #[test]
    fn cadence_flags_have_the_cluster_autoscalers_defaults_and_refuse_bad_values() {
        use clap::Parser;
        let d = Cli::try_parse_from(["x"]).expect("defaults parse").run;
        assert_eq!(d.max_scale_down_parallelism, 10);
        assert_eq!(d.max_drain_parallelism, 10, "deliberately not CA's 1");
        assert!(d.scale_down_unready_enabled);
        assert_eq!(d.scale_down_unready_time, Duration::from_secs(1200));
        assert_eq!(d.max_total_unready_percentage, 45.0);
        assert_eq!(d.ok_total_unready_count, 3);
        assert_eq!(d.gpu_pod_scale_up_delay, Duration::ZERO);
        let s = Cli::try_parse_from([
            "x",
            "--max-drain-parallelism=1",
            "--scale-down-unready-enabled=false",
            "--max-total-unready-percentage=12.5",
            "--gpu-pod-scale-up-delay=30s",
        ])
        .expect("flags parse")
        .run;
        assert_eq!(s.max_drain_parallelism, 1);
        assert!(!s.scale_down_unready_enabled);
        assert_eq!(s.max_total_unready_percentage, 12.5);
        assert_eq!(s.gpu_pod_scale_up_delay, Duration::from_secs(30));
        for bad in [
            "--max-total-unready-percentage=101",
            "--max-total-unready-percentage=NaN",
            "--max-scale-down-parallelism=0",
            "--ok-total-unready-count=-1",
        ] {
            let e = Cli::try_parse_from(["x", bad])
                .err()
                .expect(bad)
                .to_string();
            let flag = bad.split('=').next().unwrap_or_default();
            assert!(e.contains(flag), "{bad}: {e}");
        }
    }

    #[test]
    fn guard_flags_parse_and_bad_fractions_are_refused() {
        use clap::Parser;
        let d = Cli::try_parse_from(["x"]).expect("defaults parse").run;
        assert_eq!(d.max_launches_per_pod, 1);
        assert_eq!(d.launch_backoff, Duration::from_secs(300));
        assert_eq!(d.device_plugin_timeout, Duration::from_secs(300));
        assert_eq!(d.resource_mismatch_ttl, Duration::from_secs(1800));
        assert_eq!(d.kwok_register_gpu_fraction, 1.0);
        let s = Cli::try_parse_from(["x", "--kwok-register-gpu-fraction=0.25"])
            .expect("flags parse")
            .run;
        assert_eq!(s.kwok_register_gpu_fraction, 0.25);
        assert!(d.kwok_register_with_taints.0.is_empty());
        let t = Cli::try_parse_from([
            "x",
            "--kwok-register-with-taints=readiness.k8s.io/cni=pending:NoSchedule, dedicated:NoExecute",
        ])
        .expect("taints parse")
        .run
        .kwok_register_with_taints;
        let got: Vec<_> =
            t.0.iter()
                .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
                .collect();
        assert_eq!(
            got,
            [
                ("readiness.k8s.io/cni", Some("pending"), "NoSchedule"),
                ("dedicated", None, "NoExecute")
            ]
        );
        for (bad, why) in [
            ("a=b", "no effect"),
            ("a:Sometimes", "the effect is not"),
            ("=v:NoSchedule", "no key"),
            ("a b:NoSchedule", "key:"),
            ("a=b:c:NoSchedule", "value:"),
        ] {
            let e = Cli::try_parse_from(["x", &format!("--kwok-register-with-taints={bad}")])
                .err()
                .expect("refused")
                .to_string();
            assert!(e.contains(bad) && e.contains(why), "{e}");
        }
        for bad in ["0", "1.5", "-1", "NaN", "inf", "x"] {
            let e = Cli::try_parse_from(["x", &format!("--kwok-register-gpu-fraction={bad}")])
                .err()
                .expect("refused")
                .to_string();
            assert!(
                e.contains("kwok-register-gpu-fraction") && e.contains(bad),
                "{e}"
            );
        }
    }

    #[test]
    fn cluster_limit_flags_take_the_cluster_autoscalers_shapes() {
        use clap::Parser;
        let d = Cli::try_parse_from(["x"]).expect("defaults parse").run;
        assert_eq!(d.limits.to_core(), None);
        let s = Cli::try_parse_from([
            "x",
            "--max-nodes-total=10",
            "--cores-total=8:64",
            "--memory-total=0:256",
            "--gpu-total=H100:0:16",
            "--gpu-total=L4:2:8",
        ])
        .expect("flags parse")
        .run;
        let l = s.limits.to_core().expect("a limit");
        assert_eq!(l.name, "cluster limit");
        assert_eq!(l.max.nodes, Some(10));
        assert_eq!(l.max.resources.get("cpu"), Some(&64_000));
        assert_eq!(l.min.resources.get("cpu"), Some(&8_000));
        assert_eq!(l.max.resources.get("memory"), Some(&(256 << 30)));
        assert_eq!(l.min.resources.get("memory"), None);
        assert_eq!(l.max.gpus_by_model.get("H100"), Some(&16));
        assert_eq!(l.min.gpus_by_model.get("L4"), Some(&2));
        for bad in [
            "--cores-total=64",
            "--cores-total=9:8",
            "--memory-total=a:b",
            "--gpu-total=16",
            "--gpu-total=:0:16",
            "--gpu-total=H100:0",
            "--cores-total=0:99999999999999999999",
        ] {
            let e = Cli::try_parse_from(["x", bad])
                .err()
                .expect(bad)
                .to_string();
            assert!(e.contains("invalid"), "{bad}: {e}");
        }
    }
}
