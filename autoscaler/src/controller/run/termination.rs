//! Deleted managed Nodes: drained, then their claim deleted, their instance terminated and
//! the finalizer released.
//!
//! Every path that removes a managed Node ends here: consolidation (which has drained it
//! already), a NodeClaim deleted by a user or by the lifecycle, and `kubectl delete node`.
//! The last two used to terminate the instance under whatever ran on it; now the Node is
//! drained first, the way `kubectl drain` and Karpenter's termination controller do it.
//!
//! A NodeClaim with `spec.terminationGracePeriod` bounds the drain, as in Karpenter v1
//! (`pkg/controllers/nodeclaim/lifecycle/controller.go`, `pkg/controllers/node/termination/
//! drain.go`): the deadline, deletion time plus grace period, is written on the claim
//! ([`keys::TERMINATION_TIMESTAMP_ANNOTATION`]); a pod whose own grace period would outlast
//! it is deleted rather than evicted, PodDisruptionBudgets and `do-not-disrupt` regardless
//! ([`autoscaler_core::disruption::drain_step`]); at the deadline the Node is removed whatever
//! still runs on it.
//!
//! A drained Node's instance is terminated once the VolumeAttachments of its drained pods'
//! volumes are gone, or at that deadline ([`crate::controller::detach`]), as Karpenter's
//! termination controller waits; the claim's `VolumesDetached` condition says which.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use autoscaler_core::disruption::{
    DEFAULT_POD_GRACE_S, DrainStep, DrainTier, deadline_reached, drain_step, termination_deadline,
};
use autoscaler_core::model::PodKey;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use kube::ResourceExt;
use nodepools::NodeClaim;
use providers::{CloudProvider, InstanceState};
use serde_json::json;

use nodepools::conditions::DRAINED;

use crate::controller::actuator::set_condition_status;
use crate::controller::actuator::{Evicted, Refusal, has_finalizer, reference, without_finalizer};
use crate::controller::cache::CachedPod;
use crate::controller::detach::{Detach, blocking, kept_volumes};
use crate::controller::error::Result;
use crate::controller::keys;
use crate::controller::snapshot::{claims_by_provider_id, disruption_taint, has_disruption_taint};
use crate::controller::translate;

use super::{Controller, epoch};

/// How long a Node's instance, once seen running, is taken to be running without asking the
/// cloud again (one `get` per draining Node per loop round would eat into the cloud's rate
/// limit).
const INSTANCE_RECHECK: Duration = Duration::from_secs(5);

/// After a PodDisruptionBudget refuses an eviction, the Node's next evictions wait this long
/// (the Eviction API answers 429 until the budget's pods are back).
const EVICTION_RETRY: Duration = Duration::from_secs(2);

/// How long a condition just written on a claim (`Drained`, `VolumesDetached`) is taken as
/// written though the claim store does not show it yet.
const CONDITION_STORE_LAG: Duration = Duration::from_secs(10);

/// The least time a drain lasts: a pod the scheduler bound just after the taint, before it
/// saw it, is drained too rather than left on a node about to go (Karpenter's `MinDrainTime`,
/// `pkg/controllers/node/termination/controller.go`).
const MIN_DRAIN: Duration = Duration::from_secs(5);

