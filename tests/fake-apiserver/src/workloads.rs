//! The cluster's own controllers, minimally: graceful pod termination (the kubelet's part),
//! pod GC of pods bound to a deleted Node, and the workload controllers that keep ReplicaSets
//! (and Deployments through them), StatefulSets and DaemonSets at their desired pods.
//!
//! They run as one pass under the state lock ([`State::controllers_pass`]), woken by every
//! commit and by a timer (grace periods and GC delays expire without a write). Only objects
//! that exist are acted on: a pod whose `ownerReferences` name a ReplicaSet the server does
//! not hold is left alone, as many hand-written test pods are.
//!
//! # In detail
//!
//! `workloads.rs`: one pass under the state lock, woken by every commit and a 50 ms tick — graceful
//! termination (`Options::graceful_deletion` scales grace periods; the pod keeps a
//! `deletionTimestamp` until then and until its finalizers are gone), pod GC after
//! `Options::pod_gc_delay`, and the ReplicaSet / Deployment / StatefulSet / DaemonSet controllers
//! (only for owners the server holds).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::binder::{affinity_matches, terminal, tolerates};
use crate::error::Result;
use crate::resources::{Builtin, ResourceDef};
use crate::selector::labels_of;
use crate::store::{
    ChangeKind, State, WriteOpts, finalizers, meta_mut, meta_str, now, pod_healthy,
};

/// Delete options of a forced deletion (grace period 0), as pod GC and the kubelet send.
pub(crate) fn force() -> WriteOpts {
    WriteOpts {
        grace_period: Some(0),
        ..WriteOpts::default()
    }
}

/// The grace period pods get when neither the delete nor the pod names one (Kubernetes' default).
const DEFAULT_GRACE_S: i64 = 30;

/// Tolerations the DaemonSet controller adds to every daemon pod, so node conditions and
/// cordoning do not keep daemons off their nodes.
const DAEMON_TOLERATIONS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];

/// The controller owner reference of an object: `(kind, name, uid)`.
fn controller_of(obj: &Value) -> Option<(String, String, String)> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("kind"), s("name"), s("uid"))
        })
}

fn owner_ref(owner: &Value, kind: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": kind,
        "name": meta_str(owner, "name"), "uid": meta_str(owner, "uid"),
        "controller": true, "blockOwnerDeletion": true,
    })
}

