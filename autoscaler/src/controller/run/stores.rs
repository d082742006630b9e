//! The reflectors' caches the loop reads: one store per watched kind, and [`Late`] stores
//! for the optional APIs, filled once their CRD is served.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, PodTemplate,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use nodepools::{CapacityQuota, NodeClaim, NodeOverlay, NodePool};

use crate::controller::api_calls::check;
use crate::controller::cache::{PodStore, PodWire};
use crate::controller::gangs::{GangObjects, SchedulingPodGroup, VolcanoPodGroup};
use crate::controller::provreq::ProvisioningRequest;

pub mod dra;
pub use dra::DraStores;

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
    /// PersistentVolumeClaims, trimmed to what volume topology reads.
    pub volume_claims: Store<PersistentVolumeClaim>,
    /// PersistentVolumes, trimmed to what volume topology reads.
    pub volumes: Store<PersistentVolume>,
    /// StorageClasses.
    pub storage_classes: Store<StorageClass>,
    /// CSINodes (each node's volume attach limits), once listed; a cluster or a role that
    /// does not serve them leaves volumes uncounted.
    pub csi_nodes: Late<Store<CSINode>>,
    /// ProvisioningRequests and PodTemplates, once the ProvisioningRequest CRD is served.
    pub provreqs: Late<(Store<ProvisioningRequest>, Store<PodTemplate>)>,
    /// Volcano PodGroups, once Volcano is installed.
    pub volcano: Late<Store<VolcanoPodGroup>>,
    /// Kubernetes PodGroups, once `scheduling.k8s.io/v1alpha2` is served.
    pub k8s_groups: Late<Store<SchedulingPodGroup>>,
    /// CapacityQuotas, once their CRD is installed (a chart upgrade may come after the binary).
    pub quotas: Late<Store<CapacityQuota>>,
    /// NodeOverlays, once their CRD is installed.
    pub overlays: Late<Store<NodeOverlay>>,
    /// ResourceClaims, their templates, DeviceClasses and ResourceSlices, once
    /// `resource.k8s.io/v1` is served (Kubernetes 1.34 and later).
    pub dra: Late<DraStores>,
    /// Namespaces: pod affinity terms may select namespaces by label. Optional as the other
    /// late stores are, so a role that cannot read them (an older ClusterRole) costs only those
    /// terms (they then select the namespaces they list), not the start-up.
    pub namespaces: Late<Store<Namespace>>,
    /// VolumeAttachments: a drained node's instance is terminated once those of its drained
    /// pods' volumes are gone (`storage.k8s.io/v1`; empty while not served).
    pub volume_attachments: Late<Store<VolumeAttachment>>,
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

    /// Asks `attempt` until the API answers for certain, then returns: with the store when
    /// the API is served and listed, or empty while it is not served, asking again every
    /// `every` in the background.
    ///
    /// An answer that is not certain (a 5xx, a 429, a timeout) is asked again at once, with a
    /// short back-off, and the call does not return meanwhile: taking a passing API fault for
    /// "not served" would switch the support off until the next recheck, and with it what the
    /// support protects (a booked ProvisioningRequest's nodes, a gang's minimum). After
    /// [`OPTIONAL_API_PATIENCE`] without a certain answer (a broken conversion webhook, objects
    /// the controller cannot decode) the support starts off and is asked again every `every`,
    /// so one broken optional API never keeps the whole controller from starting.
    async fn start<F, Fut>(kind: &'static str, every: Duration, attempt: F) -> Self
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Attempt<T>> + Send,
    {
        Late::start_within(kind, every, OPTIONAL_API_PATIENCE, attempt).await
    }

    /// [`Late::start`] with its patience for uncertain answers.
    async fn start_within<F, Fut>(
        kind: &'static str,
        every: Duration,
        patience: Duration,
        attempt: F,
    ) -> Self
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Attempt<T>> + Send,
    {
        let late = Late::default();
        let mut backoff = WatchBackoff::new();
        let asked_since = tokio::time::Instant::now();
        loop {
            match attempt().await {
                Attempt::Ready(v) => {
                    let _ = late.0.set(v);
                    return late;
                }
                Attempt::NotServed => break,
                Attempt::Unknown(error) if asked_since.elapsed() >= patience => {
                    tracing::warn!(kind, %error, ?patience, "no certain answer whether the API is served: its support starts off");
                    break;
                }
                Attempt::Unknown(error) => {
                    let wait = backoff.next().unwrap_or(WATCH_BACKOFF_MAX);
                    tracing::warn!(kind, %error, retry_in = ?wait, "is the API served? asking again");
                    tokio::time::sleep(wait).await;
                }
            }
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
                if let Attempt::Ready(v) = attempt().await {
                    let _ = slot.set(v);
                    tracing::info!(kind, "now served: its support is on");
                    return;
                }
            }
        });
        late
    }
}

