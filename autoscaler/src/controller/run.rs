//! The wiring of `gpu-autoscaler run`: client, reflectors, leader election, the reconcile loop,
//! metrics and health.
//!
//! One loop, run only by the leader every `--loop-interval`, performs in order: the kwok
//! provider's boot step (kwok only), the NodeClaim lifecycle ([`super::lifecycle::step`] per
//! claim), the termination of deleted managed Nodes, provisioning (when the batcher closes a
//! window), disruption (every `--disruption-interval`), garbage collection (every
//! `--gc-interval`), NodePool status and metrics. Launches run as spawned tasks (rate-limited,
//! retried with backoff) so a slow cloud never stalls the loop.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use autoscaler_core::disruption::{DisruptionConfig, DisruptionState, plan_disruption};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{PodKey, Snapshot};
use autoscaler_core::plan::NewClaim;
use autoscaler_core::provision::plan_provisioning;
use autoscaler_core::requirements::{Constraint, Requirements, ValueSet};
use autoscaler_core::resources::{Resources, is_gpu_class};
use futures::StreamExt;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, ObjectReference, PodTemplate};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use nodepools::conditions::{self, reasons};
use nodepools::{
    NodeClaim, NodeClaimSpec, NodeClaimStatus, NodePool, NodeSelectorRequirement,
    ResourceRequirements, Taint as ApiTaint,
};
use providers::kwok::{KwokConfig, KwokProvider};
use providers::{
    CloudProvider, InstanceState, LaunchRequest, NodeClassRef, OfferingKey, ProviderError,
    UnavailableOfferings, fake::FakeProvider,
};
use serde_json::json;
use tokio::sync::watch;

use super::actuator::{Actuator, Evicted, has_finalizer, reference, set_condition};
use super::api_calls::check;
use super::batcher::{BatchConfig, Batcher};
use super::cache::{CachedPod, PodStore, PodWire};
use super::disrupt::{self, Job, Stage};
use super::error::{Error, Result};
use super::gangs::{GangObjects, SchedulingPodGroup, VolcanoPodGroup};
use super::keys;
use super::leader::{self, LeaderConfig};
use super::lifecycle::{self, Action, Phase, Timeouts};
use super::metrics::{
    Health, Liveness, LoopLabel, Metrics, ModelLabel, PhaseLabel, PoolLabel, ReasonLabel,
};
use super::pod_problems;
use super::provreq::ProvisioningRequest;
use super::settings::{LogFormat, ProviderKind, RunArgs};
use super::snapshot::{Inputs, SnapshotBuilder, claims_by_provider_id};
use super::translate;

/// Seconds since the Unix epoch: the core's clock.
fn epoch() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Least time between two `lastPodEventTime` writes to one NodeClaim, seconds.
const POD_EVENT_WRITE_EVERY_S: i64 = 5;

/// The reflectors' stores.
#[derive(Clone)]
pub struct Stores {
    /// Pods, compact and translated.
    pub pods: PodStore,
    /// Nodes.
    pub nodes: Store<Node>,
    /// NodePools.
    pub pools: Store<NodePool>,
    /// NodeClaims.
    pub claims: Store<NodeClaim>,
    /// DaemonSets.
    pub daemonsets: Store<DaemonSet>,
    /// PodDisruptionBudgets.
    pub pdbs: Store<PodDisruptionBudget>,
    /// ProvisioningRequests and PodTemplates, once the ProvisioningRequest CRD is served.
    pub provreqs: Late<(Store<ProvisioningRequest>, Store<PodTemplate>)>,
    /// Volcano PodGroups, once Volcano is installed.
    pub volcano: Late<Store<VolcanoPodGroup>>,
    /// Kubernetes PodGroups, once `scheduling.k8s.io/v1alpha2` is served.
    pub k8s_groups: Late<Store<SchedulingPodGroup>>,
}

/// The store of an optional API: empty while the API is not served, then set for good. The
/// API is asked at start-up and, while it does not answer, again every `--optional-api-recheck`,
/// so a CRD installed after the autoscaler (Kueue's ProvisioningRequest, Volcano) is picked up
/// without a restart. The store is set only once it has listed, so a reader never mistakes a
/// cache still filling for an empty cluster.
pub struct Late<T>(Arc<std::sync::OnceLock<T>>);

impl<T> Clone for Late<T> {
    fn clone(&self) -> Self {
        Late(self.0.clone())
    }
}

impl<T> Default for Late<T> {
    fn default() -> Self {
        Late(Arc::new(std::sync::OnceLock::new()))
    }
}

impl<T: Send + Sync + 'static> Late<T> {
    /// The store, once the API is served and listed.
    pub fn get(&self) -> Option<&T> {
        self.0.get()
    }

    /// Tries `attempt` now and, while it gives nothing, every `every` in the background.
    async fn start<F, Fut>(kind: &'static str, every: Duration, attempt: F) -> Self
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Option<T>> + Send,
    {
        let late = Late::default();
        if let Some(v) = attempt().await {
            let _ = late.0.set(v);
            return late;
        }
        tracing::info!(
            kind,
            recheck = ?every,
            "not served: its support is off until the API appears"
        );
        let slot = late.0.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Some(v) = attempt().await {
                    let _ = slot.set(v);
                    tracing::info!(kind, "now served: its support is on");
                    return;
                }
            }
        });
        late
    }
}

/// Whether the API serves `K` (its CRD is installed): one list call of at most one object.
async fn served<K>(client: &kube::Client) -> bool
where
    K: Cacheable,
{
    let api: Api<K> = Api::all(client.clone());
    match api.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(kind = %K::kind(&()), error = %e, "not served");
            false
        }
    }
}

/// What a reflector can cache: a typed, cluster-listable Kubernetes object.
trait Cacheable:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Cacheable for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

fn reflect<K>(api: Api<K>, group: &'static str, resource: &'static str) -> Store<K>
where
    K: Cacheable,
{
    reflect_trimmed(api, group, resource, |_| {})
}

/// The pod reflector, into the compact [`PodStore`].
fn reflect_pods(api: Api<PodWire>) -> PodStore {
    check("", "pods", "list");
    check("", "pods", "watch");
    let store = PodStore::new();
    let writer = store.clone();
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => writer.apply(event),
                Err(e) => tracing::warn!(resource = "pods", error = %e, "watch"),
            }
        }
    });
    store
}

/// Node status the controller never reads; on a real node the image list alone is kilobytes.
fn trim_node(n: &mut Node) {
    if let Some(s) = n.status.as_mut() {
        s.images = None;
        s.node_info = None;
        s.daemon_endpoints = None;
        s.volumes_attached = None;
        s.volumes_in_use = None;
        s.config = None;
        s.runtime_handlers = None;
        s.features = None;
        s.addresses = None;
    }
}

/// [`reflect`], with `trim` dropping what is never read before an object is cached.
fn reflect_trimmed<K>(
    api: Api<K>,
    group: &'static str,
    resource: &'static str,
    trim: fn(&mut K),
) -> Store<K>
where
    K: Cacheable,
{
    check(group, resource, "list");
    check(group, resource, "watch");
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        // managedFields are never read: drop them to keep the cache small.
        .modify(move |o| {
            o.managed_fields_mut().clear();
            trim(o);
        })
        .reflect(writer)
        .applied_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                tracing::warn!(resource, error = %e, "watch");
            }
        }
    });
    reader
}

/// A listed reflector for `K` once the API serves it (see [`Late`]).
async fn reflect_when_served<K>(
    client: &kube::Client,
    group: &'static str,
    resource: &'static str,
    every: Duration,
) -> Late<Store<K>>
where
    K: Cacheable,
{
    let client = client.clone();
    Late::start(resource, every, move || {
        let client = client.clone();
        async move {
            if !served::<K>(&client).await {
                return None;
            }
            let store = reflect(Api::all(client), group, resource);
            let _ = store.wait_until_ready().await;
            Some(store)
        }
    })
    .await
}

