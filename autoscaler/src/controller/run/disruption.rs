//! The disruption stage: plan commands with the core's [`plan_disruption`] every
//! `--disruption-interval` (expiration first, then drift and consolidation, whose commands
//! the core decides), then run the queued jobs (taint, replace, drain, terminate).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use autoscaler_core::disruption::{
    DisruptionConfig, Verdict, narrow_empty, plan_disruption_cached, validate_at,
};
use autoscaler_core::duration;
use autoscaler_core::model::{DisruptionReason, PodKey};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use providers::CloudProvider;
use serde_json::json;

use crate::controller::actuator::{Evicted, reference};
use crate::controller::cache::CachedPod;
use crate::controller::error::Result;
use crate::controller::keys;
use crate::controller::lifecycle::{self, Phase};
use crate::controller::metrics::ReasonLabel;
use autoscaler_core::disruption::execute::{self as disrupt, Job, Stage};

use super::provisioning::*;
use super::{Controller, due, epoch};

/// How long a claim deleted for expiry is not deleted again: far longer than the cache takes
/// to show a deletion, short enough that a delete lost on the way is tried again soon.
const EXPIRED_MEMORY: Duration = Duration::from_secs(30);

/// A reference to a pod known by its key, for events about it.
fn pod_reference(pk: &PodKey) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pk.name.clone()),
        namespace: Some(pk.namespace.clone()),
        ..Default::default()
    }
}

/// The NodePools of the named nodes, each once.
fn pools_of<'a>(snap: &'a autoscaler_core::Snapshot, nodes: &[String]) -> BTreeSet<&'a str> {
    snap.nodes
        .iter()
        .filter(|n| nodes.contains(&n.name))
        .filter_map(|n| n.pool.as_deref())
        .collect()
}

/// The keys of `pods` (those moving with a command's nodes), and of those the ones that stay
/// with the nodes (they tolerate the disruption taint: not evicted).
fn moving_and_staying<'a>(
    pods: impl IntoIterator<Item = &'a CachedPod>,
) -> (Vec<PodKey>, Vec<PodKey>) {
    let mut moving = Vec::new();
    let mut staying = Vec::new();
    for p in pods {
        if !p.must_leave_with_node() {
            staying.push(p.key.clone());
        }
        moving.push(p.key.clone());
    }
    (moving, staying)
}

