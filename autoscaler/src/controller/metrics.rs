//! Prometheus metrics (`gpu_autoscaler_*`) and the `/metrics`, `/healthz`, `/readyz` server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// `provision`, `disrupt`, `lifecycle`, `gc`.
    pub name: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

/// Every metric of the controller.
pub struct Metrics {
    registry: Registry,
    /// Pods the scheduler marked unschedulable.
    pub pending_pods: Gauge,
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
            registry: Registry::default(),
        };
        registry.register("pending_pods", "Unschedulable pods", m.pending_pods.clone());
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
            "Duration of controller loops",
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
        Metrics { registry, ..m }
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
        .route("/healthz", get(|| async { "ok" }))
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
    }
}