fn replicas(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn terminating(p: &Value) -> bool {
    p.pointer("/metadata/deletionTimestamp").is_some()
}

/// A short stable hash of a pod template (the `pod-template-hash` label of Deployments).
fn template_hash(template: &Value) -> String {
    // FNV-1a over the canonical JSON text: stable across runs, unlike std's RandomState.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in template.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|i| alphabet[((h >> (i * 6)) % alphabet.len() as u64) as usize] as char)
        .collect()
}

impl State {
    fn builtin_def(&self, group: &str, plural: &str) -> Arc<ResourceDef> {
        self.def(group, plural).expect("builtin")
    }

    /// Deletes a pod a workload controller no longer wants, as its controller would (default
    /// options, so graceful deletion applies). A pod already gone is no error: the next sync
    /// sees the store as it is.
    fn remove_pod(&mut self, pods: &ResourceDef, ns: &str, p: &Value) {
        let _ = self.delete(
            pods,
            ns,
            meta_str(p, "name"),
            &Value::Null,
            &WriteOpts::default(),
        );
    }

    /// The desired replicas of a pod's controller, found in the store, keyed by the uid of
    /// the controller whose scale counts (a Deployment for its ReplicaSets' pods).
    pub(crate) fn desired_replicas_of_owner(&self, ns: &str, pod: &Value) -> Option<(String, i64)> {
        let (kind, name, uid) = controller_of(pod)?;
        let plural = match kind.as_str() {
            "ReplicaSet" => "replicasets",
            "StatefulSet" => "statefulsets",
            "DaemonSet" => "daemonsets",
            _ => return None,
        };
        let owner = self
            .get(&self.builtin_def("apps", plural), ns, &name)
            .ok()?;
        if meta_str(&owner, "uid") != uid {
            return None;
        }
        if kind == "DaemonSet" {
            let n = owner
                .pointer("/status/desiredNumberScheduled")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            return Some((uid, n));
        }
        if let Some((dkind, dname, duid)) = controller_of(&owner)
            && dkind == "Deployment"
            && let Ok(d) = self.get(&self.builtin_def("apps", "deployments"), ns, &dname)
            && meta_str(&d, "uid") == duid
        {
            return Some((duid, replicas(&d)));
        }
        Some((uid, replicas(&owner)))
    }

    /// The grace period (seconds, before scaling) a delete of `obj` gets, or `None` when the
    /// delete takes the ordinary path: not a pod, graceful deletion off, grace 0, or a pod no
    /// kubelet runs (unbound pods are removed at once, as on a real cluster).
    pub(crate) fn grace_of(&self, def: &ResourceDef, obj: &Value, opts: &WriteOpts) -> Option<i64> {
        self.grace_scale?;
        if def.builtin != Some(Builtin::Pod)
            || obj
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .is_empty()
            || terminal(obj)
        {
            return None;
        }
        let grace = opts.grace_period.unwrap_or_else(|| {
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(DEFAULT_GRACE_S)
        });
        (grace > 0).then_some(grace)
    }

    /// Starts (or shortens) a pod's graceful termination: `deletionTimestamp` is set to the end
    /// of the grace period, and the pod stays until then (and until its finalizers are gone).
    pub(crate) fn delete_gracefully(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        old: Arc<Value>,
        grace: i64,
        opts: &WriteOpts,
    ) -> Result<(Arc<Value>, bool)> {
        let scale = self.grace_scale.unwrap_or(1.0).max(0.0);
        let wait = Duration::from_secs_f64(grace as f64 * scale);
        let key = (ns.to_string(), name.to_string());
        let deadline = Instant::now() + wait;
        if terminating(&old) {
            // A second delete may only shorten the grace period.
            if let Some(d) = self.removals.get_mut(&key)
                && deadline < *d
                && !opts.dry_run
            {
                *d = deadline;
            }
            return Ok((old, false));
        }
        let mut new = (*old).clone();
        let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(grace);
        let m = meta_mut(&mut new);
        m.insert(
            "deletionTimestamp".into(),
            json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        );
        m.insert("deletionGracePeriodSeconds".into(), json!(grace));
        if opts.dry_run {
            return Ok((Arc::new(new), false));
        }
        self.removals.insert(key, deadline);
        let change = self.commit(def, ns, name, new, ChangeKind::Modified);
        self.after_write(def, &change);
        Ok((change.object.clone(), false))
    }

    /// Lists an evicted pod in its PDB's `status.disruptedPods`.
    pub(crate) fn record_disruption(&mut self, pdb: &Value, pod: &Value) {
        let ns = meta_str(pdb, "namespace").to_string();
        let pod_name = meta_str(pod, "name").to_string();
        self.evicted.insert(
            (ns.clone(), pod_name.clone()),
            meta_str(pod, "uid").to_string(),
        );
        let pdbs = self.builtin_def("policy", "poddisruptionbudgets");
        let Ok(current) = self.get(&pdbs, &ns, meta_str(pdb, "name")) else {
            return;
        };
        let mut new = (*current).clone();
        if !new["status"].is_object() {
            new["status"] = json!({});
        }
        if !new["status"]["disruptedPods"].is_object() {
            new["status"]["disruptedPods"] = json!({});
        }
        new["status"]["disruptedPods"][&pod_name] = json!(now());
        let name = meta_str(&new, "name").to_string();
        self.commit(&pdbs, &ns, &name, new, ChangeKind::Modified);
        self.refresh_pdbs(&ns, None);
    }

    /// One pass of every controller. Returns how many writes it made (0 when settled).
    pub(crate) fn controllers_pass(&mut self, workloads: bool) -> usize {
        let before = self.rv;
        self.finish_terminations();
        self.collect_orphans();
        if workloads {
            self.sync_deployments();
            self.sync_replicasets();
            self.sync_statefulsets();
            self.sync_daemonsets();
            self.sync_resource_claims();
        }
        (self.rv - before) as usize
    }

    /// The kubelet's side of graceful deletion: a pod whose grace period ended is removed
    /// (once its finalizers are gone; until then it stays terminating).
    fn finish_terminations(&mut self) {
        let now = Instant::now();
        let due: Vec<_> = self
            .removals
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let pods = self.builtin_def("", "pods");
        for key in due {
            self.removals.remove(&key);
            let Ok(pod) = self.get(&pods, &key.0, &key.1) else {
                continue;
            };
            if finalizers(&pod).is_empty() {
                let change =
                    self.commit(&pods, &key.0, &key.1, (*pod).clone(), ChangeKind::Deleted);
                self.after_write(&pods, &change);
            }
        }
    }

    /// Pod GC with a delay: force-deletes pods bound to a Node that has been missing for
    /// `pod_gc_delay` (with no delay this happens inline when the Node is deleted).
    fn collect_orphans(&mut self) {
        if !self.gc_orphan_pods || self.pod_gc_delay.is_zero() {
            return;
        }
        let pods = self.builtin_def("", "pods");
        let nodes = self.builtin_def("", "nodes");
        let now = Instant::now();
        let mut orphans = Vec::new();
        for ((ns, name), p) in &self.table(&pods).objects {
            let node = p
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !node.is_empty() && self.get(&nodes, "", node).is_err() {
                orphans.push((ns.clone(), name.clone()));
            }
        }
        self.orphan_since.retain(|k, _| orphans.contains(k));
        for key in orphans {
            let since = *self.orphan_since.entry(key.clone()).or_insert(now);
            if now.duration_since(since) >= self.pod_gc_delay {
                self.orphan_since.remove(&key);
                let _ = self.delete(&pods, &key.0, &key.1, &Value::Null, &force());
            }
        }
    }

    /// Pods of a namespace by the uid of their controller.
    fn pods_by_owner(&self, ns: &str) -> HashMap<String, Vec<Arc<Value>>> {
        let pods = self.builtin_def("", "pods");
        let mut by = HashMap::<String, Vec<Arc<Value>>>::new();
        for (_, p) in self
            .table(&pods)
            .objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
        {
            if let Some((_, _, uid)) = controller_of(p) {
                by.entry(uid).or_default().push(p.clone());
            }
        }
        by
    }

    fn all_of(&self, plural: &str) -> Vec<Arc<Value>> {
        let def = self.builtin_def("apps", plural);
        self.table(&def).objects.values().cloned().collect()
    }

    /// Creates a pod from an owner's template; `name` or else a generated name.
    fn create_pod(
        &mut self,
        owner: &Value,
        kind: &str,
        name: Option<String>,
        extra: impl FnOnce(&mut Value),
    ) {
        let ns = meta_str(owner, "namespace").to_string();
        let template = owner
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(json!({}));
        let mut meta = json!({
            "namespace": ns,
            "labels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
            "annotations": template.pointer("/metadata/annotations").cloned().unwrap_or(json!({})),
            "ownerReferences": [owner_ref(owner, kind)],
        });
        match name {
            Some(n) => meta["name"] = json!(n),
            None => meta["generateName"] = json!(format!("{}-", meta_str(owner, "name"))),
        }
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                             "spec": template.get("spec").cloned().unwrap_or(json!({}))});
        extra(&mut pod);
        let pods = self.builtin_def("", "pods");
        // A template the server rejects stays without pods, as a ReplicaSet with a bad
        // template does (the real controller records a FailedCreate event).
        let _ = self.create(&pods, &ns, pod, &WriteOpts::default());
    }

    /// Writes an owner's status when it changed.
    fn write_status(&mut self, plural: &str, obj: &Value, status: Value) {
        let mut status = status;
        status["observedGeneration"] = obj
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1));
        if obj.get("status") == Some(&status) {
            return;
        }
        let def = self.builtin_def("apps", plural);
        let mut new = obj.clone();
        new["status"] = status;
        let (ns, name) = (
            meta_str(obj, "namespace").to_string(),
            meta_str(obj, "name").to_string(),
        );
        let change = self.commit(&def, &ns, &name, new, ChangeKind::Modified);
        self.after_write(&def, &change);
    }

    /// Deployments: one ReplicaSet per pod template (named by its hash) at the Deployment's
    /// replicas; ReplicaSets of older templates are scaled to zero (no rolling update).
    fn sync_deployments(&mut self) {
        let rs_def = self.builtin_def("apps", "replicasets");
        for d in self.all_of("deployments") {
            if terminating(&d) {
                continue;
            }
            let ns = meta_str(&d, "namespace").to_string();
            let duid = meta_str(&d, "uid").to_string();
            let template = d.pointer("/spec/template").cloned().unwrap_or(json!({}));
            let hash = template_hash(&template);
            let rs_name = format!("{}-{hash}", meta_str(&d, "name"));
            let want = replicas(&d);
            let owned: Vec<Arc<Value>> = self
                .all_of("replicasets")
                .into_iter()
                .filter(|rs| meta_str(rs, "namespace") == ns)
                .filter(|rs| controller_of(rs).is_some_and(|(_, _, u)| u == duid))
                .collect();
            for rs in &owned {
                let target = if meta_str(rs, "name") == rs_name {
                    want
                } else {
                    0
                };
                if replicas(rs) != target {
                    let mut new = (**rs).clone();
                    new["spec"]["replicas"] = json!(target);
                    let _ = self.update(
                        &rs_def,
                        &ns,
                        meta_str(rs, "name"),
                        new,
                        crate::store::Part::Main,
                        &WriteOpts::default(),
                    );
                }
            }
            if !owned.iter().any(|rs| meta_str(rs, "name") == rs_name) {
                let mut template = template.clone();
                template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
                let mut selector = d.pointer("/spec/selector").cloned().unwrap_or(json!({}));
                selector["matchLabels"]["pod-template-hash"] = json!(hash);
                let rs = json!({
                    "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": rs_name, "namespace": ns,
                                 "labels": template["metadata"]["labels"].clone(),
                                 "ownerReferences": [owner_ref(&d, "Deployment")]},
                    "spec": {"replicas": want, "selector": selector, "template": template},
                });
                let _ = self.create(&rs_def, &ns, rs, &WriteOpts::default());
            }
            let sum = |field: &str| -> i64 {
                owned
                    .iter()
                    .filter_map(|rs| {
                        rs.pointer(&format!("/status/{field}"))
                            .and_then(Value::as_i64)
                    })
                    .sum()
            };
            let status = json!({
                "replicas": sum("replicas"),
                "readyReplicas": sum("readyReplicas"),
                "availableReplicas": sum("availableReplicas"),
                "updatedReplicas": owned.iter().find(|rs| meta_str(rs, "name") == rs_name)
                    .and_then(|rs| rs.pointer("/status/replicas").and_then(Value::as_i64)).unwrap_or(0),
            });
            self.write_status("deployments", &d, status);
        }
    }

    /// ReplicaSets: a pod is created for every replica missing among the active (not
    /// terminating, not finished) pods, at once: a terminating pod is already replaced.
    fn sync_replicasets(&mut self) {
        let pods = self.builtin_def("", "pods");
        let mut by_ns: BTreeMap<String, HashMap<String, Vec<Arc<Value>>>> = BTreeMap::new();
        for rs in self.all_of("replicasets") {
            if terminating(&rs) {
                continue;
            }
            let ns = meta_str(&rs, "namespace").to_string();
            if !by_ns.contains_key(&ns) {
                let index = self.pods_by_owner(&ns);
                by_ns.insert(ns.clone(), index);
            }
            let owned = by_ns[&ns]
                .get(meta_str(&rs, "uid"))
                .cloned()
                .unwrap_or_default();
            let mut active: Vec<&Arc<Value>> = owned
                .iter()
                .filter(|p| !terminating(p) && !terminal(p))
                .collect();
            let want = replicas(&rs);
            let have = active.len() as i64;
            for _ in have..want {
                self.create_pod(&rs, "ReplicaSet", None, |_| {});
            }
            if have > want {
                // Scale down the least settled first: unbound, then not ready, then newest.
                active.sort_by_key(|p| {
                    (
                        p.pointer("/spec/nodeName").is_some(),
                        pod_healthy(p),
                        std::cmp::Reverse(meta_str(p, "creationTimestamp").to_string()),
                    )
                });
                for p in active.iter().take((have - want) as usize) {
                    self.remove_pod(&pods, &ns, p);
                }
            }
            let ready = owned.iter().filter(|p| pod_healthy(p)).count();
            let status = json!({
                "replicas": have,
                "fullyLabeledReplicas": have,
                "readyReplicas": ready,
                "availableReplicas": ready,
            });
            self.write_status("replicasets", &rs, status);
        }
    }

    /// StatefulSets: pod `NAME-i` for every ordinal below replicas, recreated only once the
    /// old pod of that name is gone (a stable identity); higher ordinals are deleted.
    fn sync_statefulsets(&mut self) {
        let pods = self.builtin_def("", "pods");
        for sts in self.all_of("statefulsets") {
            if terminating(&sts) {
                continue;
            }
            let ns = meta_str(&sts, "namespace").to_string();
            let name = meta_str(&sts, "name").to_string();
            let uid = meta_str(&sts, "uid").to_string();
            let want = replicas(&sts);
            for i in 0..want {
                let pod_name = format!("{name}-{i}");
                if self.get(&pods, &ns, &pod_name).is_err() {
                    self.create_pod(&sts, "StatefulSet", Some(pod_name.clone()), |p| {
                        p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] =
                            json!(pod_name);
                    });
                }
            }
            let owned = self.pods_by_owner(&ns).remove(&uid).unwrap_or_default();
            for p in &owned {
                let ordinal = meta_str(p, "name")
                    .strip_prefix(&format!("{name}-"))
                    .and_then(|o| o.parse::<i64>().ok());
                if ordinal.is_none_or(|o| o >= want) && !terminating(p) {
                    self.remove_pod(&pods, &ns, p);
                }
            }
            let ready = owned.iter().filter(|p| pod_healthy(p)).count();
            let current = owned.iter().filter(|p| !terminating(p)).count();
            let status = json!({
                "replicas": current, "currentReplicas": current,
                "readyReplicas": ready, "availableReplicas": ready,
            });
            self.write_status("statefulsets", &sts, status);
        }
    }

    /// DaemonSets: one pod per Node whose labels match the template's `nodeSelector` and
    /// required node affinity and whose NoSchedule/NoExecute taints the template tolerates;
    /// each pod is pinned to its node by required node affinity on `metadata.name`.
    fn sync_daemonsets(&mut self) {
        let pods = self.builtin_def("", "pods");
        let nodes_def = self.builtin_def("", "nodes");
        let nodes: Vec<Arc<Value>> = self.table(&nodes_def).objects.values().cloned().collect();
        for ds in self.all_of("daemonsets") {
            if terminating(&ds) {
                continue;
            }
            let ns = meta_str(&ds, "namespace").to_string();
            let uid = meta_str(&ds, "uid").to_string();
            let mut tolerations: Vec<Value> = ds
                .pointer("/spec/template/spec/tolerations")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (key, effect) in DAEMON_TOLERATIONS {
                tolerations.push(json!({"key": key, "operator": "Exists", "effect": effect}));
            }
            let probe =
                json!({"spec": ds.pointer("/spec/template/spec").cloned().unwrap_or(json!({}))});
            let selector = ds
                .pointer("/spec/template/spec/nodeSelector")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let eligible: Vec<String> = nodes
                .iter()
                .filter(|n| !terminating(n))
                .filter(|n| {
                    let labels = labels_of(n);
                    selector
                        .iter()
                        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
                })
                .filter(|n| affinity_matches(&probe, n))
                .filter(|n| {
                    n.pointer("/spec/taints")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter(|t| {
                            matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute"))
                        })
                        .all(|t| tolerates(&tolerations, t))
                })
                .map(|n| meta_str(n, "name").to_string())
                .collect();
            let owned = self.pods_by_owner(&ns).remove(&uid).unwrap_or_default();
            let target = |p: &Value| -> String {
                p.pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .or_else(|| {
                        p.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
                            .and_then(Value::as_str)
                    })
                    .unwrap_or_default()
                    .to_string()
            };
            for node in &eligible {
                if owned
                    .iter()
                    .any(|p| !terminating(p) && !terminal(p) && target(p) == *node)
                {
                    continue;
                }
                let tols = tolerations.clone();
                self.create_pod(&ds, "DaemonSet", None, |p| {
                    p["spec"]["tolerations"] = json!(tols);
                    p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}});
                });
            }
            // Daemon pods of nodes that no longer qualify go; those of deleted nodes are pod GC's.
            let node_exists = |n: &str| nodes.iter().any(|x| meta_str(x, "name") == n);
            for p in &owned {
                let t = target(p);
                if !terminating(p) && node_exists(&t) && !eligible.contains(&t) {
                    self.remove_pod(&pods, &ns, p);
                }
            }
            let scheduled = owned
                .iter()
                .filter(|p| !terminating(p) && eligible.contains(&target(p)))
                .count();
            let ready = owned.iter().filter(|p| pod_healthy(p)).count();
            let status = json!({
                "desiredNumberScheduled": eligible.len(),
                "currentNumberScheduled": scheduled,
                "updatedNumberScheduled": scheduled,
                "numberMisscheduled": 0,
                "numberReady": ready,
                "numberAvailable": ready,
            });
            self.write_status("daemonsets", &ds, status);
        }
    }
}
