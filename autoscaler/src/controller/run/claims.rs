//! The NodeClaim lifecycle stage: one [`lifecycle::step`] per claim performed, pod events
//! persisted onto claims, and deleted managed Nodes terminated (`termination`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use autoscaler_core::instance::InstanceType;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::ResourceExt;
use nodepools::conditions::{self, reasons};
use nodepools::{NodeClaim, NodePool};
use providers::{CloudProvider, InstanceState};
use serde_json::json;

use crate::controller::actuator::{
    has_finalizer, reference, set_condition, with_finalizer, without_finalizer,
};
use crate::controller::atomic;
use crate::controller::error::Result;
use crate::controller::keys;
use crate::controller::lifecycle::{self, Action, Phase, Timeouts};
use crate::controller::translate;

use super::{Controller, Shared, epoch};

/// How long a finished termination task keeps its claim or Node from a second one.
const TERMINATED_MEMORY: Duration = Duration::from_secs(10);

/// Releases the controller's finalizer of `claim`, whose instance is terminated.
async fn release_claim<P: CloudProvider>(shared: &Shared<P>, claim: &NodeClaim) -> Result<()> {
    let f = without_finalizer(claim.finalizers());
    tracing::info!(claim = %claim.name_any(), at = epoch(), "terminated");
    shared.actuator.set_claim_finalizers(claim, &f).await
}

/// Least time between two `lastPodEventTime` writes to one NodeClaim, seconds.
const POD_EVENT_WRITE_EVERY_S: i64 = 5;

