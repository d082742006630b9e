//! Deleted managed Nodes: drained, then their claim deleted, their instance terminated and
//! the finalizer released.
//!
//! Every path that removes a managed Node ends here: consolidation (which has drained it
//! already), a NodeClaim deleted by a user or by the lifecycle, and `kubectl delete node`.
//! The last two used to terminate the instance under whatever ran on it; now the Node is
//! drained first, the way `kubectl drain` and Karpenter's termination controller do it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use providers::{CloudProvider, InstanceState};
use serde_json::json;

use crate::controller::actuator::{Evicted, has_finalizer, reference, without_finalizer};
use crate::controller::cache::CachedPod;
use crate::controller::error::Result;
use crate::controller::snapshot::{claims_by_provider_id, has_disruption_taint};

use super::{Controller, epoch};

/// How long a Node's instance, once seen running, is taken to be running without asking the
/// cloud again (one `get` per draining Node per loop round would eat into the cloud's rate
/// limit).
const INSTANCE_RECHECK: Duration = Duration::from_secs(5);

/// After a PodDisruptionBudget refuses an eviction, the Node's next evictions wait this long
/// (the Eviction API answers 429 until the budget's pods are back).
const EVICTION_RETRY: Duration = Duration::from_secs(2);

/// What the termination of one deleted Node has done so far, kept across loop rounds.
#[derive(Debug, Default)]
pub(super) struct Draining {
    /// When the instance was last seen running.
    alive_at: Option<Instant>,
    /// No eviction before this (a PodDisruptionBudget refused one).
    evict_after: Option<Instant>,
    /// Whether the start of the drain and its protected pods were reported.
    reported: bool,
}

/// Why a pod that must leave a deleted Node is not evicted: it is protected, and it holds the
/// termination until it ends or is deleted (`None`: evict it).
fn protection(pod: &CachedPod, now: i64) -> Option<String> {
    let core = pod.core.as_ref().ok()?;
    if let Some(why) = autoscaler_core::disruption::pod_protection(core, now) {
        return Some(why);
    }
    let safe = core
        .annotations
        .get(autoscaler_core::disruption::SAFE_TO_EVICT);
    (safe.map(String::as_str) == Some("false")).then(|| {
        format!(
            "pod {} has {}=false",
            pod.key,
            autoscaler_core::disruption::SAFE_TO_EVICT
        )
    })
}

