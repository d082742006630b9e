//! Atomic NodePools' scale-ups (`spec.atomicScaleUp`): the NodeClaims the planner marks
//! [`autoscaler_core::plan::NewClaim::atomic`] are written with one annotation,
//! `gpu-autoscaler.dev/atomic-scale-up: <id>/<size>`, and from then on live or die together:
//!
//! - launched together: where the cloud has an atomic group launch
//!   (`CloudProvider::atomic_groups`), with one `launch_group` call once every member is
//!   written and pending, so the cloud decides all or none; elsewhere one by one;
//! - rolled back together: while not every member has initialized, one member failing or being
//!   deleted (or a member missing after [`MISSING_GRACE_S`], when the cache has long caught up
//!   with the writes) deletes all the others, so the pool returns to zero rather than stay
//!   part-grown. Once every member has initialized the scale-up is over and the annotation is
//!   no longer acted on; disruption then removes the pool only whole.
//!
//! Pure: the run loop performs what these functions decide.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use nodepools::NodeClaim;

use crate::controller::lifecycle::{Phase, condition, phase};
use nodepools::conditions;

/// The annotation naming a claim's atomic scale-up: `<id>/<size>`.
pub const ATOMIC_ANNOTATION: &str = "gpu-autoscaler.dev/atomic-scale-up";

/// How long after the first member was created a missing member counts as lost.
pub const MISSING_GRACE_S: i64 = 60;

/// The annotation value for the `size` claims of one scale-up of `pool` decided at `now_ms`.
pub fn annotation(pool: &str, now_ms: i64, size: usize) -> String {
    format!("{pool}-{now_ms}/{size}")
}

/// The scale-up a claim belongs to: its id and its size.
pub fn group_of(claim: &NodeClaim) -> Option<(String, usize)> {
    let v = claim.annotations().get(ATOMIC_ANNOTATION)?;
    let (id, size) = v.rsplit_once('/')?;
    Some((id.to_string(), size.parse().ok().filter(|n| *n > 0)?))
}

/// The members of scale-up `id`, by name.
pub fn members(claims: &[Arc<NodeClaim>], id: &str) -> Vec<Arc<NodeClaim>> {
    let mut out: Vec<Arc<NodeClaim>> = claims
        .iter()
        .filter(|c| group_of(c).is_some_and(|(g, _)| g == id))
        .cloned()
        .collect();
    out.sort_by_key(|c| c.name_any());
    out
}

/// Whether the members of a scale-up of `size` can be launched together now: all written and
/// all pending.
pub fn ready_to_launch(members: &[Arc<NodeClaim>], size: usize) -> bool {
    members.len() == size && members.iter().all(|c| phase(c) == Phase::Pending)
}

/// The claims to delete because their atomic scale-up failed part-way, by name.
pub fn rollbacks(claims: &[Arc<NodeClaim>], now_s: i64) -> Vec<String> {
    let mut groups: BTreeMap<String, (usize, Vec<&Arc<NodeClaim>>)> = BTreeMap::new();
    for c in claims {
        if let Some((id, size)) = group_of(c) {
            groups.entry(id).or_insert((size, Vec::new())).1.push(c);
        }
    }
    let mut out = Vec::new();
    for (size, members) in groups.values() {
        let phases: Vec<Phase> = members.iter().map(|c| phase(c)).collect();
        if members.len() == *size && phases.iter().all(|p| *p == Phase::Initialized) {
            continue;
        }
        let first = members
            .iter()
            .filter_map(|c| c.metadata.creation_timestamp.as_ref())
            .map(|t| t.0.as_second())
            .min();
        let missing = members.len() < *size && first.is_some_and(|t| now_s - t >= MISSING_GRACE_S);
        // A member lost after it initialized is a node gone later, not a failed scale-up: the
        // planner brings the pool back to its size.
        let failed = members
            .iter()
            .zip(&phases)
            .any(|(c, p)| matches!(p, Phase::Failed | Phase::Deleting) && !was_initialized(c));
        if missing || failed {
            out.extend(
                members
                    .iter()
                    .zip(&phases)
                    .filter(|(_, p)| **p != Phase::Deleting)
                    .map(|(c, _)| c.name_any()),
            );
        }
    }
    out.sort();
    out
}

/// Whether the claim's node ever initialized (its `Initialized` condition is True).
fn was_initialized(claim: &NodeClaim) -> bool {
    condition(claim, conditions::INITIALIZED).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn claim(name: &str, group: &str, created_s: i64) -> NodeClaim {
        let mut c: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "annotations": {ATOMIC_ANNOTATION: group}},
            "spec": {"nodePool": "slice"},
        }))
        .expect("a claim");
        c.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(created_s).expect("a time"),
        ));
        c
    }

    #[test]
    fn a_failed_member_rolls_the_others_back_and_a_finished_scale_up_is_left_alone() {
        let g = annotation("slice", 1000, 3);
        assert_eq!(group_of(&claim("a", &g, 0)), Some(("slice-1000".into(), 3)));
        let mut all: Vec<Arc<NodeClaim>> = ["a", "b", "c"]
            .iter()
            .map(|n| Arc::new(claim(n, &g, 100)))
            .collect();
        assert!(ready_to_launch(&members(&all, "slice-1000"), 3));
        assert!(
            rollbacks(&all, 110).is_empty(),
            "all pending: nothing to do"
        );
        // One member is being deleted (its launch failed): the other two go.
        let mut b = (*all[1]).clone();
        b.metadata.deletion_timestamp = b.metadata.creation_timestamp.clone();
        all[1] = Arc::new(b);
        assert_eq!(rollbacks(&all, 110), ["a", "c"]);
        assert!(!ready_to_launch(&members(&all, "slice-1000"), 3));
        // Only two of three written: waited for, then rolled back.
        let two = vec![all[0].clone(), all[2].clone()];
        assert!(rollbacks(&two, 100 + MISSING_GRACE_S - 1).is_empty());
        assert_eq!(rollbacks(&two, 100 + MISSING_GRACE_S), ["a", "c"]);
        // A member that had initialized and is lost later: the others stay.
        let mut lost = (*all[1]).clone();
        lost.status = Some(
            serde_json::from_value(serde_json::json!({
                "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized",
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
            }))
            .expect("a status"),
        );
        all[1] = Arc::new(lost);
        assert!(rollbacks(&all, 110).is_empty());
        // Not an atomic claim: never touched.
        let plain: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "p"}, "spec": {"nodePool": "x"}}))
        .expect("a claim");
        assert!(rollbacks(&[Arc::new(plain)], 10_000).is_empty());
    }
}