impl<P: CloudProvider + 'static> Controller<P> {
    /// The stage: every claim's lifecycle step, pod events onto claims, deleted Nodes
    /// terminated.
    pub(super) async fn claims_stage(&mut self) {
        let t = Instant::now();
        self.lifecycle().await;
        self.roll_back_atomic().await;
        self.persist_pod_events().await;
        self.terminate_nodes().await;
        self.observe("lifecycle", t);
    }

    /// Deletes the other claims of an atomic NodePool's scale-up that failed part-way
    /// ([`atomic::rollbacks`]).
    async fn roll_back_atomic(&self) {
        for name in atomic::rollbacks(&self.stores.claims.state(), epoch()) {
            tracing::info!(claim = %name, "atomic scale-up failed part-way: rolling back");
            if let Err(e) = self.shared.actuator.delete_claim(&name).await {
                tracing::warn!(claim = %name, error = %e, "rolling back an atomic scale-up");
            }
        }
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts {
            registration_s: crate::controller::settings::whole_seconds(
                self.args.registration_timeout,
            ),
            initialization_s: crate::controller::settings::whole_seconds(
                self.args.initialization_timeout,
            ),
            device_plugin_s: crate::controller::settings::whole_seconds(
                self.args.device_plugin_timeout,
            ),
        }
    }

    /// One [`lifecycle::step`] per NodeClaim.
    async fn lifecycle(&mut self) {
        // Launches need the pools' catalogs; after a restart they are not loaded yet.
        let pools = self.stores.pools.state();
        let types = self.instance_types(&pools).await;
        let slices = self
            .stores
            .dra
            .get()
            .map(|d| d.slices.state())
            .unwrap_or_default();
        let claims = self.stores.claims.state();
        let nodes = self.stores.nodes.state();
        let by_pid: HashMap<&str, &Arc<Node>> = nodes
            .iter()
            .filter_map(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .map(|p| (p, n))
            })
            .collect();
        let now = epoch();
        let timeouts = self.timeouts();
        self.round_instances = None;
        // Claims gone since are no longer held (the warning is once per held claim).
        self.held
            .retain(|n| claims.iter().any(|c| c.name_any() == *n));
        // Forget launches the store has caught up with.
        {
            let mut l = self.shared.launching.lock().expect("lock");
            l.retain(|name, at| {
                let pending = claims
                    .iter()
                    .find(|c| c.name_any() == *name)
                    .is_some_and(|c| lifecycle::phase(c) == Phase::Pending);
                // A launch that failed transiently is retried after this pause; one that
                // succeeded is forgotten as soon as the store shows the claim launched.
                pending && at.elapsed() < Duration::from_secs(10)
            });
        }
        for claim in &claims {
            let name = claim.name_any();
            let node = lifecycle::provider_id(claim)
                .and_then(|p| by_pid.get(p))
                .map(|n| n.as_ref());
            let dra = dra_devices(claim, node, &pools, &types, &slices);
            let action = lifecycle::step_with_dra(claim, node, dra.as_ref(), now, &timeouts);
            if let Err(e) = self.perform(claim, node, action).await {
                tracing::warn!(claim = %name, error = %e, "NodeClaim lifecycle");
            }
        }
    }

    async fn perform(
        &mut self,
        claim: &Arc<NodeClaim>,
        node: Option<&Node>,
        action: Action,
    ) -> Result<()> {
        let name = claim.name_any();
        let status = || claim.status.clone().unwrap_or_default();
        let ts = jiff::Timestamp::now();
        match action {
            Action::Wait => Ok(()),
            Action::AddFinalizer => {
                let mut f = claim.finalizers().to_vec();
                f.push(keys::FINALIZER.into());
                self.shared.actuator.set_claim_finalizers(claim, &f).await
            }
            Action::Launch => {
                // A live ProvisioningRequest's claims are launched together by its loop when
                // the cloud has an atomic group launch; so are an atomic NodePool's.
                if self.launched_by_request(claim) {
                    return Ok(());
                }
                match atomic::group_of(claim).filter(|_| self.shared.provider.atomic_groups()) {
                    Some((id, size)) => {
                        let members = atomic::members(&self.stores.claims.state(), &id);
                        if atomic::ready_to_launch(&members, size) {
                            self.spawn_group_launch(members);
                        }
                    }
                    None => self.spawn_launch(claim.clone()),
                }
                Ok(())
            }
            Action::Register { node: node_name } => {
                let Some(n) = node else { return Ok(()) };
                crate::controller::crashpoint::reached("register");
                self.adopt_node(claim, n, &node_name).await?;
                let mut s = status();
                s.node_name = Some(node_name.clone());
                set_condition(
                    &mut s.conditions,
                    (conditions::REGISTERED, true),
                    reasons::SUCCEEDED,
                    "",
                    ts,
                    claim.metadata.generation,
                );
                set_condition(
                    &mut s.conditions,
                    (conditions::INITIALIZED, false),
                    reasons::NODE_NOT_READY,
                    "the Node is not Ready",
                    ts,
                    claim.metadata.generation,
                );
                tracing::info!(claim = %name, node = %node_name, "registered");
                self.shared
                    .actuator
                    .patch_claim_status(&name, &json!(s))
                    .await
            }
            Action::Reregister { node: node_name } => {
                let Some(n) = node else { return Ok(()) };
                tracing::warn!(claim = %name, node = %node_name, "the claim's Node was registered again without the finalizer: labelling and finalizing it again");
                self.adopt_node(claim, n, &node_name).await
            }
            Action::NotInitialized { reason, message } => {
                let mut s = status();
                set_condition(
                    &mut s.conditions,
                    (conditions::INITIALIZED, false),
                    reason,
                    &message,
                    ts,
                    claim.metadata.generation,
                );
                set_condition(
                    &mut s.conditions,
                    (conditions::READY, false),
                    reason,
                    &message,
                    ts,
                    claim.metadata.generation,
                );
                self.shared
                    .actuator
                    .patch_claim_status(&name, &json!(s))
                    .await
            }
            Action::Initialize => {
                crate::controller::crashpoint::reached("initialize");
                if let Some(created) = &claim.metadata.creation_timestamp {
                    let secs = (ts.as_millisecond() - created.0.as_millisecond()) as f64 / 1000.0;
                    self.shared
                        .metrics
                        .launch_to_initialized_seconds
                        .observe(secs.max(0.0));
                }
                let mut s = status();
                for c in [conditions::INITIALIZED, conditions::READY] {
                    set_condition(
                        &mut s.conditions,
                        (c, true),
                        reasons::SUCCEEDED,
                        "",
                        ts,
                        claim.metadata.generation,
                    );
                }
                tracing::info!(claim = %name, "initialized");
                self.shared
                    .actuator
                    .patch_claim_status(&name, &json!(s))
                    .await
            }
            Action::ResourceMismatch { message } => self.report_mismatch(claim, message).await,
            Action::Delete { reason, failed } => {
                tracing::info!(claim = %name, %reason, "deleting NodeClaim");
                if failed {
                    self.warm_backoff.failed(&name, &reason, epoch());
                }
                self.shared
                    .actuator
                    .event(
                        &reference(claim.as_ref()),
                        true,
                        "NodeClaimDeleted",
                        "Delete",
                        reason,
                    )
                    .await;
                self.batcher.flag(self.millis());
                self.shared.actuator.delete_claim(&name).await
            }
            Action::Terminate {
                provider_id,
                node: node_name,
            } => {
                // The Node goes first (its own finalizer path terminates too); the claim's
                // finalizer is released only once the Node is gone and the instance terminated.
                if let Some(nn) = &node_name
                    && let Some(n) = self.stores.node(nn)
                {
                    if n.metadata.deletion_timestamp.is_none() {
                        self.keep_node_finalizer(nn).await?;
                        self.shared.actuator.delete_node(nn).await?;
                    }
                    return Ok(());
                }
                let shared = self.shared.clone();
                match provider_id {
                    Some(pid) => {
                        let claim = claim.clone();
                        self.spawn_termination(format!("claim/{name}"), async move {
                            shared
                                .cloud("terminate", || shared.provider.delete(&pid))
                                .await?;
                            release_claim(&shared, &claim).await
                        });
                        return Ok(());
                    }
                    None => {
                        // No instance recorded: the launch may still be running here, or
                        // may have created one whose answer was lost (a timeout, a crash
                        // before the status write). Found by its claim tag, not left to GC.
                        if shared.in_flight.lock().expect("lock").contains(&name) {
                            return Ok(());
                        }
                        let found = self.instances_of_claim(&name).await?;
                        if self.runs_pods_that_must_leave(&found).await? {
                            if self.held.insert(name.clone()) {
                                tracing::warn!(claim = %name, instances = ?found, "an instance the deleted claim never recorded runs pods that must move first: terminating it waits until they are gone");
                            }
                            return Ok(());
                        }
                        for pid in found {
                            tracing::info!(claim = %name, instance = %pid, "terminating an instance the claim never recorded");
                            shared
                                .cloud("terminate", || shared.provider.delete(&pid))
                                .await?;
                        }
                    }
                }
                release_claim(&self.shared, claim).await
            }
        }
    }

    /// Labels and taints the claim's Node `n` as its NodePool says (the cloud's boot config
    /// normally did already) and puts the finalizer on it, in one patch carrying the cached
    /// resourceVersion (a stale cache fails it; the next round tries again).
    ///
    /// # Errors
    /// The API error of the patch.
    async fn adopt_node(&self, claim: &NodeClaim, n: &Node, node_name: &str) -> Result<()> {
        let name = claim.name_any();
        let mut node_labels = n.labels().clone();
        for (k, v) in claim.labels() {
            node_labels.insert(k.clone(), v.clone());
        }
        node_labels.insert(keys::CLAIM_LABEL.into(), name.clone());
        let mut taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        for t in &claim.spec.taints {
            if !taints
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect)
            {
                taints.push(k8s_openapi::api::core::v1::Taint {
                    key: t.key.clone(),
                    value: (!t.value.is_empty()).then(|| t.value.clone()),
                    effect: t.effect.clone(),
                    time_added: None,
                });
            }
        }
        let finalizers = with_finalizer(n.finalizers());
        self.shared
            .actuator
            .patch_node(
                node_name,
                &json!({
                    "metadata": {
                        "labels": node_labels,
                        "finalizers": finalizers,
                        "resourceVersion": n.resource_version(),
                    },
                    "spec": {"taints": taints},
                }),
            )
            .await
    }

    /// Puts the Node finalizer back on Node `name` when the cache shows it alive without one,
    /// just before the Node is deleted. The lifecycle's [`Action::Reregister`] restores it each
    /// round; this covers a Node registered again since that round's look: deleted without
    /// the finalizer it would go at once under its pods, and its still-claimed instance would
    /// register it again. The resourceVersion makes a stale cache fail the patch rather than
    /// overwrite finalizers added since.
    ///
    /// # Errors
    /// The API error of the patch.
    pub(super) async fn keep_node_finalizer(&self, name: &str) -> Result<()> {
        let Some(n) = self.stores.node(name) else {
            return Ok(());
        };
        if n.metadata.deletion_timestamp.is_some() || has_finalizer(&n.metadata) {
            return Ok(());
        }
        self.shared
            .actuator
            .patch_node(
                name,
                &json!({"metadata": {
                    "finalizers": with_finalizer(n.finalizers()),
                    "resourceVersion": n.resource_version(),
                }}),
            )
            .await
    }

    /// Runs `work` (a cloud termination, then the release of a finalizer) in a task beside
    /// the loop, one task per `key` at a time. Under cloud faults one termination retries
    /// for seconds, and a loop that waited for each planned no pending pod meanwhile (a
    /// restarted controller spent its first seconds on the terminations its predecessor left).
    /// A task that failed lets the next round try again; one that succeeded keeps its key
    /// for [`TERMINATED_MEMORY`], until the cache shows the released finalizer. A controller
    /// killed mid-task leaves the finalizer in place: the next one terminates again (a delete
    /// of an instance already gone succeeds).
    pub(super) fn spawn_termination<F>(&self, key: String, work: F)
    where
        F: std::future::Future<Output = Result<()>> + Send + 'static,
    {
        {
            let mut t = self.shared.terminating.lock().expect("lock");
            t.retain(|_, done| done.is_none_or(|at| at.elapsed() < TERMINATED_MEMORY));
            if t.contains_key(&key) {
                return;
            }
            t.insert(key.clone(), None);
        }
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let result = work.await;
            let mut t = shared.terminating.lock().expect("lock");
            match result {
                Ok(()) => {
                    t.insert(key, Some(Instant::now()));
                }
                Err(e) => {
                    tracing::warn!(%key, error = %e, "terminating; retried next round");
                    t.remove(&key);
                }
            }
        });
    }

    /// The cloud's instances, listed at most once per lifecycle round: the lookups of a round
    /// (claims that never recorded their instance, deleted Nodes to drain) share one call.
    ///
    /// # Errors
    /// The cloud's, from the list (asked again by the next lookup).
    pub(super) async fn listed_this_round(&mut self) -> Result<&[providers::Instance]> {
        if self.round_instances.is_none() {
            let shared = self.shared.clone();
            let listed = shared.cloud("list", || shared.provider.list()).await?;
            self.round_instances = Some(listed);
        }
        Ok(self.round_instances.as_deref().unwrap_or_default())
    }

    /// The live instances tagged with `claim`, from one cloud list per lifecycle round (a
    /// round that deletes many never-launched claims lists once).
    async fn instances_of_claim(&mut self, claim: &str) -> Result<Vec<String>> {
        Ok(self
            .listed_this_round()
            .await?
            .iter()
            .filter(|i| i.claim.as_deref() == Some(claim))
            .filter(|i| i.state != InstanceState::Terminated)
            .map(|i| i.provider_id.clone())
            .collect())
    }

    /// Whether a Node of one of `instances` (by providerID) runs pods that must move before it
    /// goes (read fresh from the API server). Termination does not drain: that is disruption's
    /// work, within PodDisruptionBudgets.
    async fn runs_pods_that_must_leave(&self, instances: &[String]) -> Result<bool> {
        let nodes: Vec<String> = self
            .stores
            .nodes
            .state()
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_ref())
                    .is_some_and(|p| instances.contains(p))
            })
            .map(|n| n.name_any())
            .collect();
        if nodes.is_empty() {
            return Ok(false);
        }
        Ok(!self.pods_moving_with(&nodes).await?.is_empty())
    }

    /// Writes the watch's pod events onto the claims of their nodes (`lastPodEventTime`), where
    /// they outlive a restart; disruption reads the later of them and the watch's own record
    /// ([`crate::controller::snapshot::take_pod_events`]). Under pod churn a claim is written
    /// at most once per [`POD_EVENT_WRITE_EVERY_S`]: only just after a restart can
    /// consolidation start that much before `consolidateAfter` is over, never more.
    async fn persist_pod_events(&mut self) {
        let claims = self.stores.claims.state();
        let node_of = |c: &NodeClaim| c.status.as_ref().and_then(|s| s.node_name.clone());
        let live: HashSet<String> = claims.iter().filter_map(|c| node_of(c)).collect();
        let events = self.stores.pods.pod_events(|n| live.contains(n));
        for c in &claims {
            let Some(node) = node_of(c) else { continue };
            let Some(&at) = events.get(node.as_str()) else {
                continue;
            };
            let written = c
                .status
                .as_ref()
                .and_then(|s| s.last_pod_event_time.as_ref())
                .map(translate::epoch_seconds);
            if written.is_some_and(|w| at < w + POD_EVENT_WRITE_EVERY_S) {
                continue;
            }
            let Ok(t) = jiff::Timestamp::from_second(at) else {
                continue;
            };
            if let Err(e) = self
                .shared
                .actuator
                .patch_claim_status(&c.name_any(), &json!({"lastPodEventTime": t.to_string()}))
                .await
            {
                tracing::warn!(claim = %c.name_any(), error = %e, "recording the last pod event");
            }
        }
    }
}

/// The DRA devices a claim launched for pods with DRA claims waits for: its instance type's
/// template against what its Node's slices publish (`None` for other claims, or before a Node
/// registered).
fn dra_devices(
    claim: &NodeClaim,
    node: Option<&Node>,
    pools: &[Arc<NodePool>],
    types: &BTreeMap<String, Arc<Vec<InstanceType>>>,
    slices: &[Arc<ResourceSlice>],
) -> Option<lifecycle::DraDevices> {
    claim
        .annotations()
        .get(keys::DRA_ANNOTATION)
        .filter(|v| v.as_str() == "true")?;
    let node_name = node?.metadata.name.as_deref()?;
    let pool = &claim.spec.node_pool;
    let it_name = claim.status.as_ref()?.instance_type.as_deref()?;
    let it = types.get(pool)?.iter().find(|t| t.name == it_name)?;
    let partitions = pools
        .iter()
        .find(|p| p.name_any() == *pool)
        .and_then(|p| p.spec.gpu_sharing.as_ref())
        .is_some_and(|s| s.mig.is_some());
    Some(lifecycle::DraDevices {
        expected: crate::controller::dra::expected_devices(it, partitions),
        published: crate::controller::dra::published_devices(slices, node_name),
    })
}
