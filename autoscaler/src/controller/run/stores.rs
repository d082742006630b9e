//! The reflectors' caches the loop reads: one store per watched kind, and [`Late`] stores
//! for the optional APIs, filled once their CRD is served.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PodTemplate};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::ResourceSlice;
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
    /// Kubernetes PodGroup, DRA) once the API is served, checking again every `recheck`.
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
        let quotas =
            reflect_when_served(client, "gpu-autoscaler.dev", "capacityquotas", recheck).await;
        let overlays =
            reflect_when_served(client, "gpu-autoscaler.dev", "nodeoverlays", recheck).await;
        let dra = {
            let client = client.clone();
            Late::start("resource.k8s.io/v1", recheck, move || {
                let client = client.clone();
                async move {
                    if !served::<ResourceSlice>(&client).await {
                        return None;
                    }
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
                    Some(stores)
                }
            })
            .await
        };
        Stores {
            dra,
            quotas,
            overlays,
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
        }
    }
}
