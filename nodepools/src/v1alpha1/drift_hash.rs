//! The drift hash of a NodePool's template: what a NodeClaim records at launch
//! (`karpenter.sh/nodepool-hash`) and drift compares with the NodePool's current one.
//!
//! As Karpenter's `NodePool.Hash()` (`pkg/apis/v1/nodepool.go`), the hash covers the fields of
//! `spec.template` that a node carries from its launch on: `metadata.labels`, `taints`,
//! `startupTaints` and `nodeClassRef`. Left out, as Karpenter leaves them out:
//! `requirements` (`hash:"ignore"`; drift checks them against the node's labels instead, so
//! widening an `In` list drifts nothing) and everything outside the template (`weight`,
//! `limits`, `disruption`, behavioural settings that apply to existing nodes as they are).
//! Also left out, where Karpenter hashes it: `expireAfter`, which this controller reads from
//! the NodePool at each pass, so a change reaches existing nodes without replacing them.
//! Taint lists are hashed as sets and labels as a sorted map (Karpenter's `SlicesAsSets`), so
//! no order changes the hash; an absent list or map hashes as an empty one.

use std::collections::BTreeMap;

use serde::Serialize;

use super::common::{NodeClassRef, Taint};
use super::nodepool::NodePoolTemplate;

/// What the hash covers, in a fixed field order: its JSON text is the canonical form hashed.
#[derive(Serialize)]
struct Hashed<'a> {
    labels: &'a BTreeMap<String, String>,
    taints: Vec<(&'a str, &'a str, &'a str)>,
    startup_taints: Vec<(&'a str, &'a str, &'a str)>,
    node_class_ref: Option<&'a NodeClassRef>,
}

/// The taints as a sorted list of (key, value, effect): a set, whatever order they were
/// written in.
fn as_set(taints: &[Taint]) -> Vec<(&str, &str, &str)> {
    let mut out: Vec<_> = taints
        .iter()
        .map(|t| (t.key.as_str(), t.value.as_str(), t.effect.as_str()))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3): fixed constants, so
/// every process, build and platform computes the same value, which std's `RandomState` does
/// not promise.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl NodePoolTemplate {
    /// The template's drift hash, in decimal (as Karpenter writes its hash): 64-bit FNV-1a of
    /// the JSON text of the hashed fields (see the module). Deterministic across processes and
    /// builds, and insensitive to the order of labels and taints. Never fails.
    pub fn drift_hash(&self) -> String {
        let hashed = Hashed {
            labels: &self.metadata.labels,
            taints: as_set(&self.taints),
            startup_taints: as_set(&self.startup_taints),
            node_class_ref: self.node_class_ref.as_ref(),
        };
        // Strings, tuples and a string-keyed map always serialize; the fallback is unreachable
        // and would only make every template hash alike (no drift), never panic.
        let text = serde_json::to_string(&hashed).unwrap_or_default();
        fnv1a64(text.as_bytes()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1alpha1::NodeSelectorRequirement;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect: effect.into(),
        }
    }

    fn template() -> NodePoolTemplate {
        let mut t = NodePoolTemplate::default();
        t.metadata.labels.insert("team".into(), "ml".into());
        t.metadata.labels.insert("tier".into(), "gpu".into());
        t.taints = vec![taint("a", "NoSchedule"), taint("b", "NoExecute")];
        t
    }

    #[test]
    fn the_hash_is_a_fixed_function_of_the_hashed_fields() {
        // FNV-1a's published test vectors: the constants are the standard ones.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        // The same template hashes the same in every process: pinned here (the FNV-1a of
        // `{"labels":{},"taints":[],"startup_taints":[],"node_class_ref":null}`, checked by
        // hand), so a change of what is hashed, which must bump NODEPOOL_HASH_VERSION, shows
        // up as a failure.
        assert_eq!(
            NodePoolTemplate::default().drift_hash(),
            "5396486427034464282"
        );
    }

    #[test]
    fn order_does_not_change_the_hash_and_requirements_and_expiry_are_left_out() {
        let t = template();
        let mut reordered = t.clone();
        reordered.taints.reverse();
        reordered.metadata.labels = t.metadata.labels.clone().into_iter().rev().collect();
        assert_eq!(t.drift_hash(), reordered.drift_hash());
        let mut ignored = t.clone();
        ignored.requirements.push(NodeSelectorRequirement {
            key: "karpenter.sh/capacity-type".into(),
            operator: "In".into(),
            values: vec!["on-demand".into()],
            min_values: None,
        });
        ignored.expire_after = Some("24h".into());
        assert_eq!(t.drift_hash(), ignored.drift_hash());
    }

    #[test]
    fn each_hashed_field_changes_the_hash() {
        let t = template();
        let mut label = t.clone();
        label
            .metadata
            .labels
            .insert("team".into(), "research".into());
        let mut taints = t.clone();
        taints.taints.pop();
        let mut startup = t.clone();
        startup.startup_taints.push(taint("c", "NoSchedule"));
        let mut class = t.clone();
        class.node_class_ref = Some(NodeClassRef {
            group: "fake.gpu-autoscaler.dev".into(),
            kind: "FakeNodeClass".into(),
            name: "other".into(),
        });
        for changed in [label, taints, startup, class] {
            assert_ne!(t.drift_hash(), changed.drift_hash(), "{changed:?}");
        }
    }
}
