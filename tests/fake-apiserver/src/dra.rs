//! Dynamic Resource Allocation (`resource.k8s.io/v1`), as far as the cluster's own components
//! play it for the harness: the resourceclaim controller and the scheduler's DRA plugin.
//!
//! Written independently of the autoscaler's planner and allocator, so an end-to-end test
//! checks the autoscaler against a second opinion rather than against itself.
//!
//! * The resourceclaim controller ([`State::sync_resource_claims`], in the controllers' pass):
//!   a pod entry naming a `resourceClaimTemplateName` gets its own ResourceClaim (generated
//!   name `<pod>-<entry>-xxxxx`, the pod as controlling owner, annotation
//!   `resource.kubernetes.io/pod-claim-name`), recorded in the pod's
//!   `status.resourceClaimStatuses`; reservations of pods that are gone or finished are
//!   dropped, and a claim nobody reserves any more is deallocated; a generated claim whose pod
//!   is gone or finished is deleted (the owner-reference garbage collection, which the fake
//!   otherwise lacks).
//! * The scheduler's part ([`Dra`], used by `binder.rs`): a pod with `spec.resourceClaims` binds
//!   only to a node where all its claims can be allocated together. A claim already allocated
//!   pins the pod to the nodes its `allocation.nodeSelector` selects (shared claims: the pod
//!   joins `reservedFor`). Otherwise each request (`exactly`, or the first satisfiable of
//!   `firstAvailable`) takes `count` devices (`ExactCount`, default 1) or every matching device
//!   (`All`, at least one, none of them in use) from the node's ResourceSlices (`nodeName`,
//!   `allNodes` or a `nodeSelector` matching the node) that no claim has allocated. A device
//!   matches when its DeviceClass's and the request's CEL selectors are true, evaluated with
//!   the `cel` crate and Kubernetes' CEL library (`kube-cel`), over `device.driver`,
//!   `device.attributes[domain][name]` (versions as strings) and `device.capacity[domain][name]`
//!   (quantities). On binding the claims get `status.allocation` (devices, node selector by
//!   node name) and the pod in `status.reservedFor`.
//!
//! Not modelled: `constraints` (matchAttribute, distinctAttribute), shared counters of
//! partitionable devices (`consumesCounters`), consumable capacity, admin access, device
//! taints, a CEL runtime error (the device just does not match, where the real allocator fails
//! the claim), unknown attribute domains reading as empty maps (they err, so do not match).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kube_cel::{KubeCelExt, cel};
use serde_json::{Value, json};

use crate::binder::{affinity_matches, terminal};
use crate::store::{Part, State, WriteOpts, meta_str};
use crate::workloads::force;

/// The annotation the resourceclaim controller puts on a claim it generated for a pod: the
/// pod's entry in `spec.resourceClaims`.
pub const POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";

/// A device: `(driver, pool, name)`, what an allocation result names.
type DeviceId = (String, String, String);

/// One published device with its CEL view.
struct Device {
    id: DeviceId,
    cel: cel::Value,
}

/// The DRA state one scheduling pass works from: devices by slice, device classes, claims, and
/// the devices already allocated (updated as the pass allocates).
pub(crate) struct Dra {
    slices: Vec<(Arc<Value>, Vec<Arc<Device>>)>,
    classes: HashMap<String, Arc<Value>>,
    claims: HashMap<(String, String), Arc<Value>>,
    in_use: BTreeSet<DeviceId>,
    programs: HashMap<String, Result<Arc<cel::Program>, String>>,
}

