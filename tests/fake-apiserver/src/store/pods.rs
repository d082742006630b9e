//! Pods: binding, status writes, and evictions against PodDisruptionBudgets, whose status the
//! store keeps as the disruption controller would.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::selector::LabelSelector;

use super::{ChangeKind, State, WriteOpts, meta_str, now};

/// A PDB's selector. In policy/v1 an empty selector selects every pod of the namespace and a
/// missing one selects none.
pub(super) fn pdb_selector(pdb: &Value) -> Option<LabelSelector> {
    pdb.pointer("/spec/selector")
        .filter(|s| !s.is_null())
        .and_then(|s| LabelSelector::from_object(s).ok())
}

/// PDB arithmetic for one budget.
pub(crate) struct Budget {
    pub expected: i64,
    pub current_healthy: i64,
    pub desired_healthy: i64,
    pub always_allow_unhealthy: bool,
}

impl Budget {
    /// `status.disruptionsAllowed`.
    pub fn disruptions_allowed(&self) -> i64 {
        (self.current_healthy - self.desired_healthy).max(0)
    }
}

/// A pod counts as healthy for PDBs when it is Running, Ready and not terminating.
pub(crate) fn pod_healthy(p: &Value) -> bool {
    p.pointer("/metadata/deletionTimestamp").is_none()
        && p.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && p.pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// Sets (or replaces) a condition of `status.conditions`, keeping lastTransitionTime when the
/// status did not change.
pub(crate) fn set_condition(
    obj: &mut Value,
    kind: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
) {
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    if !obj["status"]["conditions"].is_array() {
        obj["status"]["conditions"] = json!([]);
    }
    let conds = obj["status"]["conditions"].as_array_mut().expect("array");
    let mut c =
        json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now()});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    match conds.iter_mut().find(|x| x["type"] == kind) {
        Some(existing) => {
            if existing["status"] == status {
                c["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            *existing = c;
        }
        None => conds.push(c),
    }
}

/// `v` as a JSON object, made one if it is anything else.
fn object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("just made an object")
}

