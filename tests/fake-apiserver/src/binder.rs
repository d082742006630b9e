//! A small stand-in for kube-scheduler (and, optionally, kubelet) in the test harness.
//!
//! Written independently of the project's planner so end-to-end tests do not grade the planner
//! against itself. It binds pending pods to the first fitting node by name (or, with
//! [`Score::LeastAllocated`], as kube-scheduler's default score would) and marks pods that fit
//! nowhere `PodScheduled=False, reason=Unschedulable`, which is what the autoscaler watches.
//!
//! Fit rules: the node is Ready and not `spec.unschedulable`; every requested resource (CPU,
//! memory, `pods`, extended resources such as `nvidia.com/gpu`) fits in allocatable minus what
//! non-terminal pods already bound there request; `NoSchedule`/`NoExecute` taints are tolerated;
//! `nodeSelector` and required node affinity (`matchExpressions` and `matchFields` on
//! `metadata.name`) match; a pod's DRA claims can be allocated on the node (`dra.rs`); a pod's
//! GPU share fits a device of the node (below); the node affinity of every PersistentVolume
//! the pod's claims are bound to matches, and for an unbound claim whose StorageClass binds on
//! first use, one of the class's `allowedTopologies` (kube-scheduler's `VolumeBinding`
//! filter; a claim or volume not found leaves the pod unschedulable, naming it), and a bound
//! volume's zone and region labels allow the node's (`VolumeZone`); a node whose CSINode
//! gives a driver an attach count takes no pod that would attach more distinct claims of that
//! driver than the count (`NodeVolumeLimits`: a claim's driver is its bound volume's
//! `spec.csi.driver`, else its StorageClass's provisioner; the AWS, GCE and Azure disk
//! in-tree plugins count as their CSI drivers). Pod groups
//! bind all or nothing (`binder/gangs.rs`).
//! Not modelled: pod (anti-)affinity, topology spread, preemption, host ports, creating the
//! volume of an unbound claim, scheduling gates other than "has any gate".
//!
//! GPU sharing, per encoding, as the component that serves it in a real cluster would:
//! - **Time-slicing** (NVIDIA device plugin): the node advertises each GPU `replicas` times as
//!   `nvidia.com/gpu` (or `nvidia.com/gpu.shared` when renamed); pods request whole replicas,
//!   checked against allocatable like any extended resource.
//! - **MIG** (mixed strategy): each instance profile is an extended resource
//!   (`nvidia.com/mig-1g.10gb`), checked against allocatable the same way; under the single
//!   strategy the instances are `nvidia.com/gpu`.
//! - **Fractional shares** (what a HAMi-style scheduler extender with its GPU policy set to
//!   `binpack` does; `binder/shares.rs`): a pod with the annotation
//!   `gpu-autoscaler.dev/gpu-share: "N"` takes N thousandths (1..=1000) of one `nvidia.com/gpu`
//!   device; without it, HAMi's `nvidia.com/gpucores: C` (1..=99) with `nvidia.com/gpu: K`
//!   takes C % of each of K distinct devices (one when `nvidia.com/gpu` is absent). An
//!   annotation that does not parse makes the pod fit nowhere, naming the annotation. A node
//!   has one device per whole `nvidia.com/gpu` it advertises. A device holds shares summing to
//!   at most 1000 thousandths, never pooled across devices; a share goes to the partly used
//!   device with the least room that still holds it (lowest index on a tie), else opens an
//!   untouched device, which then no longer counts as a free whole device. Whole-device pods
//!   take only devices no share touches. A share pod's `nvidia.com/gpu` request and HAMi's
//!   `gpucores` / `gpumem` / `gpumem-percentage` are not checked against allocatable (HAMi's
//!   extender manages them; device memory is not modelled). Every node advertising
//!   `nvidia.com/gpu` takes shares: which nodes run the share scheduler is for the pods'
//!   selectors and tolerations to say. The devices a bound share pod holds are remembered for
//!   its lifetime, as HAMi records them on the pod; a share pod bound by someone else is given
//!   devices (same rule) when first seen.

mod gangs;
mod shares;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::dra::{self, Dra};
use crate::quantity::parse_milli;
use crate::store::{State, WriteOpts, meta_str, now, set_condition};
use gangs::group_of;
pub(crate) use shares::Memory;
use shares::{Ask, NodeDevices};

