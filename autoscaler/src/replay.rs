//! Cluster snapshots: what `gpu-autoscaler snapshot` records of a live cluster and how
//! `gpu-autoscaler simulate --from-snapshot` starts the simulator from it.
//!
//! # The file
//!
//! A YAML stream of one or more documents, each a [`Sample`] of the whole cluster at one time:
//!
//! ```yaml
//! apiVersion: gpu-autoscaler.dev/v1alpha1
//! kind: ClusterSnapshot
//! time: "2026-01-01T10:00:00Z"
//! nodePools: [...]          # NodePool objects (spec; read strictly)
//! nodes: [...]              # Node objects
//! pods: [...]               # Pod objects
//! daemonSets: [...]         # DaemonSet objects
//! podDisruptionBudgets: [...]
//! ```
//!
//! Objects are Kubernetes objects as the API server returns them, with what no part of
//! the autoscaler reads left out ([`trim`]: managed fields, container commands and
//! environment, images of nodes, `last-applied-configuration`). `snapshot --every D --for T`
//! appends one document per sample and flushes it, so an interrupted recording keeps every
//! complete sample; the loader uses every document that parses, and drops (with a note) a last
//! one cut short.
//!
//! # Replay
//!
//! [`load`] builds the simulator's [`Scenario`] with the controller's own code: the first
//! sample goes through [`SnapshotBuilder::build`] (pods translated by the pod cache's
//! [`CachedPod`], NodePools by `NodePool::to_core` against the catalog), and the core snapshot's
//! nodes become the scenario's [`ExistingNode`]s with their pods bound, the same type a
//! scenario's `existingNodes` key gives. Later samples are replayed as arrivals and departures:
//! a pod present in sample k+1 but not in k is created (pending) at k+1's time, one present in k
//! and gone in k+1 is deleted then. Nodes of later samples are not replayed (the policies decide
//! the nodes); DaemonSet and mirror pods stay with their node. Times are seconds since the first
//! sample.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use autoscaler_core::InstanceType;
use autoscaler_core::model::{Pod as CorePod, PodKey};
use autoscaler_core::{CapacityType, labels};
use autoscaler_sim::Scenario;
use autoscaler_sim::scenario::{ClusterConfig, ExistingNode, POLICY_NAMES, PdbRule, ReplayPod};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
#[cfg(feature = "controller")]
use kube::api::{Api, ListParams};
use nodepools::NodePool;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::controller::cache::CachedPod;
use crate::controller::error::{Error, Result};
use crate::controller::gangs::GangObjects;
use crate::controller::snapshot::{Inputs, SnapshotBuilder, node_price};

/// `apiVersion` of a snapshot document.
pub const API_VERSION: &str = "gpu-autoscaler.dev/v1alpha1";
/// `kind` of a snapshot document.
pub const KIND: &str = "ClusterSnapshot";
/// Virtual time a single snapshot is replayed for (a series: its span plus one interval).
pub const SINGLE_SAMPLE_S: i64 = 3600;

/// One sample of the cluster: one document of a snapshot file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sample {
    /// [`API_VERSION`].
    pub api_version: String,
    /// [`KIND`].
    pub kind: String,
    /// When it was taken (RFC 3339).
    pub time: jiff::Timestamp,
    /// NodePools (spec only).
    #[serde(default, deserialize_with = "nodepools::strict::nodepools")]
    pub node_pools: Vec<NodePool>,
    /// Nodes.
    #[serde(default)]
    pub nodes: Vec<Node>,
    /// Pods of every namespace.
    #[serde(default)]
    pub pods: Vec<Pod>,
    /// DaemonSets of every namespace.
    #[serde(default)]
    pub daemon_sets: Vec<DaemonSet>,
    /// PodDisruptionBudgets of every namespace.
    #[serde(default)]
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
    /// Namespaces, for pod affinity terms that select them by label (none in samples taken
    /// before they were recorded: such terms then select only the namespaces they list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<Namespace>,
    /// Always `true`, written last: a document without it was cut short.
    pub complete: bool,
}