impl State {
    /// What the LimitRanger admission plugin does to a pod being created: for each resource a
    /// `Container` item of the namespace's LimitRanges defaults, a container that neither
    /// requests nor limits it gets the default request (`defaultRequest`, else `default`), and
    /// one with no limit for it gets `default`. A container with a limit but no request is left
    /// alone: the real server's defaulting has already made its request the limit. Where several
    /// LimitRanges default one resource, the first by name wins. `min`, `max` and ratios are not
    /// enforced.
    pub(super) fn apply_limit_ranges(&self, ns: &str, pod: &mut Value) {
        let Some(def) = self.def("", "limitranges") else {
            return;
        };
        let mut requests = Map::new();
        let mut limits = Map::new();
        for (_, lr) in self
            .table(&def)
            .objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
        {
            for item in lr
                .pointer("/spec/limits")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|i| i["type"] == "Container")
            {
                let defaults = item.get("default").and_then(Value::as_object);
                let default_requests = item.get("defaultRequest").and_then(Value::as_object);
                for (r, q) in defaults.into_iter().flatten() {
                    limits.entry(r.clone()).or_insert_with(|| q.clone());
                }
                for (r, q) in default_requests
                    .into_iter()
                    .flatten()
                    .chain(defaults.into_iter().flatten())
                {
                    requests.entry(r.clone()).or_insert_with(|| q.clone());
                }
            }
        }
        if requests.is_empty() && limits.is_empty() {
            return;
        }
        for list in ["containers", "initContainers"] {
            let Some(cs) = pod
                .pointer_mut(&format!("/spec/{list}"))
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            // A container that is no object is the typed decoding's to reject.
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                let res = object(c.entry("resources").or_insert(Value::Null));
                let limited: Vec<String> = res
                    .get("limits")
                    .and_then(Value::as_object)
                    .map(|l| l.keys().cloned().collect())
                    .unwrap_or_default();
                let reqs = object(res.entry("requests").or_insert(Value::Null));
                for (r, q) in &requests {
                    if !reqs.contains_key(r) && !limited.contains(r) {
                        reqs.insert(r.clone(), q.clone());
                    }
                }
                if reqs.is_empty() {
                    res.remove("requests");
                }
                let lims = object(res.entry("limits").or_insert(Value::Null));
                for (r, q) in &limits {
                    lims.entry(r.clone()).or_insert_with(|| q.clone());
                }
                if lims.is_empty() {
                    res.remove("limits");
                }
                if res.is_empty() {
                    c.remove("resources");
                }
            }
        }
    }

    /// Recomputes the status of the PDBs of a namespace (only those selecting one of `labels`).
    pub fn refresh_pdbs(
        &mut self,
        ns: &str,
        labels: Option<&[std::collections::BTreeMap<String, String>]>,
    ) {
        let pdbs = self.def("policy", "poddisruptionbudgets").expect("builtin");
        let names: Vec<String> = self
            .table(&pdbs)
            .objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
            .filter(|(_, p)| match labels {
                None => true,
                Some(ls) => pdb_selector(p).is_some_and(|s| ls.iter().any(|l| s.matches_labels(l))),
            })
            .map(|((_, name), _)| name.clone())
            .collect();
        for name in names {
            self.refresh_pdb(ns, &name);
        }
    }

    /// Recomputes one PDB's status, as the disruption controller would, and stores it if changed.
    pub(super) fn refresh_pdb(&mut self, ns: &str, name: &str) {
        let pdbs = self.def("policy", "poddisruptionbudgets").expect("builtin");
        let Ok(pdb) = self.get(&pdbs, ns, name) else {
            return;
        };
        // Evicted pods stay listed until they are gone (or replaced by a new pod of that name).
        let pods = self.def("", "pods").expect("builtin");
        let mut disrupted = Map::new();
        for (pod, at) in pdb
            .pointer("/status/disruptedPods")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let key = (ns.to_string(), pod.clone());
            let live = self.get(&pods, ns, pod).ok();
            if live.is_some_and(|p| {
                Some(meta_str(&p, "uid")) == self.evicted.get(&key).map(String::as_str)
            }) {
                disrupted.insert(pod.clone(), at.clone());
            }
        }
        let mut pdb_now = (*pdb).clone();
        pdb_now["status"]["disruptedPods"] = Value::Object(disrupted.clone());
        let budget = self.pdb_budget(&pdb_now);
        let mut new = (*pdb).clone();
        let allowed = budget.disruptions_allowed();
        let mut status = json!({
            "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            "disruptionsAllowed": allowed,
            "currentHealthy": budget.current_healthy,
            "desiredHealthy": budget.desired_healthy,
            "expectedPods": budget.expected,
            "disruptedPods": disrupted,
            "conditions": [{
                "type": "DisruptionAllowed",
                "status": if allowed > 0 { "True" } else { "False" },
                "reason": if allowed > 0 { "SufficientPods" } else { "InsufficientPods" },
                "message": "",
                "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
                "lastTransitionTime": now(),
            }],
        });
        // Keep the old transition time when the condition did not change, so no-op refreshes stay no-ops.
        if let Some(old_cond) = pdb.pointer("/status/conditions/0")
            && old_cond["status"] == status["conditions"][0]["status"]
        {
            status["conditions"][0]["lastTransitionTime"] = old_cond["lastTransitionTime"].clone();
        }
        if pdb.get("status") == Some(&status) {
            return;
        }
        new["status"] = status;
        self.commit(&pdbs, ns, name, new, ChangeKind::Modified);
    }

    /// The budget arithmetic of a PDB against the current pods.
    pub fn pdb_budget(&self, pdb: &Value) -> Budget {
        let ns = meta_str(pdb, "namespace");
        let pods = self.def("", "pods").expect("builtin");
        let selector = pdb_selector(pdb);
        let disrupted = pdb
            .pointer("/status/disruptedPods")
            .and_then(Value::as_object);
        let mut expected = 0i64;
        let mut healthy = 0i64;
        // Pods whose controller is known count through its desired replicas, once per
        // controller, as the disruption controller does with the scale subresource.
        let mut owners = std::collections::BTreeSet::new();
        for ((_, _), p) in self
            .table(&pods)
            .objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
        {
            if !selector.as_ref().is_some_and(|s| s.matches(p)) {
                continue;
            }
            let phase = p
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if matches!(phase, "Succeeded" | "Failed") {
                continue;
            }
            match self.desired_replicas_of_owner(ns, p) {
                Some((uid, n)) => {
                    if owners.insert(uid) {
                        expected += n;
                    }
                }
                None => expected += 1,
            }
            // An evicted pod stays out of the healthy count until it is gone.
            let name = meta_str(p, "name");
            if pod_healthy(p) && !disrupted.is_some_and(|d| d.contains_key(name)) {
                healthy += 1;
            }
        }
        let scaled = |v: &Value| -> i64 {
            match v {
                Value::Number(n) => n.as_i64().unwrap_or(0),
                Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
                    // Percentages round up, as the disruption controller does.
                    Some(pct) => (pct * expected + 99) / 100,
                    None => s.parse().unwrap_or(0),
                },
                _ => 0,
            }
        };
        let desired = if let Some(mu) = pdb.pointer("/spec/maxUnavailable") {
            (expected - scaled(mu)).max(0)
        } else if let Some(ma) = pdb.pointer("/spec/minAvailable") {
            scaled(ma)
        } else {
            0
        };
        Budget {
            expected,
            current_healthy: healthy,
            desired_healthy: desired,
            always_allow_unhealthy: pdb
                .pointer("/spec/unhealthyPodEvictionPolicy")
                .and_then(Value::as_str)
                == Some("AlwaysAllow"),
        }
    }

    /// The eviction subresource: deletes the pod unless a PodDisruptionBudget forbids it (429).
    pub fn evict(&mut self, ns: &str, name: &str, body: &Value, opts: &WriteOpts) -> Result<()> {
        let pods = self.def("", "pods").expect("builtin");
        let pod = self.get(&pods, ns, name)?;
        let preconditions = body
            .pointer("/deleteOptions/preconditions")
            .cloned()
            .unwrap_or(Value::Null);
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending");
        // Terminal, pending and already-terminating pods are evicted without consulting PDBs.
        let ignore_pdb = matches!(phase, "Succeeded" | "Failed" | "Pending")
            || pod.pointer("/metadata/deletionTimestamp").is_some();
        let mut disrupting = None;
        if !ignore_pdb {
            let pdb_def = self.def("policy", "poddisruptionbudgets").expect("builtin");
            let labels = crate::selector::labels_of(&pod);
            let matching: Vec<Arc<Value>> = self
                .table(&pdb_def)
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .filter(|(_, p)| pdb_selector(p).is_some_and(|s| s.matches_labels(&labels)))
                .map(|(_, p)| p.clone())
                .collect();
            if matching.len() > 1 {
                return Err(Error::Internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
                ));
            }
            if let Some(pdb) = matching.first() {
                let b = self.pdb_budget(pdb);
                let allowed = if pod_healthy(&pod) {
                    b.disruptions_allowed() > 0
                } else {
                    b.always_allow_unhealthy || b.current_healthy >= b.desired_healthy
                };
                if !allowed {
                    self.evictions.1 += 1;
                    let pdb_name = meta_str(pdb, "name");
                    return Err(Error::TooManyRequests {
                        message:
                            "Cannot evict pod as it would violate the pod's disruption budget."
                                .into(),
                        causes: vec![(
                            "DisruptionBudget".into(),
                            format!(
                                "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                                b.desired_healthy, b.current_healthy
                            ),
                        )],
                    });
                }
                if !opts.dry_run && pod_healthy(&pod) {
                    disrupting = Some(pdb.clone());
                }
            }
        }
        let mut opts = opts.clone();
        if let Some(g) = body
            .pointer("/deleteOptions/gracePeriodSeconds")
            .and_then(Value::as_i64)
        {
            opts.grace_period = Some(g);
        }
        let (_, gone) = self.delete(&pods, ns, name, &preconditions, &opts)?;
        self.evictions.0 += 1;
        if let Some(pdb) = disrupting
            && !gone
        {
            self.record_disruption(&pdb, &pod);
        }
        Ok(())
    }

    /// The binding subresource: assigns a pod to a node (what kube-scheduler does).
    pub fn bind(
        &mut self,
        ns: &str,
        name: &str,
        node: &str,
        opts: &WriteOpts,
    ) -> Result<Arc<Value>> {
        let pods = self.def("", "pods").expect("builtin");
        let pod = self.get(&pods, ns, name)?;
        if node.is_empty() {
            return Err(Error::invalid(
                "Binding",
                name,
                "target.name",
                "Required value",
            ));
        }
        if let Some(current) = pod.pointer("/spec/nodeName").and_then(Value::as_str)
            && !current.is_empty()
        {
            return Err(Error::conflict(
                &pods.plural,
                "",
                name,
                &format!("pod {name} is already assigned to node {current:?}"),
            ));
        }
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(Error::conflict(
                &pods.plural,
                "",
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        let mut new = (*pod).clone();
        new["spec"]["nodeName"] = json!(node);
        set_condition(&mut new, "PodScheduled", "True", None, None);
        if opts.dry_run {
            return Ok(Arc::new(new));
        }
        // No re-validation: only nodeName and a well-formed condition changed.
        let change = self.commit(&pods, ns, name, new, ChangeKind::Modified);
        self.after_write(&pods, &change);
        Ok(change.object.clone())
    }

    /// Writes a pod's status directly (for the harness scheduler), skipping no-op writes.
    pub fn write_pod_status(&mut self, ns: &str, name: &str, status: Value) {
        let pods = self.def("", "pods").expect("builtin");
        let Ok(pod) = self.get(&pods, ns, name) else {
            return;
        };
        if pod.get("status") == Some(&status) {
            return;
        }
        let mut new = (*pod).clone();
        new["status"] = status;
        let change = self.commit(&pods, ns, name, new, ChangeKind::Modified);
        self.after_write(&pods, &change);
    }
}
