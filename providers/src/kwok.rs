//! The `kwok` provider: machines as Kubernetes objects, for tests and large-scale trials without
//! cloud cost.
//!
//! Its "cloud" keeps one cluster-scoped [`KwokInstance`] object per instance (the instance
//! table, durable across controller restarts the way a real cloud is), named after the claim
//! that launched it, which makes [`CloudProvider::launch`] idempotent by construction. The
//! instances "boot" in [`KwokProvider::materialize`], which whoever runs the provider calls
//! periodically:
//!
//! 1. `register_delay` after the launch, a Node named like the instance appears, with the
//!    instance type's capacity and labels, the request's labels, taints and startup taints,
//!    providerID `kwok://<name>`, and the annotation `kwok.x-k8s.io/node: fake` so that a real
//!    kwok controller can manage it. GPU-class allocatable starts at zero.
//! 2. `ready_delay` after that, the Node turns Ready.
//! 3. `gpu_delay` after that, the device plugin "starts": GPU-class allocatable is raised to
//!    the capacity and the startup taints are removed (as the GPU Operator would). A Node
//!    whose `nvidia.com/mig.config` asks for a MIG geometry registers with
//!    `nvidia.com/mig.config.state=pending`, which turns `success` then too.
//!
//! The emulated device plugin is configured as the NodePool says: the Node advertises the
//! instance type with the pool's GPU sharing applied ([`autoscaler_core::gpu::apply_sharing`]:
//! time-slicing replicas, MIG instances, and the GPU Operator's labels). With
//! [`KwokConfig::gpu_fraction`] below one it advertises fewer devices than that, the way a
//! device plugin configured otherwise than the pool (or missing devices) would, so tests can
//! drive the controller's delivered-capacity check.
//!
//! A Node whose `Ready` condition someone set to `Unknown` (what the node lifecycle controller
//! does when a kubelet stops reporting) broke down: it is left as it is, not booted again,
//! until someone sets it back, so tests can drive the controller's handling of unready nodes.
//!
//! Terminating an instance deletes its `KwokInstance` and its Node.
//!
//! **Stage times.** Each delay counts from the moment the stage before was due (the instance
//! created, the Node created, the Node turned Ready), kept in memory with the object's uid, so
//! a pass that runs late does not delay the stages after it: a node is up the sum of the
//! delays after its launch, however often `materialize` runs. An object this process did not
//! write (another replica's, or one from before a restart) counts from its Kubernetes
//! timestamp instead. Those have one-second precision, which under `bench fidelity`'s time
//! compression is 15 virtual seconds per stage.
//!
//! **Placement groups** are recorded, not emulated: a launch with
//! [`LaunchRequest::placement_group`] puts the name in the instance's labels under
//! [`tags::PLACEMENT_GROUP`], so its Node carries it as a label, and the instance lists with it
//! as a tag.
//!
//! **Outages.** A `KwokInstance` labelled [`OUTAGE_LABEL`] is not an instance but a capacity
//! outage of the emulated cloud: while it exists, launches refuse its instance type, zone and
//! capacity type with an insufficient-capacity error, the way a real cloud runs out of an
//! offering. It never boots and is never listed as an instance. Tests create and delete them
//! to exercise insufficient-capacity handling mid-way through a scale-up.
//!
//! Behind the cargo feature `kwok`, which pulls in kube and tokio.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use autoscaler_core::labels;
use autoscaler_core::model::GpuSharing;
use autoscaler_core::resources::is_gpu_class;
use autoscaler_core::{CapacityType, InstanceType};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::common::RetrySettings;
use crate::error::{Action, ProviderError};
use crate::faults::{CloudFaultCounts, CloudFaultInjector, CloudFaultRates, Draw};
use crate::provider::{
    CloudProvider, Instance, InstanceState, LaunchRequest, Launched, NodeClassRef, OfferingKey,
    tags,
};

mod api;