impl Stores {
    /// Starts every reflector; those of optional APIs (ProvisioningRequests, Volcano, the
    /// Kubernetes PodGroup) once the API is served, checking again every `recheck`.
    pub async fn start(client: &kube::Client, recheck: Duration) -> Self {
        let provreqs = {
            let client = client.clone();
            Late::start("provisioningrequests", recheck, move || {
                let client = client.clone();
                async move {
                    if !served::<ProvisioningRequest>(&client).await {
                        return None;
                    }
                    let requests = reflect(
                        Api::all(client.clone()),
                        "autoscaling.x-k8s.io",
                        "provisioningrequests",
                    );
                    let templates = reflect(Api::all(client), "", "podtemplates");
                    let _ =
                        futures::join!(requests.wait_until_ready(), templates.wait_until_ready());
                    Some((requests, templates))
                }
            })
            .await
        };
        let volcano =
            reflect_when_served(client, "scheduling.volcano.sh", "podgroups", recheck).await;
        let k8s_groups =
            reflect_when_served(client, "scheduling.k8s.io", "podgroups", recheck).await;
        Stores {
            provreqs,
            volcano,
            k8s_groups,
            // Translated and compacted as they arrive.
            pods: reflect_pods(Api::all(client.clone())),
            nodes: reflect_trimmed(Api::all(client.clone()), "", "nodes", trim_node),
            pools: reflect(Api::all(client.clone()), "gpu-autoscaler.dev", "nodepools"),
            claims: reflect(Api::all(client.clone()), "gpu-autoscaler.dev", "nodeclaims"),
            daemonsets: reflect(Api::all(client.clone()), "apps", "daemonsets"),
            pdbs: reflect(Api::all(client.clone()), "policy", "poddisruptionbudgets"),
        }
    }

    /// Waits until every store has listed once.
    pub async fn ready(&self) {
        let _ = futures::join!(
            self.pods.wait_until_ready(),
            self.nodes.wait_until_ready(),
            self.pools.wait_until_ready(),
            self.claims.wait_until_ready(),
            self.daemonsets.wait_until_ready(),
            self.pdbs.wait_until_ready(),
        );
        // Optional APIs' stores are set only once listed.
    }

    /// What the cluster's gang objects say of gang minimums.
    pub fn gang_objects(&self) -> GangObjects {
        GangObjects {
            volcano: self
                .volcano
                .get()
                .map(|v| super::gangs::volcano_minimums(v.state().iter().map(|g| g.as_ref())))
                .unwrap_or_default(),
            k8s: self
                .k8s_groups
                .get()
                .map(|k| super::gangs::k8s_policies(k.state().iter().map(|g| g.as_ref())))
                .unwrap_or_default(),
        }
    }
}

/// The NodeClaim to create for a planned claim of `cluster`: the claim of a group's node
/// carries the group's placement group ([`keys::PLACEMENT_GROUP_ANNOTATION`]).
pub fn claim_object(nc: &NewClaim, pool: &NodePool, cluster: &str) -> NodeClaim {
    let mut requirements = requirement_exprs(&nc.requirements);
    requirements.retain(|r| r.key != labels::INSTANCE_TYPE);
    requirements.push(NodeSelectorRequirement {
        key: labels::INSTANCE_TYPE.into(),
        operator: "In".into(),
        values: nc
            .instance_types
            .iter()
            .map(|o| o.instance_type.clone())
            .collect(),
        min_values: None,
    });
    // The pool's minValues travel with the claim, as Karpenter's do, so the claim says what
    // flexibility it was planned with (the planner kept at least that many values).
    for r in &mut requirements {
        let Some(m) = pool
            .spec
            .template
            .requirements
            .iter()
            .filter(|p| p.key == r.key)
            .filter_map(|p| p.min_values)
            .max()
        else {
            continue;
        };
        let holds = match r.operator.as_str() {
            "In" => r.values.len() >= m as usize,
            "Exists" => true,
            _ => false,
        };
        if holds {
            r.min_values = Some(m);
        }
    }
    let mut claim_labels = nc.labels.clone();
    claim_labels.insert(keys::POOL_LABEL.into(), nc.pool.clone());
    let taint = |t: &autoscaler_core::Taint| ApiTaint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: format!("{:?}", t.effect),
    };
    let annotations = nc.group.as_ref().map(|g| {
        BTreeMap::from([(
            keys::PLACEMENT_GROUP_ANNOTATION.to_string(),
            providers::placement_group_name(cluster, g),
        )])
    });
    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", nc.pool)),
            labels: Some(claim_labels),
            annotations,
            finalizers: Some(vec![keys::FINALIZER.into()]),
            ..Default::default()
        },
        spec: NodeClaimSpec {
            node_pool: nc.pool.clone(),
            requirements,
            resources: ResourceRequirements {
                requests: quantities(&nc.requests),
            },
            taints: nc.taints.iter().map(taint).collect(),
            startup_taints: nc.startup_taints.iter().map(taint).collect(),
            node_class_ref: pool.spec.template.node_class_ref.clone(),
        },
        status: None,
    }
}

/// Resources as a Kubernetes resource map.
pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    providers::kwok::quantities(r)
}

/// Requirements as API expressions (one key may need two: `Exists` plus `NotIn`).
pub fn requirement_exprs(r: &Requirements) -> Vec<NodeSelectorRequirement> {
    let mut out = Vec::new();
    let expr = |key: &str, op: &str, values: Vec<String>| NodeSelectorRequirement {
        key: key.to_string(),
        operator: op.to_string(),
        values,
        min_values: None,
    };
    for (key, c) in r.iter() {
        match &c.values {
            ValueSet::In(set) if set.is_empty() => {
                if c.allow_absent {
                    out.push(expr(key, "DoesNotExist", vec![]));
                }
            }
            ValueSet::In(set) => out.push(expr(key, "In", set.iter().cloned().collect())),
            ValueSet::NotIn(set) => {
                if !c.allow_absent && c.gt.is_none() && c.lt.is_none() {
                    out.push(expr(key, "Exists", vec![]));
                }
                if !set.is_empty() {
                    out.push(expr(key, "NotIn", set.iter().cloned().collect()));
                }
                if let Some(g) = c.gt {
                    out.push(expr(key, "Gt", vec![g.to_string()]));
                }
                if let Some(l) = c.lt {
                    out.push(expr(key, "Lt", vec![l.to_string()]));
                }
            }
        }
    }
    out
}

