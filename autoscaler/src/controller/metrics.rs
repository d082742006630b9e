//! Prometheus metrics (`gpu_autoscaler_*`) and the `/metrics`, `/healthz`, `/readyz` server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use autoscaler_core::resources::{Resources, names as resource_names};

use super::error::{Error, Result};

/// Label set with one `phase`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// NodeClaim phase.
    pub phase: String,
}

/// Label set with one `reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why.
    pub reason: String,
}

/// Label set with one `pool`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabel {
    /// NodePool.
    pub pool: String,
}

/// Label set with one GPU `model`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabel {
    /// GPU model (node label).
    pub model: String,
}

/// Label set of a ProvisioningRequest count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvReqLabel {
    /// Provisioning class (unknown classes too: they are left to other backends).
    pub class: String,
    /// `new`, `waiting`, `launching`, `booked`, `done`, or `ignored` for unknown classes.
    pub state: String,
}

/// Label set with one loop name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoopLabel {
    /// `round`, `provision`, `plan` (a batch of pending pods planned: snapshot and plan,
    /// only in rounds that plan), `provisioning_requests`, `disrupt`, `lifecycle`, `gc`.
    pub name: String,
}

/// Label set of a cloud API call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudCallLabel {
    /// The provider's name (`aws`, `gcp`, `kwok`, `fake`).
    pub provider: String,
    /// The operation: `launch`, `launch_group`, `terminate`, `list`, `get`, `gc`,
    /// `instance_types`.
    pub operation: String,
    /// `ok`, or the error's class: `insufficient_capacity`, `not_found`, `throttled`,
    /// `invalid_request`, `other`.
    pub code: String,
}

/// Label set of a cloud API call's duration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudOpLabel {
    /// The provider's name.
    pub provider: String,
    /// The operation, as in [`CloudCallLabel`].
    pub operation: String,
}

/// Label set of a NodePool's usage or limit of one resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolResourceLabel {
    /// NodePool.
    pub nodepool: String,
    /// `cpu` (cores), `memory` (bytes), `nodes`, or an extended resource (`nvidia.com/gpu`).
    pub resource: String,
}

/// Label set of a count of nodes kept by one disruption reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolReasonLabel {
    /// NodePool.
    pub nodepool: String,
    /// The reason of the node's `Consolidatable=False` condition (`AboveThreshold`,
    /// `PdbBlocked`, `DoNotDisrupt`, `BudgetExhausted`, `AtMinNodes`, `Booked`, ...).
    pub reason: String,
}

/// Label set of `build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabel {
    /// The crate version of the binary.
    pub version: String,
    /// The provider this process runs with.
    pub provider: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Buckets of the launch-to-initialized histogram: 5 s to 30 min, where device plugins and
/// GPU driver installs land.
const LAUNCH_BUCKETS: [f64; 14] = [
    5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 900.0, 1200.0, 1800.0,
];

fn launch_histogram() -> Histogram {
    Histogram::new(LAUNCH_BUCKETS)
}

fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