/// What the termination of one deleted Node has done so far, kept across loop rounds.
#[derive(Debug, Default)]
pub(super) struct Draining {
    /// The UID of the Node drained.
    uid: Option<String>,
    /// When this drain began (its first round).
    began: Option<Instant>,
    /// When the instance was last seen running.
    alive_at: Option<Instant>,
    /// No eviction before this (a PodDisruptionBudget refused one).
    evict_after: Option<Instant>,
    /// Whether the start of the drain and its protected pods were reported.
    reported: bool,
    /// Pods this drain deleted past the deadline: until the cache shows them terminating, a
    /// later round would delete them (and tell them) again.
    deleted: HashSet<PodKey>,
    /// The last wait for VolumeAttachments told (reason and attachments): an event each time
    /// it changes, not each round.
    awaiting: Option<(&'static str, Vec<String>)>,
    /// Pods whose refused eviction this drain told of (once each).
    refusals_told: HashSet<PodKey>,
    /// The claim as the last condition write here returned it, and when.
    last_claim: Option<(NodeClaim, Instant)>,
    /// The conditions last written to the claim, by type (status and reason) and when: not
    /// written again while the store catches up, but again after [`CONDITION_STORE_LAG`] if
    /// the store still shows another (a writer with a stale copy).
    written: HashMap<&'static str, ((&'static str, &'static str), Instant)>,
}

/// Why a pod that must leave a deleted Node is not evicted: it is protected, and it holds the
/// termination until it ends or is deleted (`None`: evict it).
fn protection(pod: &CachedPod, now: i64) -> Option<String> {
    let core = pod.core.as_ref().ok()?;
    if let Some(why) = autoscaler_core::disruption::pod_protection(core, now) {
        return Some(why);
    }
    // The Cluster Autoscaler's annotation does not hold a DaemonSet pod: consolidation does
    // not read it on them (it may pick their node), and the Cluster Autoscaler's own drain
    // evicts them regardless; held here, it would keep such a node for ever.
    if matches!(
        pod.drain_tier,
        DrainTier::DaemonSet | DrainTier::CriticalDaemonSet
    ) {
        return None;
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

/// Where one round of a deleted Node's drain left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drained {
    /// Pods to drain remain.
    No,
    /// None remains.
    Yes,
    /// Its claim's `terminationGracePeriod` ran out with pods still on it: it counts as
    /// drained.
    GracePeriodElapsed,
    /// Nothing was to drain: the Node records no instance, or its instance is gone.
    NothingToDrain,
}

impl Drained {
    /// The claim's `Drained` condition it gives (status, reason, message), as Karpenter's
    /// (Unknown `Draining` while pods remain, then True); none when nothing was drained.
    fn condition(self) -> Option<(&'static str, &'static str, &'static str)> {
        use nodepools::conditions::reasons;
        match self {
            Drained::No => Some((
                "Unknown",
                reasons::DRAINING,
                "evicting the node's pods; the instance is terminated once they are gone",
            )),
            Drained::Yes => Some((
                "True",
                reasons::SUCCEEDED,
                "every pod drained from the node is gone",
            )),
            Drained::GracePeriodElapsed => Some((
                "False",
                reasons::TERMINATION_GRACE_PERIOD_ELAPSED,
                "the terminationGracePeriod ran out before every pod drained from the node was gone",
            )),
            Drained::NothingToDrain => None,
        }
    }
}

/// Whether `claim` shows `Drained` Unknown (a False one, the deadline's, is kept).
fn draining(claim: &NodeClaim) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == DRAINED && c.status == "Unknown")
    })
}

/// The patch that marks the deleted Node `node` as draining, if it lacks a mark: the
/// disruption taint (`NoSchedule`), so nothing new lands on it, and
/// [`keys::EXCLUDE_FROM_BALANCERS_LABEL`]. The taint list is replaced whole, so the patch
/// carries the Node's `resourceVersion` (a concurrent change to it is refused, not lost).
fn drain_marks(node: &Node) -> Option<serde_json::Value> {
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(keys::EXCLUDE_FROM_BALANCERS_LABEL));
    if labelled && has_disruption_taint(node) {
        return None;
    }
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !has_disruption_taint(node) {
        taints.push(disruption_taint());
    }
    let mut labels = serde_json::Map::new();
    if !labelled {
        labels.insert(
            keys::EXCLUDE_FROM_BALANCERS_LABEL.into(),
            keys::EXCLUDE_FROM_BALANCERS_VALUE.into(),
        );
    }
    Some(json!({
        "metadata": {"resourceVersion": node.resource_version(), "labels": labels},
        "spec": {"taints": taints}
    }))
}

/// `secs` since the epoch as the annotation writes it (RFC 3339, UTC); `None` out of range.
fn rfc3339(secs: i64) -> Option<String> {
    jiff::Timestamp::from_second(secs)
        .ok()
        .map(|t| t.to_string())
}