#[cfg(feature = "controller")]
fn list_error(what: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |e| Error::kube(format!("listing {what}"), e)
}

/// Takes one sample of the cluster `client` reaches (NodePools, Nodes, Pods, DaemonSets,
/// PodDisruptionBudgets, Namespaces; a cluster without the NodePool CRD has none, a role
/// that cannot list Namespaces records none), trimmed by [`trim`].
///
/// # Errors
/// [`Error::Kube`] naming the list that failed.
#[cfg(feature = "controller")]
pub async fn take(client: &kube::Client, time: jiff::Timestamp) -> Result<Sample> {
    let lp = ListParams::default();
    let pools = match Api::<NodePool>::all(client.clone()).list(&lp).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(list_error("NodePools")(e)),
    };
    let nodes = Api::<Node>::all(client.clone())
        .list(&lp)
        .await
        .map_err(list_error("Nodes"))?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&lp)
        .await
        .map_err(list_error("Pods"))?
        .items;
    let daemon_sets = Api::<DaemonSet>::all(client.clone())
        .list(&lp)
        .await
        .map_err(list_error("DaemonSets"))?
        .items;
    let pdbs = Api::<PodDisruptionBudget>::all(client.clone())
        .list(&lp)
        .await
        .map_err(list_error("PodDisruptionBudgets"))?
        .items;
    // As the controller reads them; a role without them costs those terms only.
    let namespaces = match Api::<Namespace>::all(client.clone()).list(&lp).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if matches!(s.code, 403 | 404) => Vec::new(),
        Err(e) => return Err(list_error("Namespaces")(e)),
    };
    Ok(Sample {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        time,
        node_pools: pools.into_iter().map(trim_pool).collect(),
        nodes: nodes
            .iter()
            .filter_map(|n| trimmed(n, Kind::Node))
            .collect(),
        pods: pods.iter().filter_map(|p| trimmed(p, Kind::Pod)).collect(),
        daemon_sets: daemon_sets
            .iter()
            .filter_map(|d| trimmed(d, Kind::DaemonSet))
            .collect(),
        pod_disruption_budgets: pdbs
            .iter()
            .filter_map(|b| trimmed(b, Kind::Other))
            .collect(),
        namespaces: namespaces
            .iter()
            .filter_map(|n| trimmed(n, Kind::Other))
            .collect(),
        complete: true,
    })
}

/// The kinds [`trim`] knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A Node: spec, allocatable, capacity and conditions.
    Node,
    /// A Pod: scheduling-relevant spec, phase, start time and conditions.
    Pod,
    /// A DaemonSet: its pod template trimmed as a pod's spec, its UID kept.
    DaemonSet,
    /// Anything else: metadata trimmed only.
    Other,
}

#[cfg(feature = "controller")]
fn trimmed<T: Serialize + serde::de::DeserializeOwned>(obj: &T, kind: Kind) -> Option<T> {
    let mut v = serde_json::to_value(obj).ok()?;
    trim(&mut v, kind);
    serde_json::from_value(v).ok()
}