/// What binding a pod writes to one claim.
#[derive(Debug)]
pub(crate) struct ClaimWrite {
    ns: String,
    name: String,
    /// The new allocation, or `None` when the claim was allocated already.
    allocation: Option<Value>,
    devices: Vec<DeviceId>,
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn array<'a>(v: &'a Value, ptr: &str) -> impl Iterator<Item = &'a Value> + 'a {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The CEL map of one attribute or capacity table, by domain then name: unqualified names
/// belong to the driver's domain.
fn by_domain(
    driver: &str,
    table: Option<&serde_json::Map<String, Value>>,
    value: impl Fn(&Value) -> Option<cel::Value>,
) -> cel::Value {
    let mut out: HashMap<String, HashMap<String, cel::Value>> = HashMap::new();
    for (k, v) in table.into_iter().flatten() {
        let (domain, name) = k.rsplit_once('/').unwrap_or((driver, k));
        if let Some(v) = value(v) {
            out.entry(domain.to_string())
                .or_default()
                .insert(name.to_string(), v);
        }
    }
    let out: HashMap<String, cel::Value> = out.into_iter().map(|(k, v)| (k, v.into())).collect();
    out.into()
}

fn attribute(v: &Value) -> Option<cel::Value> {
    if let Some(b) = v["bool"].as_bool() {
        return Some(cel::Value::Bool(b));
    }
    if let Some(i) = v["int"].as_i64() {
        return Some(cel::Value::Int(i));
    }
    v["string"]
        .as_str()
        .or_else(|| v["version"].as_str())
        .map(|s| cel::Value::String(Arc::new(s.to_string())))
}

/// A quantity as Kubernetes' CEL library represents it (`quantity("80Gi")`).
fn quantity(q: &str) -> Option<cel::Value> {
    let program = cel::Program::compile("quantity(q)").ok()?;
    let mut ctx = cel::Context::default().with_all();
    ctx.add_variable_from_value("q", q.to_string());
    program.execute(&ctx).ok()
}

fn device_view(driver: &str, d: &Value) -> cel::Value {
    let mut m: HashMap<String, cel::Value> = HashMap::new();
    m.insert("driver".into(), driver.to_string().into());
    m.insert(
        "attributes".into(),
        by_domain(driver, d["attributes"].as_object(), attribute),
    );
    m.insert(
        "capacity".into(),
        by_domain(driver, d["capacity"].as_object(), |c| {
            quantity(c["value"].as_str()?)
        }),
    );
    m.into()
}

/// Whether a node selector (a `NodeSelector` object) selects the node.
fn selects(selector: &Value, node: &Value) -> bool {
    let as_pod = json!({"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": selector}}}});
    affinity_matches(&as_pod, node)
}

/// One request (or subrequest) of a claim: the class, the selectors, how many.
struct Want<'a> {
    /// The name results carry (`request` or `request/subrequest`).
    name: String,
    class: &'a str,
    selectors: Vec<&'a str>,
    all: bool,
    count: usize,
}

fn want<'a>(name: String, exact: &'a Value) -> Want<'a> {
    Want {
        name,
        class: s(exact, "/deviceClassName"),
        selectors: array(exact, "/selectors")
            .map(|x| s(x, "/cel/expression"))
            .collect(),
        all: s(exact, "/allocationMode") == "All",
        count: exact["count"].as_u64().unwrap_or(1) as usize,
    }
}

impl Dra {
    /// Reads the DRA objects of the store.
    pub fn load(state: &State) -> Dra {
        let table = |plural: &str| {
            let def = state.def("resource.k8s.io", plural).expect("builtin");
            state.tables_objects(&def).cloned().collect::<Vec<_>>()
        };
        let slices = table("resourceslices")
            .into_iter()
            .map(|slice| {
                let driver = s(&slice, "/spec/driver").to_string();
                let pool = s(&slice, "/spec/pool/name").to_string();
                let devices = array(&slice, "/spec/devices")
                    .map(|d| {
                        Arc::new(Device {
                            id: (driver.clone(), pool.clone(), s(d, "/name").to_string()),
                            cel: device_view(&driver, d),
                        })
                    })
                    .collect();
                (slice, devices)
            })
            .collect();
        let classes = table("deviceclasses")
            .into_iter()
            .map(|c| (meta_str(&c, "name").to_string(), c))
            .collect();
        let mut in_use = BTreeSet::new();
        let mut claims = HashMap::new();
        for c in table("resourceclaims") {
            for r in array(&c, "/status/allocation/devices/results") {
                in_use.insert((
                    s(r, "/driver").to_string(),
                    s(r, "/pool").to_string(),
                    s(r, "/device").to_string(),
                ));
            }
            let key = (
                meta_str(&c, "namespace").to_string(),
                meta_str(&c, "name").to_string(),
            );
            claims.insert(key, c);
        }
        Dra {
            slices,
            classes,
            claims,
            in_use,
            programs: HashMap::new(),
        }
    }

