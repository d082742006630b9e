//! The compact form pods are cached in.
//!
//! A `k8s_openapi` `Pod` is over 2 KiB before any of its strings, and a cluster may hold
//! 150,000 of them. The pod reflector therefore deserializes each pod straight into a
//! [`CachedPod`] (`#[serde(from = "Pod")]`): the pod is translated into the core's vocabulary
//! once, when it arrives, and only that translation plus the handful of facts the loop reads
//! (binding, phase, scheduling condition, readiness) are kept. Planning rounds then take
//! translated pods instead of parsing objects.
//!
//! Most pods are replicas: apart from their name they translate to the same core pod. The
//! translation is therefore shared ([`Translated`]) by every pod that translates alike, and
//! node names are shared too; with 150,000 pods this is the difference between a few hundred
//! MiB and a few dozen. A snapshot's pods share the cached translation's shape too
//! ([`CachedPod::core_pod`]): 100,000 pending replicas add their keys to a round, not 100,000
//! copies of their labels, selectors and tolerations.
//!
//! # Memory at scale
//!
//! Memory at scale (`cache`): pods are watched in their wire form and cached only as a compact
//! `CachedPod` in a `PodStore` keyed by the pod's own key (no `ObjectMeta`, no second key copy);
//! pods that translate alike apart from their name share one translated core pod, and node names
//! are shared. Nodes drop status fields never read (images, nodeInfo...). For provisioning,
//! `SnapshotBuilder::build_for_provisioning` folds each node's bound pods that the planner reads
//! only as used capacity (no GPU share, no anti-affinity, namespace not selected by a pending pod's
//! topology term) into one pod, which keeps every host port they bind; unit tests check the plan is
//! unchanged. For disruption, `build_for_disruption` folds the same way but only on nodes no
//! NodePool manages (never candidates, only places pods may move to), keeping whole the namespaces
//! that pending pods or the pods of managed nodes select; managed nodes keep every pod.

use std::borrow::Cow;
#[cfg(feature = "controller")]
use std::collections::HashMap;
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, LazyLock, Mutex};

use autoscaler_core::disruption::DrainTier;
use autoscaler_core::model::{Pod as CorePod, PodKey};
use autoscaler_core::resources::Resources;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::translate::{self, TranslateError};

mod wire;
use wire::SpecWire;

/// A pod as the controller caches it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "PodWire")]
pub struct CachedPod {
    /// `namespace/name`.
    pub key: PodKey,
    /// `metadata.uid`, for events about the pod.
    pub uid: Option<String>,
    /// `metadata.deletionTimestamp`, seconds since the epoch: set once the pod is deleted,
    /// when its grace period ends.
    pub deletion_s: Option<i64>,
    /// A toleration of it tolerates the disruption taint (read from the pod itself, so an
    /// untranslatable pod is read too).
    pub tolerates_disruption: bool,
    /// A mirror of a static pod ([`translate::is_mirror`]; read from the pod itself).
    pub mirror: bool,
    /// When a drain of its node evicts it, by its priority class and whether a DaemonSet owns
    /// it (read from the pod itself).
    pub drain_tier: DrainTier,
    /// The node it is bound to.
    pub node_name: Option<Arc<str>>,
    /// Not finished (phase neither Succeeded nor Failed).
    pub active: bool,
    /// `PodScheduled=False, reason=Unschedulable`, unbound, not deleting, not finished.
    pub unschedulable: bool,
    /// When it became unschedulable, milliseconds since the epoch.
    pub unschedulable_since_ms: Option<i64>,
    /// `status.nominatedNodeName`: the node the scheduler preempted pods on for it, where it
    /// will be bound once they are gone.
    pub nominated_node: Option<Arc<str>>,
    /// Its creation time, milliseconds since the epoch (for `--new-pod-scale-up-delay`, and
    /// to find a DaemonSet's newest pod).
    pub created_ms: Option<i64>,
    /// The UID of the DaemonSet that controls it, for a pod a DaemonSet controls; none for any
    /// other pod. The snapshot builder sizes each DaemonSet's overhead by its newest pod.
    pub daemonset_uid: Option<Arc<str>>,
    /// `Ready=True`.
    pub ready: bool,
    /// Its gang, if any (boxed: most pods have none).
    pub group: Option<Box<super::gangs::Gang>>,
    /// The PersistentVolumeClaims its volumes use ([`super::volumes::claim_names`]): kept
    /// per pod, since replicas that share a translation each have their own claims.
    pub volume_claims: super::volumes::PodClaims,
    /// `spec.terminationGracePeriodSeconds`, as the API server defaulted it (`None` only
    /// where no server did): how early a drain with a deadline deletes the pod.
    pub grace_s: Option<i64>,
    /// The translation, or why it failed, shared with the pods that translate alike.
    pub core: Translated,
}