/// Settings of the harness scheduler.
#[derive(Clone, Debug)]
pub struct BinderOptions {
    /// How often to look for pending pods even when nothing changed.
    pub interval: Duration,
    /// Also play kubelet: a bound pod becomes `Running` and `Ready` at once.
    pub mark_running: bool,
    /// Only pods with this `spec.schedulerName` are scheduled.
    pub scheduler_name: String,
    /// How a pod's node is chosen among those that fit.
    pub score: Score,
}

/// How the harness scheduler picks among the nodes that fit a pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Score {
    /// The first by name: tests know where a pod goes.
    #[default]
    FirstFit,
    /// kube-scheduler's default score (`NodeResourcesFit` with the `LeastAllocated` strategy,
    /// CPU and memory weighted equally), with `nvidia.com/gpu` scored too for pods that ask
    /// for GPUs (a `scoringStrategy.resources` entry of weight 1; shares count the thousandths
    /// they hold), as the simulator's scheduler scores: the node with the largest share of
    /// its allocatable left after the pod; on a tie the older node, then the first by name.
    LeastAllocated,
}

impl Default for BinderOptions {
    fn default() -> Self {
        BinderOptions {
            interval: Duration::from_millis(200),
            mark_running: true,
            scheduler_name: "default-scheduler".into(),
            score: Score::FirstFit,
        }
    }
}

type Resources = BTreeMap<String, i128>;

