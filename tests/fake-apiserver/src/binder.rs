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
//! GPU share fits a device of the node (below). Not modelled: pod (anti-)affinity, topology
//! spread, preemption, host ports, volumes, scheduling gates other than "has any gate".
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

mod shares;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::dra::{self, Dra};
use crate::quantity::parse_milli;
use crate::store::{State, WriteOpts, now, set_condition};
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
    let Some(terms) = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    else {
        return true;
    };
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

struct NodeView {
    name: String,
    node: std::sync::Arc<Value>,
    allocatable: Resources,
    free: Resources,
    devices: NodeDevices,
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
    let mut views: Vec<NodeView> = nodes
        .items
        .iter()
        .map(|n| {
            let allocatable = quantities(n.pointer("/status/allocatable"));
            NodeView {
                name: n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
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
    // Higher priority first, then oldest, then by key: deterministic.
    pending.sort_by_key(|p| {
        (
            -p.pointer("/spec/priority")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            p["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            p["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    });
    let mut bound = 0;
    let mut dra: Option<Dra> = None;
    for pod in pending {
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ask = memory.ask(&uid_of(&pod), &pod);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        // DRA state is read once per pass, and only when some pod has claims.
        let claims = dra::has_claims(&pod);
        if claims && dra.is_none() {
            dra = Some(Dra::load(state));
        }
        // Resources first: it is the cheapest check and rules out full nodes at once; the
        // reasons are only worked out (in kube-scheduler's filter order) when nothing fits.
        let mut chosen = None;
        let mut order: Vec<usize> = (0..views.len())
            .filter(|i| fits_resources(&ask.requests, &views[*i]))
            .collect();
        if opts.score == Score::LeastAllocated {
            let scores: BTreeMap<usize, f64> = order
                .iter()
                .map(|i| (*i, least_allocated(&ask, &views[*i])))
                .collect();
            order.sort_by(|a, b| {
                scores[b]
                    .total_cmp(&scores[a])
                    .then_with(|| created(&views[*a]).cmp(created(&views[*b])))
                    .then(a.cmp(b))
            });
        }
        for i in order {
            let n = &views[i];
            if misfit(&pod, &ask, n).is_some() {
                continue;
            }
            let Some(at) = n.place(&ask) else {
                continue;
            };
            match dra
                .as_mut()
                .filter(|_| claims)
                .map(|d| d.fit(&pod, &n.node))
            {
                Some(Err(_)) => continue,
                Some(Ok(writes)) => chosen = Some((i, writes, at)),
                None => chosen = Some((i, Vec::new(), at)),
            }
            break;
        }
        if chosen.is_none() {
            for n in &views {
                let why = misfit(&pod, &ask, n).or_else(|| {
                    dra.as_mut()
                        .filter(|_| claims)
                        .and_then(|d| d.fit(&pod, &n.node).err())
                });
                if let Some(r) = why {
                    *reasons.entry(r).or_default() += 1;
                }
            }
        }
        match chosen {
            Some((i, writes, at)) => {
                let node_name = views[i].name.clone();
                let Ok(bound_pod) = state.bind(&ns, &name, &node_name, &WriteOpts::default())
                else {
                    continue;
                };
                if let Some(d) = dra.as_mut() {
                    d.commit(state, &bound_pod, writes);
                }
                views[i].take(&ask, &at);
                if !at.is_empty() {
                    memory
                        .placements
                        .insert(uid_of(&pod), (node_name.clone(), at));
                }
                bound += 1;
                if opts.mark_running
                    && let Ok(p) = state.get(&pods_def, &ns, &name)
                {
                    let mut p = (*p).clone();
                    let t = now();
                    p["status"]["phase"] = json!("Running");
                    p["status"]["startTime"] = json!(t);
                    for c in ["Initialized", "ContainersReady", "Ready"] {
                        set_condition(&mut p, c, "True", None, None);
                    }
                    state.write_pod_status(&ns, &name, p["status"].clone());
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
                let mut p = (*pod).clone();
                set_condition(
                    &mut p,
                    "PodScheduled",
                    "False",
                    Some("Unschedulable"),
                    Some(&message),
                );
                state.write_pod_status(&ns, &name, p["status"].clone());
            }
        }
    }
    state.binder_memory = memory;
    bound
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One scheduling pass over `st` with kubelet played too.
    fn pass(st: &mut State) -> usize {
        schedule_pass(st, &BinderOptions::default())
    }

    fn add_node(st: &mut State, name: &str, allocatable: Value) {
        let mut alloc = json!({"cpu": "64", "memory": "256Gi", "pods": "110"});
        alloc
            .as_object_mut()
            .unwrap()
            .extend(allocatable.as_object().unwrap().clone());
        let def = st.def("", "nodes").unwrap();
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}});
        st.create(&def, "", node, &WriteOpts::default()).unwrap();
    }

    /// A pod with `annotations` whose one container has `limits`; bound to `node` if given.
    fn add_pod(st: &mut State, name: &str, annotations: Value, limits: Value, node: Option<&str>) {
        let def = st.def("", "pods").unwrap();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "1"}, "limits": limits}}]}});
        if let Some(n) = node {
            pod["spec"]["nodeName"] = json!(n);
        }
        st.create(&def, "default", pod, &WriteOpts::default())
            .unwrap();
    }

    fn share_pod(st: &mut State, name: &str, milli: &str) {
        add_pod(
            st,
            name,
            json!({"gpu-autoscaler.dev/gpu-share": milli}),
            json!({}),
            None,
        );
    }

    fn delete_pod(st: &mut State, name: &str) {
        let def = st.def("", "pods").unwrap();
        st.delete(&def, "default", name, &Value::Null, &WriteOpts::default())
            .unwrap();
    }

    /// The pod's node, or the harness's message for why it is unschedulable.
    fn placed(st: &State, name: &str) -> Result<String, String> {
        let def = st.def("", "pods").unwrap();
        let p = st.get(&def, "default", name).unwrap();
        match p.pointer("/spec/nodeName").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => Ok(n.to_string()),
            _ => Err(p
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "PodScheduled")
                .and_then(|c| c["message"].as_str())
                .unwrap_or("pending, not looked at")
                .to_string()),
        }
    }

    fn unschedulable(st: &State, name: &str, says: &str) {
        match placed(st, name) {
            Err(m) if m.contains(says) => {}
            other => panic!("{name}: want unschedulable saying {says:?}, got {other:?}"),
        }
    }

    #[test]
    fn least_allocated_picks_the_emptiest_node_and_first_fit_the_first_by_name() {
        let mut st = State::new(1000, 16, false);
        add_node(&mut st, "a", json!({}));
        add_node(&mut st, "b", json!({}));
        // Node a already runs 10 of its 64 CPUs, node b 2.
        let def = st.def("", "pods").unwrap();
        for (name, node, cpu) in [("on-a", "a", "10"), ("on-b", "b", "2")] {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                    "resources": {"requests": {"cpu": cpu}}}]}});
            st.create(&def, "default", pod, &WriteOpts::default())
                .unwrap();
        }
        add_pod(&mut st, "first", json!({}), json!({}), None);
        assert_eq!(pass(&mut st), 1);
        assert_eq!(
            placed(&st, "first").as_deref(),
            Ok("a"),
            "first fit by name"
        );
        let least = BinderOptions {
            score: Score::LeastAllocated,
            ..BinderOptions::default()
        };
        add_pod(&mut st, "scored", json!({}), json!({}), None);
        assert_eq!(schedule_pass(&mut st, &least), 1);
        assert_eq!(
            placed(&st, "scored").as_deref(),
            Ok("b"),
            "more room left on b"
        );
    }

    #[test]
    fn least_allocated_scores_gpu_shares_by_what_they_hold() {
        let mut st = State::new(1000, 16, false);
        add_node(&mut st, "g2", json!({"nvidia.com/gpu": "2"}));
        add_node(&mut st, "g1", json!({"nvidia.com/gpu": "2"}));
        // g2 holds half a device in shares, g1 a whole GPU: by CPU and memory alike, by GPU
        // g2 has more left (1.5 of 2 against 1 of 2); first fit by name would pick g1.
        add_pod(
            &mut st,
            "half",
            json!({"gpu-autoscaler.dev/gpu-share": "500"}),
            json!({}),
            Some("g2"),
        );
        add_pod(
            &mut st,
            "whole",
            json!({}),
            json!({"nvidia.com/gpu": "1"}),
            Some("g1"),
        );
        let least = BinderOptions {
            score: Score::LeastAllocated,
            ..BinderOptions::default()
        };
        share_pod(&mut st, "share", "300");
        assert_eq!(schedule_pass(&mut st, &least), 1);
        assert_eq!(placed(&st, "share").as_deref(), Ok("g2"));
        add_pod(
            &mut st,
            "gpu",
            json!({}),
            json!({"nvidia.com/gpu": "1"}),
            None,
        );
        assert_eq!(schedule_pass(&mut st, &least), 1);
        // g2: 0.8 of a device held, 1 device free whole; g1: 1 device free. A whole GPU leaves
        // g2 0.2 of 2 and g1 none, which outweighs g2's one more CPU used.
        assert_eq!(placed(&st, "gpu").as_deref(), Ok("g2"));
    }

    #[test]
    fn time_sliced_replicas_are_allocatable_under_either_name() {
        let mut st = State::new(1000, 16, false);
        // One GPU time-sliced four ways, and one renamed to nvidia.com/gpu.shared.
        add_node(&mut st, "ts", json!({"nvidia.com/gpu": "4"}));
        add_node(&mut st, "ts-renamed", json!({"nvidia.com/gpu.shared": "4"}));
        for i in 0..5 {
            add_pod(
                &mut st,
                &format!("r{i}"),
                json!({}),
                json!({"nvidia.com/gpu": "1"}),
                None,
            );
        }
        add_pod(
            &mut st,
            "shared",
            json!({}),
            json!({"nvidia.com/gpu.shared": "4"}),
            None,
        );
        assert_eq!(pass(&mut st), 5);
        for i in 0..4 {
            assert_eq!(placed(&st, &format!("r{i}")), Ok("ts".into()));
        }
        unschedulable(&st, "r4", "2 Insufficient nvidia.com/gpu");
        assert_eq!(placed(&st, "shared"), Ok("ts-renamed".into()));
    }

    #[test]
    fn mig_profiles_are_extended_resources() {
        let mut st = State::new(1000, 16, false);
        add_node(&mut st, "mig", json!({"nvidia.com/mig-3g.40gb": "2"}));
        for i in 0..3 {
            add_pod(
                &mut st,
                &format!("m{i}"),
                json!({}),
                json!({"nvidia.com/mig-3g.40gb": "1"}),
                None,
            );
        }
        add_pod(
            &mut st,
            "small",
            json!({}),
            json!({"nvidia.com/mig-1g.10gb": "1"}),
            None,
        );
        add_pod(
            &mut st,
            "whole",
            json!({}),
            json!({"nvidia.com/gpu": "1"}),
            None,
        );
        assert_eq!(pass(&mut st), 2);
        assert_eq!(placed(&st, "m1"), Ok("mig".into()));
        unschedulable(&st, "m2", "Insufficient nvidia.com/mig-3g.40gb");
        unschedulable(&st, "small", "Insufficient nvidia.com/mig-1g.10gb");
        unschedulable(&st, "whole", "Insufficient nvidia.com/gpu");
    }

    #[test]
    fn fractional_shares_pack_per_device_and_keep_their_devices() {
        let mut st = State::new(1000, 16, false);
        add_node(&mut st, "n", json!({"nvidia.com/gpu": "2"}));
        share_pod(&mut st, "a", "600");
        share_pod(&mut st, "b", "500");
        assert_eq!(pass(&mut st), 2, "0.6 and 0.5 on two devices");
        // Both devices hold a share: none is free whole, though 0.9 is free in total.
        add_pod(
            &mut st,
            "whole",
            json!({}),
            json!({"nvidia.com/gpu": "1"}),
            None,
        );
        share_pod(&mut st, "d", "400");
        share_pod(&mut st, "e", "600");
        assert_eq!(pass(&mut st), 1);
        unschedulable(&st, "whole", "1 Insufficient nvidia.com/gpu");
        assert_eq!(placed(&st, "d"), Ok("n".into()), "0.4 fills the 0.6 device");
        unschedulable(
            &st,
            "e",
            "1 node(s) had no nvidia.com/gpu device with 600/1000 free",
        );
        // b leaves: its device is free again, e takes it, and the whole pod still waits.
        delete_pod(&mut st, "b");
        assert_eq!(pass(&mut st), 1);
        assert_eq!(placed(&st, "e"), Ok("n".into()));
        unschedulable(&st, "whole", "Insufficient nvidia.com/gpu");
        // a leaves: 0.4 (d) and 0.6 (e) stay on their two devices rather than being packed
        // onto one afresh, so 0.7 fits neither device and no device is free whole.
        delete_pod(&mut st, "a");
        share_pod(&mut st, "f", "700");
        assert_eq!(pass(&mut st), 0);
        unschedulable(&st, "f", "no nvidia.com/gpu device with 700/1000 free");
        share_pod(&mut st, "g", "400");
        assert_eq!(pass(&mut st), 1, "0.4 still fits beside e's 0.6");
    }

    #[test]
    fn hami_cores_take_a_share_of_each_device_and_bad_annotations_fit_nowhere() {
        let mut st = State::new(1000, 16, false);
        add_node(&mut st, "one", json!({"nvidia.com/gpu": "1"}));
        let hami = |gpus: &str, cores: &str| json!({"nvidia.com/gpu": gpus, "nvidia.com/gpucores": cores, "nvidia.com/gpumem": "8000"});
        add_pod(&mut st, "h1", json!({}), hami("1", "50"), None);
        add_pod(&mut st, "h2", json!({}), hami("1", "50"), None);
        add_pod(&mut st, "h3", json!({}), hami("1", "10"), None);
        add_pod(&mut st, "two", json!({}), hami("2", "10"), None);
        add_pod(
            &mut st,
            "bad",
            json!({"gpu-autoscaler.dev/gpu-share": "half"}),
            json!({}),
            None,
        );
        assert_eq!(pass(&mut st), 2, "two halves of the one device");
        unschedulable(&st, "h3", "no nvidia.com/gpu device with 100/1000 free");
        unschedulable(
            &st,
            "two",
            "fewer than 2 nvidia.com/gpu devices with 100/1000 free",
        );
        unschedulable(&st, "bad", "gpu-autoscaler.dev/gpu-share=\"half\"");
    }

    #[test]
    fn a_share_pod_bound_by_someone_else_holds_a_device() {
        let mut st = State::new(1000, 16, false);
        add_node(&mut st, "one", json!({"nvidia.com/gpu": "1"}));
        add_pod(
            &mut st,
            "bound",
            json!({"gpu-autoscaler.dev/gpu-share": "700"}),
            json!({}),
            Some("one"),
        );
        share_pod(&mut st, "big", "500");
        share_pod(&mut st, "small", "300");
        assert_eq!(pass(&mut st), 1);
        unschedulable(&st, "big", "no nvidia.com/gpu device with 500/1000 free");
        assert_eq!(placed(&st, "small"), Ok("one".into()));
    }

    #[test]
    fn requests_default_to_limits_and_add_init_and_overhead() {
        let pod = json!({"spec": {
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "500m"}}},
                {"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
            "overhead": {"cpu": "100m"}
        }});
        let r = pod_requests(&pod);
        assert_eq!(r["cpu"], 2100);
        assert_eq!(r["nvidia.com/gpu"], 1000);
        assert_eq!(r["memory"], 1_073_741_824_000);
        assert_eq!(r["pods"], 1000);
    }

    #[test]
    fn tolerations_and_affinity() {
        let taint = json!({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"});
        assert!(tolerates(
            &[json!({"key": "nvidia.com/gpu", "operator": "Exists"})],
            &taint
        ));
        assert!(tolerates(&[json!({"operator": "Exists"})], &taint));
        assert!(!tolerates(
            &[json!({"key": "nvidia.com/gpu", "value": "false"})],
            &taint
        ));
        assert!(!tolerates(
            &[json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"})],
            &taint
        ));
        let node = json!({"metadata": {"name": "n1", "labels": {"gpu": "a100", "mem": "80"}}});
        let pod = |expr: Value| json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}}});
        assert!(affinity_matches(
            &pod(json!({"key": "gpu", "operator": "In", "values": ["a100"]})),
            &node
        ));
        assert!(!affinity_matches(
            &pod(json!({"key": "gpu", "operator": "NotIn", "values": ["a100"]})),
            &node
        ));
        assert!(affinity_matches(
            &pod(json!({"key": "mem", "operator": "Gt", "values": ["40"]})),
            &node
        ));
        assert!(!affinity_matches(
            &pod(json!({"key": "x", "operator": "Exists"})),
            &node
        ));
    }
}