impl<P: CloudProvider + 'static> Controller<P> {
    /// Every deleted Node carrying the finalizer: drained ([`Controller::drain`]), then its
    /// claim deleted, its instance terminated and the finalizer released. A failure is logged
    /// and retried on the next round; nothing is terminated while the drain is unfinished.
    pub(super) async fn terminate_nodes(&mut self) {
        let claims = self.stores.claims.state();
        let by_pid = claims_by_provider_id(&claims);
        let nodes = self.stores.nodes.state();
        let deleting: HashSet<String> = nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_some() && has_finalizer(&n.metadata))
            .map(|n| n.name_any())
            .collect();
        self.draining.retain(|n, _| deleting.contains(n));
        if deleting.is_empty() {
            return;
        }
        let mut on_node: HashMap<String, Vec<Arc<CachedPod>>> = HashMap::new();
        for p in self.stores.pods.state() {
            if let Some(n) = p.node_name.as_deref()
                && deleting.contains(n)
                && p.must_leave_with_node()
            {
                on_node.entry(n.to_string()).or_default().push(p);
            }
        }
        for n in nodes.iter().filter(|n| deleting.contains(&n.name_any())) {
            let name = n.name_any();
            let pods = on_node.remove(&name).unwrap_or_default();
            match self.drain(n, &pods).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "draining a deleted node; retried next round");
                    continue;
                }
            }
            // Drained: the claim, the instance and the finalizer go beside the loop.
            let pid = n.spec.as_ref().and_then(|s| s.provider_id.clone());
            let claim = pid
                .as_deref()
                .and_then(|p| by_pid.get(p))
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .map(|c| c.name_any());
            let shared = self.shared.clone();
            let node = n.clone();
            self.spawn_termination(format!("node/{name}"), async move {
                if let Some(c) = &claim {
                    shared.actuator.delete_claim(c).await?;
                }
                if let Some(pid) = &pid {
                    shared
                        .cloud("terminate", || shared.provider.delete(pid))
                        .await?;
                }
                let f = without_finalizer(node.finalizers());
                let rv = node.resource_version();
                shared
                    .actuator
                    .patch_node(
                        &node.name_any(),
                        &json!({"metadata": {"finalizers": f, "resourceVersion": rv}}),
                    )
                    .await?;
                tracing::info!(node = %node.name_any(), "node terminated");
                Ok(())
            });
        }
    }

    /// One round of draining the deleted Node `node`, whose pods that must leave are `pods`
    /// (from the cache); whether it is drained. Nothing to drain when the Node records no
    /// instance or its instance is gone (a spot interruption, a failure: its pods went with
    /// it). Otherwise the Node is tainted so that nothing new lands on it, and its pods are
    /// evicted through the Eviction API, so PodDisruptionBudgets hold (a refusal is retried
    /// after [`EVICTION_RETRY`]); pods protected by `karpenter.sh/do-not-disrupt` or
    /// `cluster-autoscaler.kubernetes.io/safe-to-evict=false` are not evicted and hold the
    /// termination until they end or are deleted. Drained once no pod must leave, by a fresh
    /// read from the API server (the cache may not have seen a pod bound just now).
    ///
    /// # Errors
    /// The API server's and the cloud's, from the taint, the evictions and the reads.
    async fn drain(&mut self, node: &Node, pods: &[Arc<CachedPod>]) -> Result<bool> {
        let name = node.name_any();
        let Some(pid) = node.spec.as_ref().and_then(|s| s.provider_id.clone()) else {
            return Ok(true);
        };
        if pods.is_empty() {
            return Ok(self.pods_that_must_leave(&[name]).await?.is_empty());
        }
        if !self.instance_running(&name, &pid).await? {
            tracing::info!(node = %name, "the deleted node's instance is gone: nothing to drain");
            return Ok(true);
        }
        let now = Instant::now();
        let state = self.draining.entry(name.clone()).or_default();
        if state.evict_after.is_some_and(|t| now < t) {
            return Ok(false);
        }
        let first = !std::mem::replace(&mut state.reported, true);
        if !has_disruption_taint(node) {
            self.taint(&name).await?;
        }
        let at = epoch();
        let mut protected = Vec::new();
        let mut refused = false;
        for p in pods {
            if let Some(why) = protection(p, at) {
                protected.push(why);
                continue;
            }
            match self.shared.actuator.evict(&p.key).await? {
                Evicted::Yes => {
                    self.shared.metrics.evictions.inc();
                    self.shared
                        .actuator
                        .event(
                            &p.reference(),
                            false,
                            "Evicted",
                            "Drain",
                            format!("evicted by gpu-autoscaler: its node {name} is being deleted"),
                        )
                        .await;
                }
                Evicted::Refused => {
                    self.shared.metrics.evictions_refused.inc();
                    refused = true;
                }
                Evicted::Gone => {}
            }
        }
        if refused && let Some(s) = self.draining.get_mut(&name) {
            s.evict_after = Some(now + EVICTION_RETRY);
        }
        if first {
            let note = if protected.is_empty() {
                format!(
                    "draining {} pods before the instance is terminated",
                    pods.len()
                )
            } else {
                format!(
                    "draining {} pods before the instance is terminated; waiting for protected pods to end: {}",
                    pods.len(),
                    protected.join("; ")
                )
            };
            tracing::info!(node = %name, "{note}");
            self.shared
                .actuator
                .event(
                    &reference(node),
                    !protected.is_empty(),
                    "Draining",
                    "Drain",
                    note,
                )
                .await;
        }
        Ok(false)
    }

    /// Whether the instance `pid` of the deleted Node `node` still runs: looked up in the
    /// cloud's instance list, listed at most once per round whatever the number of Nodes
    /// draining (shared with the lifecycle's lookups), and not again for a Node whose
    /// instance was seen running in the last [`INSTANCE_RECHECK`].
    ///
    /// # Errors
    /// The cloud's, from the list.
    async fn instance_running(&mut self, node: &str, pid: &str) -> Result<bool> {
        let state = self.draining.entry(node.to_string()).or_default();
        if state
            .alive_at
            .is_some_and(|t| t.elapsed() < INSTANCE_RECHECK)
        {
            return Ok(true);
        }
        let running = self
            .listed_this_round()
            .await?
            .iter()
            .any(|i| i.provider_id == pid && i.state != InstanceState::Terminated);
        if running && let Some(s) = self.draining.get_mut(node) {
            s.alive_at = Some(Instant::now());
        }
        Ok(running)
    }
}