/// What one look at an optional API found.
enum Attempt<T> {
    /// Served, and its store has listed.
    Ready(T),
    /// Not served (404), or not readable by the controller (403: its support stays off).
    NotServed,
    /// No certain answer (any other error); ask again.
    Unknown(String),
}

impl<T> Attempt<T> {
    /// `Ready` from what `served` found, once `listed` has listed.
    async fn after<Fut: std::future::Future<Output = T>>(
        served: Served,
        listed: impl FnOnce() -> Fut,
    ) -> Self {
        match served {
            Served::Yes => Attempt::Ready(listed().await),
            Served::No => Attempt::NotServed,
            Served::Unknown(e) => Attempt::Unknown(e),
        }
    }
}

/// Whether an API is served, from one list call.
enum Served {
    Yes,
    No,
    Unknown(String),
}

/// Whether the API serves `K` (its CRD is installed): one list call of at most one object.
/// 404 is "not served", 403 too (the controller may not read it, so its support stays off);
/// any other error is no answer.
async fn served<K>(client: &kube::Client) -> Served
where
    K: Cacheable,
{
    let api: Api<K> = Api::all(client.clone());
    match api.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(_) => Served::Yes,
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 403 => {
            tracing::debug!(kind = %K::kind(&()), code = s.code, "not served");
            Served::No
        }
        Err(e) => Served::Unknown(e.to_string()),
    }
}

/// The first wait after a failed list or watch. kube-runtime's default (client-go's) is
/// 800 ms; a controller that has just started (a restart, a failover) plans nothing until
/// every cache has listed, and each failed list of its dozen kinds would hold the first round
/// back by 0.8 to 1.6 s. Doubling up to [`WATCH_BACKOFF_MAX`] still spares a struggling API
/// server.
const WATCH_BACKOFF_MIN: Duration = Duration::from_millis(200);
/// How long a start-up asks an optional API that gives no certain answer before it starts
/// with that API's support off (asked again every `--optional-api-recheck`).
const OPTIONAL_API_PATIENCE: Duration = Duration::from_secs(30);
/// The longest wait between two tries of one list or watch (as client-go's).
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// After this long without a failure the back-off starts again from [`WATCH_BACKOFF_MIN`].
const WATCH_BACKOFF_RESET: Duration = Duration::from_secs(120);

/// Exponential back-off with jitter for the reflectors and the optional-API checks: the
/// n-th wait is drawn from `[d, 2d)` with `d = MIN * 2^(n-1)` capped at `MAX`, so that the
/// controller's watches do not retry in step.
struct WatchBackoff {
    next: Duration,
    /// SplitMix64 state: the jitter need not be secure, only spread.
    state: u64,
}

impl WatchBackoff {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64);
        WatchBackoff::seeded(nanos ^ (u64::from(std::process::id()) << 32))
    }

    fn seeded(seed: u64) -> Self {
        WatchBackoff {
            next: WATCH_BACKOFF_MIN,
            state: seed,
        }
    }

    /// A fraction in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = self.next;
        self.next = (d * 2).min(WATCH_BACKOFF_MAX);
        Some(d.mul_f64(1.0 + self.unit()).min(WATCH_BACKOFF_MAX))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = WATCH_BACKOFF_MIN;
    }
}

/// The reflectors' back-off: [`WatchBackoff`], reset after [`WATCH_BACKOFF_RESET`] without a
/// failure.
fn watch_backoff() -> kube::runtime::utils::ResetTimerBackoff<WatchBackoff> {
    kube::runtime::utils::ResetTimerBackoff::new(WatchBackoff::new(), WATCH_BACKOFF_RESET)
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
    let stream = watcher(api, watcher::Config::default()).backoff(watch_backoff());
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

/// What volume topology does not read of a claim: labels, other annotations, the request,
/// the selector, the status but for its phase.
fn trim_volume_claim(c: &mut PersistentVolumeClaim) {
    c.metadata.labels = None;
    if let Some(a) = c.metadata.annotations.as_mut() {
        a.retain(|k, _| k == crate::controller::volumes::BIND_COMPLETED);
    }
    if let Some(s) = c.spec.as_mut() {
        *s = k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
            volume_name: s.volume_name.take(),
            storage_class_name: s.storage_class_name.take(),
            ..Default::default()
        };
    }
    if let Some(st) = c.status.as_mut() {
        *st = k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
            phase: st.phase.take(),
            ..Default::default()
        };
    }
}