/// The offerings a claim may launch on, cheapest first: its instance-type, zone and
/// capacity-type requirements over the pool's catalog, minus offerings recently refused.
pub fn candidates(
    requirements: &Requirements,
    types: &[InstanceType],
    unavailable: &UnavailableOfferings,
    now: i64,
) -> Vec<(OfferingKey, f64)> {
    let any = Constraint::any();
    let it_c = requirements.get(labels::INSTANCE_TYPE).unwrap_or(&any);
    let zone_c = requirements.get(labels::ZONE).unwrap_or(&any);
    let ct_c = requirements.get(labels::CAPACITY_TYPE).unwrap_or(&any);
    let mut out = Vec::new();
    for t in types.iter().filter(|t| it_c.matches(Some(&t.name))) {
        for o in &t.offerings {
            let key = OfferingKey::new(&t.name, &o.zone, o.capacity_type);
            if zone_c.matches(Some(&o.zone))
                && ct_c.matches(Some(o.capacity_type.as_str()))
                && !unavailable.is_unavailable(&key, now)
            {
                out.push((key, o.price));
            }
        }
    }
    out.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// Shared between the loop and its launch tasks.
struct Shared<P> {
    provider: Arc<P>,
    actuator: Actuator,
    metrics: Arc<Metrics>,
    limiter: DefaultDirectRateLimiter,
    unavailable: Mutex<UnavailableOfferings>,
    /// Claims with a launch task running (or just finished, until the store shows it).
    launching: Mutex<HashMap<String, Instant>>,
    /// A placement group collection is running (at most one at a time).
    collecting_groups: AtomicBool,
}

impl<P: CloudProvider + 'static> Shared<P> {
    /// A provider call under the rate limit, retried with exponential backoff while the error
    /// is retryable (the provider's idempotency contract makes that safe).
    async fn cloud<T, F, Fut>(&self, what: &str, f: F) -> Result<T, ProviderError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let mut delay = Duration::from_millis(200);
        let mut attempt = 0;
        loop {
            self.limiter.until_ready().await;
            let started = Instant::now();
            let result = f().await;
            let code = match &result {
                Ok(_) => "ok",
                Err(e) => e.code(),
            };
            self.metrics.cloud_call(
                self.provider.name(),
                what,
                code,
                started.elapsed().as_secs_f64(),
            );
            match result {
                Ok(v) => return Ok(v),
                Err(e) if e.is_retryable() && attempt < 4 => {
                    attempt += 1;
                    tracing::debug!(what, error = %e, attempt, "retrying cloud call");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The leader's state across rounds.
struct Controller<P> {
    shared: Arc<Shared<P>>,
    kwok: Option<KwokProvider>,
    stores: Stores,
    args: RunArgs,
    batcher: Batcher,
    builder: SnapshotBuilder,
    started: Instant,
    types: HashMap<NodeClassRef, (Instant, Arc<Vec<InstanceType>>)>,
    disruption_state: DisruptionState,
    jobs: Vec<Job>,
    last_disruption: Option<Instant>,
    last_gc: Option<Instant>,
    last_pool_status: Option<Instant>,
    orphans: HashMap<String, i64>,
    /// What pending pods were told of why they get no node (`NotTriggerScaleUp`).
    notices: pod_problems::Notices,
    first_round: bool,
    /// ProvisioningRequests: retry back-offs and bookings too large for their status.
    provreq_memory: provreqs::Memory,
    /// The launch guard and the shapes kept out of planning for delivering too little.
    guard: GuardState,
}

fn class_of(np: &NodePool) -> NodeClassRef {
    np.spec
        .template
        .node_class_ref
        .as_ref()
        .map(|c| NodeClassRef {
            group: c.group.clone(),
            kind: c.kind.clone(),
            name: c.name.clone(),
        })
        .unwrap_or_default()
}

mod guard;
mod provreqs;

use guard::{GuardState, LaunchCatalog};

impl<P: CloudProvider + 'static> Controller<P> {
    fn disruption_config(&self) -> DisruptionConfig {
        let s = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        DisruptionConfig {
            delay_after_scale_up_s: s(self.args.scale_down_delay_after_add),
            delay_after_delete_s: s(self.args.scale_down_delay_after_delete),
            delay_after_failure_s: s(self.args.scale_down_delay_after_failure),
            validation_delay_s: s(self.args.validation_delay),
            ignore_daemonset_utilization: self.args.ignore_daemonsets_utilization,
            ignore_mirror_utilization: self.args.ignore_mirror_pods_utilization,
            ..DisruptionConfig::default()
        }
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts {
            registration_s: i64::try_from(self.args.registration_timeout.as_secs())
                .unwrap_or(i64::MAX),
            initialization_s: i64::try_from(self.args.initialization_timeout.as_secs())
                .unwrap_or(i64::MAX),
            device_plugin_s: i64::try_from(self.args.device_plugin_timeout.as_secs())
                .unwrap_or(i64::MAX),
        }
    }

    /// Instance types per NodePool name, refreshed every five minutes per node class, with the
    /// insufficient-capacity cache applied.
    async fn instance_types(
        &mut self,
        pools: &[Arc<NodePool>],
    ) -> BTreeMap<String, Arc<Vec<InstanceType>>> {
        let now = epoch();
        let mut out = BTreeMap::new();
        for np in pools {
            let class = class_of(np);
            let fresh = self
                .types
                .get(&class)
                .is_some_and(|(at, _)| at.elapsed() < Duration::from_secs(300));
            if !fresh {
                let shared = self.shared.clone();
                let c = class.clone();
                match shared
                    .cloud("instance types", || shared.provider.instance_types(&c))
                    .await
                {
                    Ok(t) => {
                        self.types
                            .insert(class.clone(), (Instant::now(), Arc::new(t)));
                    }
                    Err(e) => tracing::warn!(error = %e, "listing instance types"),
                }
            }
            if let Some((_, t)) = self.types.get(&class) {
                let mut t = t.as_ref().clone();
                self.shared
                    .unavailable
                    .lock()
                    .expect("lock")
                    .apply(&mut t, now);
                self.guard.shapes.apply_to_pool(&np.name_any(), &mut t, now);
                out.insert(np.name_any(), Arc::new(t));
            }
        }
        out
    }

    async fn round(&mut self) {
        let started = Instant::now();
        if let Some(k) = &self.kwok
            && let Err(e) = k.materialize().await
        {
            tracing::warn!(error = %e, "kwok: booting instances");
        }
        let t = Instant::now();
        self.lifecycle().await;
        self.persist_pod_events().await;
        self.terminate_nodes().await;
        self.observe("lifecycle", t);
        let t = Instant::now();
        self.provision().await;
        self.observe("provision", t);
        if self.stores.provreqs.get().is_some() {
            let t = Instant::now();
            self.provisioning_requests().await;
            self.observe("provisioning_requests", t);
        }
        if self
            .last_disruption
            .is_none_or(|at| at.elapsed() >= self.args.disruption_interval)
        {
            self.last_disruption = Some(Instant::now());
            let t = Instant::now();
            self.disrupt().await;
            self.observe("disrupt", t);
        }
        if !self.jobs.is_empty() {
            self.run_jobs().await;
        }
        if self
            .last_gc
            .is_none_or(|at| at.elapsed() >= self.args.gc_interval)
        {
            self.last_gc = Some(Instant::now());
            let t = Instant::now();
            self.gc().await;
            self.observe("gc", t);
        }
        // Status and gauges walk every claim, node and pod: every few seconds is plenty.
        if self
            .last_pool_status
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(5))
        {
            self.last_pool_status = Some(Instant::now());
            self.pool_status().await;
            self.update_metrics();
        }
        self.first_round = false;
        self.observe("round", started);
    }

    fn observe(&self, name: &str, since: Instant) {
        self.shared
            .metrics
            .loop_seconds
            .get_or_create(&LoopLabel { name: name.into() })
            .observe(since.elapsed().as_secs_f64());
    }

    /// One [`lifecycle::step`] per NodeClaim.
    async fn lifecycle(&mut self) {
        // Launches need the pools' catalogs; after a restart they are not loaded yet.
        let pools = self.stores.pools.state();
        self.instance_types(&pools).await;
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
            let action = lifecycle::step(claim, node, now, &timeouts);
            if let Err(e) = self.perform(claim, node, action, now).await {
                tracing::warn!(claim = %name, error = %e, "NodeClaim lifecycle");
            }
        }
    }

    async fn perform(
        &mut self,
        claim: &Arc<NodeClaim>,
        node: Option<&Node>,
        action: Action,
        now: i64,
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
                // the cloud has an atomic group launch.
                if !self.launched_by_request(claim) {
                    self.spawn_launch(claim.clone());
                }
                Ok(())
            }
            Action::Register { node: node_name } => {
                let Some(n) = node else { return Ok(()) };
                // Label and taint the Node as its NodePool says (the cloud's boot config
                // normally did already), and put the finalizer on it.
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
                let mut finalizers = n.finalizers().to_vec();
                if !has_finalizer(&n.metadata) {
                    finalizers.push(keys::FINALIZER.into());
                }
                self.shared
                    .actuator
                    .patch_node(
                        &node_name,
                        &json!({
                            "metadata": {
                                "labels": node_labels,
                                "finalizers": finalizers,
                                "resourceVersion": n.resource_version(),
                            },
                            "spec": {"taints": taints},
                        }),
                    )
                    .await?;
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
            Action::Delete { reason } => {
                tracing::info!(claim = %name, %reason, "deleting NodeClaim");
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
                    && let Some(n) = self
                        .stores
                        .nodes
                        .find(|n| n.metadata.name.as_deref() == Some(nn.as_str()))
                {
                    if n.metadata.deletion_timestamp.is_none() {
                        self.shared.actuator.delete_node(nn).await?;
                    }
                    return Ok(());
                }
                if let Some(pid) = provider_id {
                    let shared = self.shared.clone();
                    shared
                        .cloud("terminate", || shared.provider.delete(&pid))
                        .await?;
                }
                let f: Vec<String> = claim
                    .finalizers()
                    .iter()
                    .filter(|f| *f != keys::FINALIZER)
                    .cloned()
                    .collect();
                tracing::info!(claim = %name, at = now, "terminated");
                self.shared.actuator.set_claim_finalizers(claim, &f).await
            }
        }
    }

    fn millis(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Launches a group of claims of one NodePool in a task with [`launch_group`], unless one of
    /// them is being launched already.
    fn spawn_group_launch(&self, claims: Vec<Arc<NodeClaim>>) {
        let names: Vec<String> = claims.iter().map(|c| c.name_any()).collect();
        {
            let mut l = self.shared.launching.lock().expect("lock");
            if names.iter().any(|n| l.contains_key(n)) {
                return;
            }
            for n in &names {
                l.insert(n.clone(), Instant::now());
            }
        }
        let pool = claims
            .first()
            .map(|c| c.spec.node_pool.clone())
            .unwrap_or_default();
        let catalog = self.launch_catalog(&pool);
        if catalog.is_none() || claims.iter().any(|c| c.spec.node_pool != pool) {
            // No catalog yet, or claims of several pools (no shared template): next round,
            // or one by one.
            let mut l = self.shared.launching.lock().expect("lock");
            for n in &names {
                l.remove(n);
            }
            drop(l);
            if catalog.is_some() {
                for c in claims {
                    self.spawn_launch(c);
                }
            }
            return;
        }
        let Some(catalog) = catalog else { return };
        let shared = self.shared.clone();
        tokio::spawn(async move {
            if let Err(e) = launch_group(&shared, &claims, &catalog).await {
                tracing::warn!(claims = ?names, error = %e, "group launch");
            }
        });
    }

    /// Launches in a task: rate-limited, retried, and recorded on the claim.
    fn spawn_launch(&self, claim: Arc<NodeClaim>) {
        let name = claim.name_any();
        {
            let mut l = self.shared.launching.lock().expect("lock");
            if l.contains_key(&name) {
                return;
            }
            l.insert(name.clone(), Instant::now());
        }
        let shared = self.shared.clone();
        let pool = claim.spec.node_pool.clone();
        let Some(catalog) = self.launch_catalog(&pool) else {
            // No catalog yet (the provider did not answer): try again next round rather than
            // fail the claim for want of candidates.
            self.shared.launching.lock().expect("lock").remove(&name);
            return;
        };
        tokio::spawn(async move {
            if let Err(e) = launch(&shared, &claim, &catalog).await {
                tracing::warn!(claim = %claim.name_any(), error = %e, "launch");
            }
        });
    }

    /// Writes the watch's pod events onto the claims of their nodes (`lastPodEventTime`), where
    /// disruption reads them for `consolidateAfter` and where they outlive a restart. Under pod
    /// churn a claim is written at most once per [`POD_EVENT_WRITE_EVERY_S`]; consolidation
    /// may then start that much before `consolidateAfter` is over, never more.
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

    /// Managed Nodes being deleted: terminate the instance, delete the claim, release the
    /// Node's finalizer.
    async fn terminate_nodes(&mut self) {
        let claims = self.stores.claims.state();
        let by_pid = claims_by_provider_id(&claims);
        for n in self.stores.nodes.state() {
            if n.metadata.deletion_timestamp.is_none() || !has_finalizer(&n.metadata) {
                continue;
            }
            let name = n.name_any();
            let pid = n.spec.as_ref().and_then(|s| s.provider_id.clone());
            let result: Result<()> = async {
                if let Some(pid) = &pid {
                    if let Some(c) = by_pid.get(pid.as_str())
                        && c.metadata.deletion_timestamp.is_none()
                    {
                        self.shared.actuator.delete_claim(&c.name_any()).await?;
                    }
                    let shared = self.shared.clone();
                    shared
                        .cloud("terminate", || shared.provider.delete(pid))
                        .await?;
                }
                let f: Vec<String> = n
                    .finalizers()
                    .iter()
                    .filter(|f| *f != keys::FINALIZER)
                    .cloned()
                    .collect();
                self.shared
                    .actuator
                    .patch_node(
                        &name,
                        &json!({"metadata": {"finalizers": f, "resourceVersion": n.resource_version()}}),
                    )
                    .await
            }
            .await;
            match result {
                Ok(()) => tracing::info!(node = %name, "node terminated"),
                Err(e) => tracing::warn!(node = %name, error = %e, "terminating node"),
            }
        }
    }

    /// Unschedulable pods, except those consuming a live ProvisioningRequest's capacity: that
    /// capacity is booked for them, so they never trigger a scale-up of their own.
    fn pending_now(&self, pods: &[Arc<CachedPod>]) -> BTreeSet<PodKey> {
        let live = self.live_provreqs();
        pods.iter()
            .filter(|p| p.unschedulable)
            .filter(|p| {
                live.is_empty()
                    || !p
                        .core
                        .as_ref()
                        .ok()
                        .and_then(super::provreq::consumed_request)
                        .is_some_and(|r| live.contains(&r))
            })
            .map(|p| p.key.clone())
            .collect()
    }

    async fn provision(&mut self) {
        let pods = self.stores.pods.state();
        let pending = self.pending_now(&pods);
        self.shared.metrics.pending_pods.set(pending.len() as i64);
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let oldest = pods
            .iter()
            .filter(|p| pending.contains(&p.key))
            .filter_map(|p| p.unschedulable_since_ms)
            .map(|since| now_ms.saturating_sub(since))
            .max()
            .unwrap_or(0);
        self.shared
            .metrics
            .oldest_pending_pod_seconds
            .set(oldest as f64 / 1000.0);
        self.guard_observe(&pending);
        let Some(batch) = self.batcher.step(self.millis(), &pending) else {
            return;
        };
        if batch.is_empty() {
            return;
        }
        let pools = self.stores.pools.state();
        let types = self.instance_types(&pools).await;
        let nodes = self.stores.nodes.state();
        let claims = self.stores.claims.state();
        let daemonsets = self.stores.daemonsets.state();
        let pdbs = self.stores.pdbs.state();
        let gangs = self.stores.gang_objects();
        let building = Instant::now();
        let mut built = self.builder.build_for_provisioning(&Inputs {
            pods: &pods,
            nodes: &nodes,
            pools: &pools,
            claims: &claims,
            daemonsets: &daemonsets,
            pdbs: &pdbs,
            instance_types: &types,
            pending: &batch,
            gangs: &gangs,
        });
        self.hold_bookings(&mut built.snapshot, &pods);
        let pod_by_key: HashMap<&PodKey, &Arc<CachedPod>> =
            pods.iter().map(|p| (&p.key, p)).collect();
        // Pending pods left out for their own fields are told below, once; not logged per round.
        let refused: Vec<(&CachedPod, String)> = pod_problems::refusals(
            batch
                .iter()
                .filter_map(|k| pod_by_key.get(k).map(|p| p.as_ref())),
        )
        .collect();
        let refused_objects: HashSet<String> = refused
            .iter()
            .map(|(p, _)| format!("pod {}", p.key))
            .collect();
        for (obj, problem) in &built.problems {
            if !refused_objects.contains(obj) {
                tracing::warn!(object = %obj, %problem, "left out of the snapshot");
            }
        }
        let planning = Instant::now();
        let mut plan = plan_provisioning(&built.snapshot);
        tracing::info!(
            snapshot_ms = (planning - building).as_millis() as u64,
            plan_ms = planning.elapsed().as_millis() as u64,
            pending = batch.len(),
            existing = plan.existing.len(),
            in_flight = plan.in_flight.len(),
            new_claims = plan.new_claims.len(),
            unschedulable = plan.unschedulable.len(),
            "planned"
        );
        let mut events = Vec::new();
        self.guard_plan(&mut plan, &built.snapshot, &pod_by_key, &mut events);
        // Claims are written concurrently (a burst may need hundreds), results kept in order.
        let objects: Vec<(&NewClaim, NodeClaim)> = plan
            .new_claims
            .iter()
            .filter_map(|nc| {
                let np = pools.iter().find(|p| p.name_any() == nc.pool)?;
                Some((nc, claim_object(nc, np, &self.args.cluster_name)))
            })
            .collect();
        let actuator = self.shared.actuator.clone();
        let created: Vec<(&NewClaim, Result<NodeClaim>)> = futures::stream::iter(objects)
            .map(|(nc, obj)| {
                let actuator = actuator.clone();
                async move { (nc, actuator.create_claim(&obj).await) }
            })
            .buffered(16)
            .collect()
            .await;
        for (nc, result) in created {
            match result {
                Ok(created) => {
                    let cname = created.name_any();
                    let types: Vec<&str> = nc
                        .instance_types
                        .iter()
                        .take(5)
                        .map(|o| o.instance_type.as_str())
                        .collect();
                    tracing::info!(claim = %cname, pool = %nc.pool, pods = nc.pods.len(), "created NodeClaim");
                    self.guard.launches.created(&cname, &nc.pods);
                    self.disruption_state.last_scale_up = Some(epoch());
                    for pk in &nc.pods {
                        if let Some(p) = pod_by_key.get(pk) {
                            if let Some(since) = p.unschedulable_since_ms {
                                self.shared.metrics.pending_to_claim_seconds.observe(
                                    (jiff::Timestamp::now().as_millisecond() - since) as f64
                                        / 1000.0,
                                );
                            }
                            events.push((
                                p.reference(),
                                false,
                                "TriggeredScaleUp",
                                format!(
                                    "pod triggered scale-up: NodeClaim {cname} (NodePool {}) with instance types [{}]",
                                    nc.pool,
                                    types.join(", ")
                                ),
                            ));
                            self.notices.forget(&pod_problems::pod_id(p));
                        }
                    }
                }
                Err(e) => tracing::warn!(pool = %nc.pool, error = %e, "creating NodeClaim"),
            }
        }
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let unplanned = plan.unschedulable.iter().filter_map(|u| {
            let p = pod_by_key.get(&u.pod)?;
            Some((p.as_ref(), pod_problems::not_triggered(&u.reason)))
        });
        for (p, note) in refused.into_iter().chain(unplanned) {
            if self.notices.admit(&pod_problems::pod_id(p), &note, now_ms) {
                tracing::info!(pod = %p.key, %note, "NotTriggerScaleUp");
                events.push((p.reference(), true, "NotTriggerScaleUp", note));
            }
        }
        let pending_ids: HashSet<String> = pods
            .iter()
            .filter(|p| pending.contains(&p.key))
            .map(|p| pod_problems::pod_id(p))
            .collect();
        self.notices.retain(|id| pending_ids.contains(id));
        if !events.is_empty() {
            let actuator = self.shared.actuator.clone();
            tokio::spawn(async move {
                for (r, warning, reason, note) in events {
                    actuator.event(&r, warning, reason, "ScaleUp", note).await;
                }
            });
        }
    }

    /// The cluster with every pending pod. For disruption (`for_disruption`) the plain pods of
    /// nodes no NodePool manages are folded (`SnapshotBuilder::build_for_disruption`): those
    /// nodes are never candidates, only places pods may move to.
    fn full_snapshot(
        &mut self,
        types: &BTreeMap<String, Arc<Vec<InstanceType>>>,
        for_disruption: bool,
    ) -> Snapshot {
        let pods = self.stores.pods.state();
        let pending = self.pending_now(&pods);
        let nodes = self.stores.nodes.state();
        let pools = self.stores.pools.state();
        let claims = self.stores.claims.state();
        let daemonsets = self.stores.daemonsets.state();
        let pdbs = self.stores.pdbs.state();
        let gangs = self.stores.gang_objects();
        let inputs = Inputs {
            pods: &pods,
            nodes: &nodes,
            pools: &pools,
            claims: &claims,
            daemonsets: &daemonsets,
            pdbs: &pdbs,
            instance_types: types,
            pending: &pending,
            gangs: &gangs,
        };
        let mut snap = if for_disruption {
            self.builder.build_for_disruption(&inputs)
        } else {
            self.builder.build(&inputs)
        }
        .snapshot;
        self.hold_bookings(&mut snap, &pods);
        snap
    }

    async fn disrupt(&mut self) {
        let pools = self.stores.pools.state();
        let types = self.instance_types(&pools).await;
        let snap = self.full_snapshot(&types, true);
        let now = epoch();
        let plan = plan_disruption(
            &snap,
            &self.disruption_state,
            now,
            &self.disruption_config(),
        );
        self.disruption_state = plan.state.clone();
        for v in plan
            .verdicts
            .iter()
            .filter(|v| !v.disrupted && v.pool.is_some())
        {
            tracing::debug!(node = %v.node, reason = %v.reason, "kept");
        }
        let busy: HashSet<&str> = self
            .jobs
            .iter()
            .flat_map(|j| j.command.nodes.iter().map(String::as_str))
            .collect();
        let mut new_jobs = Vec::new();
        for cmd in plan.commands {
            if cmd.nodes.iter().any(|n| busy.contains(n.as_str())) {
                continue;
            }
            tracing::info!(reason = ?cmd.reason, method = ?cmd.method, nodes = ?cmd.nodes, "disruption decided");
            new_jobs.push(Job::new(cmd));
        }
        self.jobs.extend(new_jobs);
        // Nodes left tainted by a previous leader's unfinished job are released.
        if self.first_round {
            for n in self.stores.nodes.state() {
                let name = n.name_any();
                if super::snapshot::has_disruption_taint(&n)
                    && n.metadata.deletion_timestamp.is_none()
                    && !self.jobs.iter().any(|j| j.command.nodes.contains(&name))
                {
                    let _ = self.untaint(&name).await;
                }
            }
        }
    }

    async fn taint(&self, name: &str) -> Result<()> {
        let Some(n) = self
            .stores
            .nodes
            .find(|n| n.metadata.name.as_deref() == Some(name))
        else {
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
        taints.push(k8s_openapi::api::core::v1::Taint {
            key: keys::DISRUPTION_TAINT.into(),
            value: None,
            effect: "NoSchedule".into(),
            time_added: None,
        });
        self.shared
            .actuator
            .patch_node(
                name,
                &json!({"metadata": {"resourceVersion": n.resource_version()}, "spec": {"taints": taints}}),
            )
            .await
    }

    async fn untaint(&self, name: &str) -> Result<()> {
        let Some(n) = self
            .stores
            .nodes
            .find(|n| n.metadata.name.as_deref() == Some(name))
        else {
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

    async fn run_jobs(&mut self) {
        let pools = self.stores.pools.state();
        let types = self.instance_types(&pools).await;
        let snap = self.full_snapshot(&types, true);
        let config = self.disruption_config();
        let now = epoch();
        let pods = self.stores.pods.state();
        let nodes = self.stores.nodes.state();
        let claims = self.stores.claims.state();
        let mut jobs = std::mem::take(&mut self.jobs);
        for job in &mut jobs {
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
            let pods_left: Vec<PodKey> = pods
                .iter()
                .filter(|p| {
                    p.node_name
                        .as_deref()
                        .is_some_and(|n| nodes_present.iter().any(|x| x == n))
                        && p.active
                        && !p.deleting
                        && !p.stays_with_node()
                })
                .map(|p| p.key.clone())
                .collect();
            let replacement_initialized = match &job.stage {
                Stage::Replacing { claim, .. } => claims
                    .iter()
                    .find(|c| c.name_any() == *claim)
                    .map(|c| lifecycle::phase(c) == Phase::Initialized),
                _ => None,
            };
            let facts = disrupt::Facts {
                snapshot: &snap,
                now,
                config: &config,
                nodes_present: nodes_present.clone(),
                pods_left,
                replacement_initialized,
                replacement_timeout_s: i64::try_from(self.args.replacement_timeout.as_secs())
                    .unwrap_or(i64::MAX),
                drain_timeout_s: i64::try_from(self.args.drain_timeout.as_secs())
                    .unwrap_or(i64::MAX),
            };
            let step = disrupt::step(job, &facts);
            let reason = format!("{:?}", job.command.reason);
            let ok = match step.action {
                disrupt::Action::Wait => true,
                disrupt::Action::CreateReplacement(nc) => {
                    match pools.iter().find(|p| p.name_any() == nc.pool) {
                        Some(np) => {
                            let mut obj = claim_object(&nc, np, &self.args.cluster_name);
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
                disrupt::Action::Evict(pods) => {
                    let mut refused = false;
                    for pk in &pods {
                        match self.shared.actuator.evict(pk).await {
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
                            Ok(Evicted::Refused) => {
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
                        ok &= self.shared.actuator.delete_node(n).await.is_ok();
                    }
                    if ok {
                        self.shared
                            .metrics
                            .disruptions
                            .get_or_create(&ReasonLabel {
                                reason: reason.clone(),
                            })
                            .inc();
                        self.disruption_state.last_delete = Some(now);
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
                    // Cluster Autoscaler's scale-down-delay-after-failure starts here.
                    self.disruption_state.last_failure = Some(now);
                    self.shared.metrics.disruption_failures.inc();
                    let why = match &step.next {
                        Stage::Abandoned(why) => why.clone(),
                        other => other.as_str().to_string(),
                    };
                    for node in nodes
                        .iter()
                        .filter(|n| job.command.nodes.contains(&n.name_any()))
                    {
                        self.shared
                            .actuator
                            .event(
                                &reference(node.as_ref()),
                                true,
                                "DrainFailed",
                                "Disrupt",
                                format!("disruption given up, node untainted: {why}"),
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

    /// Instances without a claim (after the grace period) are terminated; claims whose
    /// instance is gone are deleted.
    async fn gc(&mut self) {
        let shared = self.shared.clone();
        let instances = match shared.cloud("list", || shared.provider.list()).await {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "gc: listing instances");
                return;
            }
        };
        let claims = self.stores.claims.state();
        let names: HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
        let now = epoch();
        let grace = i64::try_from(self.args.gc_grace.as_secs()).unwrap_or(i64::MAX);
        let mut still = HashMap::new();
        for i in &instances {
            let owned = i.claim.as_ref().is_some_and(|c| names.contains(c));
            if owned || i.state == InstanceState::Terminated {
                continue;
            }
            let since = self.orphans.get(&i.provider_id).copied().unwrap_or(now);
            if now - since >= grace {
                tracing::info!(instance = %i.provider_id, "gc: terminating instance without a NodeClaim");
                match shared
                    .cloud("gc", || shared.provider.delete(&i.provider_id))
                    .await
                {
                    Ok(()) => {
                        shared.metrics.gc_instances.inc();
                    }
                    Err(e) => tracing::warn!(error = %e, "gc: terminating"),
                }
            } else {
                still.insert(i.provider_id.clone(), since);
            }
        }
        self.orphans = still;
        let live: HashSet<&str> = instances
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .map(|i| i.provider_id.as_str())
            .collect();
        for c in &claims {
            let Some(pid) = lifecycle::provider_id(c) else {
                continue;
            };
            if live.contains(pid) || lifecycle::phase(c) == Phase::Deleting {
                continue;
            }
            let gone = match shared.cloud("get", || shared.provider.get(pid)).await {
                Err(ProviderError::NotFound { .. }) => true,
                Ok(i) => i.state == InstanceState::Terminated,
                Err(_) => false,
            };
            if gone {
                tracing::info!(claim = %c.name_any(), "gc: instance is gone, deleting NodeClaim");
                let _ = shared.actuator.delete_claim(&c.name_any()).await;
            }
        }
        // Placement groups no live instance is in and no claim names any more (a claim's
        // group must survive until its launch, however late). In the background, one
        // collection at a time and without the retry loop: the next GC pass is the retry,
        // and the reconcile loop never waits on the cloud's placement API.
        let keep: BTreeSet<String> = claims
            .iter()
            .filter_map(|c| placement_group_of(c))
            .collect();
        if shared.collecting_groups.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(async move {
            // Cleared however the task ends (a panic too), or collection would stop for good.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(false, Ordering::SeqCst);
                }
            }
            let _done = Done(&shared.collecting_groups);
            shared.limiter.until_ready().await;
            match shared
                .provider
                .collect_placement_groups(&instances, &keep, grace)
                .await
            {
                Ok(deleted) => {
                    for g in deleted {
                        tracing::info!(placement_group = %g, "gc: deleted unused placement group");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "gc: collecting placement groups"),
            }
        });
    }

    async fn pool_status(&mut self) {
        let claims = self.stores.claims.state();
        for np in self.stores.pools.state() {
            let name = np.name_any();
            let mine: Vec<&Arc<NodeClaim>> = claims
                .iter()
                .filter(|c| c.spec.node_pool == name && lifecycle::phase(c) != Phase::Deleting)
                .collect();
            let mut total = Resources::new();
            for c in &mine {
                if let Some(s) = &c.status
                    && let Ok(r) = translate::resources(Some(&s.capacity), "status.capacity")
                {
                    total.add(&r);
                }
            }
            self.pool_metrics(&np, &total, mine.len() as i64);
            let mut conds = np.status.clone().unwrap_or_default().conditions;
            let ts = jiff::Timestamp::now();
            match np.validate() {
                Ok(()) => {
                    set_condition(
                        &mut conds,
                        (conditions::VALIDATION_SUCCEEDED, true),
                        reasons::VALID,
                        "",
                        ts,
                        np.metadata.generation,
                    );
                    set_condition(
                        &mut conds,
                        (conditions::READY, true),
                        reasons::VALID,
                        "",
                        ts,
                        np.metadata.generation,
                    );
                }
                Err(e) => {
                    let msg = e.to_string();
                    set_condition(
                        &mut conds,
                        (conditions::VALIDATION_SUCCEEDED, false),
                        reasons::INVALID_SPEC,
                        &msg,
                        ts,
                        np.metadata.generation,
                    );
                    set_condition(
                        &mut conds,
                        (conditions::READY, false),
                        reasons::INVALID_SPEC,
                        &msg,
                        ts,
                        np.metadata.generation,
                    );
                }
            }
            let (delivered, reason, message) = self.delivered_condition(&name, epoch());
            set_condition(
                &mut conds,
                (conditions::CAPACITY_DELIVERED, delivered),
                reason,
                &message,
                ts,
                np.metadata.generation,
            );
            let status = nodepools::NodePoolStatus {
                conditions: conds,
                nodes: mine.len() as i64,
                resources: quantities(&total),
            };
            if np.status.as_ref() == Some(&status) {
                continue;
            }
            if let Err(e) = self
                .shared
                .actuator
                .patch_pool_status(&name, &json!(status))
                .await
            {
                tracing::warn!(pool = %name, error = %e, "NodePool status");
            }
        }
    }

    /// A NodePool's usage and limit gauges.
    fn pool_metrics(&self, np: &NodePool, usage: &Resources, nodes: i64) {
        let m = &self.shared.metrics;
        let name = np.name_any();
        m.set_pool_usage(&name, usage, nodes);
        let (node_limit, others): (BTreeMap<_, _>, BTreeMap<_, _>) = np
            .spec
            .limits
            .clone()
            .into_iter()
            .partition(|(k, _)| k == "nodes");
        // An unparsable limit is reported by the pool's ValidationSucceeded condition.
        if let Ok(limits) = translate::resources(Some(&others), "spec.limits") {
            let nodes = node_limit
                .get("nodes")
                .and_then(|q| autoscaler_core::quantity::Quantity::parse(&q.0).ok())
                .and_then(|q| i64::try_from(q.units_ceil()).ok());
            m.set_pool_limits(&name, &limits, nodes);
        }
    }

    fn update_metrics(&self) {
        let m = &self.shared.metrics;
        let claims = self.stores.claims.state();
        let mut by_phase: BTreeMap<Phase, i64> = Phase::ALL.iter().map(|p| (*p, 0)).collect();
        for c in &claims {
            *by_phase.entry(lifecycle::phase(c)).or_default() += 1;
        }
        for (p, n) in by_phase {
            m.nodeclaims
                .get_or_create(&PhaseLabel {
                    phase: p.as_str().into(),
                })
                .set(n);
        }
        let mut alloc: BTreeMap<String, i64> = BTreeMap::new();
        let mut used: BTreeMap<String, i64> = BTreeMap::new();
        let mut model_of: HashMap<String, String> = HashMap::new();
        for n in self.stores.nodes.state() {
            let model = n
                .labels()
                .get(labels::NVIDIA_PRODUCT)
                .or_else(|| n.labels().get(labels::GPU_NAME))
                .cloned()
                .unwrap_or_else(|| "unknown".into());
            if let Ok(r) = translate::node_allocatable(&n) {
                let g: i64 = r
                    .extended
                    .iter()
                    .filter(|(k, _)| is_gpu_class(k))
                    .map(|(_, v)| *v)
                    .sum();
                if g > 0 {
                    *alloc.entry(model.clone()).or_default() += g;
                    model_of.insert(n.name_any(), model);
                }
            }
        }
        for p in self.stores.pods.state() {
            let Some(model) = p.node_name.as_deref().and_then(|n| model_of.get(n)) else {
                continue;
            };
            if !p.active {
                continue;
            }
            let g: i64 = p
                .requests()
                .extended
                .iter()
                .filter(|(k, _)| is_gpu_class(k))
                .map(|(_, v)| *v)
                .sum();
            *used.entry(model.clone()).or_default() += g;
        }
        for (model, v) in alloc {
            let u = used.get(&model).copied().unwrap_or(0);
            m.gpu_allocatable
                .get_or_create(&ModelLabel {
                    model: model.clone(),
                })
                .set(v);
            m.gpu_allocated.get_or_create(&ModelLabel { model }).set(u);
        }
    }
}

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

/// Launches one claim and records the outcome on it.
/// The launch request of a claim: its candidates (minus offerings marked unavailable), the
/// node's labels (the claim's, plus the claim label) and taints.
fn launch_request<P: CloudProvider + 'static>(
    shared: &Shared<P>,
    claim: &NodeClaim,
    catalog: &LaunchCatalog,
    now: i64,
) -> Result<LaunchRequest> {
    let name = claim.name_any();
    let spec = claim
        .spec
        .to_core()
        .map_err(|e| Error::Config(format!("NodeClaim {name}: {e}")))?;
    let offered = {
        let u = shared.unavailable.lock().expect("lock");
        candidates(&spec.requirements, &catalog.types, &u, now)
    };
    let mut node_labels = claim.labels().clone();
    node_labels.insert(keys::CLAIM_LABEL.into(), name.clone());
    let request = LaunchRequest {
        claim: name.clone(),
        pool: spec.node_pool.clone(),
        class: claim
            .spec
            .node_class_ref
            .as_ref()
            .map(|c| NodeClassRef {
                group: c.group.clone(),
                kind: c.kind.clone(),
                name: c.name.clone(),
            })
            .unwrap_or_default(),
        candidates: offered.iter().map(|(k, _)| k.clone()).collect(),
        labels: node_labels,
        taints: spec.taints.clone(),
        startup_taints: spec.startup_taints.clone(),
        placement_group: placement_group_of(claim),
        gpu_sharing: catalog.sharing.clone(),
    };
    Ok(request)
}

/// The placement group a claim is to be launched into, as written by [`claim_object`].
pub fn placement_group_of(claim: &NodeClaim) -> Option<String> {
    claim
        .annotations()
        .get(keys::PLACEMENT_GROUP_ANNOTATION)
        .filter(|g| !g.is_empty())
        .cloned()
}

/// Records a launch's outcome on the claim: Launched with the instance, or Launched=False
/// with the capacity or request error (transient errors leave the claim Pending for a retry).
/// The claim's capacity and allocatable are the instance type as the NodePool's node (GPU
/// sharing applied): what it was launched for, which initialization checks the Node against.
async fn record_launch<P: CloudProvider + 'static>(
    shared: &Shared<P>,
    claim: &NodeClaim,
    catalog: &LaunchCatalog,
    result: Result<providers::Launched, ProviderError>,
    now: i64,
) -> Result<()> {
    let name = claim.name_any();
    let node_pool = claim.spec.node_pool.clone();
    let mut status: NodeClaimStatus = claim.status.clone().unwrap_or_default();
    let ts = jiff::Timestamp::now();
    match result {
        Ok(launched) => {
            shared
                .unavailable
                .lock()
                .expect("lock")
                .mark_all(launched.unavailable.clone(), now);
            let i = &launched.instance;
            let it = catalog.types.iter().find(|t| t.name == i.instance_type);
            status.provider_id = Some(i.provider_id.clone());
            status.instance_type = Some(i.instance_type.clone());
            status.zone = Some(i.zone.clone());
            status.capacity_type = Some(i.capacity_type.as_str().into());
            if let Some(it) = it {
                status.capacity = quantities(&it.capacity);
                status.allocatable = quantities(&it.allocatable());
            }
            set_condition(
                &mut status.conditions,
                (conditions::LAUNCHED, true),
                reasons::SUCCEEDED,
                "",
                ts,
                claim.metadata.generation,
            );
            set_condition(
                &mut status.conditions,
                (conditions::REGISTERED, false),
                reasons::NODE_NOT_FOUND,
                "waiting for the Node to join",
                ts,
                claim.metadata.generation,
            );
            shared
                .metrics
                .launches
                .get_or_create(&PoolLabel {
                    pool: node_pool.clone(),
                })
                .inc();
            tracing::info!(claim = %name, instance = %i.provider_id, instance_type = %i.instance_type, zone = %i.zone, "launched");
        }
        Err(e) => {
            let reason = match &e {
                ProviderError::InsufficientCapacity { offerings, .. } => {
                    shared
                        .unavailable
                        .lock()
                        .expect("lock")
                        .mark_all(offerings.clone(), now);
                    reasons::INSUFFICIENT_CAPACITY
                }
                ProviderError::InvalidRequest { .. } => reasons::LAUNCH_FAILED,
                // Transient and retried already: leave the claim Pending for the next round.
                _ => {
                    shared
                        .metrics
                        .launch_failures
                        .get_or_create(&ReasonLabel {
                            reason: "Transient".into(),
                        })
                        .inc();
                    return Err(e.into());
                }
            };
            shared
                .metrics
                .launch_failures
                .get_or_create(&ReasonLabel {
                    reason: reason.into(),
                })
                .inc();
            set_condition(
                &mut status.conditions,
                (conditions::LAUNCHED, false),
                reason,
                &e.to_string(),
                ts,
                claim.metadata.generation,
            );
            tracing::warn!(claim = %name, error = %e, "launch failed");
            shared
                .actuator
                .event(&reference(claim), true, reason, "Launch", e.to_string())
                .await;
        }
    }
    shared
        .actuator
        .patch_claim_status(&name, &json!(status))
        .await
}

async fn launch<P: CloudProvider + 'static>(
    shared: &Shared<P>,
    claim: &NodeClaim,
    catalog: &LaunchCatalog,
) -> Result<()> {
    let now = epoch();
    let request = launch_request(shared, claim, catalog, now)?;
    let result = shared
        .cloud("launch", || shared.provider.launch(&request))
        .await;
    record_launch(shared, claim, catalog, result, now).await
}

/// Launches the claims of an all-or-nothing group with the provider's atomic group launch
/// when they share one template (the claim label is added at registration instead), or one
/// by one otherwise. A failed group launch fails every claim, so the caller rolls back.
async fn launch_group<P: CloudProvider + 'static>(
    shared: &Shared<P>,
    claims: &[Arc<NodeClaim>],
    catalog: &LaunchCatalog,
) -> Result<()> {
    let now = epoch();
    let mut requests = Vec::with_capacity(claims.len());
    for c in claims {
        let mut r = launch_request(shared, c, catalog, now)?;
        r.labels.remove(keys::CLAIM_LABEL);
        requests.push(r);
    }
    let shared_template = requests.windows(2).all(|w| {
        w[0].pool == w[1].pool
            && w[0].class == w[1].class
            && w[0].candidates == w[1].candidates
            && w[0].labels == w[1].labels
            && w[0].taints == w[1].taints
            && w[0].startup_taints == w[1].startup_taints
            && w[0].placement_group == w[1].placement_group
            && w[0].gpu_sharing == w[1].gpu_sharing
    });
    if !shared_template {
        tracing::info!(
            claims = claims.len(),
            "group claims differ: launching one by one"
        );
        for c in claims {
            launch(shared, c, catalog).await?;
        }
        return Ok(());
    }
    let result = shared
        .cloud("launch group", || shared.provider.launch_group(&requests))
        .await;
    match result {
        Ok(launched) => {
            tracing::info!(claims = claims.len(), "group launched atomically");
            for (c, l) in claims.iter().zip(launched) {
                record_launch(shared, c, catalog, Ok(l), now).await?;
            }
        }
        Err(e) => {
            for c in claims {
                record_launch(shared, c, catalog, Err(e.clone()), now).await?;
            }
        }
    }
    Ok(())
}

fn identity(args: &RunArgs) -> String {
    args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "gpu-autoscaler".into());
        format!("{host}-{}", std::process::id())
    })
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// `gpu-autoscaler run`: builds a runtime and runs the controller until SIGTERM or SIGINT.
///
/// # Errors
/// Configuration, client or server errors, or lost leadership.
pub fn run_blocking(args: RunArgs) -> Result<()> {
    init_logging(args.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Config(format!("starting the async runtime: {e}")))?;
    rt.block_on(run(args))
}

/// Runs the controller until SIGTERM or SIGINT.
///
/// # Errors
/// Configuration, client or server errors, or lost leadership.
pub async fn run(args: RunArgs) -> Result<()> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| Error::KubeConfig(e.to_string()))?;
    let mut catalog = providers::catalog::default_catalog_for(&args.catalog);
    if !args.region.is_empty() {
        catalog.retain(|t| t.labels.get(labels::REGION) == Some(&args.region));
    }
    // The embedded catalog serves kwok and fake; AWS and GCP discover their own.
    if catalog.is_empty() && !matches!(args.provider, ProviderKind::Aws | ProviderKind::Gcp) {
        return Err(Error::Config(format!(
            "no instance types in the embedded {:?} catalog for region {:?} (catalogs: aws, gcp)",
            args.catalog, args.region
        )));
    }
    match args.provider {
        ProviderKind::Kwok => {
            let kwok = KwokProvider::new(
                client.clone(),
                catalog,
                KwokConfig {
                    cluster: args.cluster_name.clone(),
                    register_delay: args.kwok_register_delay,
                    ready_delay: args.kwok_ready_delay,
                    gpu_delay: args.kwok_gpu_delay,
                    launch_latency: args.kwok_launch_latency,
                    gpu_fraction: args.kwok_register_gpu_fraction,
                },
            );
            run_with(client, Arc::new(kwok.clone()), Some(kwok), args).await
        }
        ProviderKind::Fake => {
            let fake = FakeProvider::new(catalog).with_cluster(args.cluster_name.clone());
            run_with(client, Arc::new(fake), None, args).await
        }
        ProviderKind::Aws => {
            // The catalog comes from EC2; `--region` is the AWS region.
            let aws = args
                .aws
                .connect(Some(&args.region), Some(&args.cluster_name))
                .await?;
            run_with(client, Arc::new(aws), None, args).await
        }
        ProviderKind::Gcp => {
            // The catalog comes from Compute Engine; `--endpoint-url` serves both clouds.
            let gcp = args
                .gcp
                .connect(crate::gcp::Common {
                    cluster: Some(&args.cluster_name),
                    region: Some(&args.region),
                    endpoint_url: args.aws.endpoint_url.as_deref(),
                })
                .await?;
            run_with(client, Arc::new(gcp), None, args).await
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

async fn run_with<P: CloudProvider + 'static>(
    client: kube::Client,
    provider: Arc<P>,
    kwok: Option<KwokProvider>,
    args: RunArgs,
) -> Result<()> {
    let me = identity(&args);
    let metrics = Arc::new(Metrics::new());
    metrics
        .build_info
        .get_or_create(&super::metrics::BuildLabel {
            version: env!("CARGO_PKG_VERSION").into(),
            provider: provider.name().into(),
        })
        .set(1);
    let health = Arc::new(Health {
        metrics: metrics.clone(),
        ready: AtomicBool::new(false),
        liveness: Liveness::new(args.stall_timeout),
    });
    let bound = super::metrics::serve(args.metrics_addr, health.clone()).await?;
    tracing::info!(identity = %me, metrics = %bound, provider = provider.name(), "starting");
    let stores = Stores::start(&client, args.optional_api_recheck).await;
    stores.ready().await;
    health.ready.store(true, Ordering::SeqCst);
    tracing::info!("caches synced");

    let (stop_tx, stop_rx) = watch::channel(false);
    let is_leader = Arc::new(AtomicBool::new(!args.leader_elect));
    let lease_cfg = LeaderConfig {
        namespace: args.namespace.clone(),
        name: args.lease_name.clone(),
        identity: me.clone(),
        lease_duration: args.lease_duration,
        retry: args.lease_retry,
    };
    let (lost_tx, mut lost_rx) = tokio::sync::mpsc::channel::<String>(1);
    if args.leader_elect {
        let (c, cfg, l, s) = (
            client.clone(),
            lease_cfg.clone(),
            is_leader.clone(),
            stop_rx.clone(),
        );
        tokio::spawn(async move {
            if let Err(why) = leader::run(c, cfg, l, s).await {
                let _ = lost_tx.send(why).await;
            }
        });
    }
    let qps = NonZeroU32::new(args.cloud_qps.max(1)).expect("non-zero");
    let shared = Arc::new(Shared {
        provider,
        actuator: Actuator::new(client.clone(), &me),
        metrics: metrics.clone(),
        limiter: RateLimiter::direct(Quota::per_second(qps)),
        unavailable: Mutex::new(UnavailableOfferings::default()),
        launching: Mutex::new(HashMap::new()),
        collecting_groups: AtomicBool::new(false),
    });
    let mut ctl = Controller {
        shared,
        kwok,
        stores,
        batcher: Batcher::new(BatchConfig {
            idle_ms: u64::try_from(args.batch_idle.as_millis()).unwrap_or(u64::MAX),
            max_ms: u64::try_from(args.batch_max.as_millis()).unwrap_or(u64::MAX),
            replan_ms: u64::try_from(args.replan_interval.as_millis()).unwrap_or(u64::MAX),
        }),
        args: args.clone(),
        builder: SnapshotBuilder::new(),
        started: Instant::now(),
        types: HashMap::new(),
        disruption_state: DisruptionState::default(),
        jobs: Vec::new(),
        last_disruption: None,
        last_gc: None,
        last_pool_status: None,
        orphans: HashMap::new(),
        notices: pod_problems::Notices::default(),
        first_round: true,
        provreq_memory: provreqs::Memory::default(),
        guard: GuardState::new(&args),
    };
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let mut lost: Option<String> = None;
    loop {
        let leading = is_leader.load(Ordering::SeqCst);
        metrics.leader.set(i64::from(leading));
        health
            .liveness
            .set_leading(leading, jiff::Timestamp::now().as_millisecond());
        if leading {
            ctl.round().await;
            let done = jiff::Timestamp::now().as_millisecond();
            health.liveness.round_done(done);
            metrics
                .last_round_timestamp_seconds
                .set(done as f64 / 1000.0);
        }
        tokio::select! {
            _ = tokio::time::sleep(args.loop_interval) => {}
            _ = &mut shutdown => {
                tracing::info!("shutting down");
                break;
            }
            why = lost_rx.recv() => {
                lost = why;
                break;
            }
        }
    }
    let _ = stop_tx.send(true);
    if let Some(why) = lost {
        return Err(Error::Config(format!("lost leadership: {why}")));
    }
    if args.leader_elect && is_leader.load(Ordering::SeqCst) {
        leader::release(client, &lease_cfg).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use autoscaler_core::builders::itype;
    use autoscaler_core::instance::CapacityType;
    use autoscaler_core::requirements::Operator;

    use super::*;

    #[test]
    fn requirements_round_trip_through_api_expressions() {
        let r = Requirements::new()
            .with(labels::ZONE, Operator::In, &["a", "b"])
            .with("team", Operator::NotIn, &["x"])
            .with("gpu", Operator::Exists, &[])
            .with("old", Operator::DoesNotExist, &[])
            .with("count", Operator::Gt, &["2"]);
        let exprs = requirement_exprs(&r);
        let spec = NodeClaimSpec {
            node_pool: "p".into(),
            requirements: exprs,
            ..Default::default()
        };
        let back = spec.to_core().expect("valid").requirements;
        assert_eq!(back, r);
    }

    #[test]
    fn a_group_claim_carries_its_placement_group_and_others_none() {
        let np: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1",
            "kind": "NodePool",
            "metadata": {"name": "gpu"},
            "spec": {"template": {}},
        }))
        .expect("a NodePool");
        let plain = NewClaim {
            name: "gpu-1".into(),
            pool: "gpu".into(),
            instance_types: vec![],
            requirements: Requirements::new(),
            labels: Default::default(),
            taints: vec![],
            startup_taints: vec![],
            pods: vec![],
            requests: Resources::default(),
            price: 1.0,
            gpus: 1,
            group: None,
        };
        let grouped = NewClaim {
            group: Some("volcano:team-a/train".into()),
            ..plain.clone()
        };
        let obj = claim_object(&plain, &np, "prod");
        assert_eq!(placement_group_of(&obj), None);
        assert!(obj.metadata.annotations.is_none());
        let a = claim_object(&grouped, &np, "prod");
        let b = claim_object(&grouped, &np, "prod");
        let name = placement_group_of(&a).expect("a placement group");
        assert_eq!(placement_group_of(&b).as_deref(), Some(name.as_str()));
        assert_eq!(
            name,
            providers::placement_group_name("prod", "volcano:team-a/train")
        );
        assert_ne!(
            Some(name),
            placement_group_of(&claim_object(&grouped, &np, "staging"))
        );
    }

    #[test]
    fn candidates_follow_requirements_and_skip_refused_offerings() {
        let types = vec![
            itype("small")
                .on_demand(&["a", "b"], 1.0)
                .offer("a", CapacityType::Spot, 0.3)
                .build(),
            itype("big").on_demand(&["a"], 5.0).build(),
        ];
        let r = Requirements::new()
            .with(labels::INSTANCE_TYPE, Operator::In, &["small", "big"])
            .with(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]);
        let mut u = UnavailableOfferings::default();
        u.mark(OfferingKey::new("small", "a", CapacityType::OnDemand), 100);
        let got: Vec<String> = candidates(&r, &types, &u, 100)
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(got, vec!["small/b/on-demand", "big/a/on-demand"]);
    }

    #[test]
    fn a_pools_min_values_reach_the_plan_and_the_nodeclaim() {
        let np: NodePool = serde_yaml::from_str(
            r#"
apiVersion: gpu-autoscaler.dev/v1alpha1
kind: NodePool
metadata: {name: flex}
spec:
  template:
    nodeClassRef: {group: gpu-autoscaler.dev, kind: KwokNodeClass, name: default}
    requirements:
      - {key: node.kubernetes.io/instance-type, operator: Exists, minValues: 2}
"#,
        )
        .expect("valid NodePool");
        let types = vec![
            itype("m.small")
                .cpu("2")
                .mem("8Gi")
                .on_demand(&["a"], 1.0)
                .build(),
            itype("m.big")
                .cpu("8")
                .mem("32Gi")
                .on_demand(&["a"], 4.0)
                .build(),
        ];
        let pool = np.to_core(Arc::new(types)).expect("converts");
        assert_eq!(pool.min_values.get(labels::INSTANCE_TYPE), Some(&2));
        let plan_for = |cpu: &str| {
            autoscaler_core::provision::plan_provisioning(&autoscaler_core::model::Snapshot {
                pending: vec![autoscaler_core::builders::pod("p").cpu(cpu).build()],
                pools: vec![pool.clone()],
                ..Default::default()
            })
        };
        // Only the big type holds 4 CPUs: one type is less than the two the pool demands.
        assert!(plan_for("4").new_claims.is_empty());
        let plan = plan_for("1");
        let obj = claim_object(&plan.new_claims[0], &np, "test");
        let it = obj
            .spec
            .requirements
            .iter()
            .find(|r| r.key == labels::INSTANCE_TYPE)
            .expect("instance types listed");
        assert_eq!(it.values, ["m.small", "m.big"]);
        assert_eq!(it.min_values, Some(2));
        obj.spec
            .to_core()
            .expect("the NodeClaim the controller writes is valid");
    }
}