/// A pod's translation, or why it failed, shared by every pod that translates alike apart
/// from its name: the shared pod's `key.name` is empty (its namespace is kept).
/// [`CachedPod::core_pod`] gives an owned pod with its real key.
#[derive(Clone, Debug, PartialEq)]
pub struct Translated(Result<Arc<CorePod>, Box<TranslateError>>);

impl Translated {
    fn new(r: Result<CorePod, TranslateError>) -> Self {
        Translated(match r {
            Ok(mut p) => {
                p.key.name = String::new();
                Ok(intern(&SHAPES, Arc::new(p)))
            }
            Err(e) => Err(Box::new(e)),
        })
    }

    /// The translation (with an empty `key.name`), or why it failed. Named like
    /// `Result::as_ref` so that callers read it as the result it stands for.
    #[allow(clippy::should_implement_trait)]
    pub fn as_ref(&self) -> Result<&CorePod, &TranslateError> {
        match &self.0 {
            Ok(p) => Ok(p),
            Err(e) => Err(e),
        }
    }

    /// Whether the pod translated.
    pub fn is_ok(&self) -> bool {
        self.0.is_ok()
    }
}

/// The shared copies. Entries nobody else holds any more are dropped whenever the table has
/// doubled since the last sweep, so the table stays proportional to the live values.
struct Interner<T: ?Sized> {
    set: HashSet<Arc<T>>,
    sweep_at: usize,
}

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            set: HashSet::new(),
            sweep_at: 1024,
        }
    }
}

static SHAPES: LazyLock<Mutex<Interner<CorePod>>> = LazyLock::new(Default::default);
static NODE_NAMES: LazyLock<Mutex<Interner<str>>> = LazyLock::new(Default::default);
/// A DaemonSet has a pod on most nodes: its UID is kept once, not once per pod.
static DAEMONSET_UIDS: LazyLock<Mutex<Interner<str>>> = LazyLock::new(Default::default);

/// The shared copy of `v`.
fn intern<T: ?Sized + Hash + Eq>(table: &Mutex<Interner<T>>, v: Arc<T>) -> Arc<T> {
    // A poisoned table is still a valid table: every operation on it is a whole insert.
    let mut t = table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(e) = t.set.get(&v) {
        return e.clone();
    }
    if t.set.len() >= t.sweep_at {
        t.set.retain(|e| Arc::strong_count(e) > 1);
        t.sweep_at = (t.set.len() * 2).max(1024);
    }
    t.set.insert(v.clone());
    v
}

/// A pod as it comes over the wire, what the pod watcher lists and watches: the typed `Pod`
/// plus `spec.schedulingGroup`, which is newer than the API types this project builds with.
/// It lives only until it is turned into a [`CachedPod`].
#[derive(Clone, Debug, Deserialize)]
pub struct PodWire {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SpecWire>,
    #[serde(default)]
    status: Option<k8s_openapi::api::core::v1::PodStatus>,
}

impl From<PodWire> for CachedPod {
    fn from(w: PodWire) -> Self {
        let (spec, group_name) = match w.spec {
            Some(s) => (
                Some(s.spec),
                s.scheduling_group.and_then(|g| g.pod_group_name),
            ),
            None => (None, None),
        };
        let pod = Pod {
            metadata: w.metadata,
            spec,
            status: w.status,
        };
        CachedPod::new(pod, group_name.as_deref())
    }
}

