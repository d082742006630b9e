//! The audit of disruptive calls: every eviction and Node deletion the system under test asks
//! for (calls through the router that faults apply to, never a test's own fault-free client),
//! recorded *before* the call with what it would disrupt, so a test can count safety
//! violations afterwards: a protected pod evicted, a PodDisruptionBudget with no disruption
//! left, pods still running on a Node deleted under them.
//!
//! Records are JSON objects, oldest first, served at `GET /debug/audit`:
//! `{"call": "evict", "pod": "ns/name", "node", "uid", "protected", "pdbAllowed", "accepted",
//! "rv"}` and `{"call": "deleteNode", "node", "uid", "pods": [{"pod", "protected",
//! "pdbAllowed"}], "rv"}`; `uid` is the Node's (which incarnation of a name it was). A Node
//! deletion is recorded when the Node goes: at the delete call when it has no finalizers,
//! else at the write that releases its last finalizer;
//! `rv` is the server's resourceVersion when the call came (what any write before it has at
//! most), so a test can tell calls before an event of its own from calls after it;
//! `protected` is `do-not-disrupt` (the `karpenter.sh/do-not-disrupt: "true"` annotation),
//! `safe-to-evict=false` (`cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`) or null;
//! `pdbAllowed` is the matching budget's `disruptionsAllowed` then, or null without one.

use std::sync::Arc;

use serde_json::{Value, json};

use super::pods::pdb_selector;
use super::{State, finalizers, meta_str};
use crate::binder::terminal;

/// The protection annotation a pod carries, if any.
fn protection(pod: &Value) -> Option<&'static str> {
    let a = pod.pointer("/metadata/annotations")?;
    if a["karpenter.sh/do-not-disrupt"] == "true" {
        return Some("do-not-disrupt");
    }
    if a["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false" {
        return Some("safe-to-evict=false");
    }
    None
}

fn is_daemon(pod: &Value) -> bool {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|rs| rs.iter().any(|r| r["kind"] == "DaemonSet"))
}

impl State {
    /// `disruptionsAllowed` of the PodDisruptionBudget selecting `pod`, if one does.
    fn pdb_allowed(&self, pod: &Value) -> Option<i64> {
        let ns = meta_str(pod, "namespace");
        let def = self.def("policy", "poddisruptionbudgets")?;
        let labels = crate::selector::labels_of(pod);
        let pdb = self
            .table(&def)
            .objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
            .map(|(_, p)| p.clone())
            .find(|p| pdb_selector(p).is_some_and(|s| s.matches_labels(&labels)))?;
        Some(self.pdb_budget(&pdb).disruptions_allowed())
    }

    fn pod_record(&self, pod: &Value) -> Value {
        json!({
            "pod": format!("{}/{}", meta_str(pod, "namespace"), meta_str(pod, "name")),
            "protected": protection(pod),
            "pdbAllowed": self.pdb_allowed(pod),
        })
    }

    /// Records an eviction of `ns/name` about to be attempted (nothing for a missing,
    /// terminal or terminating pod: evicting those disrupts nothing).
    pub fn audit_eviction(&mut self, ns: &str, name: &str) {
        let Some(pods) = self.def("", "pods") else {
            return;
        };
        let Ok(pod) = self.get(&pods, ns, name) else {
            return;
        };
        if terminal(&pod) || pod.pointer("/metadata/deletionTimestamp").is_some() {
            return;
        }
        let mut r = self.pod_record(&pod);
        r["call"] = json!("evict");
        r["node"] = pod
            .pointer("/spec/nodeName")
            .cloned()
            .unwrap_or(Value::Null);
        r["uid"] = r["node"]
            .as_str()
            .and_then(|n| self.node(n))
            .map_or(Value::Null, |n| json!(meta_str(&n, "uid")));
        r["rv"] = json!(self.rv);
        self.audit.push(r);
    }

    /// Marks the last eviction record of `ns/name` with whether the server accepted it.
    pub fn audit_eviction_outcome(&mut self, ns: &str, name: &str, accepted: bool) {
        let key = format!("{ns}/{name}");
        if let Some(r) = self
            .audit
            .iter_mut()
            .rev()
            .find(|r| r["call"] == "evict" && r["pod"] == key.as_str())
        {
            r["accepted"] = json!(accepted);
        }
    }

    /// The Node `name` as it is now, if it exists.
    fn node(&self, name: &str) -> Option<Arc<Value>> {
        let def = self.def("", "nodes")?;
        self.get(&def, "", name).ok()
    }

    /// The removal record of Node `node`: the running pods still bound to it (DaemonSet pods,
    /// terminal and terminating pods left out) and the Node's uid (which incarnation of the
    /// name went).
    fn node_removal(&self, node: &Value) -> Option<Value> {
        let name = meta_str(node, "name");
        let pods_def = self.def("", "pods")?;
        let on_node: Vec<Value> = self
            .table(&pods_def)
            .objects
            .values()
            .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(name))
            .filter(|p| !terminal(p) && p.pointer("/metadata/deletionTimestamp").is_none())
            .filter(|p| !is_daemon(p))
            .map(|p| self.pod_record(p))
            .collect();
        Some(json!({
            "call": "deleteNode", "node": name, "uid": meta_str(node, "uid"),
            "pods": on_node, "rv": self.rv,
        }))
    }

    /// Records a deletion of Node `name` about to happen, when it removes the Node at once
    /// (no finalizers). A Node with finalizers only gets a deletionTimestamp: nothing is
    /// disrupted until the last finalizer goes ([`Self::node_release`]).
    pub fn audit_node_delete(&mut self, name: &str) {
        let Some(node) = self.node(name) else { return };
        if !finalizers(&node).is_empty() {
            return;
        }
        if let Some(r) = self.node_removal(&node) {
            self.audit.push(r);
        }
    }

    /// Before a write to Node `name`: the removal record to keep if the write releases its
    /// last finalizer while it is being deleted ([`Self::audit_node_release`]).
    pub fn node_release(&self, name: &str) -> Option<Value> {
        let node = self.node(name)?;
        node.pointer("/metadata/deletionTimestamp")?;
        self.node_removal(&node)
    }

    /// After that write: records the removal if the Node is gone.
    pub fn audit_node_release(&mut self, record: Option<Value>) {
        if let Some(r) = record
            && r["node"].as_str().is_none_or(|n| self.node(n).is_none())
        {
            self.audit.push(r);
        }
    }
}