use api::{api_taint, booted_type, node_status};
pub use api::{quantities, quantity};

/// `nvidia.com/mig.config.state` while the emulated MIG manager works.
const MIG_PENDING: &str = "pending";

/// Label marking a [`KwokInstance`] as an outage of its offering rather than an instance.
pub const OUTAGE_LABEL: &str = "kwok.gpu-autoscaler.dev/outage";

/// Whether the object is an outage marker (see the module documentation).
pub fn is_outage(ki: &KwokInstance) -> bool {
    ki.labels().contains_key(OUTAGE_LABEL)
}

/// Scheme of kwok provider ids: `kwok://<instance name>`.
pub const PROVIDER_ID_PREFIX: &str = "kwok://";
/// The annotation a real kwok controller looks for.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Label on kwok Nodes: the instance behind them.
pub const INSTANCE_LABEL: &str = "kwok.gpu-autoscaler.dev/instance";
/// The field manager of the provider's writes.
pub const FIELD_MANAGER: &str = "gpu-autoscaler-kwok";

/// The spec of a [`KwokInstance`]: everything needed to boot its Node later.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "kwok.gpu-autoscaler.dev",
    version = "v1alpha1",
    kind = "KwokInstance",
    plural = "kwokinstances",
    schema = "disabled",
    doc = "One instance of the kwok provider's emulated cloud."
)]
#[serde(rename_all = "camelCase")]
pub struct KwokInstanceSpec {
    /// The cluster tag.
    pub cluster: String,
    /// The NodeClaim that launched it (also its name).
    pub claim: String,
    /// The NodePool of that claim.
    pub pool: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// USD per hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// Labels the Node registers with.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Taints the Node registers with.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Startup taints, removed when the device plugin starts.
    #[serde(default)]
    pub startup_taints: Vec<Taint>,
    /// The NodePool's GPU sharing, which the emulated device plugin applies.
    #[serde(default, skip_serializing_if = "is_default")]
    pub gpu_sharing: GpuSharing,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The CRD of [`KwokInstance`]; install it (or let the Helm chart do so) before using the
/// provider.
pub const CRD_YAML: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: kwokinstances.kwok.gpu-autoscaler.dev
spec:
  group: kwok.gpu-autoscaler.dev
  names:
    kind: KwokInstance
    listKind: KwokInstanceList
    plural: kwokinstances
    singular: kwokinstance
  scope: Cluster
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          description: One instance of the gpu-autoscaler kwok provider's emulated cloud.
          properties:
            spec:
              type: object
              required: [cluster, claim, pool, instanceType, zone, capacityType]
              properties:
                cluster: {type: string}
                claim: {type: string}
                pool: {type: string}
                instanceType: {type: string}
                zone: {type: string}
                capacityType: {type: string}
                price: {type: number}
                labels:
                  type: object
                  additionalProperties: {type: string}
                taints:
                  type: array
                  items:
                    type: object
                    x-kubernetes-preserve-unknown-fields: true
                startupTaints:
                  type: array
                  items:
                    type: object
                    x-kubernetes-preserve-unknown-fields: true
                gpuSharing:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
"#;

/// Settings of the kwok provider.
#[derive(Clone, Debug, PartialEq)]
pub struct KwokConfig {
    /// The cluster tag of the instances.
    pub cluster: String,
    /// Launch to Node registration.
    pub register_delay: Duration,
    /// Registration to Ready.
    pub ready_delay: Duration,
    /// Ready to GPU allocatable (device plugin start).
    pub gpu_delay: Duration,
    /// How long a launch call takes before the instance exists (cloud API latency).
    pub launch_latency: Duration,
    /// The share of each GPU-class resource the device plugin advertises, in (0, 1]: each
    /// count is rounded down, to at least one device. Below 1 the Node comes up with fewer
    /// devices than its NodePool promised.
    pub gpu_fraction: f64,
    /// Retries of an operation whose API calls failed transiently (429, 5xx, conflicts,
    /// network): the provider's single retry layer.
    pub retry: RetrySettings,
    /// Emulated cloud faults: each attempt of an operation (one cloud call) draws once, before
    /// the retry layer sees its result (see [`crate::faults`]). None by default.
    pub faults: CloudFaultRates,
    /// Seed of the fault draws.
    pub fault_seed: u64,
    /// Taints every Node registers with besides its claim's, as the kubelet's
    /// `--register-with-taints` adds them (a Node Readiness Controller's `readiness.k8s.io/`
    /// taints, say). Nothing here removes them.
    pub register_taints: Vec<Taint>,
}

impl Default for KwokConfig {
    fn default() -> Self {
        KwokConfig {
            cluster: "kwok".into(),
            register_delay: Duration::from_secs(5),
            ready_delay: Duration::from_secs(5),
            gpu_delay: Duration::from_secs(10),
            launch_latency: Duration::ZERO,
            gpu_fraction: 1.0,
            retry: RetrySettings::default(),
            faults: CloudFaultRates::default(),
            fault_seed: 0,
            register_taints: Vec::new(),
        }
    }
}

/// The kwok provider.
#[derive(Clone)]
pub struct KwokProvider {
    client: kube::Client,
    catalog: Vec<InstanceType>,
    config: KwokConfig,
    faults: std::sync::Arc<CloudFaultInjector>,
    /// Per instance name, when this process saw each boot stage begin.
    marks: Arc<Mutex<HashMap<String, Marks>>>,
}

/// When one instance's boot stages began, each with the uid of the object written then (a
/// Node deleted and registered again is a new object, whose stages start again).
#[derive(Default, Debug)]
struct Marks {
    launched: Option<(String, jiff::Timestamp)>,
    registered: Option<(String, jiff::Timestamp)>,
    ready: Option<(String, jiff::Timestamp)>,
}

/// A boot stage, for [`KwokProvider::since`].
#[derive(Clone, Copy)]
enum Stage {
    Launched,
    Registered,
    Ready,
}

impl Marks {
    fn slot(&mut self, stage: Stage) -> &mut Option<(String, jiff::Timestamp)> {
        match stage {
            Stage::Launched => &mut self.launched,
            Stage::Registered => &mut self.registered,
            Stage::Ready => &mut self.ready,
        }
    }
}

fn kube_err(action: Action, e: kube::Error) -> ProviderError {
    match &e {
        kube::Error::Api(s) if s.code == 429 => ProviderError::Throttled {
            action,
            retry_after_s: None,
        },
        kube::Error::Api(s) if s.code == 404 && action == Action::Get => ProviderError::NotFound {
            action,
            provider_id: s.message.clone(),
        },
        // Refused as made (a malformed or invalid object): repeating it cannot help.
        kube::Error::Api(s) if s.code == 400 || s.code == 422 => ProviderError::InvalidRequest {
            action,
            why: s.message.clone(),
        },
        _ => ProviderError::Other {
            action,
            message: e.to_string(),
        },
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// The instance name behind a kwok provider id.
pub fn instance_name(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .filter(|n| !n.is_empty())
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

/// When a stage that began `elapsed` before `now` was due to end after `delay`: a pass that
/// comes late does not push the next stage later too, so the stages keep the timeline their
/// delays add up to however often [`KwokProvider::materialize`] runs.
fn due(now: jiff::Timestamp, elapsed: Duration, delay: Duration) -> jiff::Timestamp {
    jiff::SignedDuration::try_from(elapsed.saturating_sub(delay))
        .ok()
        .and_then(|late| now.checked_sub(late).ok())
        .unwrap_or(now)
}

fn age(since: Option<&Time>, now: jiff::Timestamp) -> Duration {
    since
        .map(|t| now.duration_since(t.0).unsigned_abs())
        .unwrap_or_default()
}

impl KwokProvider {
    /// A provider creating objects through `client`, offering `catalog`.
    pub fn new(client: kube::Client, catalog: Vec<InstanceType>, config: KwokConfig) -> Self {
        let faults = std::sync::Arc::new(CloudFaultInjector::new(config.faults, config.fault_seed));
        KwokProvider {
            client,
            catalog,
            config,
            faults,
            marks: Arc::default(),
        }
    }

    /// Records that `stage` of instance `name` began `at`, for the object with `uid`.
    fn mark(&self, name: &str, stage: Stage, uid: Option<&str>, at: jiff::Timestamp) {
        let Some(uid) = uid else { return };
        let mut m = self.marks.lock().expect("kwok marks");
        *m.entry(name.to_string()).or_default().slot(stage) = Some((uid.to_string(), at));
    }

    /// How long ago `stage` of instance `name` began: from this process's mark when it was
    /// made for the object with `uid`, else from the object's timestamp `fallback`.
    fn since(
        &self,
        name: &str,
        stage: Stage,
        uid: Option<&str>,
        fallback: Option<&Time>,
        now: jiff::Timestamp,
    ) -> Duration {
        let mut m = self.marks.lock().expect("kwok marks");
        let marked = m.get_mut(name).and_then(|k| {
            k.slot(stage)
                .as_ref()
                .filter(|(u, _)| Some(u.as_str()) == uid)
                .map(|(_, at)| *at)
        });
        match marked {
            Some(at) => now.duration_since(at).unsigned_abs(),
            None => age(fallback, now),
        }
    }

    /// The emulated cloud faults injected so far (and the calls drawn).
    pub fn faults_injected(&self) -> CloudFaultCounts {
        self.faults.counts()
    }

    fn instances_api(&self) -> Api<KwokInstance> {
        Api::all(self.client.clone())
    }

    fn nodes_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    fn to_instance(&self, ki: &KwokInstance) -> Instance {
        let s = &ki.spec;
        let mut tags = BTreeMap::from([
            (tags::CLUSTER.to_string(), s.cluster.clone()),
            (tags::CLAIM.to_string(), s.claim.clone()),
            (tags::POOL.to_string(), s.pool.clone()),
        ]);
        if let Some(g) = s.labels.get(tags::PLACEMENT_GROUP) {
            tags.insert(tags::PLACEMENT_GROUP.to_string(), g.clone());
        }
        Instance {
            provider_id: format!("{PROVIDER_ID_PREFIX}{}", ki.name_any()),
            claim: Some(s.claim.clone()),
            pool: Some(s.pool.clone()),
            instance_type: s.instance_type.clone(),
            zone: s.zone.clone(),
            capacity_type: if s.capacity_type == "spot" {
                CapacityType::Spot
            } else {
                CapacityType::OnDemand
            },
            price: s.price,
            state: if ki.metadata.deletion_timestamp.is_some() {
                InstanceState::ShuttingDown
            } else {
                InstanceState::Running
            },
            tags,
        }
    }

    fn booted_type(&self, ki: &KwokInstance) -> Option<InstanceType> {
        booted_type(&self.catalog, ki)
    }

    /// The Node a [`KwokInstance`] boots into, before it is Ready.
    pub fn node_for(&self, ki: &KwokInstance) -> Option<Node> {
        let s = &ki.spec;
        let booted = self.booted_type(ki)?;
        let it = &booted;
        let name = ki.name_any();
        let mut node_labels = it.labels.clone();
        node_labels.extend(s.labels.clone());
        node_labels.insert(labels::ZONE.into(), s.zone.clone());
        node_labels.insert(labels::CAPACITY_TYPE.into(), s.capacity_type.clone());
        node_labels.insert(labels::HOSTNAME.into(), name.clone());
        node_labels.insert(INSTANCE_LABEL.into(), name.clone());
        node_labels.insert("type".into(), "kwok".into());
        // The GPU Operator's MIG manager starts on a Node whose `nvidia.com/mig.config` asks
        // for a geometry, and reports it applied when the device plugin comes back (below).
        if node_labels
            .get(labels::NVIDIA_MIG_CONFIG)
            .is_some_and(|c| c != autoscaler_core::gpu::mig::DISABLED)
        {
            node_labels.insert(labels::NVIDIA_MIG_CONFIG_STATE.into(), MIG_PENDING.into());
        }
        let mut taints = s.taints.clone();
        taints.extend(s.startup_taints.clone());
        // The API server refuses a Node with two taints of one key and effect.
        for t in &self.config.register_taints {
            if !taints
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect)
            {
                taints.push(t.clone());
            }
        }
        Some(Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(node_labels),
                annotations: Some(BTreeMap::from([(
                    KWOK_NODE_ANNOTATION.to_string(),
                    "fake".to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(format!("{PROVIDER_ID_PREFIX}{name}")),
                taints: (!taints.is_empty()).then_some(taints),
                ..Default::default()
            }),
            status: Some(self.node_status(it, false, false)),
        })
    }

    fn node_status(&self, it: &InstanceType, ready: bool, gpus: bool) -> NodeStatus {
        node_status(it, ready, gpus, self.config.gpu_fraction)
    }

    /// Boots instances: creates their Nodes, makes them Ready, then starts their device
    /// plugins, each after its delay. Idempotent; call it every second or so.
    ///
    /// # Errors
    /// The first API error; the next call picks up where this one stopped.
    pub async fn materialize(&self) -> Result<(), ProviderError> {
        let instances = self
            .instances_api()
            .list(&ListParams::default())
            .await
            .map_err(|e| kube_err(Action::List, e))?;
        let nodes = self
            .nodes_api()
            .list(&ListParams::default().labels(INSTANCE_LABEL))
            .await
            .map_err(|e| kube_err(Action::List, e))?;
        let by_name: BTreeMap<String, &Node> =
            nodes.items.iter().map(|n| (n.name_any(), n)).collect();
        let t = now();
        {
            let listed: std::collections::HashSet<String> =
                instances.items.iter().map(|k| k.name_any()).collect();
            // Instances gone (terminated by another replica, deleted by hand) leave no marks.
            self.marks
                .lock()
                .expect("kwok marks")
                .retain(|n, _| listed.contains(n));
        }
        for ki in instances.items.iter().filter(|k| {
            k.spec.cluster == self.config.cluster
                && k.metadata.deletion_timestamp.is_none()
                && !is_outage(k)
        }) {
            let name = ki.name_any();
            let Some(node) = by_name.get(&name) else {
                let launched = self.since(
                    &name,
                    Stage::Launched,
                    ki.metadata.uid.as_deref(),
                    ki.metadata.creation_timestamp.as_ref(),
                    t,
                );
                if launched >= self.config.register_delay {
                    self.register(ki, due(t, launched, self.config.register_delay))
                        .await?;
                }
                continue;
            };
            if node.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(booted) = self.booted_type(ki) else {
                continue;
            };
            let it = &booted;
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
            let is_ready = ready.is_some_and(|c| c.status == "True");
            if ready.is_some_and(|c| c.status == "Unknown") {
                // Broke down after it booted: a kubelet that stopped reporting stays silent.
                continue;
            }
            if !is_ready {
                let registered = self.since(
                    &name,
                    Stage::Registered,
                    node.metadata.uid.as_deref(),
                    node.metadata.creation_timestamp.as_ref(),
                    t,
                );
                if registered >= self.config.ready_delay {
                    self.patch_status(&name, self.node_status(it, true, false))
                        .await?;
                    self.mark(
                        &name,
                        Stage::Ready,
                        node.metadata.uid.as_deref(),
                        due(t, registered, self.config.ready_delay),
                    );
                }
                continue;
            }
            let gpus_up = it.capacity.extended.iter().all(|(k, v)| {
                !is_gpu_class(k)
                    || *v == 0
                    || node
                        .status
                        .as_ref()
                        .and_then(|s| s.allocatable.as_ref())
                        .and_then(|a| a.get(k))
                        .is_some_and(|q| q.0 != "0")
            });
            let since_ready = self.since(
                &name,
                Stage::Ready,
                node.metadata.uid.as_deref(),
                ready.and_then(|c| c.last_transition_time.as_ref()),
                t,
            );
            if !gpus_up && since_ready >= self.config.gpu_delay {
                let mut status = self.node_status(it, true, true);
                // Keep the Ready transition time: readiness did not change.
                if let (Some(conds), Some(r)) = (status.conditions.as_mut(), ready) {
                    conds[0].last_transition_time = r.last_transition_time.clone();
                }
                // The agent behind the startup taints (device plugin, GPU Operator) removes
                // them as soon as the devices are advertised: in the same pass, on the Node
                // the status write returned (its resourceVersion is the fresh one).
                let patched = self.patch_status(&name, status).await?;
                self.remove_startup_taints(&patched, ki).await?;
            } else if gpus_up {
                // Left over from a pass that stopped after the status write.
                self.remove_startup_taints(node, ki).await?;
            }
        }
        Ok(())
    }

    /// Creates the Node of `ki`, marking it registered `at` (when it was due).
    async fn register(&self, ki: &KwokInstance, at: jiff::Timestamp) -> Result<(), ProviderError> {
        let Some(node) = self.node_for(ki) else {
            return Ok(());
        };
        let status = node.status.clone();
        match self.nodes_api().create(&PostParams::default(), &node).await {
            Ok(created) => self.mark(
                &ki.name_any(),
                Stage::Registered,
                created.metadata.uid.as_deref(),
                at,
            ),
            Err(e) if is_status(&e, 409) => return Ok(()),
            Err(e) => return Err(kube_err(Action::Launch, e)),
        }
        // Status is a subresource: written separately, as a kubelet would.
        if let Some(s) = status {
            self.patch_status(&ki.name_any(), s).await?;
        }
        Ok(())
    }

    /// Writes a Node's status; returns the Node as written.
    async fn patch_status(&self, name: &str, status: NodeStatus) -> Result<Node, ProviderError> {
        self.nodes_api()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(|e| kube_err(Action::Launch, e))
    }

    async fn remove_startup_taints(
        &self,
        node: &Node,
        ki: &KwokInstance,
    ) -> Result<(), ProviderError> {
        let Some(taints) = node.spec.as_ref().and_then(|s| s.taints.as_ref()) else {
            return Ok(());
        };
        let keep: Vec<&Taint> = taints
            .iter()
            .filter(|t| {
                !ki.spec
                    .startup_taints
                    .iter()
                    .any(|s| s.key == t.key && s.effect == t.effect)
            })
            .collect();
        // The MIG manager finished before the device plugin it paused came back.
        let mig_pending = node
            .labels()
            .get(labels::NVIDIA_MIG_CONFIG_STATE)
            .is_some_and(|s| s == MIG_PENDING);
        if keep.len() == taints.len() && !mig_pending {
            return Ok(());
        }
        let rv = node.metadata.resource_version.clone();
        let mut patch = json!({
            "metadata": {"resourceVersion": rv},
            "spec": {"taints": keep},
        });
        if mig_pending {
            patch["metadata"]["labels"] = json!({ labels::NVIDIA_MIG_CONFIG_STATE: "success" });
        }
        self.nodes_api()
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(|_| ())
            .or_else(|e| if is_status(&e, 409) { Ok(()) } else { Err(e) })
            .map_err(|e| kube_err(Action::Launch, e))
    }
}

impl CloudProvider for KwokProvider {
    fn name(&self) -> &str {
        "kwok"
    }

    async fn instance_types(
        &self,
        _class: &NodeClassRef,
    ) -> Result<Vec<InstanceType>, ProviderError> {
        Ok(self.catalog.clone())
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, ProviderError> {
        let offerings = &request.candidates;
        let result = self
            .retrying(Action::Launch, offerings, || self.launch_once(request))
            .await;
        if let Err(ProviderError::InsufficientCapacity { .. }) = &result
            && let Ok(Some(existing)) = self.instances_api().get_opt(&request.claim).await
        {
            // The claim name is the launch's idempotency token: a cloud answers a retry of a
            // launch that took effect (its answer lost to a timeout) with that instance, as
            // EC2 does for a repeated ClientToken, never with a refusal.
            return Ok(Launched {
                instance: self.to_instance(&existing),
                unavailable: vec![],
            });
        }
        result
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        self.retrying(Action::Delete, &[], || self.delete_once(provider_id))
            .await
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, ProviderError> {
        self.retrying(Action::Get, &[], || self.get_once(provider_id))
            .await
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        self.retrying(Action::List, &[], || self.list_once()).await
    }
}

/// One attempt of each operation; every one is idempotent (launch on the claim name, delete
/// of a missing instance succeeds), so [`KwokProvider::retrying`] may repeat it.
impl KwokProvider {
    /// Runs `op` until it succeeds, fails for good, or `config.retry.max_attempts` attempts
    /// were made, sleeping a jittered exponential delay between attempts. Each attempt is one
    /// call of the emulated cloud and draws once from the fault injector, so an operation
    /// makes at most `max_attempts` cloud calls whatever the faults.
    async fn retrying<T, F, Fut>(
        &self,
        action: Action,
        offerings: &[OfferingKey],
        op: F,
    ) -> Result<T, ProviderError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let mut attempts = 0;
        loop {
            let result = match self.faults.draw(action, offerings) {
                Draw::Pass => op().await,
                Draw::FailBefore(e) => {
                    tracing::info!(error = %e, "injected cloud fault");
                    Err(e)
                }
                Draw::FailAfter(e) => {
                    // The call takes effect; its answer is lost.
                    let _ = op().await;
                    tracing::info!(error = %e, after = true, "injected cloud fault");
                    Err(e)
                }
            };
            attempts += 1;
            match result {
                Err(e) if e.is_retryable() && self.config.retry.may_retry(attempts) => {
                    let delay = self.config.retry.delay(attempts - 1, fastrand::f64());
                    tracing::debug!(error = %e, attempts, ?delay, "retrying kwok operation");
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    async fn launch_once(&self, request: &LaunchRequest) -> Result<Launched, ProviderError> {
        let invalid = |why: String| ProviderError::InvalidRequest {
            action: Action::Launch,
            why,
        };
        if request.claim.is_empty() {
            return Err(invalid(
                "claim name (the idempotency token) is empty".into(),
            ));
        }
        let api = self.instances_api();
        if let Some(existing) = api
            .get_opt(&request.claim)
            .await
            .map_err(|e| kube_err(Action::Launch, e))?
        {
            return Ok(Launched {
                instance: self.to_instance(&existing),
                unavailable: vec![],
            });
        }
        if !self.config.launch_latency.is_zero() {
            tokio::time::sleep(self.config.launch_latency).await;
        }
        let outages: Vec<(String, String, String)> = api
            .list(&ListParams::default().labels(OUTAGE_LABEL))
            .await
            .map_err(|e| kube_err(Action::Launch, e))?
            .items
            .into_iter()
            .filter(is_outage)
            .map(|o| (o.spec.instance_type, o.spec.zone, o.spec.capacity_type))
            .collect();
        let mut refused: Vec<OfferingKey> = Vec::new();
        for key in &request.candidates {
            if outages.iter().any(|(t, z, c)| {
                *t == key.instance_type && *z == key.zone && c == key.capacity_type.as_str()
            }) {
                refused.push(key.clone());
                continue;
            }
            let it = self
                .catalog
                .iter()
                .find(|t| t.name == key.instance_type)
                .ok_or_else(|| invalid(format!("unknown instance type {}", key.instance_type)))?;
            let Some(offering) = it
                .offerings
                .iter()
                .find(|o| o.zone == key.zone && o.capacity_type == key.capacity_type)
            else {
                refused.push(key.clone());
                continue;
            };
            let mut node_labels = request.labels.clone();
            if let Some(g) = &request.placement_group {
                node_labels.insert(tags::PLACEMENT_GROUP.to_string(), g.clone());
            }
            let ki = KwokInstance {
                metadata: ObjectMeta {
                    name: Some(request.claim.clone()),
                    labels: Some(BTreeMap::from([
                        (tags::CLUSTER.to_string(), self.config.cluster.clone()),
                        (tags::POOL.to_string(), request.pool.clone()),
                    ])),
                    ..Default::default()
                },
                spec: KwokInstanceSpec {
                    cluster: self.config.cluster.clone(),
                    claim: request.claim.clone(),
                    pool: request.pool.clone(),
                    instance_type: key.instance_type.clone(),
                    zone: key.zone.clone(),
                    capacity_type: key.capacity_type.as_str().to_string(),
                    price: Some(offering.price),
                    labels: node_labels,
                    taints: request.taints.iter().map(api_taint).collect(),
                    startup_taints: request.startup_taints.iter().map(api_taint).collect(),
                    gpu_sharing: request.gpu_sharing.clone(),
                },
            };
            let created = match api.create(&PostParams::default(), &ki).await {
                Ok(c) => {
                    self.mark(
                        &request.claim,
                        Stage::Launched,
                        c.metadata.uid.as_deref(),
                        now(),
                    );
                    c
                }
                // A concurrent launch for the same claim won: its instance is ours.
                Err(e) if is_status(&e, 409) => api
                    .get(&request.claim)
                    .await
                    .map_err(|e| kube_err(Action::Launch, e))?,
                Err(e) => return Err(kube_err(Action::Launch, e)),
            };
            return Ok(Launched {
                instance: self.to_instance(&created),
                unavailable: refused,
            });
        }
        if request.candidates.is_empty() {
            return Err(invalid(format!(
                "claim {} has no candidate offerings",
                request.claim
            )));
        }
        Err(ProviderError::InsufficientCapacity {
            action: Action::Launch,
            offerings: refused,
        })
    }

    async fn delete_once(&self, provider_id: &str) -> Result<(), ProviderError> {
        let Some(name) = instance_name(provider_id) else {
            return Ok(());
        };
        self.marks.lock().expect("kwok marks").remove(name);
        for result in [
            self.instances_api()
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
            self.nodes_api()
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
        ] {
            match result {
                Ok(()) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(kube_err(Action::Delete, e)),
            }
        }
        Ok(())
    }

    async fn get_once(&self, provider_id: &str) -> Result<Instance, ProviderError> {
        let not_found = || ProviderError::NotFound {
            action: Action::Get,
            provider_id: provider_id.to_string(),
        };
        let name = instance_name(provider_id).ok_or_else(not_found)?;
        match self.instances_api().get_opt(name).await {
            Ok(Some(ki)) => Ok(self.to_instance(&ki)),
            Ok(None) => Err(not_found()),
            Err(e) => Err(kube_err(Action::Get, e)),
        }
    }

    async fn list_once(&self) -> Result<Vec<Instance>, ProviderError> {
        let list = self
            .instances_api()
            .list(&ListParams::default())
            .await
            .map_err(|e| kube_err(Action::List, e))?;
        let mut out: Vec<Instance> = list
            .items
            .iter()
            .filter(|k| k.spec.cluster == self.config.cluster && !is_outage(k))
            .map(|k| self.to_instance(k))
            .collect();
        out.sort_by(|a, b| a.provider_id.cmp(&b.provider_id));
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