impl From<Pod> for CachedPod {
    fn from(p: Pod) -> Self {
        CachedPod::new(p, None)
    }
}

impl CachedPod {
    /// Caches `p`, whose `spec.schedulingGroup.podGroupName` is `scheduling_group`.
    pub fn new(p: Pod, scheduling_group: Option<&str>) -> Self {
        let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        let unschedulable_since_ms = conditions
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.as_millisecond());
        let ready = conditions
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let gang = super::gangs::gang_of(&p, scheduling_group);
        let daemonset_uid = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .filter(|o| o.kind == "DaemonSet" && !o.uid.is_empty())
            .map(|o| intern(&DAEMONSET_UIDS, Arc::from(o.uid.as_str())));
        CachedPod {
            key: translate::pod_key(&p),
            node_name: translate::node_name(&p).map(|n| intern(&NODE_NAMES, Arc::from(n))),
            active: translate::is_active(&p),
            unschedulable: translate::is_unschedulable(&p),
            unschedulable_since_ms,
            nominated_node: p
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref())
                .filter(|n| !n.is_empty())
                .map(|n| intern(&NODE_NAMES, Arc::from(n))),
            created_ms: p
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond()),
            daemonset_uid,
            ready,
            core: Translated::new(translate::pod(&p).map(|mut c| {
                c.group = gang.as_ref().map(|g| g.id.clone());
                c
            })),
            group: gang.map(Box::new),
            volume_claims: super::volumes::claim_names(&p),
            grace_s: p
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds),
            deletion_s: p
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|t| t.0.as_second()),
            tolerates_disruption: tolerates_disruption(&p),
            mirror: translate::is_mirror(&p),
            drain_tier: drain_tier(&p),
            uid: p.metadata.uid,
        }
    }
}

/// Whether a toleration of `p` that translates tolerates the disruption taint.
fn tolerates_disruption(p: &Pod) -> bool {
    let taint = autoscaler_core::taints::Taint::disruption();
    p.spec
        .iter()
        .flat_map(|s| s.tolerations.iter().flatten())
        .filter_map(|t| translate::toleration(t, "").ok())
        .any(|t| t.tolerates(&taint))
}

/// The tier a drain evicts `p` in: by its priority class, and whether a DaemonSet owns it
/// (any owner of that kind, as Karpenter's `IsOwnedByDaemonSet`, or the Cluster Autoscaler's
/// DaemonSet-pod annotation).
fn drain_tier(p: &Pod) -> DrainTier {
    let owned = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    let annotated = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(translate::CA_DAEMONSET_POD))
        .is_some_and(|v| v == "true");
    let class = p
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref());
    DrainTier::of(class, owned || annotated)
}