/// What volume topology and volume limits do not read of a volume: everything but its node
/// affinity, its zone and region labels, whether it is on a node's own disk (`local`,
/// `hostPath`) and its CSI driver or in-tree source (which names the driver it migrated to).
fn trim_volume(v: &mut PersistentVolume) {
    if let Some(l) = v.metadata.labels.as_mut() {
        l.retain(|k, _| crate::controller::volumes::ZONE_LABELS.contains(&k.as_str()));
    }
    v.metadata.annotations = None;
    if let Some(s) = v.spec.as_mut() {
        *s = k8s_openapi::api::core::v1::PersistentVolumeSpec {
            node_affinity: s.node_affinity.take(),
            local: s.local.take(),
            host_path: s.host_path.take(),
            csi: s
                .csi
                .take()
                .map(|c| k8s_openapi::api::core::v1::CSIPersistentVolumeSource {
                    driver: c.driver,
                    ..Default::default()
                }),
            aws_elastic_block_store: s.aws_elastic_block_store.take(),
            gce_persistent_disk: s.gce_persistent_disk.take(),
            azure_disk: s.azure_disk.take(),
            azure_file: s.azure_file.take(),
            cinder: s.cinder.take(),
            vsphere_volume: s.vsphere_volume.take(),
            portworx_volume: s.portworx_volume.take(),
            ..Default::default()
        };
    }
    v.status = None;
}

/// What is read of a Namespace: its name and labels.
fn trim_namespace(n: &mut Namespace) {
    n.metadata.annotations = None;
    n.metadata.finalizers = None;
    n.spec = None;
    n.status = None;
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
        .backoff(watch_backoff())
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
    reflect_trimmed_when_served(client, group, resource, every, |_| {}).await
}

/// [`reflect_when_served`], with `trim` dropping what is never read before an object is
/// cached.
async fn reflect_trimmed_when_served<K>(
    client: &kube::Client,
    group: &'static str,
    resource: &'static str,
    every: Duration,
    trim: fn(&mut K),
) -> Late<Store<K>>
where
    K: Cacheable,
{
    let client = client.clone();
    Late::start(resource, every, move || {
        let client = client.clone();
        async move {
            Attempt::after(served::<K>(&client).await, || async move {
                let store = reflect_trimmed(Api::all(client), group, resource, trim);
                let _ = store.wait_until_ready().await;
                store
            })
            .await
        }
    })
    .await
}