    /// The claim names of a pod's `spec.resourceClaims`, or why they are not known yet.
    fn claim_names(pod: &Value) -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        for entry in array(pod, "/spec/resourceClaims") {
            let entry_name = s(entry, "/name");
            if let Some(n) = entry["resourceClaimName"].as_str() {
                names.push(n.to_string());
                continue;
            }
            let generated = array(pod, "/status/resourceClaimStatuses")
                .find(|st| st["name"] == entry_name)
                .and_then(|st| st["resourceClaimName"].as_str());
            match generated {
                Some(n) => names.push(n.to_string()),
                None => {
                    return Err(format!(
                        "waiting for the resource claim of {entry_name:?} to be created"
                    ));
                }
            }
        }
        Ok(names)
    }

    fn compiled(&mut self, expr: &str) -> Result<Arc<cel::Program>, String> {
        self.programs
            .entry(expr.to_string())
            .or_insert_with(|| {
                cel::Program::compile(expr)
                    .map(Arc::new)
                    .map_err(|e| format!("CEL expression {expr:?} does not compile: {e}"))
            })
            .clone()
    }

    fn matches(&mut self, exprs: &[&str], device: &Device) -> Result<bool, String> {
        for e in exprs {
            let program = self.compiled(e)?;
            let mut ctx = cel::Context::default().with_all();
            ctx.add_variable_from_value("device", device.cel.clone());
            if !matches!(program.execute(&ctx), Ok(cel::Value::Bool(true))) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The devices of the node's slices no claim holds.
    fn free_devices(&self, node: &Value, taken: &BTreeSet<DeviceId>) -> Vec<Arc<Device>> {
        let name = meta_str(node, "name");
        self.slices
            .iter()
            .filter(|(slice, _)| {
                s(slice, "/spec/nodeName") == name
                    || slice.pointer("/spec/allNodes") == Some(&json!(true))
                    || slice
                        .pointer("/spec/nodeSelector")
                        .is_some_and(|sel| sel.is_object() && selects(sel, node))
            })
            .flat_map(|(_, ds)| ds.iter().cloned())
            .filter(|d| !self.in_use.contains(&d.id) && !taken.contains(&d.id))
            .collect()
    }

    /// Picks the devices of one request among `free`, or says why it cannot.
    fn pick(&mut self, w: &Want, free: &[Arc<Device>]) -> Result<Vec<DeviceId>, String> {
        let class = self
            .classes
            .get(w.class)
            .cloned()
            .ok_or_else(|| format!("device class {:?} does not exist", w.class))?;
        let mut exprs: Vec<&str> = array(&class, "/spec/selectors")
            .map(|x| s(x, "/cel/expression"))
            .collect();
        exprs.extend(w.selectors.iter().copied());
        let mut chosen = Vec::new();
        for d in free {
            if self.matches(&exprs, d)? {
                chosen.push(d.id.clone());
                if !w.all && chosen.len() == w.count {
                    return Ok(chosen);
                }
            }
        }
        if w.all && !chosen.is_empty() {
            return Ok(chosen);
        }
        Err("cannot allocate all claims".into())
    }

    /// Allocates one pending claim on `node`, taking from `taken`.
    fn allocate(
        &mut self,
        claim: &Value,
        node: &Value,
        taken: &mut BTreeSet<DeviceId>,
    ) -> Result<(Value, Vec<DeviceId>), String> {
        let mut results = Vec::new();
        let mut ids = Vec::new();
        for req in array(claim, "/spec/devices/requests") {
            let name = s(req, "/name").to_string();
            let alternatives: Vec<Want> = match req.get("exactly") {
                Some(exact) => vec![want(name.clone(), exact)],
                None => array(req, "/firstAvailable")
                    .map(|sub| want(format!("{name}/{}", s(sub, "/name")), sub))
                    .collect(),
            };
            let free = self.free_devices(node, taken);
            let mut last = Err("cannot allocate all claims".to_string());
            for w in &alternatives {
                last = self.pick(w, &free).map(|got| (w.name.clone(), got));
                if last.is_ok() {
                    break;
                }
            }
            let (request, got) = last?;
            for id in got {
                results.push(
                    json!({"request": request, "driver": id.0, "pool": id.1, "device": id.2}),
                );
                taken.insert(id.clone());
                ids.push(id);
            }
        }
        let allocation = json!({
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [meta_str(node, "name")]}
            ]}]},
        });
        Ok((allocation, ids))
    }

    /// Whether the pod's claims can all be allocated on `node`: the writes binding it makes, or
    /// why not (in kube-scheduler's words where it has them).
    pub fn fit(&mut self, pod: &Value, node: &Value) -> Result<Vec<ClaimWrite>, String> {
        let ns = meta_str(pod, "namespace").to_string();
        let mut writes = Vec::new();
        let mut taken = BTreeSet::new();
        for name in Self::claim_names(pod)? {
            let claim = self
                .claims
                .get(&(ns.clone(), name.clone()))
                .cloned()
                .ok_or_else(|| format!("resourceclaim {name:?} not found"))?;
            if let Some(sel) = claim.pointer("/status/allocation") {
                let pinned = sel.get("nodeSelector");
                if pinned.is_some_and(|n| !selects(n, node)) {
                    return Err("resourceclaim allocated on another node".into());
                }
                writes.push(ClaimWrite {
                    ns: ns.clone(),
                    name,
                    allocation: None,
                    devices: Vec::new(),
                });
                continue;
            }
            let (allocation, devices) = self.allocate(&claim, node, &mut taken)?;
            writes.push(ClaimWrite {
                ns: ns.clone(),
                name,
                allocation: Some(allocation),
                devices,
            });
        }
        Ok(writes)
    }

    /// Records a pod's claims as allocated and reserved for it (after it was bound).
    pub fn commit(&mut self, state: &mut State, pod: &Value, writes: Vec<ClaimWrite>) {
        let def = state
            .def("resource.k8s.io", "resourceclaims")
            .expect("builtin");
        let me =
            json!({"resource": "pods", "name": meta_str(pod, "name"), "uid": meta_str(pod, "uid")});
        for w in writes {
            let Some(claim) = self.claims.get(&(w.ns.clone(), w.name.clone())).cloned() else {
                continue;
            };
            let mut new = (*claim).clone();
            if let Some(a) = w.allocation {
                new["status"]["allocation"] = a;
            }
            let reserved = new["status"]["reservedFor"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if !reserved.iter().any(|r| r["uid"] == me["uid"]) {
                let mut reserved = reserved;
                reserved.push(me.clone());
                new["status"]["reservedFor"] = Value::Array(reserved);
            }
            new["metadata"]["resourceVersion"] = Value::Null;
            if let Ok(stored) = state.update(
                &def,
                &w.ns,
                &w.name,
                new,
                Part::Status,
                &WriteOpts::default(),
            ) {
                self.in_use.extend(w.devices);
                self.claims.insert((w.ns, w.name), stored);
            }
        }
    }
}

