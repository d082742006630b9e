//! The unready-node halt, as the Cluster Autoscaler does it: every round the nodes' readiness is
//! judged by the core's [`health::assess`]; while the cluster is unhealthy the provisioning and
//! disruption planning stages do nothing (claims already made, commands already running and
//! garbage collection go on) and the unneeded timers restart, and each NodePool's
//! `ClusterHealthy` condition says why. A change either way is announced once with an event on
//! every NodePool (`ClusterUnhealthy`, Warning; `ClusterHealthy`, Normal) and in the log.

use std::collections::HashMap;

use autoscaler_core::health::{self, ClusterHealth, HealthConfig, NodeReadiness};
use k8s_openapi::api::core::v1::Node;
use nodepools::NodeClaim;
use providers::CloudProvider;

use crate::controller::actuator::reference;
use crate::controller::lifecycle::{self, Phase};
use crate::controller::translate;

use super::{Controller, epoch};

/// How long an unmanaged node may take to turn Ready before it counts as unready (the Cluster
/// Autoscaler's `MaxNodeStartupTime`, 15 minutes). A managed node has started once its
/// NodeClaim is initialized.
pub const NODE_STARTUP_S: i64 = 15 * 60;

/// A node's part in the health check: managed nodes (found by providerID among `claims`) have
/// started once their claim initialized; others once they are [`NODE_STARTUP_S`] old.
pub fn readiness(n: &Node, claims: &HashMap<&str, &NodeClaim>, now: i64) -> NodeReadiness {
    let started = match n
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| claims.get(p))
    {
        Some(c) => lifecycle::phase(c) == Phase::Initialized,
        None => n
            .metadata
            .creation_timestamp
            .as_ref()
            .map(translate::epoch_seconds)
            .is_none_or(|t| now - t >= NODE_STARTUP_S),
    };
    NodeReadiness::of(
        translate::node_ready(n),
        started,
        n.metadata.deletion_timestamp.is_some(),
    )
}

impl<P: CloudProvider + 'static> Controller<P> {
    /// The stage: the cluster's health this round, announced when it changed.
    pub(super) async fn health_stage(&mut self) {
        let claims = self.stores.claims.state();
        let by_pid: HashMap<&str, &NodeClaim> = claims
            .iter()
            .filter_map(|c| Some((c.status.as_ref()?.provider_id.as_deref()?, c.as_ref())))
            .collect();
        let now = epoch();
        let config = HealthConfig {
            max_unready_percentage: self.args.max_total_unready_percentage,
            ok_unready_count: self.args.ok_total_unready_count as usize,
        };
        let nodes = self.stores.nodes.state();
        let h = health::assess(nodes.iter().map(|n| readiness(n, &by_pid, now)), &config);
        self.shared
            .metrics
            .cluster_safe_to_autoscale
            .set(i64::from(h.healthy));
        self.shared.metrics.unready_nodes.set(h.unready as i64);
        let changed = self
            .health
            .as_ref()
            .is_none_or(|old| old.healthy != h.healthy);
        let was_known = self.health.is_some();
        if changed && (was_known || !h.healthy) {
            self.announce(&h).await;
            // The pools' ClusterHealthy condition is written at once, not within 5 s.
            self.last_pool_status = None;
        }
        self.health = Some(h);
    }

    /// Whether scaling is halted this round.
    pub(super) fn halted(&self) -> bool {
        self.health.as_ref().is_some_and(|h| !h.healthy)
    }

    async fn announce(&self, h: &ClusterHealth) {
        if h.healthy {
            tracing::info!(
                unready = h.unready,
                nodes = h.nodes,
                "cluster healthy again: scaling resumes"
            );
        } else {
            tracing::warn!(unready = h.unready, nodes = h.nodes, message = %h.message, "cluster unhealthy: scaling halted");
        }
        let (reason, note) = if h.healthy {
            ("ClusterHealthy", format!("scaling resumed: {}", h.message))
        } else {
            ("ClusterUnhealthy", h.message.clone())
        };
        for np in self.stores.pools.state() {
            self.shared
                .actuator
                .event(
                    &reference(np.as_ref()),
                    !h.healthy,
                    reason,
                    "Scale",
                    note.clone(),
                )
                .await;
        }
    }

    /// The `ClusterHealthy` condition of every NodePool: (status, reason, message).
    pub(super) fn health_condition(&self) -> (bool, &'static str, String) {
        use nodepools::conditions::reasons;
        match &self.health {
            Some(h) if !h.healthy => (false, reasons::TOO_MANY_UNREADY_NODES, h.message.clone()),
            Some(h) => (
                true,
                reasons::UNREADY_NODES_WITHIN_LIMITS,
                h.message.clone(),
            ),
            None => (true, reasons::UNREADY_NODES_WITHIN_LIMITS, String::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ready: Option<&str>, pid: Option<&str>, created: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "creationTimestamp": created},
            "spec": {"providerID": pid},
            "status": {"conditions": ready.map(|s| vec![serde_json::json!({"type": "Ready", "status": s})])},
        }))
        .expect("node")
    }

    fn claim(initialized: bool) -> NodeClaim {
        let conditions: Vec<serde_json::Value> = ["Launched", "Registered", "Initialized"]
            .iter()
            .map(|t| {
                let ok = *t != "Initialized" || initialized;
                serde_json::json!({"type": t, "status": if ok {"True"} else {"False"},
                    "reason": "x", "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"nodePool": "p", "requirements": [], "resources": {}},
            "status": {"providerID": "kwok://c", "nodeName": "n", "conditions": conditions},
        }))
        .expect("claim")
    }

    /// A managed node has started once its claim initialized; an unmanaged one after the
    /// Cluster Autoscaler's 15 minutes; `Unknown` is not ready.
    #[test]
    fn readiness_of_managed_and_unmanaged_nodes() {
        use NodeReadiness::*;
        let t0 = "2024-01-01T00:00:00Z";
        let at = |mins: i64| {
            jiff::Timestamp::from_second(1_704_067_200 + mins * 60)
                .expect("time")
                .as_second()
        };
        let init = claim(true);
        let booting = claim(false);
        let managed_init = HashMap::from([("kwok://c", &init)]);
        let managed_booting = HashMap::from([("kwok://c", &booting)]);
        let none = HashMap::new();
        let pid = Some("kwok://c");
        for (n, claims, now, expected) in [
            (node(Some("True"), pid, t0), &managed_init, at(1), Ready),
            (
                node(Some("Unknown"), pid, t0),
                &managed_init,
                at(1),
                Unready,
            ),
            (
                node(Some("False"), pid, t0),
                &managed_booting,
                at(30),
                NotStarted,
            ),
            (node(Some("False"), None, t0), &none, at(14), NotStarted),
            (node(Some("False"), None, t0), &none, at(15), Unready),
            (node(None, None, t0), &none, at(20), Unready),
        ] {
            assert_eq!(readiness(&n, claims, now), expected, "{n:?}");
        }
    }
}