/// The drain deadline `claim` records, if its annotation holds one that parses.
fn recorded_deadline(claim: &NodeClaim) -> Option<i64> {
    let text = claim
        .annotations()
        .get(keys::TERMINATION_TIMESTAMP_ANNOTATION)?;
    text.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// The drain deadline of the deleted Node `node` whose NodeClaim is `claim`, from the claim's
/// `spec.terminationGracePeriod` counted from the claim's deletion, or the Node's when the
/// claim is not being deleted yet (`kubectl delete node`: Karpenter deletes the claim at
/// once, here it goes after the drain). `None`: no grace period, or one that does not parse.
fn computed_deadline(claim: &NodeClaim, node: &Node) -> Option<i64> {
    let text = claim.spec.termination_grace_period.as_deref()?;
    let grace = match nodepools::parse_duration(text, false) {
        Ok(nodepools::Duration::Seconds(s)) => s,
        Ok(nodepools::Duration::Never) | Err(_) => return None,
    };
    let began = claim
        .metadata
        .deletion_timestamp
        .as_ref()
        .or(node.metadata.deletion_timestamp.as_ref())?;
    Some(termination_deadline(began.0.as_second(), grace))
}

impl<P: CloudProvider + 'static> Controller<P> {
    /// The drain deadline of the deleted Node `node` whose NodeClaim is `claim`: the one
    /// recorded on the claim, else computed ([`computed_deadline`]) and recorded, so that a
    /// restart or a new leader keeps it (Karpenter writes it once and never moves it). A
    /// record that does not parse is replaced. A failed write is logged and tried again on
    /// the next round; the computed deadline holds meanwhile.
    async fn drain_deadline(&self, claim: &NodeClaim, node: &Node) -> Option<i64> {
        if let Some(d) = recorded_deadline(claim) {
            return Some(d);
        }
        let deadline = computed_deadline(claim, node)?;
        if let Some(text) = rfc3339(deadline) {
            match self
                .shared
                .actuator
                .annotate_claim(claim, keys::TERMINATION_TIMESTAMP_ANNOTATION, &text)
                .await
            {
                Ok(()) => {
                    tracing::info!(claim = %claim.name_any(), node = %node.name_any(), deadline = %text, "terminationGracePeriod: the drain ends by the deadline");
                }
                Err(e) => {
                    tracing::warn!(claim = %claim.name_any(), error = %e, "recording the drain deadline; retried next round");
                }
            }
        }
        Some(deadline)
    }

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
        // The pods not drained (mirror pods, those tolerating the disruption taint) and those
        // stuck terminating (their kubelet is likely gone, and their volumes would detach
        // only once the Node is gone): their volumes do not hold the instance.
        let now_s = epoch();
        let mut staying: HashMap<String, Vec<Arc<CachedPod>>> = HashMap::new();
        for p in self.stores.pods.state() {
            let Some(n) = p.node_name.as_deref().filter(|n| deleting.contains(*n)) else {
                continue;
            };
            if p.drained_with_node(now_s) {
                on_node.entry(n.to_string()).or_default().push(p);
            } else if p.active && !p.volume_claims.is_empty() {
                staying.entry(n.to_string()).or_default().push(p);
            }
        }
        for n in nodes.iter().filter(|n| deleting.contains(&n.name_any())) {
            let name = n.name_any();
            let pods = on_node.remove(&name).unwrap_or_default();
            let owner = n
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|p| by_pid.get(p));
            let deadline = match owner {
                Some(c) => self.drain_deadline(c, n).await,
                None => None,
            };
            let drained = match self.drain(n, &pods, deadline).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "draining a deleted node; retried next round");
                    continue;
                }
            };
            // The claim as this drain last wrote it, while the store may not show that yet:
            // a write goes from it rather than from a copy that write made stale.
            let recent = self
                .draining
                .get(&name)
                .and_then(|s| s.last_claim.as_ref())
                .filter(|(_, at)| at.elapsed() < CONDITION_STORE_LAG)
                .map(|(c, _)| c.clone());
            let base = recent.as_ref().or(owner.copied());
            let mut written = None;
            let condition = match drained {
                // The instance went while the claim said it was draining: its pods went too.
                Drained::NothingToDrain if base.is_some_and(draining) => Some((
                    "True",
                    nodepools::conditions::reasons::SUCCEEDED,
                    "the instance is gone, and the node's pods with it",
                )),
                d => d.condition(),
            };
            if let (Some(c), Some((status, reason, message))) = (base, condition) {
                let condition = (DRAINED, status);
                written = self
                    .claim_condition(&name, c, condition, reason, message)
                    .await;
            }
            if drained == Drained::No {
                continue;
            }
            let stay = staying.remove(&name).unwrap_or_default();
            let claim = written.as_ref().or(base);
            if self.awaits_volumes(n, claim, deadline, &stay).await {
                continue;
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

    /// One round of draining the deleted Node `node`, whose pods to drain are `pods` (from the
    /// cache, [`CachedPod::drained_with_node`]), by `deadline` (seconds since the epoch, from
    /// its NodeClaim's `terminationGracePeriod`; `None`: no deadline); whether it is drained.
    /// Nothing to drain when the Node records no instance, or when it is not Ready and its
    /// instance is gone (a spot interruption, a failure: its pods went with it); a Ready Node's
    /// kubelet still runs whatever the cloud says, as Karpenter reads it. Otherwise the Node is
    /// tainted so that nothing new lands on it and labelled out of load balancers
    /// ([`keys::EXCLUDE_FROM_BALANCERS_LABEL`]), and its pods are evicted through the Eviction
    /// API, so PodDisruptionBudgets hold (a refusal is retried after [`EVICTION_RETRY`]), tier
    /// by tier ([`DrainTier`]: workloads, then DaemonSet pods, then critical pods), each tier
    /// once every pod of the tiers before it is gone. Pods terminating already are waited for
    /// until they are gone or stuck; pods protected by `karpenter.sh/do-not-disrupt` or
    /// `cluster-autoscaler.kubernetes.io/safe-to-evict=false` are not evicted and hold the
    /// termination until they end or are deleted. With a deadline, a pod whose own grace period
    /// would outlast it is deleted instead whatever its tier (no budget or protection applies),
    /// and once it is reached the Node is drained whatever remains. Otherwise drained once no
    /// pod is left to drain, by a fresh read from the API server (the cache may not have seen a
    /// pod bound just now), and at least [`MIN_DRAIN`] after the drain began.
    ///
    /// # Errors
    /// The API server's and the cloud's, from the taint, the evictions, the deletions and the
    /// reads.
    async fn drain(
        &mut self,
        node: &Node,
        pods: &[Arc<CachedPod>],
        deadline: Option<i64>,
    ) -> Result<Drained> {
        let name = node.name_any();
        let Some(pid) = node.spec.as_ref().and_then(|s| s.provider_id.clone()) else {
            return Ok(Drained::NothingToDrain);
        };
        let at = epoch();
        // Past the deadline a pod the cache has not seen yet goes with the instance, as the
        // ones deleted below do before their grace ends.
        let overdue = deadline_reached(deadline, at);
        // A Node deleted and created again under the same name drains afresh.
        let state = self.draining.entry(name.clone()).or_default();
        if state.uid != node.metadata.uid {
            *state = Draining {
                uid: node.metadata.uid.clone(),
                ..Draining::default()
            };
        }
        let began = *state.began.get_or_insert_with(Instant::now);
        if pods.is_empty() {
            // Marked all the same: nothing new lands on it during the least drain. A failed
            // mark is tried again next round, and a round that marks is not the last (the
            // Node's resourceVersion changed: its finalizer is released from a fresh copy).
            if !overdue && let Some(patch) = drain_marks(node) {
                match self.shared.actuator.patch_node(&name, &patch).await {
                    Ok(()) => return Ok(Drained::No),
                    Err(e) => {
                        tracing::debug!(node = %name, error = %e, "marking an empty deleted node; again next round");
                    }
                }
            }
            let left = match self.shared.actuator.pods_on_node(&name).await {
                Ok(fresh) => fresh
                    .into_iter()
                    .any(|p| CachedPod::from(p).drained_with_node(at)),
                // Past the deadline nothing holds the Node, not even a failed read.
                Err(e) if overdue => {
                    tracing::debug!(node = %name, error = %e, "reading a drained node's pods past its deadline");
                    true
                }
                Err(e) => return Err(e),
            };
            return Ok(match (left, overdue) {
                (false, true) => Drained::Yes,
                (false, false) if began.elapsed() >= MIN_DRAIN => Drained::Yes,
                (true, true) => Drained::GracePeriodElapsed,
                _ => Drained::No,
            });
        }
        if !translate::node_ready(node) && !self.instance_running(&name, &pid).await? {
            tracing::info!(node = %name, "the deleted node's instance is gone: nothing to drain");
            return Ok(Drained::NothingToDrain);
        }
        let now = Instant::now();
        let state = self.draining.entry(name.clone()).or_default();
        let backing_off = state.evict_after.is_some_and(|t| now < t);
        let first = !std::mem::replace(&mut state.reported, true);
        if let Some(patch) = drain_marks(node) {
            self.shared.actuator.patch_node(&name, &patch).await?;
        }
        let steps: Vec<(&Arc<CachedPod>, DrainStep)> = pods
            .iter()
            .map(|p| {
                let grace = p.grace_s.unwrap_or(DEFAULT_POD_GRACE_S);
                (
                    p,
                    drain_step(protection(p, at), grace, p.deletion_s, deadline, at),
                )
            })
            .collect();
        // The tier evicted now: the first with a pod left that no deadline deletes.
        let tier = steps
            .iter()
            .filter(|(_, s)| !matches!(s, DrainStep::Delete { .. }))
            .map(|(p, _)| p.drain_tier)
            .min();
        let mut protected = Vec::new();
        let mut refused = false;
        for (p, step) in steps {
            match step {
                DrainStep::Hold(why) => {
                    protected.push(why);
                    continue;
                }
                DrainStep::Wait => continue,
                DrainStep::Delete { grace_s } => {
                    let deleted = self
                        .draining
                        .get(&name)
                        .is_some_and(|s| s.deleted.contains(&p.key));
                    if !deleted {
                        self.delete_overdue(p, grace_s, &name, deadline).await?;
                        if let Some(s) = self.draining.get_mut(&name) {
                            s.deleted.insert(p.key.clone());
                        }
                    }
                    continue;
                }
                // A budget refused an eviction a moment ago: the others wait a little too.
                DrainStep::Evict if backing_off => continue,
                DrainStep::Evict if Some(p.drain_tier) != tier => continue,
                DrainStep::Evict => {}
            }
            match self.shared.actuator.evict(&p.key, p.uid.as_deref()).await? {
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
                Evicted::Refused(why) => {
                    self.shared.metrics.evictions_refused.inc();
                    refused = true;
                    // Once per pod and drain: the Node says which budget holds it, as
                    // Karpenter's `FailedDraining` does (throttling is no news to tell).
                    let news = why != Refusal::Throttled
                        && self
                            .draining
                            .get_mut(&name)
                            .is_some_and(|s| s.refusals_told.insert(p.key.clone()));
                    if news {
                        self.shared
                            .actuator
                            .event(
                                &reference(node),
                                true,
                                "FailedDraining",
                                "Drain",
                                format!("cannot evict pod {} yet: {}", p.key, why.describe()),
                            )
                            .await;
                    }
                }
                Evicted::Gone => {}
            }
        }
        if refused && let Some(s) = self.draining.get_mut(&name) {
            s.evict_after = Some(now + EVICTION_RETRY);
        }
        if first {
            let mut note = if protected.is_empty() {
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
            if let Some(text) = deadline.and_then(rfc3339) {
                note.push_str(&format!(
                    "; by {text} (terminationGracePeriod) pods still there are deleted and the node removed"
                ));
            }
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
        Ok(if overdue {
            Drained::GracePeriodElapsed
        } else {
            Drained::No
        })
    }

    /// Whether the drained Node `node`'s instance waits for volumes to detach
    /// ([`crate::controller::detach`]): for the VolumeAttachments on it of volumes no pod in
    /// `staying` uses (the pods not drained: mirror pods, pods tolerating the
    /// disruption taint, pods stuck terminating), until they are gone or `deadline` (seconds
    /// since the epoch) passes. Said on its NodeClaim `claim` (`VolumesDetached`) and, when
    /// the wait begins, ends, or an attachment is added, in an event on the Node. No wait when
    /// the Node records no instance, when its instance is gone (the cloud detached its
    /// volumes), or while VolumeAttachments are not served. Before the instance goes on the
    /// cache's word that nothing is attached, the API server is asked (an attachment made a
    /// moment ago may not be cached yet). A failed read waits a round (logged); a failed
    /// condition write is logged and does not hold the instance.
    async fn awaits_volumes(
        &mut self,
        node: &Node,
        claim: Option<&NodeClaim>,
        deadline: Option<i64>,
        staying: &[Arc<CachedPod>],
    ) -> bool {
        let name = node.name_any();
        let Some(pid) = node.spec.as_ref().and_then(|s| s.provider_id.clone()) else {
            return false;
        };
        let Some(store) = self.stores.volume_attachments.get() else {
            return false;
        };
        let overdue = deadline_reached(deadline, epoch());
        let kept = self.kept_volumes(staying);
        let mut held = blocking(store.state().iter().map(|a| a.as_ref()), &name, &kept);
        if held.is_empty() && !overdue {
            match self.shared.actuator.volume_attachments().await {
                Ok(fresh) => held = blocking(&fresh, &name, &kept),
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "reading VolumeAttachments before terminating a drained node; retried next round");
                    return true;
                }
            }
        }
        if !held.is_empty() && !overdue {
            match self.instance_running(&name, &pid).await {
                Ok(true) => {}
                Ok(false) => return false,
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "listing instances before terminating a drained node; retried next round");
                    return true;
                }
            }
        }
        self.note_detach(node, claim, Detach::of(held, overdue))
            .await
    }

    /// The PersistentVolumes the `staying` pods' claims are bound to.
    fn kept_volumes(&self, staying: &[Arc<CachedPod>]) -> HashSet<String> {
        if staying.is_empty() {
            return HashSet::new();
        }
        let claims = self.stores.volume_claims.state();
        let index: HashMap<(String, String), &PersistentVolumeClaim> = claims
            .iter()
            .map(|c| {
                let ns = c.metadata.namespace.clone().unwrap_or_default();
                ((ns, c.name_any()), c.as_ref())
            })
            .collect();
        kept_volumes(
            staying.iter().flat_map(|p| {
                p.volume_claims
                    .all()
                    .iter()
                    .map(|c| (p.key.namespace.as_str(), c.as_str()))
            }),
            &index,
        )
    }

    /// Tells `verdict` on the drained `node`'s claim and, when the wait begins, ends, changes
    /// kind or gains an attachment (not as each detaches), in an event and the log; whether
    /// the instance waits.
    async fn note_detach(
        &mut self,
        node: &Node,
        claim: Option<&NodeClaim>,
        verdict: Detach,
    ) -> bool {
        let name = node.name_any();
        let (status, reason, message) = verdict.condition();
        let state = self.draining.entry(name.clone()).or_default();
        let told = match &verdict {
            Detach::Awaiting(names) | Detach::GracePeriodElapsed(names) => {
                let news = state.awaiting.as_ref().is_none_or(|(r, before)| {
                    *r != reason || names.iter().any(|n| !before.contains(n))
                });
                state.awaiting = Some((reason, names.clone()));
                news
            }
            Detach::Detached => state.awaiting.take().is_some(),
        };
        if told {
            let said = verdict.describe();
            tracing::info!(node = %name, "{said}");
            self.shared
                .actuator
                .event(
                    &reference(node),
                    false,
                    match verdict {
                        Detach::Detached => nodepools::conditions::VOLUMES_DETACHED,
                        _ => reason,
                    },
                    "Terminate",
                    format!("node {name}: {said}"),
                )
                .await;
        }
        if let Some(c) = claim {
            let condition = (nodepools::conditions::VOLUMES_DETACHED, status);
            self.claim_condition(&name, c, condition, reason, message)
                .await;
        }
        verdict.waits()
    }

    /// Writes condition `(type, status)` with `reason` and `message` on `claim`, the claim of
    /// the deleted Node `node`, unless the store shows it so already or it was written so
    /// within [`CONDITION_STORE_LAG`]; the claim as written, if it was. A failed write is
    /// logged and tried again next round; it holds nothing.
    async fn claim_condition(
        &mut self,
        node: &str,
        claim: &NodeClaim,
        (type_, status): (&'static str, &'static str),
        reason: &'static str,
        message: &str,
    ) -> Option<NodeClaim> {
        let recent = self.draining.get(node).is_some_and(|s| {
            s.written
                .get(type_)
                .is_some_and(|(w, at)| *w == (status, reason) && at.elapsed() < CONDITION_STORE_LAG)
        });
        let mut conds = claim.status.clone().unwrap_or_default().conditions;
        let shown = conds
            .iter()
            .any(|k| k.type_ == type_ && k.status == status && k.reason == reason);
        if recent || shown {
            return None;
        }
        set_condition_status(
            &mut conds,
            (type_, status),
            reason,
            message,
            jiff::Timestamp::now(),
            claim.metadata.generation,
        );
        match self
            .shared
            .actuator
            .patch_claim_conditions(claim, &conds)
            .await
        {
            Ok(fresh) => {
                let state = self.draining.entry(node.to_string()).or_default();
                state
                    .written
                    .insert(type_, ((status, reason), Instant::now()));
                if let Some(c) = &fresh {
                    state.last_claim = Some((c.clone(), Instant::now()));
                }
                fresh
            }
            Err(e) => {
                tracing::debug!(claim = %claim.name_any(), condition = type_, error = %e, "claim condition; written again next round");
                None
            }
        }
    }

    /// Deletes pod `p` of the draining Node `node` with a grace period of `grace_s` seconds,
    /// since waiting any longer would run its own grace period past the Node's `deadline`;
    /// told on the pod.
    ///
    /// # Errors
    /// The API server's, from the deletion.
    async fn delete_overdue(
        &self,
        p: &CachedPod,
        grace_s: i64,
        node: &str,
        deadline: Option<i64>,
    ) -> Result<()> {
        if !self
            .shared
            .actuator
            .delete_pod(&p.key, p.uid.as_deref(), grace_s)
            .await?
        {
            return Ok(());
        }
        let by = deadline.and_then(rfc3339).unwrap_or_default();
        tracing::info!(pod = %p.key, node, grace_s, deadline = %by, "deleted a pod: its node's terminationGracePeriod ends");
        self.shared
            .actuator
            .event(
                &p.reference(),
                false,
                "Deleted",
                "Drain",
                format!(
                    "deleted by gpu-autoscaler with a grace period of {grace_s}s, PodDisruptionBudgets and do-not-disrupt notwithstanding: its node {node} must be drained by {by} (terminationGracePeriod)"
                ),
            )
            .await;
        Ok(())
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(owner: &str, annotations: serde_json::Value) -> CachedPod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml", "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": "o",
                    "uid": "o", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    #[test]
    fn safe_to_evict_false_holds_workloads_not_daemonset_pods_and_do_not_disrupt_holds_both() {
        let now = 1_767_225_600;
        let unsafe_ = json!({"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"});
        let dnd = json!({"karpenter.sh/do-not-disrupt": "true"});
        assert!(protection(&pod("ReplicaSet", unsafe_.clone()), now).is_some());
        assert_eq!(protection(&pod("DaemonSet", unsafe_), now), None);
        assert!(protection(&pod("ReplicaSet", dnd.clone()), now).is_some());
        assert!(protection(&pod("DaemonSet", dnd), now).is_some());
        assert_eq!(protection(&pod("DaemonSet", json!({})), now), None);
    }

    #[test]
    fn the_drained_condition_is_unknown_while_draining_then_true_or_false_at_the_deadline() {
        use nodepools::conditions::reasons;
        let status = |d: Drained| d.condition().map(|(s, r, _)| (s, r));
        assert_eq!(status(Drained::No), Some(("Unknown", reasons::DRAINING)));
        assert_eq!(status(Drained::Yes), Some(("True", reasons::SUCCEEDED)));
        assert_eq!(
            status(Drained::GracePeriodElapsed),
            Some(("False", reasons::TERMINATION_GRACE_PERIOD_ELAPSED))
        );
        assert_eq!(status(Drained::NothingToDrain), None);
    }
}