/// Every metric of the controller.
pub struct Metrics {
    registry: Registry,
    /// Pods the scheduler marked unschedulable.
    pub pending_pods: Gauge,
    /// 1 while scaling may go on, 0 while the unready-node halt holds it.
    pub cluster_safe_to_autoscale: Gauge,
    /// Nodes unready after they started, as the unready-node halt counts them.
    pub unready_nodes: Gauge,
    /// NodeClaims by phase.
    pub nodeclaims: Family<PhaseLabel, Gauge>,
    /// Launches that succeeded, by pool.
    pub launches: Family<PoolLabel, Counter>,
    /// Launches that failed, by reason.
    pub launch_failures: Family<ReasonLabel, Counter>,
    /// Disruption commands executed, by reason.
    pub disruptions: Family<ReasonLabel, Counter>,
    /// Pods evicted.
    pub evictions: Counter,
    /// Evictions refused (429, PodDisruptionBudget).
    pub evictions_refused: Counter,
    /// Disruptions given up after their nodes were tainted (drain or replacement timed out,
    /// actions kept failing); each pauses scale-down.
    pub disruption_failures: Counter,
    /// Instances without a NodeClaim terminated by garbage collection.
    pub gc_instances: Counter,
    /// GPU-class allocatable by GPU model.
    pub gpu_allocatable: Family<ModelLabel, Gauge>,
    /// GPU-class requests of bound pods by GPU model.
    pub gpu_allocated: Family<ModelLabel, Gauge>,
    /// Loop durations.
    pub loop_seconds: HistogramFamily<LoopLabel>,
    /// From a pod's Unschedulable condition to the NodeClaim created for it.
    pub pending_to_claim_seconds: Histogram,
    /// 1 while this replica leads.
    pub leader: Gauge,
    /// ProvisioningRequests by class and lifecycle state.
    pub provisioning_requests: Family<ProvReqLabel, Gauge>,
    /// Cloud API calls (each attempt), by provider, operation and outcome.
    pub cloud_calls: Family<CloudCallLabel, Counter>,
    /// Cloud API call durations, by provider and operation.
    pub cloud_call_seconds: HistogramFamily<CloudOpLabel>,
    /// A NodePool's usage (its NodeClaims' capacity, and its node count).
    pub nodepool_usage: Family<PoolResourceLabel, FloatGauge>,
    /// A NodePool's limits, for the resources it limits.
    pub nodepool_limit: Family<PoolResourceLabel, FloatGauge>,
    /// From a NodeClaim's creation to its Initialized condition.
    pub launch_to_initialized_seconds: Histogram,
    /// Age of the oldest pod the scheduler marked unschedulable (0 when none).
    pub oldest_pending_pod_seconds: FloatGauge,
    /// Unix time at which the leader last completed a reconcile round.
    pub last_round_timestamp_seconds: FloatGauge,
    /// Always 1; the labels say which build runs.
    pub build_info: Family<BuildLabel, Gauge>,
    /// Managed nodes the last disruption round kept, by NodePool and reason (reset each
    /// round, so a reason no node has any more disappears).
    pub unremovable_nodes: Family<PoolReasonLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("gpu_autoscaler");
        let m = Metrics {
            pending_pods: Gauge::default(),
            cluster_safe_to_autoscale: Gauge::default(),
            unready_nodes: Gauge::default(),
            nodeclaims: Family::default(),
            launches: Family::default(),
            launch_failures: Family::default(),
            disruptions: Family::default(),
            evictions: Counter::default(),
            evictions_refused: Counter::default(),
            disruption_failures: Counter::default(),
            gc_instances: Counter::default(),
            gpu_allocatable: Family::default(),
            gpu_allocated: Family::default(),
            loop_seconds: Family::new_with_constructor(seconds_histogram),
            pending_to_claim_seconds: seconds_histogram(),
            leader: Gauge::default(),
            provisioning_requests: Family::default(),
            cloud_calls: Family::default(),
            cloud_call_seconds: Family::new_with_constructor(seconds_histogram),
            nodepool_usage: Family::default(),
            nodepool_limit: Family::default(),
            launch_to_initialized_seconds: launch_histogram(),
            oldest_pending_pod_seconds: FloatGauge::default(),
            last_round_timestamp_seconds: FloatGauge::default(),
            build_info: Family::default(),
            unremovable_nodes: Family::default(),
            registry: Registry::default(),
        };
        registry.register("pending_pods", "Unschedulable pods", m.pending_pods.clone());
        registry.register(
            "cluster_safe_to_autoscale",
            "1 while scaling may go on, 0 while too many nodes are unready (--max-total-unready-percentage, --ok-total-unready-count)",
            m.cluster_safe_to_autoscale.clone(),
        );
        registry.register(
            "unready_nodes",
            "Nodes not Ready after they started, as the unready-node halt counts them",
            m.unready_nodes.clone(),
        );
        registry.register("nodeclaims", "NodeClaims by phase", m.nodeclaims.clone());
        registry.register(
            "provisioning_requests",
            "ProvisioningRequests by class and state",
            m.provisioning_requests.clone(),
        );
        registry.register(
            "launches",
            "Successful launches by NodePool",
            m.launches.clone(),
        );
        registry.register(
            "launch_failures",
            "Failed launches by reason",
            m.launch_failures.clone(),
        );
        registry.register(
            "disruptions",
            "Disruption commands executed by reason",
            m.disruptions.clone(),
        );
        registry.register("evictions", "Pods evicted", m.evictions.clone());
        registry.register(
            "evictions_refused",
            "Evictions refused by a PodDisruptionBudget",
            m.evictions_refused.clone(),
        );
        registry.register(
            "disruption_failures",
            "Disruptions given up after their nodes were tainted",
            m.disruption_failures.clone(),
        );
        registry.register(
            "gc_instances",
            "Instances without a NodeClaim terminated",
            m.gc_instances.clone(),
        );
        registry.register(
            "gpu_allocatable",
            "GPU-class allocatable by GPU model",
            m.gpu_allocatable.clone(),
        );
        registry.register(
            "gpu_allocated",
            "GPU-class requests of bound pods by GPU model",
            m.gpu_allocated.clone(),
        );
        registry.register(
            "loop_duration_seconds",
            "Duration of controller loops (name: round, provision, plan (rounds that plan pending pods), provisioning_requests, disrupt, lifecycle, gc)",
            m.loop_seconds.clone(),
        );
        registry.register(
            "pending_to_claim_seconds",
            "From a pod becoming unschedulable to its NodeClaim",
            m.pending_to_claim_seconds.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica is the leader",
            m.leader.clone(),
        );
        registry.register(
            "cloud_api_calls",
            "Cloud provider operations by provider, operation and outcome code (each includes the provider's own retries)",
            m.cloud_calls.clone(),
        );
        registry.register(
            "cloud_api_call_duration_seconds",
            "Duration of cloud API calls by provider and operation",
            m.cloud_call_seconds.clone(),
        );
        registry.register(
            "nodepool_usage",
            "NodePool usage by resource (cpu in cores, memory in bytes, nodes, devices)",
            m.nodepool_usage.clone(),
        );
        registry.register(
            "nodepool_limit",
            "NodePool limits by resource, for the resources a pool limits",
            m.nodepool_limit.clone(),
        );
        registry.register(
            "launch_to_initialized_seconds",
            "From a NodeClaim's creation to its node being initialized",
            m.launch_to_initialized_seconds.clone(),
        );
        registry.register(
            "oldest_pending_pod_seconds",
            "Age of the oldest unschedulable pod",
            m.oldest_pending_pod_seconds.clone(),
        );
        registry.register(
            "last_round_timestamp_seconds",
            "Unix time of the last completed reconcile round of the leader",
            m.last_round_timestamp_seconds.clone(),
        );
        registry.register(
            "unremovable_nodes",
            "Managed nodes the last disruption round kept, by NodePool and reason",
            m.unremovable_nodes.clone(),
        );
        registry.register(
            "build_info",
            "Always 1: the build and provider of this process",
            m.build_info.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Metrics in which every labelled family has one example series, so that [`Self::render`]
    /// names every series the controller can export (families print nothing until a series
    /// exists). Dashboards and alert rules are checked against it.
    pub fn with_every_family() -> Self {
        let m = Self::new();
        let x = || "example".to_string();
        let _ = m.nodeclaims.get_or_create(&PhaseLabel { phase: x() });
        let _ = m.launches.get_or_create(&PoolLabel { pool: x() });
        let _ = m
            .launch_failures
            .get_or_create(&ReasonLabel { reason: x() });
        let _ = m.disruptions.get_or_create(&ReasonLabel { reason: x() });
        let _ = m.gpu_allocatable.get_or_create(&ModelLabel { model: x() });
        let _ = m.gpu_allocated.get_or_create(&ModelLabel { model: x() });
        let _ = m.loop_seconds.get_or_create(&LoopLabel { name: x() });
        let _ = m.provisioning_requests.get_or_create(&ProvReqLabel {
            class: x(),
            state: x(),
        });
        m.cloud_call(&x(), &x(), &x(), 0.0);
        m.set_pool_usage(&x(), &Resources::new().with(resource_names::CPU, 1000), 1);
        m.set_pool_limits(
            &x(),
            &Resources::new().with(resource_names::CPU, 1000),
            Some(1),
        );
        let _ = m.build_info.get_or_create(&BuildLabel {
            version: x(),
            provider: x(),
        });
        m.set_unremovable([((x(), x()), 1)]);
        m
    }

    /// Replaces every `unremovable_nodes` series with `counts` ((pool, reason) -> nodes).
    pub fn set_unremovable(&self, counts: impl IntoIterator<Item = ((String, String), i64)>) {
        self.unremovable_nodes.clear();
        for ((nodepool, reason), n) in counts {
            self.unremovable_nodes
                .get_or_create(&PoolReasonLabel { nodepool, reason })
                .set(n);
        }
    }

    /// Sets a NodePool's usage gauges: every resource of `usage` (cpu in cores) and `nodes`.
    pub fn set_pool_usage(&self, pool: &str, usage: &Resources, nodes: i64) {
        self.set_pool(&self.nodepool_usage, pool, usage, Some(nodes));
    }

    /// Sets a NodePool's limit gauges, for the resources it limits.
    pub fn set_pool_limits(&self, pool: &str, limits: &Resources, nodes: Option<i64>) {
        self.set_pool(&self.nodepool_limit, pool, limits, nodes);
    }

    fn set_pool(
        &self,
        family: &Family<PoolResourceLabel, FloatGauge>,
        pool: &str,
        amounts: &Resources,
        nodes: Option<i64>,
    ) {
        let label = |resource: &str| PoolResourceLabel {
            nodepool: pool.into(),
            resource: resource.into(),
        };
        for (name, amount) in amounts.iter() {
            // Cores, as Prometheus' node exporters count them; every other unit is Kubernetes'.
            let value = if name == resource_names::CPU {
                amount as f64 / 1000.0
            } else {
                amount as f64
            };
            family.get_or_create(&label(name)).set(value);
        }
        if let Some(n) = nodes {
            family.get_or_create(&label("nodes")).set(n as f64);
        }
    }

    /// Counts one cloud API call attempt and its duration.
    pub fn cloud_call(&self, provider: &str, operation: &str, code: &str, seconds: f64) {
        let operation = operation.replace(' ', "_");
        self.cloud_calls
            .get_or_create(&CloudCallLabel {
                provider: provider.into(),
                operation: operation.clone(),
                code: code.into(),
            })
            .inc();
        self.cloud_call_seconds
            .get_or_create(&CloudOpLabel {
                provider: provider.into(),
                operation,
            })
            .observe(seconds);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut s, &self.registry);
        s
    }
}