impl CachedPod {
    /// A reference to the pod, for events about it.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(self.key.name.clone()),
            namespace: Some(self.key.namespace.clone()),
            uid: self.uid.clone(),
            ..Default::default()
        }
    }

    /// The translated pod with its own key, sharing the cached translation's shape (no copy
    /// of it), or why it did not translate.
    pub fn core_pod(&self) -> Result<CorePod, TranslateError> {
        match self.core.as_ref() {
            Ok(c) => Ok(CorePod::sharing(self.key.clone(), c.shape().clone())),
            Err(e) => Err(e.clone()),
        }
    }

    /// Whether the scheduler preempted pods for this pod on a node that is still there and not
    /// being deleted (`status.nominatedNodeName`; `node_up` says whether a node by that name
    /// is): it is bound there once they are gone and needs no node of its own, so the
    /// controller leaves it alone, as Karpenter leaves preempting pods (`IsPreempting`). A
    /// nomination to a node that went is stale and counts for nothing.
    pub fn preempting(&self, node_up: impl Fn(&str) -> bool) -> bool {
        self.nominated_node.as_deref().is_some_and(node_up)
    }

    /// Whether the pod is a DaemonSet or mirror pod (it does not move when its node goes).
    pub fn stays_with_node(&self) -> bool {
        self.core
            .as_ref()
            .is_ok_and(|c| c.is_daemonset() || c.mirror)
    }

    /// Whether its node's removal concerns it: a running pod, not already terminating, that
    /// is neither a DaemonSet nor a mirror pod. Disruption's validation placed each such pod;
    /// one that arrived after it stops the command.
    pub fn moves_with_node(&self) -> bool {
        self.active && !self.deleting() && !self.stays_with_node()
    }

    /// Whether removing its node must first move it (evict it, and wait until it is gone): a
    /// pod that [moves with its node](Self::moves_with_node) and does not tolerate the
    /// disruption taint. One that tolerates it goes with its node, as in Karpenter
    /// (`IsDrainable`): evicted, its replacement could be scheduled onto the tainted node
    /// again, and the drain would never end.
    pub fn must_leave_with_node(&self) -> bool {
        self.moves_with_node() && !self.tolerates_disruption
    }

    /// Whether the drain of its deleted node waits until it is gone, at `now` (seconds since
    /// the epoch): a pod not finished, neither a mirror pod nor one tolerating the disruption
    /// taint, and not [stuck terminating](Self::stuck_terminating) (Karpenter's
    /// `IsWaitingEviction`). DaemonSet pods are drained too, last but critical pods
    /// ([`Self::drain_tier`]); a pod terminating already counts until it is gone, so that its
    /// instance is not terminated while it shuts down (a training job writing its checkpoint
    /// on SIGTERM).
    pub fn drained_with_node(&self, now: i64) -> bool {
        self.active && !self.mirror && !self.tolerates_disruption && !self.stuck_terminating(now)
    }

    /// Whether it is being deleted (`metadata.deletionTimestamp` is set).
    pub fn deleting(&self) -> bool {
        self.deletion_s.is_some()
    }

    /// Whether it is stuck terminating at `now` (seconds since the epoch): deleted, and its
    /// grace period ended more than a minute ago (Karpenter's `IsStuckTerminating`; its
    /// kubelet is likely gone, so it will not end while its node stands).
    pub fn stuck_terminating(&self, now: i64) -> bool {
        self.deletion_s.is_some_and(|d| now > d + 60)
    }

    /// Its effective requests (empty when it did not translate).
    pub fn requests(&self) -> Resources {
        self.core
            .as_ref()
            .map(|c| c.requests.clone())
            .unwrap_or_default()
    }
}

/// The pod cache: a reflector store that keys each pod by its own [`CachedPod::key`].
///
/// A kube `Store` keys objects by an `ObjectRef`, a second copy of each pod's name,
/// namespace, resourceVersion and uid: with 150,000 pods, tens of MiB of copies.
#[cfg(feature = "controller")]
#[derive(Clone, Default)]
pub struct PodStore {
    pods: Arc<std::sync::RwLock<HashSet<ByKey>>>,
    /// A (re)list being gathered.
    relist: Arc<Mutex<Option<HashSet<ByKey>>>>,
    ready: Arc<tokio::sync::Notify>,
    synced: Arc<std::sync::atomic::AtomicBool>,
    /// When a pod that moves with consolidation was last bound to or removed from each node,
    /// seconds since the epoch, as the watch saw it (see [`PodStore::pod_events`]).
    pod_events: Arc<Mutex<HashMap<Arc<str>, i64>>>,
}

/// A cached pod hashed and compared by its key.
#[cfg(feature = "controller")]
struct ByKey(Arc<CachedPod>);

#[cfg(feature = "controller")]
impl Hash for ByKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.key.hash(h);
    }
}

#[cfg(feature = "controller")]
impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

#[cfg(feature = "controller")]
impl Eq for ByKey {}

#[cfg(feature = "controller")]
impl std::borrow::Borrow<PodKey> for ByKey {
    fn borrow(&self) -> &PodKey {
        &self.0.key
    }
}

#[cfg(feature = "controller")]
impl PodStore {
    /// An empty store, not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every pod.
    pub fn state(&self) -> Vec<Arc<CachedPod>> {
        self.read().iter().map(|p| p.0.clone()).collect()
    }

    /// The pod with this key.
    pub fn get(&self, key: &PodKey) -> Option<Arc<CachedPod>> {
        self.read().get(key).map(|p| p.0.clone())
    }

