//! The audit of disruptive calls: every eviction and Node deletion the system under test asks
//! for (calls through the router that faults apply to, never a test's own fault-free client),
//! recorded *before* the call with what it would disrupt, so a test can count safety
//! violations afterwards: a protected pod evicted, a PodDisruptionBudget with no disruption
//! left, pods still running on a Node deleted under them.
//!
//! Records are JSON objects, oldest first, served at `GET /debug/audit`:
//! `{"call": "evict", "pod": "ns/name", "node", "protected", "pdbAllowed", "accepted", "rv"}`
//! and `{"call": "deleteNode", "node", "pods": [{"pod", "protected", "pdbAllowed"}], "rv"}`;
//! `rv` is the server's resourceVersion when the call came (what any write before it has at
//! most), so a test can tell calls before an event of its own from calls after it;
//! `protected` is `do-not-disrupt` (the `karpenter.sh/do-not-disrupt: "true"` annotation),
//! `safe-to-evict=false` (`cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`) or null;
//! `pdbAllowed` is the matching budget's `disruptionsAllowed` then, or null without one.

use serde_json::{Value, json};

use super::pods::pdb_selector;
use super::{State, meta_str};
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

    /// Records a deletion of Node `name` about to happen, with the running pods still bound
    /// to it (DaemonSet pods, terminal and terminating pods left out).
    pub fn audit_node_delete(&mut self, name: &str) {
        let Some(pods_def) = self.def("", "pods") else {
            return;
        };
        let on_node: Vec<Value> = self
            .table(&pods_def)
            .objects
            .values()
            .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(name))
            .filter(|p| !terminal(p) && p.pointer("/metadata/deletionTimestamp").is_none())
            .filter(|p| !is_daemon(p))
            .map(|p| self.pod_record(p))
            .collect();
        self.audit
            .push(json!({"call": "deleteNode", "node": name, "pods": on_node, "rv": self.rv}));
    }
}