/// What the HTTP handlers read.
pub struct Health {
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// Set once every reflector has listed.
    pub ready: AtomicBool,
    /// Liveness: whether the leader's loop still completes rounds.
    pub liveness: Liveness,
}

/// Whether the reconcile loop is stuck: the leader must complete a round within `stall_after`
/// of the previous one (or of becoming leader). A follower runs no rounds and is always live,
/// so a stuck follower is not restarted for nothing and a live leader is never killed for a
/// follower's silence.
#[derive(Debug)]
pub struct Liveness {
    stall_after_ms: i64,
    leading: AtomicBool,
    /// Unix milliseconds of the last completed round, or of becoming leader.
    progress_ms: AtomicI64,
}

impl Liveness {
    /// A loop that stalls after `stall_after` without a completed round.
    pub fn new(stall_after: Duration) -> Self {
        Self {
            stall_after_ms: i64::try_from(stall_after.as_millis()).unwrap_or(i64::MAX),
            leading: AtomicBool::new(false),
            progress_ms: AtomicI64::new(0),
        }
    }

    /// Records whether this replica leads at `now_ms`; becoming leader starts the clock.
    pub fn set_leading(&self, leading: bool, now_ms: i64) {
        let was = self.leading.swap(leading, Ordering::SeqCst);
        if leading && !was {
            self.progress_ms.store(now_ms, Ordering::SeqCst);
        }
    }