#[cfg(feature = "controller")]
fn trim_pool(mut np: NodePool) -> NodePool {
    np.status = None;
    let m = &mut np.metadata;
    m.managed_fields = None;
    m.resource_version = None;
    m.uid = None;
    m.generation = None;
    m.creation_timestamp = None;
    m.finalizers = None;
    if let Some(a) = m.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
    np
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Keeps only `keys` of the object `v` (a no-op on anything else).
fn keep(v: &mut Value, keys: &[&str]) {
    if let Some(o) = v.as_object_mut() {
        o.retain(|k, _| keys.contains(&k.as_str()));
    }
}

/// What no part of the autoscaler reads, removed from an object as JSON: managed fields,
/// resource versions, UIDs but a DaemonSet's, `last-applied-configuration`; of pod specs
/// (pods' and DaemonSet templates') every container field but name, image, resources, ports
/// and restart policy, and every volume source but `hostPath` and `emptyDir`; of Nodes their
/// images and system info. What is left is what the translation reads (`controller::translate`).
/// A DaemonSet keeps its UID because its pods name it as their owner: the snapshot builder
/// sizes the DaemonSet by its newest pod.
pub fn trim(v: &mut Value, kind: Kind) {
    if let Some(m) = v.get_mut("metadata") {
        let uid = m.get("uid").cloned();
        trim_metadata(m);
        if let (Kind::DaemonSet, Some(uid), Some(o)) = (kind, uid, m.as_object_mut()) {
            o.insert("uid".into(), uid);
        }
    }
    match kind {
        Kind::Pod => {
            if let Some(s) = v.get_mut("spec") {
                trim_pod_spec(s);
            }
            if let Some(s) = v.get_mut("status") {
                keep(s, &["phase", "startTime", "conditions"]);
            }
        }
        Kind::DaemonSet => {
            if let Some(t) = v.pointer_mut("/spec/template") {
                if let Some(m) = t.get_mut("metadata") {
                    trim_metadata(m);
                }
                if let Some(s) = t.get_mut("spec") {
                    trim_pod_spec(s);
                }
            }
            if let Some(o) = v.as_object_mut() {
                o.remove("status");
            }
        }
        Kind::Node => {
            if let Some(s) = v.get_mut("status") {
                keep(s, &["allocatable", "capacity", "conditions"]);
            }
        }
        Kind::Other => {}
    }
}

fn trim_metadata(m: &mut Value) {
    if let Some(o) = m.as_object_mut() {
        for k in [
            "managedFields",
            "resourceVersion",
            "uid",
            "generation",
            "selfLink",
        ] {
            o.remove(k);
        }
        if let Some(a) = o.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED);
        }
    }
}

fn trim_pod_spec(s: &mut Value) {
    for list in ["containers", "initContainers"] {
        if let Some(cs) = s.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                keep(c, &["name", "image", "resources", "ports", "restartPolicy"]);
            }
        }
    }
    if let Some(o) = s.as_object_mut() {
        o.remove("ephemeralContainers");
    }
    if let Some(vs) = s.get_mut("volumes").and_then(Value::as_array_mut) {
        for v in vs {
            keep(v, &["name", "hostPath", "emptyDir"]);
        }
    }
}

/// One sample as a YAML document (with its `---` line), ready to append to a file.
///
/// # Errors
/// [`Error::Snapshot`] if it cannot be serialized (never for objects read from a server).
pub fn to_document(sample: &Sample) -> Result<String> {
    let text = serde_norway::to_string(sample).map_err(|e| Error::Snapshot {
        path: String::new(),
        why: format!("serializing the sample of {}: {e}", sample.time),
    })?;
    Ok(format!("---\n{text}"))
}

/// Appends one document to `out` and flushes it, so a recording stopped at any point keeps
/// every sample written before.
///
/// # Errors
/// [`Error::Snapshot`] naming the file.
pub fn append(out: &mut std::fs::File, path: &Path, sample: &Sample) -> Result<()> {
    let doc = to_document(sample)?;
    out.write_all(doc.as_bytes())
        .and_then(|()| out.sync_data())
        .map_err(|e| Error::Snapshot {
            path: path.display().to_string(),
            why: format!("writing: {e}"),
        })
}

/// Reads a snapshot file: every document a [`Sample`], in time order.
///
/// # Errors
/// [`Error::Snapshot`] naming the file and the document: YAML that does not parse, an
/// unknown field (NodePools strictly, with the field's path), a wrong `apiVersion` or
/// `kind`, samples out of time order, or no sample at all. A document after the first that
/// is cut short (broken YAML, or without its final `complete: true`) ends the file: it is
/// dropped and named in the returned notes, and the samples before it are used.
pub fn read(path: &Path) -> Result<(Vec<Sample>, Vec<String>)> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Snapshot {
        path: path.display().to_string(),
        why: format!("reading: {e}"),
    })?;
    parse(path, &text)
}