    /// Waits until the first list has been applied.
    pub async fn wait_until_ready(&self) {
        loop {
            let notified = self.ready.notified();
            if self.synced.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashSet<ByKey>> {
        // A poisoned set is still a valid set: every write is one whole insert or swap.
        self.pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<ByKey>> {
        self.pods
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies one watcher event. A (re)list is gathered aside and swapped in whole when it
    /// is complete, so readers never see a half-listed cluster.
    pub fn apply(&self, event: kube::runtime::watcher::Event<PodWire>) {
        use kube::runtime::watcher::Event;
        let mut relist = self
            .relist
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            Event::Init => *relist = Some(HashSet::new()),
            Event::InitApply(p) => {
                relist
                    .get_or_insert_with(HashSet::new)
                    .replace(ByKey(Arc::new(p.into())));
            }
            Event::InitDone => {
                let fresh = relist.take().unwrap_or_default();
                let relisted = self.synced.load(std::sync::atomic::Ordering::SeqCst);
                let old = std::mem::replace(&mut *self.write(), fresh);
                if relisted {
                    // What changed while the watch was down is what it would have told.
                    self.record_differences(&old);
                }
                self.synced.store(true, std::sync::atomic::Ordering::SeqCst);
                self.ready.notify_waiters();
            }
            Event::Apply(p) => {
                let new = Arc::new(CachedPod::from(p));
                let old = self.write().replace(ByKey(new.clone()));
                self.record(old.as_ref().map(|o| &*o.0), Some(&new));
            }
            Event::Delete(p) => {
                // As `translate::pod_key` names it.
                let key = PodKey {
                    namespace: p.metadata.namespace.unwrap_or_else(|| "default".into()),
                    name: p.metadata.name.unwrap_or_default(),
                };
                let old = self.write().take(&key);
                self.record(old.as_ref().map(|o| &*o.0), None);
            }
        }
    }

    /// Notes a pod arriving on or leaving a node (bound, finished, deleted). DaemonSet and
    /// mirror pods are left out: they come and go with the node and never hold it.
    fn record(&self, old: Option<&CachedPod>, new: Option<&CachedPod>) {
        let on = |p: Option<&CachedPod>| {
            p.filter(|p| p.active && !p.stays_with_node())
                .and_then(|p| p.node_name.clone())
        };
        let (before, after) = (on(old), on(new));
        if before == after {
            return;
        }
        let now = jiff::Timestamp::now().as_second();
        let mut events = self
            .pod_events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for node in before.into_iter().chain(after) {
            events.insert(node, now);
        }
    }

    /// After a relist, records as pod events the differences between the pods before it
    /// (`old`) and the store now: pods that appeared, left, moved or finished meanwhile.
    fn record_differences(&self, old: &HashSet<ByKey>) {
        let now = self.read();
        for p in now.iter() {
            self.record(old.get(&p.0.key).map(|o| &*o.0), Some(&p.0));
        }
        for o in old.iter().filter(|o| !now.contains(&o.0.key)) {
            self.record(Some(&o.0), None);
        }
    }

    /// When a pod was last bound to or removed from each node, seconds since the epoch, for
    /// the nodes where the watch saw one happen since start-up (the first list is not an
    /// event; a later relist's differences are).
    /// Nodes not in `keep` are forgotten.
    pub fn pod_events(&self, keep: impl Fn(&str) -> bool) -> HashMap<Arc<str>, i64> {
        let mut events = self
            .pod_events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        events.retain(|n, _| keep(n));
        events.clone()
    }
}

impl kube::Resource for PodWire {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn deserializes_straight_into_the_compact_form() {
        let v = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "cuda", "env": [{"name": "A", "value": "1"}],
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        });
        let c: CachedPod = serde_json::from_value(v.clone()).unwrap();
        let p: Pod = serde_json::from_value(v).unwrap();
        assert_eq!(c.core_pod(), translate::pod(&p));
        assert!(c.unschedulable);
        assert_eq!(c.unschedulable_since_ms, Some(1_767_225_600_000));
        assert_eq!(c.key.to_string(), "ml/p");
        assert_eq!(c.uid.as_deref(), Some("u1"));
        assert!(!c.deleting());
        let r = c.reference();
        assert_eq!(
            (r.kind.as_deref(), r.name.as_deref(), r.namespace.as_deref()),
            (Some("Pod"), Some("p"), Some("ml"))
        );
    }

    #[test]
    fn a_pod_tolerating_the_disruption_taint_goes_with_its_node() {
        let running = |tolerations: serde_json::Value, owner: Option<&str>| -> CachedPod {
            let owners = owner.map_or(json!([]), |k| {
                json!([{"apiVersion": "apps/v1", "kind": k, "name": "o", "uid": "o", "controller": true}])
            });
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ml", "ownerReferences": owners},
                "spec": {"nodeName": "n1", "tolerations": tolerations, "containers": [{"name": "c"}]},
                "status": {"phase": "Running"}
            }))
            .unwrap()
        };
        assert!(running(json!([]), Some("ReplicaSet")).must_leave_with_node());
        // Another taint's toleration does not keep it.
        assert!(
            running(
                json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]),
                Some("ReplicaSet")
            )
            .must_leave_with_node()
        );
        for tolerates in [
            json!([{"operator": "Exists"}]),
            json!([{"key": "gpu-autoscaler.dev/disrupted", "operator": "Exists", "effect": "NoSchedule"}]),
        ] {
            assert!(
                !running(tolerates.clone(), Some("ReplicaSet")).must_leave_with_node(),
                "{tolerates}"
            );
        }
        assert!(!running(json!([]), Some("DaemonSet")).must_leave_with_node());
    }

    #[test]
    fn a_pod_is_stuck_terminating_a_minute_after_its_grace_period() {
        let deleted: CachedPod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml",
                "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let at = 1_767_225_600;
        assert!(deleted.deleting() && !deleted.must_leave_with_node());
        assert!(!deleted.stuck_terminating(at + 60));
        assert!(deleted.stuck_terminating(at + 61));
        // A drain waits for it until then: its instance must outlive its shutdown.
        assert!(deleted.drained_with_node(at + 60));
        assert!(!deleted.drained_with_node(at + 61));
    }

    #[test]
    fn a_drain_takes_workloads_then_daemonsets_then_critical_pods_and_never_mirror_pods() {
        let pod = |meta: serde_json::Value, spec: serde_json::Value| -> CachedPod {
            let mut m = json!({"name": "p", "namespace": "kube-system"});
            m.as_object_mut()
                .unwrap()
                .extend(meta.as_object().unwrap().clone());
            let mut sp = json!({"nodeName": "n1", "containers": [{"name": "c"}]});
            sp.as_object_mut()
                .unwrap()
                .extend(spec.as_object().unwrap().clone());
            serde_json::from_value(
                json!({"metadata": m, "spec": sp, "status": {"phase": "Running"}}),
            )
            .unwrap()
        };
        let ds = json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
            "name": "d", "uid": "d", "controller": true}]});
        let critical = json!({"priorityClassName": "system-node-critical"});
        let at = 1_767_225_600;
        let cases = [
            (pod(json!({}), json!({})), Some(DrainTier::Workload)),
            (
                pod(json!({}), json!({"priorityClassName": "high"})),
                Some(DrainTier::Workload),
            ),
            (pod(ds.clone(), json!({})), Some(DrainTier::DaemonSet)),
            // The Cluster Autoscaler's annotation makes a DaemonSet pod of any pod.
            (
                pod(
                    json!({"annotations": {"cluster-autoscaler.kubernetes.io/daemonset-pod": "true"}}),
                    json!({}),
                ),
                Some(DrainTier::DaemonSet),
            ),
            (pod(json!({}), critical.clone()), Some(DrainTier::Critical)),
            (
                pod(ds.clone(), critical.clone()),
                Some(DrainTier::CriticalDaemonSet),
            ),
            // Mirror pods stay: by the kubelet's annotation or by a Node owner alone.
            (
                pod(
                    json!({"annotations": {"kubernetes.io/config.mirror": "x"}}),
                    json!({}),
                ),
                None,
            ),
            (
                pod(
                    json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "n"}]}),
                    critical,
                ),
                None,
            ),
            // A DaemonSet pod tolerating the disruption taint stays.
            (
                pod(ds, json!({"tolerations": [{"operator": "Exists"}]})),
                None,
            ),
        ];
        for (i, (p, want)) in cases.into_iter().enumerate() {
            let got = p.drained_with_node(at).then_some(p.drain_tier);
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn a_pod_nominated_to_a_node_preempts_only_while_that_node_is_up() {
        let nominated = |node: &str| -> CachedPod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ml"},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"nominatedNodeName": node, "conditions": [{"type": "PodScheduled",
                    "status": "False", "reason": "Unschedulable"}]}
            }))
            .unwrap()
        };
        let p = nominated("n1");
        assert!(p.unschedulable);
        assert!(p.preempting(|n| n == "n1"));
        assert!(!p.preempting(|n| n == "n2"));
        // The scheduler clears a nomination by writing it empty.
        assert!(!nominated("").preempting(|_| true));
    }

    #[test]
    fn replicas_share_one_translation_and_keep_their_keys() {
        let replica = |name: &str, node: &str| -> CachedPod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml", "uid": name, "labels": {"app": "x"}},
                "spec": {"nodeName": node, "containers": [{"name": "c",
                    "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": "Running"}
            }))
            .unwrap()
        };
        let (a, b) = (replica("a", "n1"), replica("b", "n1"));
        let (Ok(ca), Ok(cb)) = (a.core.as_ref(), b.core.as_ref()) else {
            panic!("translates");
        };
        assert!(std::ptr::eq(ca, cb));
        assert_eq!(ca.key.namespace, "ml");
        let (pa, pb) = (a.core_pod().unwrap(), b.core_pod().unwrap());
        assert_eq!(pa.key.to_string(), "ml/a");
        assert_eq!(pb.key.to_string(), "ml/b");
        // A snapshot's pods share the cached shape rather than copy it.
        assert!(pa.shares_shape_with(&pb));
        assert!(Arc::ptr_eq(pa.shape(), ca.shape()));
        assert!(Arc::ptr_eq(
            a.node_name.as_ref().unwrap(),
            b.node_name.as_ref().unwrap()
        ));
        let other = replica("c", "n2");
        assert_eq!(other.node_name.as_deref(), Some("n2"));
    }

    #[test]
    fn only_a_pod_a_daemonset_controls_keeps_its_owners_uid_once_for_all() {
        let owned = |name: &str, owner: serde_json::Value| -> CachedPod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "kube-system", "ownerReferences": owner},
                "spec": {"containers": [{"name": "c"}]}
            }))
            .unwrap()
        };
        let ds = |uid: &str, controller: bool| {
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": uid,
                "controller": controller}])
        };
        let (a, b) = (owned("a", ds("ds-1", true)), owned("b", ds("ds-1", true)));
        assert_eq!(a.daemonset_uid.as_deref(), Some("ds-1"));
        assert!(Arc::ptr_eq(
            a.daemonset_uid.as_ref().unwrap(),
            b.daemonset_uid.as_ref().unwrap()
        ));
        // A DaemonSet that only co-owns the pod does not make it one of its pods.
        assert_eq!(owned("c", ds("ds-1", false)).daemonset_uid, None);
        let rs = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
            "uid": "rs-1", "controller": true}]);
        assert_eq!(owned("d", rs).daemonset_uid, None);
        assert_eq!(owned("e", json!([])).daemonset_uid, None);
    }

    #[cfg(feature = "controller")]
    #[test]
    fn binding_finishing_and_deleting_are_pod_events_of_their_node() {
        use kube::runtime::watcher::Event;
        let wire = |name: &str, node: Option<&str>, phase: &str, owner: Option<&str>| -> PodWire {
            let owners = owner.map_or(json!([]), |k| {
                json!([{"apiVersion": "apps/v1", "kind": k, "name": "o", "uid": "u", "controller": true}])
            });
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml", "uid": name, "ownerReferences": owners},
                "spec": {"nodeName": node, "containers": [{"name": "c"}]},
                "status": {"phase": phase}
            }))
            .unwrap()
        };
        let store = PodStore::new();
        store.apply(Event::Init);
        // What was there at the (re)list is no event: its time is unknown.
        store.apply(Event::InitApply(wire("old", Some("n0"), "Running", None)));
        store.apply(Event::InitDone);
        let events = |s: &PodStore| {
            let mut v: Vec<String> = s
                .pod_events(|_| true)
                .into_keys()
                .map(|k| k.to_string())
                .collect();
            v.sort();
            v
        };
        assert!(events(&store).is_empty());
        // Pending, then bound to n1: n1 gets an event.
        store.apply(Event::Apply(wire("a", None, "Pending", None)));
        assert!(events(&store).is_empty());
        store.apply(Event::Apply(wire("a", Some("n1"), "Running", None)));
        assert_eq!(events(&store), ["n1"]);
        // A DaemonSet pod arriving on n2 is not one; a pod finishing on n3 and one deleted
        // from n0 are.
        store.apply(Event::Apply(wire(
            "ds",
            Some("n2"),
            "Running",
            Some("DaemonSet"),
        )));
        assert_eq!(events(&store), ["n1"]);
        store.apply(Event::Apply(wire("b", Some("n3"), "Running", None)));
        store.apply(Event::Apply(wire("b", Some("n3"), "Succeeded", None)));
        store.apply(Event::Delete(wire("old", Some("n0"), "Running", None)));
        assert_eq!(events(&store), ["n0", "n1", "n3"]);
        // Nodes that are gone are forgotten.
        store.pod_events(|n| n != "n0");
        assert_eq!(events(&store), ["n1", "n3"]);
        // A relist after the watch was down: what changed meanwhile is an event of its node
        // (c bound to n4, a moved from n1 to n5, b finished earlier stays no news), and an
        // unchanged pod is none.
        store.pod_events(|_| false);
        store.apply(Event::Init);
        store.apply(Event::InitApply(wire("a", Some("n5"), "Running", None)));
        store.apply(Event::InitApply(wire("b", Some("n3"), "Succeeded", None)));
        store.apply(Event::InitApply(wire("c", Some("n4"), "Running", None)));
        store.apply(Event::InitDone);
        assert_eq!(events(&store), ["n1", "n4", "n5"]);
        // The ds pod (n2) vanished in that relist: a DaemonSet pod is still no event; a pod
        // deleted while the watch was down is.
        store.pod_events(|_| false);
        store.apply(Event::Init);
        store.apply(Event::InitApply(wire("a", Some("n5"), "Running", None)));
        store.apply(Event::InitDone);
        assert_eq!(events(&store), ["n4"]);
    }

    #[test]
    fn only_annotations_something_reads_tell_replicas_apart() {
        let annotated = |name: &str, ann: serde_json::Value| -> CachedPod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml", "uid": name, "annotations": ann},
                "spec": {"containers": [{"name": "c",
                    "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": "Running"}
            }))
            .unwrap()
        };
        // Per-pod annotations such as a restart stamp or a metrics scrape port are not read.
        let a = annotated(
            "a",
            json!({"kubectl.kubernetes.io/restartedAt": "1", "x/port": "1"}),
        );
        let b = annotated("b", json!({"kubectl.kubernetes.io/restartedAt": "2"}));
        let keep = annotated(
            "c",
            json!({"karpenter.sh/do-not-disrupt": "true", "x/port": "3"}),
        );
        let (Ok(ca), Ok(cb), Ok(cc)) = (a.core.as_ref(), b.core.as_ref(), keep.core.as_ref())
        else {
            panic!("translates");
        };
        assert!(ca.annotations.is_empty(), "{:?}", ca.annotations);
        assert!(std::ptr::eq(ca, cb));
        assert!(!std::ptr::eq(ca, cc));
        let kept: Vec<&str> = cc.annotations.keys().map(String::as_str).collect();
        assert_eq!(kept, ["karpenter.sh/do-not-disrupt"]);
        // The one it keeps still blocks disruption.
        let snap = autoscaler_core::model::Snapshot::default();
        assert!(autoscaler_core::disruption::pod_blocker(cc, &snap, 0).is_some());
    }
}