    /// Records a completed round at `now_ms`.
    pub fn round_done(&self, now_ms: i64) {
        self.progress_ms.store(now_ms, Ordering::SeqCst);
    }

    /// `Err` with the stall's length when the leader has completed no round for too long.
    pub fn check(&self, now_ms: i64) -> std::result::Result<(), String> {
        if !self.leading.load(Ordering::SeqCst) {
            return Ok(());
        }
        let since = now_ms.saturating_sub(self.progress_ms.load(Ordering::SeqCst));
        if since > self.stall_after_ms {
            Err(format!(
                "no reconcile round completed for {} s (limit {} s)",
                since / 1000,
                self.stall_after_ms / 1000
            ))
        } else {
            Ok(())
        }
    }
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

async fn healthz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    match h.liveness.check(now_ms()) {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn metrics(State(h): State<Arc<Health>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.render(),
    )
}

async fn readyz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    if h.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until the process ends; returns the
/// bound address (useful with port 0).
///
/// # Errors
/// [`Error::Http`] when the address cannot be bound.
pub async fn serve(addr: SocketAddr, health: Arc<Health>) -> Result<SocketAddr> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(health);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Http {
            addr: addr.to_string(),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| Error::Http {
        addr: addr.to_string(),
        source,
    })?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_prefix() {
        let m = Metrics::new();
        m.pending_pods.set(3);
        m.nodeclaims
            .get_or_create(&PhaseLabel {
                phase: "launched".into(),
            })
            .set(1);
        m.launches
            .get_or_create(&PoolLabel { pool: "gpu".into() })
            .inc();
        let text = m.render();
        assert!(text.contains("gpu_autoscaler_pending_pods 3"), "{text}");
        assert!(
            text.contains("gpu_autoscaler_nodeclaims{phase=\"launched\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("gpu_autoscaler_launches_total{pool=\"gpu\"} 1"),
            "{text}"
        );
        m.cloud_call("aws", "launch group", "throttled", 0.5);
        let text = m.render();
        assert!(
            text.contains(
                "gpu_autoscaler_cloud_api_calls_total{provider=\"aws\",operation=\"launch_group\",code=\"throttled\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_leader_without_rounds_is_not_live_and_a_follower_always_is() {
        let l = Liveness::new(Duration::from_secs(60));
        assert!(l.check(1_000_000).is_ok(), "a follower is live");
        l.set_leading(true, 1_000_000);
        assert!(
            l.check(1_059_000).is_ok(),
            "within the limit of becoming leader"
        );
        let err = l.check(1_061_000).expect_err("stalled");
        assert!(err.contains("61 s"), "{err}");
        l.round_done(1_061_000);
        assert!(l.check(1_100_000).is_ok(), "a round restarts the clock");
        // Staying leader does not restart the clock; only a new leadership does.
        l.set_leading(true, 1_200_000);
        assert!(l.check(1_200_000).is_err());
        l.set_leading(false, 1_200_000);
        assert!(l.check(1_200_000).is_ok(), "a follower again");
        l.set_leading(true, 1_300_000);
        assert!(
            l.check(1_300_000).is_ok(),
            "a new leadership starts the clock"
        );
    }
}