impl<P: CloudProvider + 'static> Controller<P> {
    /// The stage: commands planned every `--disruption-interval`; queued jobs advanced every
    /// round. While scaling is halted (`run/health.rs`) nothing new is planned and the
    /// unneeded timers restart, as the Cluster Autoscaler's do; commands under way go on.
    pub(super) async fn disruption_stage(&mut self) {
        if self.halted() {
            self.disruption_state.unneeded_since.clear();
        } else if due(&mut self.last_disruption, self.args.disruption_interval) {
            let t = Instant::now();
            self.disrupt().await;
            self.observe("disrupt", t);
        }
        if !self.jobs.is_empty() {
            self.run_jobs().await;
        }
    }

    fn disruption_config(&self) -> DisruptionConfig {
        self.args.disruption_config()
    }

    async fn disrupt(&mut self) {
        let pools = self.stores.pools.state();
        let types = self.instance_types(&pools).await;
        let snap = self.full_snapshot(&types, true);
        let now = epoch();
        let expiring = self.expire(&snap, now).await;
        self.disruption_state.in_progress = disrupt::in_progress(&self.jobs);
        let plan = plan_disruption_cached(
            &snap,
            &self.disruption_state,
            now,
            &self.disruption_config(),
            &mut self.disruption_cache,
        );
        self.disruption_state = plan.state.clone();
        for v in plan
            .verdicts
            .iter()
            .filter(|v| !v.disrupted && v.pool.is_some())
        {
            tracing::debug!(node = %v.node, reason = %v.reason, "kept");
        }
        self.publish_verdicts(&snap, &plan.verdicts, &self.disruption_config(), now)
            .await;
        let mut new_jobs = Vec::new();
        for cmd in plan.commands {
            // An expired node is on its way out already, by the termination flow.
            if !disrupt::admit(&self.jobs, &cmd) || cmd.nodes.iter().any(|n| expiring.contains(n)) {
                continue;
            }
            tracing::info!(reason = ?cmd.reason, method = ?cmd.method, nodes = ?cmd.nodes, "disruption decided");
            let pool = plan
                .verdicts
                .iter()
                .find(|v| cmd.nodes.contains(&v.node))
                .and_then(|v| v.pool.clone())
                .unwrap_or_default();
            self.visibility.decided(
                now,
                "ScaleDown",
                &pool,
                cmd.nodes.clone(),
                format!(
                    "{:?} {:?}: {} pods to move, saving {:.3} per hour",
                    cmd.reason,
                    cmd.method,
                    cmd.pods.len(),
                    cmd.savings
                ),
            );
            if cmd.reason == DisruptionReason::Drifted {
                self.drift_event(&cmd.nodes, &plan.verdicts).await;
            }
            new_jobs.push(Job::new(cmd));
        }
        self.jobs.extend(new_jobs);
        self.release_orphaned_taints().await;
    }

    /// Tells each node of a drift command why it is replaced: a `Drifted` event with its
    /// verdict's words (the drift reason, what differs, and how it goes).
    async fn drift_event(&self, nodes: &[String], verdicts: &[Verdict]) {
        for name in nodes {
            let (Some(node), Some(v)) = (
                self.stores.node(name),
                verdicts.iter().find(|v| &v.node == name),
            ) else {
                continue;
            };
            self.shared
                .actuator
                .event(
                    &reference(node.as_ref()),
                    false,
                    "Drifted",
                    "Disrupt",
                    v.reason.clone(),
                )
                .await;
        }
    }

    /// Deletes the NodeClaim of every node past its NodePool's `expireAfter`
    /// ([`autoscaler_core::disruption::expired`]) that no disruption job of this leader is
    /// removing: as in Karpenter, expiration needs no budget and launches no replacement
    /// first; the termination flow drains the node (within PodDisruptionBudgets, waiting for
    /// pods that may not be disrupted) and the pods are planned again. Returns the nodes
    /// expired, so that no consolidation command takes them too. A failed delete is tried
    /// again on the next pass; a claim deleted here is not deleted (nor its node told) again
    /// for [`EXPIRED_MEMORY`] while the cache catches up.
    async fn expire(&mut self, snap: &autoscaler_core::Snapshot, now: i64) -> BTreeSet<String> {
        let busy: BTreeSet<&str> = self
            .jobs
            .iter()
            .flat_map(|j| j.command.nodes.iter().map(String::as_str))
            .collect();
        self.expired.retain(|_, at| at.elapsed() < EXPIRED_MEMORY);
        let mut out = BTreeSet::new();
        for e in autoscaler_core::disruption::expired(snap, now) {
            if busy.contains(e.node.as_str()) {
                continue;
            }
            if self.expired.contains_key(&e.claim) {
                // Deleted on an earlier pass; the cache does not show it yet.
                out.insert(e.node);
                continue;
            }
            let note = format!(
                "node {} is {} old, past NodePool {}'s expireAfter ({}): removing it",
                e.node,
                duration::format(e.age_s),
                e.pool,
                duration::format(e.expire_after_s)
            );
            tracing::info!(node = %e.node, claim = %e.claim, pool = %e.pool, "expired");
            match self.shared.actuator.delete_claim(&e.claim).await {
                Ok(()) => {
                    self.expired.insert(e.claim.clone(), Instant::now());
                    if let Some(node) = self.stores.node(&e.node) {
                        self.shared
                            .actuator
                            .event(&reference(node.as_ref()), false, "Expired", "Delete", note)
                            .await;
                    }
                    out.insert(e.node);
                }
                Err(err) => {
                    tracing::warn!(claim = %e.claim, error = %err, "deleting an expired NodeClaim")
                }
            }
        }
        out
    }

    /// Untaints nodes that carry the disruption taint though no job of this leader is removing
    /// them: a previous leader died between tainting and deleting, or its taint landed after
    /// this leader's first look. A tainted node counts as being deleted, so it would never be a
    /// candidate again and stay forever, empty or not. Runs on every planning pass rather than
    /// once after startup: the patch can fail (a conflict with a status write, an API fault)
    /// and a late write can taint a node at any time. Jobs taint only after they are queued, so
    /// a node of a queued job is never released here.
    async fn release_orphaned_taints(&self) {
        for n in self.stores.nodes.state() {
            let name = n.name_any();
            if !crate::controller::snapshot::has_disruption_taint(&n)
                || n.metadata.deletion_timestamp.is_some()
                || self.jobs.iter().any(|j| j.command.nodes.contains(&name))
            {
                continue;
            }
            match self.untaint(&name).await {
                Ok(()) => {
                    tracing::info!(node = %name, "released a node left tainted by an unfinished disruption")
                }
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "releasing a node left tainted by an unfinished disruption; retried next pass")
                }
            }
        }
    }

    /// Puts the disruption taint (`NoSchedule`) on the Node `name` (nothing when it has it or
    /// is not in the cache).
    ///
    /// # Errors
    /// The API server's, from the patch.
    pub(super) async fn taint(&self, name: &str) -> Result<()> {
        let Some(n) = self.stores.node(name) else {
            return Ok(());
        };
        let mut taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if taints.iter().any(|t| t.key == keys::DISRUPTION_TAINT) {
            return Ok(());
        }
        taints.push(crate::controller::snapshot::disruption_taint());
        self.shared
            .actuator
            .patch_node(
                name,
                &json!({"metadata": {"resourceVersion": n.resource_version()}, "spec": {"taints": taints}}),
            )
            .await
    }

    async fn untaint(&self, name: &str) -> Result<()> {
        let Some(n) = self.stores.node(name) else {
            return Ok(());
        };
        let taints: Vec<_> = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key != keys::DISRUPTION_TAINT)
            .collect();
        self.shared
            .actuator
            .patch_node(
                name,
                &json!({"metadata": {"resourceVersion": n.resource_version()}, "spec": {"taints": taints}}),
            )
            .await
    }

    /// The pods on `nodes` that [move with them](CachedPod::moves_with_node), read fresh from
    /// the API server (those tolerating the disruption taint included: they are work the
    /// nodes run, though a drain does not evict them).
    pub(super) async fn pods_moving_with(&self, nodes: &[String]) -> Result<Vec<CachedPod>> {
        let mut out = Vec::new();
        for n in nodes {
            for p in self.shared.actuator.pods_on_node(n).await? {
                let p = CachedPod::from(p);
                if p.moves_with_node() {
                    out.push(p);
                }
            }
        }
        Ok(out)
    }

    async fn run_jobs(&mut self) {
        let pools = self.stores.pools.state();
        let types = self.instance_types(&pools).await;
        let mut snap = self.full_snapshot(&types, true);
        let config = self.disruption_config();
        let now = epoch();
        let pods = self.stores.pods.state();
        let nodes = self.stores.nodes.state();
        let claims = self.stores.claims.state();
        let mut jobs = std::mem::take(&mut self.jobs);
        for job in &mut jobs {
            // An empty-nodes command some of whose nodes took pods while it waited goes on
            // with the ones still empty, as Karpenter's does, before it is validated.
            if job.stage == Stage::Decided
                && now >= job.command.decided_at + config.validation_delay_s
                && let Some(kept) = narrow_empty(&job.command, &snap)
            {
                tracing::info!(nodes = ?job.command.nodes, kept = ?kept, "pods landed on some nodes of an empty-nodes command: going on with the others");
                job.command.nodes = kept;
            }
            let nodes_present: Vec<String> = job
                .command
                .nodes
                .iter()
                .filter(|n| {
                    nodes
                        .iter()
                        .any(|x| x.metadata.name.as_deref() == Some(n.as_str()))
                })
                .cloned()
                .collect();
            let nodes_not_deleting: Vec<String> = nodes
                .iter()
                .filter(|x| x.metadata.deletion_timestamp.is_none())
                .filter_map(|x| x.metadata.name.clone())
                .filter(|n| nodes_present.contains(n))
                .collect();
            let moving: Vec<&CachedPod> = pods
                .iter()
                .filter(|p| {
                    p.node_name
                        .as_deref()
                        .is_some_and(|n| nodes_present.iter().any(|x| x == n))
                        && p.moves_with_node()
                })
                .map(|p| p.as_ref())
                .collect();
            let (pods_left, staying) = moving_and_staying(moving);
            let replacement_initialized = match &job.stage {
                Stage::Replacing { claim, .. } => claims
                    .iter()
                    .find(|c| c.name_any() == *claim)
                    .map(|c| lifecycle::phase(c) == Phase::Initialized),
                _ => None,
            };
            let facts = disrupt::Facts {
                now,
                validation_delay_s: config.validation_delay_s,
                nodes_present: nodes_present.clone(),
                nodes_not_deleting,
                pods_left,
                staying,
                replacement_initialized,
                timeouts: self.args.disruption_timeouts(),
            };
            let mut step = disrupt::step(job, &facts, &mut |check| {
                validate_at(check, &job.command, &mut snap, now, &config)
            });
            if let disrupt::Action::DeleteNodes(names) = &step.action {
                // Deleting a Node loses the pods bound to it: confirm from the API server that
                // none is there that the pod cache did not show yet.
                match self.pods_moving_with(names).await {
                    Ok(fresh) if fresh.iter().all(|p| facts.staying.contains(&p.key)) => {}
                    Ok(fresh) => {
                        let (pods_left, staying) = moving_and_staying(fresh.iter());
                        tracing::info!(nodes = ?names, pods = ?pods_left, "pods found on the nodes before deletion that the cache did not show");
                        step = disrupt::step(
                            job,
                            &disrupt::Facts {
                                pods_left,
                                staying,
                                ..facts
                            },
                            &mut |check| validate_at(check, &job.command, &mut snap, now, &config),
                        );
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the pods of nodes before deleting them");
                        job.action_failed();
                        continue;
                    }
                }
            }
            let reason = format!("{:?}", job.command.reason);
            // What users are told if this step stops the job, judged from where it is now.
            let notice = step.notice(job);
            let why = step.why().to_string();
            let ok = match step.action {
                disrupt::Action::Wait => true,
                disrupt::Action::CreateReplacement => {
                    let replacement = job.command.replacement.as_ref();
                    match replacement.and_then(|nc| {
                        pools
                            .iter()
                            .find(|p| p.name_any() == nc.pool)
                            .map(|p| (nc, p))
                    }) {
                        Some((nc, np)) => {
                            let mut obj = claim_object(nc, np, &self.args.cluster_name);
                            obj.annotations_mut().insert(
                                keys::REPLACES_ANNOTATION.into(),
                                job.command.nodes.join(","),
                            );
                            match self.shared.actuator.create_claim(&obj).await {
                                Ok(c) => {
                                    job.stage = Stage::Replacing {
                                        claim: c.name_any(),
                                        since: now,
                                    };
                                    if let Some(pods) = step.validated_pods.clone() {
                                        job.command.pods = pods;
                                    }
                                    job.action_succeeded();
                                    continue;
                                }
                                Err(e) => {
                                    tracing::warn!(error = %e, "creating replacement");
                                    false
                                }
                            }
                        }
                        None => false,
                    }
                }
                disrupt::Action::Taint(names) => {
                    let mut ok = true;
                    for n in &names {
                        ok &= self.taint(n).await.is_ok();
                        crate::controller::crashpoint::reached("disruption-taint");
                        if let Some(node) = nodes.iter().find(|x| x.name_any() == *n) {
                            self.shared
                                .actuator
                                .event(
                                    &reference(node.as_ref()),
                                    false,
                                    "DisruptionStarted",
                                    "Disrupt",
                                    format!(
                                        "disrupting node ({reason}, {:?}): tainted {}",
                                        job.command.method,
                                        keys::DISRUPTION_TAINT
                                    ),
                                )
                                .await;
                        }
                    }
                    ok
                }
                disrupt::Action::Evict(to_evict) => {
                    // By UID too: not a pod created since under the same name elsewhere.
                    let wanted: HashSet<&PodKey> = to_evict.iter().collect();
                    let uids: HashMap<&PodKey, &str> = pods
                        .iter()
                        .filter(|p| wanted.contains(&p.key))
                        .filter_map(|p| Some((&p.key, p.uid.as_deref()?)))
                        .collect();
                    let mut refused = false;
                    for pk in &to_evict {
                        let uid = uids.get(pk).copied();
                        match self.shared.actuator.evict(pk, uid).await {
                            Ok(Evicted::Yes) => {
                                self.shared.metrics.evictions.inc();
                                self.shared
                                    .actuator
                                    .event(
                                        &pod_reference(pk),
                                        false,
                                        "Evicted",
                                        "Disrupt",
                                        format!(
                                            "evicted by gpu-autoscaler to remove its node ({reason})"
                                        ),
                                    )
                                    .await;
                            }
                            Ok(Evicted::Refused(_)) => {
                                self.shared.metrics.evictions_refused.inc();
                                refused = true;
                            }
                            Ok(Evicted::Gone) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "eviction");
                                refused = true;
                            }
                        }
                    }
                    if refused {
                        job.evictions_refused(now);
                    } else {
                        job.evictions_accepted(now);
                    }
                    true
                }
                disrupt::Action::DeleteNodes(names) => {
                    let mut ok = true;
                    for n in &names {
                        // A Node that lost its finalizer would be removed at once and
                        // registered again by its still-claimed instance, for ever.
                        ok &= self.keep_node_finalizer(n).await.is_ok()
                            && self.shared.actuator.delete_node(n).await.is_ok();
                    }
                    if ok {
                        self.shared
                            .metrics
                            .disruptions
                            .get_or_create(&ReasonLabel {
                                reason: reason.clone(),
                            })
                            .inc();
                        for pool in pools_of(&snap, &names) {
                            self.disruption_state.deleted(pool, now);
                        }
                    }
                    ok
                }
                disrupt::Action::Untaint(names) => {
                    // A node left tainted is capacity nobody uses: stay Abandoned and retry.
                    let mut ok = true;
                    for n in &names {
                        if let Err(e) = self.untaint(n).await {
                            tracing::warn!(node = %n, error = %e, "untainting after an abandoned disruption");
                            ok = false;
                        }
                    }
                    ok
                }
            };
            if ok {
                job.action_succeeded();
                if let Some(pods) = step.validated_pods {
                    job.command.pods = pods;
                }
                if step.failure {
                    // Cluster Autoscaler's scale-down-delay-after-failure starts here, for the
                    // pools of the nodes it gave up on.
                    for pool in pools_of(&snap, &job.command.nodes) {
                        self.disruption_state.failed(pool, now, step.stuck);
                    }
                    self.shared.metrics.disruption_failures.inc();
                }
                if let Some(notice) = notice {
                    for node in nodes
                        .iter()
                        .filter(|n| job.command.nodes.contains(&n.name_any()))
                    {
                        self.shared
                            .actuator
                            .event(
                                &reference(node.as_ref()),
                                notice.warning(),
                                notice.reason(),
                                "Disrupt",
                                notice.message(&why),
                            )
                            .await;
                    }
                }
                if job.stage != step.next {
                    tracing::info!(nodes = ?job.command.nodes, from = job.stage.as_str(), to = step.next.as_str(), "disruption");
                    if let Stage::Abandoned(why) = &step.next {
                        tracing::info!(nodes = ?job.command.nodes, %why, failure = step.failure, "disruption abandoned");
                    }
                }
                job.stage = step.next;
            } else {
                job.action_failed();
            }
        }
        jobs.retain(|j| j.stage != Stage::Done);
        self.jobs = jobs;
    }
}