/// [`read`] on text; `path` names it in errors.
///
/// # Errors
/// As [`read`].
pub fn parse(path: &Path, text: &str) -> Result<(Vec<Sample>, Vec<String>)> {
    let err = |why: String| Error::Snapshot {
        path: path.display().to_string(),
        why,
    };
    autoscaler_core::nesting::check_flow_nesting(text).map_err(|e| err(e.to_string()))?;
    let mut samples = Vec::new();
    let mut notes = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let s = match Sample::deserialize(doc) {
            Ok(s) => s,
            // The parser cannot go past a broken document: a recording cut short ends here.
            Err(e) if i > 0 && is_truncation(&e) => {
                notes.push(format!(
                    "document {}: {e}: dropped (a recording cut short?); {} samples used",
                    i + 1,
                    samples.len()
                ));
                break;
            }
            Err(e) => return Err(err(format!("document {}: {e}", i + 1))),
        };
        if !s.complete {
            return Err(err(format!("document {}: complete is not true", i + 1)));
        }
        if s.api_version != API_VERSION || s.kind != KIND {
            return Err(err(format!(
                "document {}: apiVersion {:?} kind {:?}: expected {API_VERSION} {KIND}",
                i + 1,
                s.api_version,
                s.kind
            )));
        }
        if let Some(prev) = samples.last().map(|p: &Sample| p.time)
            && s.time < prev
        {
            return Err(err(format!(
                "document {}: time {} is before the previous sample's {prev}",
                i + 1,
                s.time
            )));
        }
        samples.push(s);
    }
    if samples.is_empty() {
        return Err(err("no ClusterSnapshot document".into()));
    }
    Ok((samples, notes))
}