fn quantities(v: Option<&Value>) -> Resources {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, q)| Some((k.clone(), parse_milli(q.as_str()?)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A container's requests, with limits standing in for absent requests (API defaulting).
fn container_requests(c: &Value) -> Resources {
    let mut r = quantities(c.pointer("/resources/limits"));
    r.extend(quantities(c.pointer("/resources/requests")));
    r
}

/// The pod's effective requests: sum of containers, at least the largest init container,
/// plus overhead, plus one `pods` slot.
pub(crate) fn pod_requests(pod: &Value) -> Resources {
    let mut total = Resources::new();
    for c in pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (k, v) in container_requests(c) {
            *total.entry(k).or_default() += v;
        }
    }
    for c in pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (k, v) in container_requests(c) {
            let e = total.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    for (k, v) in quantities(pod.pointer("/spec/overhead")) {
        *total.entry(k).or_default() += v;
    }
    *total.entry("pods".into()).or_default() += 1000;
    total
}

pub(crate) fn tolerates(tolerations: &[Value], taint: &Value) -> bool {
    tolerations.iter().any(|t| {
        let key = t["key"].as_str().unwrap_or_default();
        let op = t["operator"].as_str().unwrap_or("Equal");
        let effect = t["effect"].as_str().unwrap_or_default();
        let key_ok =
            (key.is_empty() && op == "Exists") || key == taint["key"].as_str().unwrap_or_default();
        let value_ok = op == "Exists"
            || t["value"].as_str().unwrap_or_default()
                == taint["value"].as_str().unwrap_or_default();
        let effect_ok = effect.is_empty() || effect == taint["effect"].as_str().unwrap_or_default();
        key_ok && value_ok && effect_ok
    })
}

fn requirement_matches(expr: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = expr["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let num = |s: &str| s.parse::<i64>().ok();
    match expr["operator"].as_str().unwrap_or_default() {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(num), values.first().and_then(|s| num(s))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((value.and_then(num), values.first().and_then(|s| num(s))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

pub(crate) fn affinity_matches(pod: &Value, node: &Value) -> bool {
    match pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    {
        Some(terms) => terms_match(terms, node),
        None => true,
    }
}

/// Whether `node` matches one of the node selector `terms` (an empty term matches nothing).
fn terms_match(terms: &[Value], node: &Value) -> bool {
    let labels = node.pointer("/metadata/labels");
    let name = node.pointer("/metadata/name").and_then(Value::as_str);
    terms.iter().any(|term| {
        let exprs = term["matchExpressions"].as_array().into_iter().flatten();
        let fields = term["matchFields"].as_array().into_iter().flatten();
        let mut any = false;
        let ok = exprs.into_iter().all(|e| {
            any = true;
            let key = e["key"].as_str().unwrap_or_default();
            requirement_matches(e, labels.and_then(|l| l.get(key)).and_then(Value::as_str))
        }) && fields.into_iter().all(|e| {
            any = true;
            e["key"] == "metadata.name" && requirement_matches(e, name)
        });
        // An empty term matches nothing, as in Kubernetes.
        ok && any
    })
}

#[derive(Clone)]
struct NodeView {
    name: String,
    node: std::sync::Arc<Value>,
    allocatable: Resources,
    free: Resources,
    devices: NodeDevices,
    /// Per CSI driver with an attach count on this node's CSINode: the count, and the claims
    /// of that driver the node's pods use.
    attach: BTreeMap<String, (usize, BTreeSet<String>)>,
}

impl NodeView {
    /// The devices `ask`'s share would take here (`Some(empty)` for a pod without a share),
    /// `None` when it takes none.
    fn place(&self, ask: &Ask) -> Option<Vec<usize>> {
        match &ask.share {
            Ok(Some(s)) => self.devices.place(
                s,
                &self.allocatable,
                self.free.get(&s.resource).copied().unwrap_or(0),
            ),
            Ok(None) => Some(Vec::new()),
            Err(_) => None,
        }
    }

    /// Why attaching `volumes` (driver, claim) here would pass a driver's count.
    fn over_volume_limit(&self, volumes: &[(String, String)]) -> Option<String> {
        self.attach.iter().find_map(|(driver, (count, used))| {
            let new: BTreeSet<&String> = volumes
                .iter()
                .filter(|(d, id)| d == driver && !used.contains(id))
                .map(|(_, id)| id)
                .collect();
            (!new.is_empty() && used.len() + new.len() > *count)
                .then(|| "node(s) exceed max volume count".to_string())
        })
    }

    /// Counts the claims `volumes` as used here.
    fn attach(&mut self, volumes: &[(String, String)]) {
        for (driver, id) in volumes {
            if let Some((_, used)) = self.attach.get_mut(driver) {
                used.insert(id.clone());
            }
        }
    }

    /// Counts a pod bound here: its checked requests, and its share on the devices `at`.
    fn take(&mut self, ask: &Ask, at: &[usize]) {
        for (k, v) in ask.requests.iter() {
            *self.free.entry(k.clone()).or_default() -= v;
        }
        if let Ok(Some(s)) = &ask.share {
            let opened = self.devices.take(s, at, &self.allocatable);
            *self.free.entry(s.resource.clone()).or_default() -= 1000 * opened;
        }
    }
}

/// What a pod's volumes ask of a node.
#[derive(Debug, Default)]
struct VolumeNeeds {
    /// Per volume, node selector terms one of which the node must match: a bound volume's
    /// node affinity, or an unbound first-use claim's class topologies (`VolumeBinding`).
    terms: Vec<Vec<Value>>,
    /// Per bound volume's zone or region label, its key and the values it allows
    /// (`VolumeZone`).
    zones: Vec<(String, Vec<String>)>,
    /// Per claim with a known CSI driver: (driver, `namespace/claim`) (`NodeVolumeLimits`).
    attach: Vec<(String, String)>,
}

/// The PersistentVolume labels kube-scheduler's `VolumeZone` filter reads.
const VOLUME_ZONE_LABELS: [&str; 4] = [
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// A bound volume's zone and region labels: the values of each, split on `__`; a label with
/// an empty entry is skipped, as `VolumeZone` skips a label it cannot parse.
fn volume_zones(pv: &Value) -> Vec<(String, Vec<String>)> {
    VOLUME_ZONE_LABELS
        .iter()
        .filter_map(|key| {
            let value = pv.pointer("/metadata/labels")?.get(*key)?.as_str()?;
            let values: Vec<String> = value.split("__").map(|v| v.trim().to_string()).collect();
            (!values.iter().any(String::is_empty)).then(|| (key.to_string(), values))
        })
        .collect()
}

/// Whether `node` passes `VolumeZone` for `zones`: a node without any zone or region label
/// passes; otherwise each volume label's key (a beta key falling back to its GA form) must be
/// on the node with one of the values.
fn zones_match(zones: &[(String, Vec<String>)], node: &Value) -> bool {
    let label = |k: &str| {
        node.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
    };
    if VOLUME_ZONE_LABELS.iter().all(|k| label(k).is_none()) {
        return true;
    }
    zones.iter().all(|(key, values)| {
        let ga = key.replace(
            "failure-domain.beta.kubernetes.io/",
            "topology.kubernetes.io/",
        );
        label(key)
            .or_else(|| label(&ga))
            .is_some_and(|v| values.iter().any(|x| x == v))
    })
}

/// The claims `pod`'s volumes use: each `persistentVolumeClaim`, and a generic ephemeral
/// volume's `<pod>-<volume>`.
fn pod_claims(pod: &Value) -> Vec<String> {
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            match (
                v.pointer("/persistentVolumeClaim/claimName")
                    .and_then(Value::as_str),
                v.get("ephemeral"),
            ) {
                (Some(c), _) => Some(c.to_string()),
                (None, Some(_)) => Some(format!(
                    "{}-{}",
                    meta_str(pod, "name"),
                    v["name"].as_str().unwrap_or_default()
                )),
                (None, None) => None,
            }
        })
        .collect()
}

/// The (driver, `namespace/claim`) of each claim a bound pod uses whose driver is known; a
/// claim gone since does not stop the others from counting.
fn attached_claims(state: &State, pod: &Value) -> Vec<(String, String)> {
    let ns = meta_str(pod, "namespace");
    let Some(claims_def) = state.def("", "persistentvolumeclaims") else {
        return Vec::new();
    };
    pod_claims(pod)
        .into_iter()
        .filter_map(|claim| {
            let pvc = state.get(&claims_def, ns, &claim).ok()?;
            Some((claim_driver(state, &pvc)?, format!("{ns}/{claim}")))
        })
        .collect()
}

/// What every PersistentVolume `pod`'s claims are bound to asks of a node (a generic
/// ephemeral volume's claim is `<pod>-<volume>`), or why the pod cannot be scheduled at all,
/// in kube-scheduler's words.
fn volume_needs(state: &State, pod: &Value) -> Result<VolumeNeeds, String> {
    let ns = meta_str(pod, "namespace");
    let (Some(claims_def), Some(volumes_def)) = (
        state.def("", "persistentvolumeclaims"),
        state.def("", "persistentvolumes"),
    ) else {
        return Ok(VolumeNeeds::default());
    };
    let mut out = VolumeNeeds::default();
    for claim in pod_claims(pod) {
        let pvc = state
            .get(&claims_def, ns, &claim)
            .map_err(|_| format!("persistentvolumeclaim \"{claim}\" not found"))?;
        let Some(pv_name) = pvc
            .pointer("/spec/volumeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            // Unbound: a class binding on first use provisions in one of its allowed
            // topologies, on the node the pod is bound to.
            if let Some(terms) = allowed_topologies(state, &pvc) {
                out.terms.push(terms);
            }
            continue;
        };
        let pv = state
            .get(&volumes_def, "", pv_name)
            .map_err(|_| format!("persistentvolume \"{pv_name}\" not found"))?;
        if let Some(terms) = pv
            .pointer("/spec/nodeAffinity/required/nodeSelectorTerms")
            .and_then(Value::as_array)
        {
            out.terms.push(terms.clone());
        }
        out.zones.extend(volume_zones(&pv));
    }
    out.attach = attached_claims(state, pod);
    Ok(out)
}

/// In-tree volume sources and provisioners, each with the CSI driver kube-scheduler counts it
/// against since CSI migration: (PersistentVolume source field, provisioner, driver).
const MIGRATED: [(&str, &str, &str); 3] = [
    (
        "awsElasticBlockStore",
        "kubernetes.io/aws-ebs",
        "ebs.csi.aws.com",
    ),
    (
        "gcePersistentDisk",
        "kubernetes.io/gce-pd",
        "pd.csi.storage.gke.io",
    ),
    (
        "azureDisk",
        "kubernetes.io/azure-disk",
        "disk.csi.azure.com",
    ),
];

/// The CSI driver of a claim: its bound volume's `spec.csi.driver` (an in-tree source's
/// migrated driver), none for a bound volume of neither kind (NFS), else (unbound, or bound
/// to a volume that is gone) its StorageClass's provisioner (likewise migrated).
fn claim_driver(state: &State, pvc: &Value) -> Option<String> {
    fn text(v: Option<&Value>) -> Option<&str> {
        v.and_then(Value::as_str).filter(|s| !s.is_empty())
    }
    let bound = text(pvc.pointer("/spec/volumeName")).and_then(|pv| {
        let def = state.def("", "persistentvolumes")?;
        state.get(&def, "", pv).ok()
    });
    if let Some(pv) = bound {
        return text(pv.pointer("/spec/csi/driver"))
            .or_else(|| {
                MIGRATED
                    .iter()
                    .find(|(field, _, _)| pv["spec"].get(*field).is_some())
                    .map(|(_, _, driver)| *driver)
            })
            .map(str::to_string);
    }
    let class = text(pvc.pointer("/spec/storageClassName"))?;
    let def = state.def("storage.k8s.io", "storageclasses")?;
    let sc = state.get(&def, "", class).ok()?;
    let provisioner = text(sc.get("provisioner"))?;
    let migrated = MIGRATED.iter().find(|(_, p, _)| *p == provisioner);
    Some(migrated.map_or(provisioner, |(_, _, d)| d).to_string())
}

/// Per node name, the CSI drivers its CSINode gives an attach count, with the count.
fn attach_limits(state: &State) -> BTreeMap<String, BTreeMap<String, (usize, BTreeSet<String>)>> {
    let Some(def) = state.def("storage.k8s.io", "csinodes") else {
        return BTreeMap::new();
    };
    state
        .tables_objects(&def)
        .filter_map(|n| {
            let limits: BTreeMap<String, (usize, BTreeSet<String>)> = n
                .pointer("/spec/drivers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|d| {
                    let count = d.pointer("/allocatable/count").and_then(Value::as_u64)?;
                    let name = d.get("name").and_then(Value::as_str)?;
                    Some((name.to_string(), (count as usize, BTreeSet::new())))
                })
                .collect();
            (!limits.is_empty()).then(|| (meta_str(n, "name").to_string(), limits))
        })
        .collect()
}

/// The `allowedTopologies` of an unbound claim's StorageClass, as node selector terms, when
/// the class binds on first use and has any.
fn allowed_topologies(state: &State, pvc: &Value) -> Option<Vec<Value>> {
    let class = pvc
        .pointer("/spec/storageClassName")
        .and_then(Value::as_str)?;
    let classes = state.def("storage.k8s.io", "storageclasses")?;
    let sc = state.get(&classes, "", class).ok()?;
    if sc["volumeBindingMode"] != "WaitForFirstConsumer" {
        return None;
    }
    let terms: Vec<Value> = sc["allowedTopologies"]
        .as_array()?
        .iter()
        .map(|t| {
            let exprs: Vec<Value> = t["matchLabelExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| json!({"key": e["key"], "operator": "In", "values": e["values"]}))
                .collect();
            json!({"matchExpressions": exprs})
        })
        .collect();
    (!terms.is_empty()).then_some(terms)
}

/// [`misfit`], then what the pod's volumes ask (`volumes`, from [`volume_needs`]).
fn misfit_with_volumes(
    pod: &Value,
    ask: &Ask,
    n: &NodeView,
    volumes: &VolumeNeeds,
) -> Option<String> {
    misfit(pod, ask, n)
        .or_else(|| {
            (!volumes
                .terms
                .iter()
                .all(|terms| terms_match(terms, &n.node)))
            .then(|| "node(s) had volume node affinity conflict".to_string())
        })
        .or_else(|| {
            (!zones_match(&volumes.zones, &n.node))
                .then(|| "node(s) had no available volume zone".to_string())
        })
        .or_else(|| n.over_volume_limit(&volumes.attach))
}

/// Why a pod does not fit a node (`None` when it fits), in kube-scheduler's words.
fn misfit(pod: &Value, ask: &Ask, n: &NodeView) -> Option<String> {
    if let Err(why) = &ask.share {
        return Some(why.clone());
    }
    let node = &n.node;
    let ready = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
    if !ready {
        return Some("node(s) were not ready".into());
    }
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        return Some("node(s) were unschedulable".into());
    }
    let tolerations: &[Value] = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for taint in node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let effect = taint["effect"].as_str().unwrap_or_default();
        if matches!(effect, "NoSchedule" | "NoExecute") && !tolerates(tolerations, taint) {
            let key = taint["key"].as_str().unwrap_or_default();
            let value = taint["value"].as_str().unwrap_or_default();
            return Some(format!("node(s) had untolerated taint {{{key}: {value}}}"));
        }
    }
    let labels = node.pointer("/metadata/labels");
    if let Some(sel) = pod.pointer("/spec/nodeSelector").and_then(Value::as_object)
        && !sel
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    if !affinity_matches(pod, node) {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    for (res, want) in &ask.requests {
        if *want > 0 && n.free.get(res).copied().unwrap_or(0) < *want {
            return Some(if res == "pods" {
                "Too many pods".into()
            } else {
                format!("Insufficient {res}")
            });
        }
    }
    match &ask.share {
        Ok(Some(s)) if n.place(ask).is_none() => Some(shares::no_room(s)),
        _ => None,
    }
}

fn fits_resources(req: &Resources, n: &NodeView) -> bool {
    req.iter()
        .all(|(res, want)| *want <= 0 || n.free.get(res).copied().unwrap_or(0) >= *want)
}

/// The share of `n`'s allocatable left once `ask` is placed, averaged over CPU, memory and,
/// for a pod asking for `nvidia.com/gpu` (whole or shared), the node's GPUs counted in
/// thousandths (shares as held, not as whole devices): the `LeastAllocated` score (0 for a
/// resource the node does not advertise).
fn least_allocated(ask: &Ask, n: &NodeView) -> f64 {
    let share = |a: i128, used: i128| {
        if a <= 0 {
            0.0
        } else {
            (a - used).max(0) as f64 / a as f64
        }
    };
    let left = |r: &str| {
        let a = n.allocatable.get(r).copied().unwrap_or(0);
        let taken = a - n.free.get(r).copied().unwrap_or(0);
        share(a, taken + ask.requests.get(r).copied().unwrap_or(0))
    };
    let mut parts = vec![left("cpu"), left("memory")];
    let gpu = "nvidia.com/gpu";
    let whole = ask.requests.get(gpu).copied().unwrap_or(0);
    let shared = match &ask.share {
        Ok(Some(s)) if s.resource == gpu => i128::from(s.milli) * i128::from(s.devices),
        _ => 0,
    };
    if whole + shared > 0 {
        let a = n.allocatable.get(gpu).copied().unwrap_or(0);
        let (opened, held) = n.devices.shared(gpu);
        // Devices a share opened count as taken in `free`; here they count what they hold.
        let used = a - n.free.get(gpu).copied().unwrap_or(0) - 1000 * opened + held;
        parts.push(share(a, used + whole + shared));
    }
    parts.iter().sum::<f64>() / parts.len() as f64
}

/// The nodes whose free resources hold `ask`'s requests, in the order the pass tries them:
/// by name, or best score first (ties to the older node) under [`Score::LeastAllocated`].
fn candidates(ask: &Ask, views: &[NodeView], opts: &BinderOptions) -> Vec<usize> {
    let mut order: Vec<usize> = (0..views.len())
        .filter(|i| fits_resources(&ask.requests, &views[*i]))
        .collect();
    if opts.score == Score::LeastAllocated {
        let scores: BTreeMap<usize, f64> = order
            .iter()
            .map(|i| (*i, least_allocated(ask, &views[*i])))
            .collect();
        order.sort_by(|a, b| {
            scores[b]
                .total_cmp(&scores[a])
                .then_with(|| created(&views[*a]).cmp(created(&views[*b])))
                .then(a.cmp(b))
        });
    }
    order
}

/// Writes `PodScheduled=False`, reason `Unschedulable`, with `message` on `pod`'s status.
fn mark_unschedulable(state: &mut State, pod: &Value, message: &str) {
    let mut p = pod.clone();
    set_condition(
        &mut p,
        "PodScheduled",
        "False",
        Some("Unschedulable"),
        Some(message),
    );
    let (ns, name) = (meta_str(&p, "namespace"), meta_str(&p, "name"));
    state.write_pod_status(ns, name, p["status"].clone());
}

/// A node's `metadata.creationTimestamp` (RFC 3339, so text order is time order).
fn created(n: &NodeView) -> &str {
    n.node["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default()
}

pub(crate) fn terminal(p: &Value) -> bool {
    matches!(
        p.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// One scheduling pass over all pending pods. Returns how many pods were bound.
pub(crate) fn schedule_pass(state: &mut State, opts: &BinderOptions) -> usize {
    let pods_def = state.def("", "pods").expect("builtin");
    let nodes_def = state.def("", "nodes").expect("builtin");
    // Cheap early exit: most passes (woken by unrelated writes) find nothing to schedule.
    let any_pending = state.tables_objects(&pods_def).any(|p| {
        p.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .is_empty()
            && p.pointer("/metadata/deletionTimestamp").is_none()
            && !terminal(p)
    });
    if !any_pending {
        return 0;
    }
    let Ok(nodes) = state.list(
        &nodes_def,
        None,
        &Default::default(),
        &Default::default(),
        None,
        None,
    ) else {
        return 0;
    };
    let Ok(pods) = state.list(
        &pods_def,
        None,
        &Default::default(),
        &Default::default(),
        None,
        None,
    ) else {
        return 0;
    };
    let mut limits = attach_limits(state);
    let mut views: Vec<NodeView> = nodes
        .items
        .iter()
        .map(|n| {
            let allocatable = quantities(n.pointer("/status/allocatable"));
            let name = n["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            NodeView {
                attach: limits.remove(&name).unwrap_or_default(),
                name,
                node: n.clone(),
                free: allocatable.clone(),
                allocatable,
                devices: NodeDevices::default(),
            }
        })
        .collect();
    let index: BTreeMap<String, usize> = views
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.clone(), i))
        .collect();
    let mut memory = std::mem::take(&mut state.binder_memory);
    let uid_of = |p: &Value| {
        p.pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    memory.forget_all_but(
        &pods
            .items
            .iter()
            .filter_map(|p| p.pointer("/metadata/uid").and_then(Value::as_str))
            .collect::<HashSet<_>>(),
    );
    let mut pending = Vec::new();
    // Bound share pods whose devices are not known yet: given devices after the known ones.
    let mut unplaced = Vec::new();
    for p in &pods.items {
        let node = p
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !node.is_empty() {
            if !terminal(p)
                && let Some(&i) = index.get(node)
            {
                if !views[i].attach.is_empty() {
                    let claims = attached_claims(state, p);
                    views[i].attach(&claims);
                }
                let uid = uid_of(p);
                let ask = memory.ask(&uid, p);
                match memory.placements.get(&uid) {
                    Some((on, at)) if on == node => views[i].take(&ask, at),
                    _ if matches!(ask.share, Ok(Some(_))) => unplaced.push((i, uid, ask)),
                    _ => views[i].take(&ask, &[]),
                }
            }
            continue;
        }
        let schedulable = p.pointer("/metadata/deletionTimestamp").is_none()
            && !terminal(p)
            && p.pointer("/spec/schedulerName")
                .and_then(Value::as_str)
                .unwrap_or("default-scheduler")
                == opts.scheduler_name
            && p.pointer("/spec/schedulingGates")
                .and_then(Value::as_array)
                .is_none_or(|g| g.is_empty());
        if schedulable {
            pending.push(p.clone());
        }
    }
    for (i, uid, ask) in unplaced {
        // A node already over-committed by whoever bound the pod counts only its requests.
        let at = views[i].place(&ask).unwrap_or_default();
        views[i].take(&ask, &at);
        memory.placements.insert(uid, (views[i].name.clone(), at));
    }
    // Higher priority first, then in creation order, as kube-scheduler's queue takes pods by
    // priority and then by when they were queued. Creation order is the uid's: this server
    // numbers uids in order, while `creationTimestamp` ties within a second (30 virtual
    // seconds under `bench fidelity`'s compression).
    pending.sort_by_key(|p| {
        (
            -p.pointer("/spec/priority")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            uid_of(p),
        )
    });
    // A group's members bind one after another, at the place of its first member: no pod in
    // between takes the room the group's trial counted on.
    let mut first_of: BTreeMap<String, usize> = BTreeMap::new();
    let rank: Vec<usize> = pending
        .iter()
        .enumerate()
        .map(|(i, p)| match group_of(p) {
            Some((g, _)) => *first_of.entry(g).or_insert(i),
            None => i,
        })
        .collect();
    let mut order: Vec<usize> = (0..pending.len()).collect();
    order.sort_by_key(|i| (rank[*i], *i));
    let pending: Vec<_> = order.into_iter().map(|i| pending[i].clone()).collect();
    let mut in_groups: BTreeMap<String, usize> = BTreeMap::new();
    for p in &pods.items {
        let on_node = p
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if on_node
            && !terminal(p)
            && let Some((g, _)) = group_of(p)
        {
            *in_groups.entry(g).or_default() += 1;
        }
    }
    let groups = gangs::pending_members(&pending);
    // Each group is decided at its first member's turn, against the nodes as the pods bound
    // before it left them: deciding every group up front let an earlier pod take room a
    // group's trial had counted on, and the group then bound in part.
    let mut held: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut bound = 0;
    let mut dra: Option<Dra> = None;
    for pod in &pending {
        let (ns, name) = (meta_str(pod, "namespace"), meta_str(pod, "name"));
        let ask = memory.ask(&uid_of(pod), pod);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        // DRA state is read once per pass, and only when some pod has claims.
        let claims = dra::has_claims(pod);
        if claims && dra.is_none() {
            dra = Some(Dra::load(state));
        }
        // Resources first: it is the cheapest check and rules out full nodes at once; the
        // reasons are only worked out (in kube-scheduler's filter order) when nothing fits.
        let volumes = match volume_needs(state, pod) {
            Ok(v) => v,
            Err(message) => {
                mark_unschedulable(state, pod, &message);
                continue;
            }
        };
        let mut chosen = None;
        if let Some((g, _)) = group_of(pod) {
            let verdict = held.entry(g).or_insert_with_key(|g| {
                let already = in_groups.get(g).copied().unwrap_or(0);
                gangs::held(g, &groups[g], already, &views, &mut memory, opts)
            });
            if let Some(message) = verdict {
                mark_unschedulable(state, pod, message);
                continue;
            }
        }
        for i in candidates(&ask, &views, opts) {
            let n = &views[i];
            if misfit_with_volumes(pod, &ask, n, &volumes).is_some() {
                continue;
            }
            let Some(at) = n.place(&ask) else {
                continue;
            };
            match dra.as_mut().filter(|_| claims).map(|d| d.fit(pod, &n.node)) {
                Some(Err(_)) => continue,
                Some(Ok(writes)) => chosen = Some((i, writes, at)),
                None => chosen = Some((i, Vec::new(), at)),
            }
            break;
        }
        if chosen.is_none() {
            for n in &views {
                let why = misfit_with_volumes(pod, &ask, n, &volumes).or_else(|| {
                    dra.as_mut()
                        .filter(|_| claims)
                        .and_then(|d| d.fit(pod, &n.node).err())
                });
                if let Some(r) = why {
                    *reasons.entry(r).or_default() += 1;
                }
            }
        }
        match chosen {
            Some((i, writes, at)) => {
                let node_name = views[i].name.clone();
                let Ok(bound_pod) = state.bind(ns, name, &node_name, &WriteOpts::default()) else {
                    continue;
                };
                if let Some(d) = dra.as_mut() {
                    d.commit(state, &bound_pod, writes);
                }
                views[i].take(&ask, &at);
                views[i].attach(&volumes.attach);
                if !at.is_empty() {
                    memory
                        .placements
                        .insert(uid_of(pod), (node_name.clone(), at));
                }
                bound += 1;
                if opts.mark_running
                    && let Ok(p) = state.get(&pods_def, ns, name)
                {
                    let mut p = (*p).clone();
                    let t = now();
                    p["status"]["phase"] = json!("Running");
                    p["status"]["startTime"] = json!(t);
                    for c in ["Initialized", "ContainersReady", "Ready"] {
                        set_condition(&mut p, c, "True", None, None);
                    }
                    state.write_pod_status(ns, name, p["status"].clone());
                }
            }
            None => {
                let mut parts: Vec<String> =
                    reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
                parts.sort();
                let message = format!(
                    "0/{} nodes are available: {}.",
                    views.len(),
                    if parts.is_empty() {
                        "no nodes".to_string()
                    } else {
                        parts.join(", ")
                    }
                );
                mark_unschedulable(state, pod, &message);
            }
        }
    }
    state.binder_memory = memory;
    bound
}

#[cfg(test)]
mod tests;