/// Whether a pod asks for DRA claims.
pub(crate) fn has_claims(pod: &Value) -> bool {
    array(pod, "/spec/resourceClaims").next().is_some()
}

impl State {
    /// The resourceclaim controller's pass (see the module docs). Returns nothing: its writes
    /// are counted by the caller through the resourceVersion.
    pub(crate) fn sync_resource_claims(&mut self) {
        let claims_def = self
            .def("resource.k8s.io", "resourceclaims")
            .expect("builtin");
        let templates_def = self
            .def("resource.k8s.io", "resourceclaimtemplates")
            .expect("builtin");
        let pods_def = self.def("", "pods").expect("builtin");
        if !self.table(&templates_def).objects.is_empty() {
            self.create_pod_claims(&pods_def, &claims_def, &templates_def);
        }
        let claims: Vec<Arc<Value>> = self.tables_objects(&claims_def).cloned().collect();
        let live = |st: &State, ns: &str, name: &str, uid: &str| {
            st.get(&pods_def, ns, name)
                .is_ok_and(|p| meta_str(&p, "uid") == uid && !terminal(&p))
        };
        for claim in claims {
            let ns = meta_str(&claim, "namespace").to_string();
            let name = meta_str(&claim, "name").to_string();
            let owner = array(&claim, "/metadata/ownerReferences")
                .find(|r| r["kind"] == "Pod" && r["controller"] == true);
            if let Some(o) = owner
                && claim
                    .pointer(&format!(
                        "/metadata/annotations/{}",
                        POD_CLAIM_NAME.replace('/', "~1")
                    ))
                    .is_some()
                && !live(self, &ns, s(o, "/name"), s(o, "/uid"))
            {
                let _ = self.delete(&claims_def, &ns, &name, &Value::Null, &force());
                continue;
            }
            let reserved: Vec<Value> = array(&claim, "/status/reservedFor").cloned().collect();
            if reserved.is_empty() {
                continue;
            }
            let kept: Vec<Value> = reserved
                .iter()
                .filter(|r| r["resource"] != "pods" || live(self, &ns, s(r, "/name"), s(r, "/uid")))
                .cloned()
                .collect();
            if kept.len() == reserved.len() {
                continue;
            }
            let mut new = (*claim).clone();
            let status = new["status"].as_object_mut().expect("has reservedFor");
            if kept.is_empty() {
                // Nobody uses it any more: deallocated, as the controller does.
                status.remove("reservedFor");
                status.remove("allocation");
            } else {
                status.insert("reservedFor".into(), Value::Array(kept));
            }
            new["metadata"]["resourceVersion"] = Value::Null;
            let _ = self.update(
                &claims_def,
                &ns,
                &name,
                new,
                Part::Status,
                &WriteOpts::default(),
            );
        }
    }