/// Whether a parse error is the kind a file cut mid-write gives (the YAML itself broken or
/// a document missing its required fields), rather than a wrong value.
fn is_truncation(e: &serde_norway::Error) -> bool {
    let m = e.to_string();
    [
        "missing field",
        "while scanning",
        "did not find expected",
        "end of stream",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// A loaded snapshot: the scenario to simulate and what the reader should know.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The scenario: NodePools, DaemonSets, existing nodes, replayed pods and budgets.
    pub scenario: Scenario,
    /// Objects left out (they did not translate), nodes of no known type, dropped documents.
    pub notes: Vec<String>,
}

/// The objects of a sample as the controller's snapshot builder takes them.
struct Objects {
    pods: Vec<Arc<CachedPod>>,
    nodes: Vec<Arc<Node>>,
    pools: Vec<Arc<NodePool>>,
    daemonsets: Vec<Arc<DaemonSet>>,
    pdbs: Vec<Arc<PodDisruptionBudget>>,
    types: BTreeMap<String, Arc<Vec<InstanceType>>>,
    pending: BTreeSet<PodKey>,
    namespaces: BTreeMap<String, autoscaler_core::requirements::Labels>,
}

impl Objects {
    fn of(s: &Sample, catalog: &Arc<Vec<InstanceType>>) -> Self {
        let pods: Vec<Arc<CachedPod>> = s
            .pods
            .iter()
            .map(|p| Arc::new(CachedPod::new(p.clone(), None)))
            .collect();
        let pending = pods
            .iter()
            .filter(|p| p.node_name.is_none() && p.active && !p.deleting())
            .map(|p| p.key.clone())
            .collect();
        Objects {
            pods,
            nodes: s.nodes.iter().cloned().map(Arc::new).collect(),
            pools: s.node_pools.iter().cloned().map(Arc::new).collect(),
            daemonsets: s.daemon_sets.iter().cloned().map(Arc::new).collect(),
            pdbs: s
                .pod_disruption_budgets
                .iter()
                .cloned()
                .map(Arc::new)
                .collect(),
            types: s
                .node_pools
                .iter()
                .map(|np| {
                    (
                        np.metadata.name.clone().unwrap_or_default(),
                        catalog.clone(),
                    )
                })
                .collect(),
            pending,
            namespaces: namespace_labels(s),
        }
    }

    /// The controller's snapshot of these objects: [`SnapshotBuilder::build`], nothing folded.
    fn build(&self, gangs: &GangObjects) -> crate::controller::snapshot::Built {
        let mut builder = SnapshotBuilder {
            namespaces: self.namespaces.clone(),
            ..SnapshotBuilder::default()
        };
        builder.build(&Inputs {
            pods: &self.pods,
            nodes: &self.nodes,
            pools: &self.pools,
            claims: &[],
            daemonsets: &self.daemonsets,
            pdbs: &self.pdbs,
            instance_types: &self.types,
            pending: &self.pending,
            gangs,
            dra: &Default::default(),
            volumes: &Default::default(),
        })
    }
}

/// The controller's snapshot of a sample's objects, as the controller would build it from
/// the same objects in its stores (NodePools' instance types from `catalog`). [`load`] starts
/// the simulator from this; tests compare the two.
pub fn controller_view(
    s: &Sample,
    catalog: &Arc<Vec<InstanceType>>,
) -> crate::controller::snapshot::Built {
    Objects::of(s, catalog).build(&GangObjects::default())
}

/// Pods of a sample that the replay follows: active, not being deleted, translated, and
/// neither DaemonSet nor mirror pods (those come and go with their node).
fn replayed_pods(s: &Sample) -> BTreeMap<PodKey, CorePod> {
    let mut pods: BTreeMap<PodKey, CorePod> = s
        .pods
        .iter()
        .map(|p| CachedPod::new(p.clone(), None))
        .filter(|p| p.active && !p.deleting())
        .filter_map(|p| p.core_pod().ok())
        .filter(|p| !p.is_daemonset() && !p.mirror)
        .map(|p| (p.key.clone(), p))
        .collect();
    autoscaler_core::model::resolve_namespace_selectors(pods.values_mut(), &namespace_labels(s));
    pods
}

/// Each recorded Namespace's labels, by name.
fn namespace_labels(s: &Sample) -> BTreeMap<String, autoscaler_core::requirements::Labels> {
    crate::controller::snapshot::namespace_labels(&s.namespaces)
}

/// Builds the scenario that starts from the first sample and replays the others.
///
/// # Errors
/// [`Error::Snapshot`] naming the NodePool that does not validate, or the node whose
/// instance type the catalog lacks (give the catalog with `--catalog-file`).
pub fn load(path: &Path, samples: &[Sample], catalog: Vec<InstanceType>) -> Result<Loaded> {
    let err = |why: String| Error::Snapshot {
        path: path.display().to_string(),
        why,
    };
    let catalog = Arc::new(catalog);
    let first = samples.first().ok_or_else(|| err("no sample".into()))?;
    let t0 = first.time.as_second();
    let built = controller_view(first, &catalog);
    if let Some((name, why)) = built.invalid_pools.iter().next() {
        return Err(err(format!("NodePool {name}: {why}")));
    }
    let mut notes: Vec<String> = built
        .problems
        .iter()
        .map(|(o, why)| format!("{o} left out: {why}"))
        .collect();
    let snap = built.snapshot;

    // When each pod present in the first sample leaves, and the pods of later samples.
    let series: Vec<(i64, BTreeMap<PodKey, CorePod>)> = samples
        .iter()
        .map(|s| (s.time.as_second() - t0, replayed_pods(s)))
        .collect();
    let mut leaves: BTreeMap<PodKey, i64> = BTreeMap::new();
    let mut replay: Vec<ReplayPod> = Vec::new();
    // Per key: how many pods have had it, and the replayed one that has it now (`None`: the
    // first sample's).
    let mut uses: BTreeMap<PodKey, u32> = series[0].1.keys().map(|k| (k.clone(), 1)).collect();
    let mut current: BTreeMap<PodKey, Option<usize>> =
        series[0].1.keys().map(|k| (k.clone(), None)).collect();
    for w in series.windows(2) {
        let ((_, before), (t, after)) = (&w[0], &w[1]);
        for key in before.keys().filter(|k| !after.contains_key(*k)) {
            match current.remove(key) {
                Some(Some(i)) => replay[i].delete_at = Some(*t),
                Some(None) => {
                    leaves.insert(key.clone(), *t);
                }
                None => {}
            }
        }
        for (key, pod) in after.iter().filter(|(k, _)| !before.contains_key(*k)) {
            // A pod back under a name it had before (a StatefulSet's) is a new pod, and the
            // simulator tells pods apart by key: `<name>~<n>`.
            let n = uses.entry(key.clone()).or_insert(0);
            let mut pod = pod.clone();
            if *n > 0 {
                pod.key.name = format!("{}~{n}", key.name);
            }
            *n += 1;
            if let Some(s) = pod.started_at.as_mut() {
                *s -= t0;
            }
            current.insert(key.clone(), Some(replay.len()));
            replay.push(ReplayPod {
                pod,
                arrival: *t,
                delete_at: None,
            });
        }
    }

    let mut existing = Vec::new();
    let mut replay_first = Vec::new();
    for p in &snap.pending {
        let mut pod = p.clone();
        if let Some(s) = pod.started_at.as_mut() {
            *s -= t0;
        }
        replay_first.push(ReplayPod {
            pod,
            arrival: 0,
            delete_at: leaves.get(&p.key).copied(),
        });
    }
    for n in &snap.nodes {
        let zone = n.labels.get(labels::ZONE).cloned().unwrap_or_default();
        let capacity_type = match n.labels.get(labels::CAPACITY_TYPE).map(String::as_str) {
            Some("spot") => CapacityType::Spot,
            _ => CapacityType::OnDemand,
        };
        let (instance_type, price, gpus) = match &n.instance_type {
            None => {
                notes.push(format!(
                    "node {}: no {} label: simulated at no cost",
                    n.name,
                    labels::INSTANCE_TYPE
                ));
                (String::new(), 0.0, 0)
            }
            Some(t) => {
                let Some(it) = catalog.iter().find(|it| &it.name == t) else {
                    return Err(err(format!(
                        "node {}: instance type {t:?} is not in the catalog; give a catalog that has it with --catalog-file (the format of `gpu-autoscaler catalog --json`)",
                        n.name
                    )));
                };
                let price = node_price(std::slice::from_ref(it), &n.labels).unwrap_or(0.0);
                (t.clone(), price, it.gpu_count())
            }
        };
        let mut node_pods = Vec::new();
        let mut pods = Vec::new();
        for p in &n.pods {
            let mut pod = p.clone();
            if let Some(s) = pod.started_at.as_mut() {
                *s -= t0;
            }
            if p.is_daemonset() || p.mirror {
                node_pods.push(pod);
            } else {
                pods.push((pod, leaves.get(&p.key).copied()));
            }
        }
        existing.push(ExistingNode {
            name: n.name.clone(),
            pool: n.pool.clone(),
            instance_type,
            zone,
            capacity_type,
            price,
            gpus,
            labels: n.labels.clone(),
            taints: n.taints.clone(),
            allocatable: n.allocatable.clone(),
            unschedulable: n.unschedulable,
            node_pods,
            pods,
        });
    }
    replay_first.extend(replay);

    // Budgets: the API server's `disruptionsAllowed` at the first sample is `maxUnavailable`
    // less the selected pods not running; the simulator computes it the same way.
    let pdbs = snap
        .pdbs
        .iter()
        .map(|b| {
            let down = snap
                .pending
                .iter()
                .filter(|p| p.key.namespace == b.namespace && b.selector.matches(&p.labels))
                .count() as i32;
            PdbRule {
                namespace: b.namespace.clone(),
                name: b.name.clone(),
                selector: b.selector.clone(),
                max_unavailable: u32::try_from(b.disruptions_allowed + down).unwrap_or(0),
            }
        })
        .collect();

    let span = series.last().map_or(0, |(t, _)| *t);
    let interval = if series.len() > 1 {
        span / (series.len() as i64 - 1)
    } else {
        SINGLE_SAMPLE_S
    };
    let scenario = Scenario {
        name: format!(
            "snapshot {} ({} sample{})",
            path.file_name().map_or_else(
                || path.display().to_string(),
                |f| f.to_string_lossy().into_owned()
            ),
            samples.len(),
            if samples.len() == 1 { "" } else { "s" }
        ),
        path: path.to_path_buf(),
        seed: 1,
        duration_s: (span + interval).max(1),
        catalog,
        pools: snap.pools,
        daemonsets: snap.daemonsets,
        cluster: ClusterConfig::default(),
        workloads: Vec::new(),
        policies: POLICY_NAMES.iter().map(|s| s.to_string()).collect(),
        existing_nodes: existing,
        replay: replay_first,
        pdbs,
    };
    Ok(Loaded { scenario, notes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoscaler_core::model::TermNamespaces;

    const POOL: &str = "  - metadata: {name: cpu}\n    spec: {template: {requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}]}}\n";

    fn sample(time: &str, itype: &str, pods: &[(&str, Option<&str>)]) -> String {
        let mut s = format!(
            "---\napiVersion: {API_VERSION}\nkind: {KIND}\ntime: \"{time}\"\nnodePools:\n{POOL}nodes:\n  - metadata: {{name: n1, labels: {{node.kubernetes.io/instance-type: {itype}, topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand, gpu-autoscaler.dev/nodepool: cpu}}}}\n    status: {{allocatable: {{cpu: '4', memory: 15Gi, pods: '58'}}, conditions: [{{type: Ready, status: 'True'}}]}}\npods:\n"
        );
        for (name, node) in pods {
            let node = node.map_or(String::new(), |n| format!(", nodeName: {n}"));
            s.push_str(&format!(
                "  - metadata: {{name: {name}, namespace: default}}\n    spec: {{containers: [{{name: c, resources: {{requests: {{cpu: '1'}}}}}}]{node}}}\n"
            ));
        }
        s.push_str("complete: true\n");
        s
    }

    fn load_text(text: &str) -> Result<(Loaded, Vec<String>)> {
        let path = Path::new("snap.yaml");
        let (samples, notes) = parse(path, text)?;
        Ok((
            load(path, &samples, providers::catalog::default_catalog())?,
            notes,
        ))
    }

    #[test]
    fn a_series_replays_as_arrivals_and_departures() {
        let text = sample("2026-01-01T00:00:00Z", "m5.xlarge", &[("a", Some("n1")), ("p", None)])
            + &sample("2026-01-01T00:01:00Z", "m5.xlarge", &[("b", Some("n1")), ("p", None)])
            + &sample("2026-01-01T00:02:00Z", "m5.xlarge", &[("a", Some("n1"))])
            // A recording cut short in its fourth sample.
            + "---\napiVersion: gpu-autoscaler.dev/v1alpha1\nkind: ClusterSnapshot\ntime: \"2026-01-01T00:03:00Z\"\npods:\n  - metadata: {name: c";
        let (loaded, notes) = load_text(&text).unwrap();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("document 4") && notes[0].contains("3 samples used"));
        let s = loaded.scenario;
        assert_eq!(s.existing_nodes.len(), 1);
        let n = &s.existing_nodes[0];
        assert_eq!(
            (n.pool.as_deref(), n.instance_type.as_str()),
            (Some("cpu"), "m5.xlarge")
        );
        assert!(n.price > 0.0);
        let on_node: Vec<(&str, Option<i64>)> = n
            .pods
            .iter()
            .map(|(p, leaves)| (p.key.name.as_str(), *leaves))
            .collect();
        assert_eq!(on_node, [("a", Some(60))]);
        let replay: Vec<(&str, i64, Option<i64>)> = s
            .replay
            .iter()
            .map(|r| (r.pod.key.name.as_str(), r.arrival, r.delete_at))
            .collect();
        // p pending from the start, gone at 2m; b from 1m to 2m; a back at 2m under a new key.
        assert_eq!(
            replay,
            [
                ("p", 0, Some(120)),
                ("b", 60, Some(120)),
                ("a~1", 120, None)
            ]
        );
        assert_eq!(s.duration_s, 180);
        assert_eq!(s.pools.len(), 1);
    }

    #[test]
    fn a_samples_namespaces_resolve_its_pods_namespace_selectors() {
        // Pod `p` keeps away from `app=db` pods of namespaces labelled `team=data`: read
        // against the sample's Namespaces; a sample without them (taken before they were
        // recorded) still reads, its term selecting only the namespaces it lists.
        let with_term = sample("2026-01-01T00:00:00Z", "m5.xlarge", &[("p", None)]).replace(
            "resources: {requests: {cpu: '1'}}}]",
            "resources: {requests: {cpu: '1'}}}], affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: db}}, namespaceSelector: {matchLabels: {team: data}}}]}}",
        );
        let namespaces = |text: &str| -> TermNamespaces {
            let (samples, _) = parse(Path::new("snap.yaml"), text).unwrap();
            replayed_pods(&samples[0])
                .into_values()
                .next()
                .unwrap()
                .anti_affinity[0]
                .namespaces
                .clone()
        };
        let recorded = with_term.replace(
            "complete: true",
            "namespaces:\n  - metadata: {name: db, labels: {team: data}}\n  - metadata: {name: default}\ncomplete: true",
        );
        assert_eq!(
            namespaces(&recorded),
            TermNamespaces::Listed(["db".to_string()].into())
        );
        assert_eq!(
            namespaces(&with_term),
            TermNamespaces::Listed(Default::default())
        );
    }

    #[test]
    fn an_instance_type_the_catalog_lacks_is_named_with_its_node() {
        let e = load_text(&sample("2026-01-01T00:00:00Z", "x9.mega", &[]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node n1: instance type \"x9.mega\" is not in the catalog")
                && e.contains("--catalog-file"),
            "{e}"
        );
    }

    #[test]
    fn nodepools_are_read_strictly_and_documents_checked() {
        let text = sample("2026-01-01T00:00:00Z", "m5.xlarge", &[])
            .replace("spec: {template:", "spec: {weigth: 3, template:");
        let e = load_text(&text).unwrap_err().to_string();
        assert!(e.contains("document 1") && e.contains("spec.weigth"), "{e}");
        let e = load_text(
            &sample("2026-01-01T00:00:00Z", "m5.xlarge", &[])
                .replace("kind: ClusterSnapshot", "kind: Other"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("kind \"Other\""), "{e}");
        let two = sample("2026-01-01T00:01:00Z", "m5.xlarge", &[])
            + &sample("2026-01-01T00:00:00Z", "m5.xlarge", &[]);
        let e = load_text(&two).unwrap_err().to_string();
        assert!(e.contains("document 2: time"), "{e}");
    }

    #[test]
    fn trimming_keeps_what_translation_reads() {
        let mut pod = serde_json::json!({
            "metadata": {"name": "a", "managedFields": [{}], "annotations": {
                LAST_APPLIED: "{}", "karpenter.sh/do-not-disrupt": "true"}},
            "spec": {"containers": [{"name": "c", "image": "i", "command": ["x"], "env": [],
                "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 80}]}],
                "volumes": [{"name": "v", "configMap": {"name": "x"}}, {"name": "s", "emptyDir": {}}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}
        });
        trim(&mut pod, Kind::Pod);
        assert_eq!(
            pod,
            serde_json::json!({
                "metadata": {"name": "a", "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                "spec": {"containers": [{"name": "c", "image": "i",
                    "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 80}]}],
                    "volumes": [{"name": "v"}, {"name": "s", "emptyDir": {}}]},
                "status": {"phase": "Running"}
            })
        );
        // A DaemonSet keeps the UID its pods' owner references name; a pod drops its own.
        let mut ds = serde_json::json!({"metadata": {"name": "agent", "uid": "ds-1",
            "resourceVersion": "3"}, "spec": {"template": {"spec": {"containers": []}}}});
        trim(&mut ds, Kind::DaemonSet);
        assert_eq!(
            ds["metadata"],
            serde_json::json!({"name": "agent", "uid": "ds-1"})
        );
        let mut agent = serde_json::json!({"metadata": {"name": "agent-x", "uid": "p-1",
            "ownerReferences": [{"kind": "DaemonSet", "name": "agent", "uid": "ds-1",
                "controller": true}]}});
        trim(&mut agent, Kind::Pod);
        assert_eq!(agent["metadata"].get("uid"), None);
        assert_eq!(agent["metadata"]["ownerReferences"][0]["uid"], "ds-1");
    }
}