impl Stores {
    /// The cached Node named `name`, if the cache has it (one map lookup).
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&reflector::ObjectRef::new(name))
    }

    /// Starts every reflector; those of optional APIs (ProvisioningRequests, Volcano, the
    /// Kubernetes PodGroup, CapacityQuotas, NodeOverlays, DRA) once the API is served, checking
    /// again every `recheck`. Returns once every optional API has answered for certain (served
    /// and listed, or not served); the optional APIs are asked side by side, so a restart waits
    /// for the slowest, not for their sum.
    pub async fn start(client: &kube::Client, recheck: Duration) -> Self {
        // The core reflectors first: they list while the optional APIs are asked.
        let pods = reflect_pods(Api::all(client.clone()));
        let nodes = reflect_trimmed(Api::all(client.clone()), "", "nodes", trim_node);
        let pools = reflect(Api::all(client.clone()), "gpu-autoscaler.dev", "nodepools");
        let claims = reflect(Api::all(client.clone()), "gpu-autoscaler.dev", "nodeclaims");
        let daemonsets = reflect(Api::all(client.clone()), "apps", "daemonsets");
        let pdbs = reflect(Api::all(client.clone()), "policy", "poddisruptionbudgets");
        let volume_claims = reflect_trimmed(
            Api::all(client.clone()),
            "",
            "persistentvolumeclaims",
            trim_volume_claim,
        );
        let volumes = reflect_trimmed(
            Api::all(client.clone()),
            "",
            "persistentvolumes",
            trim_volume,
        );
        let storage_classes = reflect(Api::all(client.clone()), "storage.k8s.io", "storageclasses");
        let provreqs = {
            let client = client.clone();
            Late::start("provisioningrequests", recheck, move || {
                let client = client.clone();
                async move {
                    let served = served::<ProvisioningRequest>(&client).await;
                    Attempt::after(served, || async move {
                        let requests = reflect(
                            Api::all(client.clone()),
                            "autoscaling.x-k8s.io",
                            "provisioningrequests",
                        );
                        let templates = reflect(Api::all(client), "", "podtemplates");
                        let _ = futures::join!(
                            requests.wait_until_ready(),
                            templates.wait_until_ready()
                        );
                        (requests, templates)
                    })
                    .await
                }
            })
        };
        let dra = {
            let client = client.clone();
            Late::start("resource.k8s.io/v1", recheck, move || {
                let client = client.clone();
                async move {
                    let served = served::<ResourceSlice>(&client).await;
                    Attempt::after(served, || async move {
                        let g = "resource.k8s.io";
                        let stores = DraStores {
                            claims: reflect_trimmed(
                                Api::all(client.clone()),
                                g,
                                "resourceclaims",
                                dra::trim_claim,
                            ),
                            templates: reflect_trimmed(
                                Api::all(client.clone()),
                                g,
                                "resourceclaimtemplates",
                                dra::trim_template,
                            ),
                            classes: reflect_trimmed(
                                Api::all(client.clone()),
                                g,
                                "deviceclasses",
                                dra::trim_class,
                            ),
                            slices: reflect_trimmed(
                                Api::all(client),
                                g,
                                "resourceslices",
                                dra::trim_slice,
                            ),
                        };
                        let _ = futures::join!(
                            stores.claims.wait_until_ready(),
                            stores.templates.wait_until_ready(),
                            stores.classes.wait_until_ready(),
                            stores.slices.wait_until_ready(),
                        );
                        stores
                    })
                    .await
                }
            })
        };
        let (
            provreqs,
            volcano,
            k8s_groups,
            quotas,
            overlays,
            dra,
            csi_nodes,
            attachments,
            namespaces,
        ) = futures::join!(
            provreqs,
            reflect_when_served(client, "scheduling.volcano.sh", "podgroups", recheck),
            reflect_when_served(client, "scheduling.k8s.io", "podgroups", recheck),
            reflect_when_served(client, "gpu-autoscaler.dev", "capacityquotas", recheck),
            reflect_when_served(client, "gpu-autoscaler.dev", "nodeoverlays", recheck),
            dra,
            reflect_when_served(client, "storage.k8s.io", "csinodes", recheck),
            reflect_when_served(client, "storage.k8s.io", "volumeattachments", recheck),
            reflect_trimmed_when_served(client, "", "namespaces", recheck, trim_namespace),
        );
        if namespaces.get().is_none() {
            // Namespaces are always served: the role lacks list/watch on them.
            tracing::warn!(
                "Namespaces cannot be listed (grant list and watch on namespaces): pod affinity terms whose namespaceSelector reads namespace labels select only the namespaces they list until they can"
            );
        }
        Stores {
            dra,
            quotas,
            overlays,
            provreqs,
            volcano,
            k8s_groups,
            pods,
            nodes,
            pools,
            claims,
            daemonsets,
            pdbs,
            volume_claims,
            volumes,
            storage_classes,
            csi_nodes,
            volume_attachments: attachments,
            namespaces,
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
            self.volume_claims.wait_until_ready(),
            self.volumes.wait_until_ready(),
            self.storage_classes.wait_until_ready(),
        );
        // Optional APIs' stores are set only once listed.
    }

    /// The DRA objects translated for one round (empty while `resource.k8s.io/v1` is not
    /// served).
    pub fn dra_index(&self) -> crate::controller::dra::DraIndex {
        let objects = self
            .dra
            .get()
            .map(|d| crate::controller::dra::DraObjects {
                claims: d.claims.state(),
                templates: d.templates.state(),
                classes: d.classes.state(),
                slices: d.slices.state(),
            })
            .unwrap_or_default();
        crate::controller::dra::DraIndex::new(&objects)
    }

    /// Each Namespace's labels, by name, for one round's snapshot.
    pub fn namespace_labels(&self) -> BTreeMap<String, autoscaler_core::requirements::Labels> {
        let Some(store) = self.namespaces.get() else {
            return BTreeMap::new();
        };
        crate::controller::snapshot::namespace_labels(store.state().iter().map(|n| n.as_ref()))
    }

    /// The storage objects read for one round's volume topology.
    pub fn volume_index(&self) -> crate::controller::volumes::VolumeIndex {
        crate::controller::volumes::VolumeIndex::new(&crate::controller::volumes::VolumeObjects {
            claims: self.volume_claims.state(),
            volumes: self.volumes.state(),
            classes: self.storage_classes.state(),
            csi_nodes: self.csi_nodes.get().map(|s| s.state()).unwrap_or_default(),
        })
    }

    /// What the cluster's gang objects say of gang minimums.
    pub fn gang_objects(&self) -> GangObjects {
        GangObjects {
            volcano: self
                .volcano
                .get()
                .map(|v| {
                    crate::controller::gangs::volcano_minimums(v.state().iter().map(|g| g.as_ref()))
                })
                .unwrap_or_default(),
            k8s: self
                .k8s_groups
                .get()
                .map(|k| {
                    crate::controller::gangs::k8s_policies(k.state().iter().map(|g| g.as_ref()))
                })
                .unwrap_or_default(),
            volcano_served: self.volcano.get().is_some(),
            k8s_served: self.k8s_groups.get().is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kube::runtime::utils::Backoff;

    use super::*;

    #[test]
    fn the_watch_backoff_doubles_with_jitter_up_to_its_cap_and_resets() {
        let mut b = WatchBackoff::seeded(7);
        let mut floor = WATCH_BACKOFF_MIN;
        for _ in 0..12 {
            let wait = b.next().expect("never ends");
            assert!(
                wait >= floor && wait <= (floor * 2).min(WATCH_BACKOFF_MAX),
                "{wait:?}"
            );
            floor = (floor * 2).min(WATCH_BACKOFF_MAX);
        }
        assert_eq!(floor, WATCH_BACKOFF_MAX);
        b.reset();
        let wait = b.next().expect("never ends");
        assert!(wait >= WATCH_BACKOFF_MIN && wait < WATCH_BACKOFF_MIN * 2);
    }

    /// `Late::start` over a scripted sequence of answers: the store it returns and how many
    /// times it asked.
    async fn late_after(answers: Vec<Attempt<u32>>) -> (Option<u32>, usize) {
        late_within(answers, OPTIONAL_API_PATIENCE).await
    }

    async fn late_within(answers: Vec<Attempt<u32>>, patience: Duration) -> (Option<u32>, usize) {
        let answers = Arc::new(Mutex::new(answers.into_iter()));
        let asked = Arc::new(AtomicUsize::new(0));
        let (a, n) = (answers.clone(), asked.clone());
        let late = Late::start_within("test", Duration::from_secs(3600), patience, move || {
            n.fetch_add(1, Ordering::SeqCst);
            let next = a.lock().expect("not poisoned").next();
            async move { next.unwrap_or(Attempt::NotServed) }
        })
        .await;
        (late.get().copied(), asked.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn an_api_fault_on_the_served_check_is_asked_again_not_taken_for_not_served() {
        let answers = vec![
            Attempt::Unknown("500 injected".into()),
            Attempt::Unknown("429 injected".into()),
            Attempt::Ready(7),
        ];
        assert_eq!(late_after(answers).await, (Some(7), 3));
    }

    #[tokio::test]
    async fn not_served_is_final_until_the_recheck() {
        assert_eq!(late_after(vec![Attempt::NotServed]).await, (None, 1));
        let answers = vec![Attempt::Unknown("503 injected".into()), Attempt::NotServed];
        assert_eq!(late_after(answers).await, (None, 2));
    }

    #[tokio::test]
    async fn an_api_that_never_answers_for_certain_starts_off_after_the_patience() {
        let answers = (0..100)
            .map(|i| Attempt::Unknown(format!("500 conversion webhook #{i}")))
            .collect();
        let (store, asked) = late_within(answers, Duration::from_millis(300)).await;
        assert_eq!(store, None);
        // 300 ms of back-off from 200 ms: asked two or three times, not a hundred.
        assert!((2..=3).contains(&asked), "asked {asked} times");
    }
}