    /// Creates the claims of pods' template entries and records them in the pods' status.
    fn create_pod_claims(
        &mut self,
        pods_def: &crate::resources::ResourceDef,
        claims_def: &crate::resources::ResourceDef,
        templates_def: &crate::resources::ResourceDef,
    ) {
        let pods: Vec<Arc<Value>> = self
            .tables_objects(pods_def)
            .filter(|p| {
                has_claims(p) && !terminal(p) && p.pointer("/metadata/deletionTimestamp").is_none()
            })
            .cloned()
            .collect();
        for pod in pods {
            let ns = meta_str(&pod, "namespace").to_string();
            let pod_name = meta_str(&pod, "name").to_string();
            let mut statuses: Vec<Value> = array(&pod, "/status/resourceClaimStatuses")
                .cloned()
                .collect();
            let before = statuses.len();
            for entry in array(&pod, "/spec/resourceClaims") {
                let entry_name = s(entry, "/name");
                let Some(template) = entry["resourceClaimTemplateName"].as_str() else {
                    continue;
                };
                if statuses.iter().any(|st| st["name"] == entry_name) {
                    continue;
                }
                // A missing template leaves the pod waiting, as upstream (which also emits an event).
                let Ok(t) = self.get(templates_def, &ns, template) else {
                    continue;
                };
                let mut annotations = t
                    .pointer("/spec/metadata/annotations")
                    .cloned()
                    .unwrap_or(json!({}));
                annotations[POD_CLAIM_NAME] = json!(entry_name);
                let claim = json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {
                        "generateName": format!("{pod_name}-{entry_name}-"),
                        "namespace": ns,
                        "labels": t.pointer("/spec/metadata/labels").cloned().unwrap_or(json!({})),
                        "annotations": annotations,
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name,
                            "uid": meta_str(&pod, "uid"), "controller": true, "blockOwnerDeletion": true}],
                    },
                    "spec": t.pointer("/spec/spec").cloned().unwrap_or(json!({})),
                });
                if let Ok(created) = self.create(claims_def, &ns, claim, &WriteOpts::default()) {
                    statuses.push(json!({"name": entry_name, "resourceClaimName": meta_str(&created, "name")}));
                }
            }
            if statuses.len() != before {
                let mut status = pod.get("status").cloned().unwrap_or(json!({}));
                status["resourceClaimStatuses"] = Value::Array(statuses);
                self.write_pod_status(&ns, &pod_name, status);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {}}})
    }

    fn gpu(name: &str, product: &str, memory: &str) -> Value {
        json!({"name": name,
               "attributes": {"type": {"string": "gpu"}, "productName": {"string": product},
                              "index": {"int": 0}},
               "capacity": {"memory": {"value": memory}}})
    }

    fn dra(devices: Vec<Value>, claims: Vec<Value>) -> Dra {
        let slice = Arc::new(
            json!({"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
                                            "pool": {"name": "n1"}, "devices": devices}}),
        );
        let devs = array(&slice, "/spec/devices")
            .map(|d| {
                Arc::new(Device {
                    id: ("gpu.nvidia.com".into(), "n1".into(), s(d, "/name").into()),
                    cel: device_view("gpu.nvidia.com", d),
                })
            })
            .collect();
        let class = json!({"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}});
        Dra {
            slices: vec![(slice, devs)],
            classes: HashMap::from([("gpu.nvidia.com".to_string(), Arc::new(class))]),
            claims: claims
                .into_iter()
                .map(|c| {
                    (
                        ("ns".to_string(), meta_str(&c, "name").to_string()),
                        Arc::new(c),
                    )
                })
                .collect(),
            in_use: BTreeSet::new(),
            programs: HashMap::new(),
        }
    }

    fn claim(name: &str, exactly: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns"},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
    }

    fn pod(claims: &[&str]) -> Value {
        let entries: Vec<Value> = claims
            .iter()
            .map(|c| json!({"name": c, "resourceClaimName": c}))
            .collect();
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
               "spec": {"resourceClaims": entries}})
    }

    #[test]
    fn counts_classes_and_selectors_decide_the_fit() {
        let devices = vec![
            gpu("gpu-0", "NVIDIA H100", "80Gi"),
            gpu("gpu-1", "NVIDIA H100", "80Gi"),
        ];
        let two = claim(
            "two",
            json!({"deviceClassName": "gpu.nvidia.com", "count": 2}),
        );
        let three = claim(
            "three",
            json!({"deviceClassName": "gpu.nvidia.com", "count": 3}),
        );
        let big = claim(
            "big",
            json!({"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression":
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}}]}),
        );
        let a100 = claim(
            "a100",
            json!({"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression":
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('a100')"}}]}),
        );
        let unknown = claim("unknown", json!({"deviceClassName": "tpu.example.com"}));
        let broken = claim(
            "broken",
            json!({"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": "device.driver =="}}]}),
        );
        let mut d = dra(devices, vec![two, three, big, a100, unknown, broken]);
        let n1 = node("n1");
        let w = d.fit(&pod(&["two"]), &n1).expect("two of two GPUs");
        assert_eq!(w[0].devices.len(), 2);
        assert_eq!(
            d.fit(&pod(&["three"]), &n1).err().unwrap(),
            "cannot allocate all claims"
        );
        assert_eq!(d.fit(&pod(&["big"]), &n1).unwrap()[0].devices.len(), 1);
        assert!(d.fit(&pod(&["a100"]), &n1).is_err(), "an H100 is no A100");
        assert!(
            d.fit(&pod(&["two", "big"]), &n1).is_err(),
            "devices are not shared between claims"
        );
        assert!(
            d.fit(&pod(&["two"]), &node("n2")).is_err(),
            "n2 publishes nothing"
        );
        assert!(
            d.fit(&pod(&["unknown"]), &n1)
                .unwrap_err()
                .contains("does not exist")
        );
        assert!(
            d.fit(&pod(&["broken"]), &n1)
                .unwrap_err()
                .contains("does not compile")
        );
    }

    #[test]
    fn allocated_claims_pin_and_in_use_devices_are_skipped() {
        let mut allocated = claim("shared", json!({"deviceClassName": "gpu.nvidia.com"}));
        allocated["status"] = json!({"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}});
        let one = claim("one", json!({"deviceClassName": "gpu.nvidia.com"}));
        let mut d = dra(
            vec![gpu("gpu-0", "NVIDIA H100", "80Gi")],
            vec![allocated, one],
        );
        d.in_use
            .insert(("gpu.nvidia.com".into(), "n1".into(), "gpu-0".into()));
        assert!(d.fit(&pod(&["shared"]), &node("n1")).is_ok());
        assert_eq!(
            d.fit(&pod(&["shared"]), &node("n2")).err().unwrap(),
            "resourceclaim allocated on another node"
        );
        assert!(
            d.fit(&pod(&["one"]), &node("n1")).is_err(),
            "gpu-0 is taken"
        );
    }

    #[test]
    fn first_available_takes_the_first_alternative_that_fits() {
        let c = json!({"metadata": {"name": "alt", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [
                {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
                {"name": "one", "deviceClassName": "gpu.nvidia.com"}]}]}}});
        let mut d = dra(vec![gpu("gpu-0", "NVIDIA H100", "80Gi")], vec![c]);
        let w = d.fit(&pod(&["alt"]), &node("n1")).unwrap();
        let a = w[0].allocation.as_ref().unwrap();
        assert_eq!(a.pointer("/devices/results/0/request").unwrap(), "gpu/one");
    }
}
