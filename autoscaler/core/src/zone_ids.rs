//! `topology.k8s.aws/zone-id`: AWS's zone IDs (`use1-az1`), the same physical zone in every
//! account, read as the zone names they stand for so that the planner, which chooses offerings
//! by zone, honours them.
//!
//! Karpenter's AWS provider treats the zone ID as a well-known label: a NodePool or pod
//! requirement on it narrows the offerings a node may be launched from, and a spread or an
//! (anti-)affinity term may count by it. Instance types list their offerings by zone name, and
//! a provider that knows the mapping puts each zone's ID on its offerings
//! ([`crate::instance::Offering::zone_id`]). [`resolve`] rewrites a snapshot before it is
//! planned: every requirement on the zone ID becomes the requirement on the zone names whose
//! IDs it allows (an ID no offering names allows no zone), and, where the mapping is known, a
//! topology key of the zone ID becomes the zone key (one ID per zone, so the domains and their
//! counts are the same). Without the rewrite a requirement on the key would be read as a label
//! the NodePool gives its nodes, and a node launched in any zone would carry the ID asked for.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::labels;
use crate::model::{PodAffinityTerm, PodShape, Snapshot, TopologySpread};
use crate::requirements::{Constraint, NodeSelector, Requirements, ValueSet};

/// Zone name to zone ID, as the snapshot's offerings give it.
pub type ZoneIds = BTreeMap<String, String>;

/// The zone IDs the offerings of `snapshot`'s NodePools carry, by zone name.
pub fn zone_ids(snapshot: &Snapshot) -> ZoneIds {
    let mut out = ZoneIds::new();
    for pool in &snapshot.pools {
        for it in pool.instance_types.iter() {
            for o in &it.offerings {
                if let Some(id) = &o.zone_id {
                    out.entry(o.zone.clone()).or_insert_with(|| id.clone());
                }
            }
        }
    }
    out
}

/// `snapshot` with every use of [`labels::ZONE_ID`] read as zones (see the module
/// documentation); borrowed, and nothing copied, when nothing uses the key.
pub fn resolve(snapshot: &Snapshot) -> Cow<'_, Snapshot> {
    let ids = zone_ids(snapshot);
    if !uses_zone_id(snapshot, !ids.is_empty()) {
        return Cow::Borrowed(snapshot);
    }
    let mut out = snapshot.clone();
    resolve_with(&mut out, &ids);
    Cow::Owned(out)
}

/// [`resolve`] in place, for a caller that owns its snapshot: only what names the key is
/// rewritten, and pods that shared a shape share the rewritten one. Idempotent.
pub fn resolve_in_place(snapshot: &mut Snapshot) {
    let ids = zone_ids(snapshot);
    if uses_zone_id(snapshot, !ids.is_empty()) {
        resolve_with(snapshot, &ids);
    }
}

fn resolve_with(snapshot: &mut Snapshot, ids: &ZoneIds) {
    for pool in &mut snapshot.pools {
        resolve_requirements(&mut pool.requirements, ids);
        // A minimum of distinct zone IDs is a minimum of distinct zones (one ID per zone).
        if let Some(n) = pool.min_values.remove(labels::ZONE_ID) {
            let zones = pool.min_values.entry(labels::ZONE.to_string()).or_insert(0);
            *zones = (*zones).max(n);
        }
    }
    for claim in &mut snapshot.in_flight {
        resolve_requirements(&mut claim.requirements, ids);
    }
    for ds in &mut snapshot.daemonsets {
        resolve_selector(&mut ds.node_selector, ids);
    }
    for limit in &mut snapshot.cluster_limits {
        resolve_requirements(&mut limit.selector, ids);
    }
    let rekey = !ids.is_empty();
    // Replicas share one shape: rewrite it once. The old shapes are kept until the end so
    // that no address is reused while it keys the map.
    let mut done: HashMap<*const PodShape, (Arc<PodShape>, Arc<PodShape>)> = HashMap::new();
    let pods = snapshot
        .pending
        .iter_mut()
        .chain(snapshot.nodes.iter_mut().flat_map(|n| n.pods.iter_mut()));
    for pod in pods {
        if !shape_uses(pod, rekey) {
            continue;
        }
        let old = pod.shape().clone();
        let (_, new) = done.entry(Arc::as_ptr(&old)).or_insert_with(|| {
            let mut shape = (*old).clone();
            resolve_shape(&mut shape, ids);
            (old.clone(), Arc::new(shape))
        });
        *pod = pod.with_shared_shape(new.clone());
    }
}

/// Whether anything in `snapshot` names the zone ID key: in a requirement, or, when the
/// zones' IDs are known (`rekey`), as a topology key.
fn uses_zone_id(snapshot: &Snapshot, rekey: bool) -> bool {
    let named = |r: &Requirements| r.get(labels::ZONE_ID).is_some();
    snapshot
        .pools
        .iter()
        .any(|p| named(&p.requirements) || p.min_values.contains_key(labels::ZONE_ID))
        || snapshot.in_flight.iter().any(|c| named(&c.requirements))
        || snapshot
            .daemonsets
            .iter()
            .any(|d| d.node_selector.terms.iter().any(named))
        || snapshot.cluster_limits.iter().any(|l| named(&l.selector))
        || snapshot
            .pending
            .iter()
            .chain(snapshot.nodes.iter().flat_map(|n| n.pods.iter()))
            .any(|p| shape_uses(p, rekey))
}

/// Whether a pod names the zone ID key in a requirement or, with `rekey`, as a topology key.
fn shape_uses(p: &PodShape, rekey: bool) -> bool {
    let named = |r: &Requirements| r.get(labels::ZONE_ID).is_some();
    let keyed = |t: &PodAffinityTerm| t.topology_key == labels::ZONE_ID;
    p.node_selector.terms.iter().any(named)
        || p.strict_node_selector
            .as_ref()
            .is_some_and(|s| s.terms.iter().any(named))
        || p.preferred.iter().any(|(_, r)| named(r))
        || (rekey
            && (p.spread.iter().any(|t| t.topology_key == labels::ZONE_ID)
                || p.affinity.iter().chain(&p.anti_affinity).any(keyed)
                || p.preferred_affinity
                    .iter()
                    .chain(&p.preferred_anti_affinity)
                    .any(|(_, t)| keyed(t))))
}

fn resolve_shape(p: &mut PodShape, ids: &ZoneIds) {
    resolve_selector(&mut p.node_selector, ids);
    if let Some(s) = &mut p.strict_node_selector {
        resolve_selector(s, ids);
    }
    for (_, r) in &mut p.preferred {
        resolve_requirements(r, ids);
    }
    // Counting by zone stands for counting by zone ID only where every zone has its ID.
    if ids.is_empty() {
        return;
    }
    let rekey = |k: &mut String| {
        if k == labels::ZONE_ID {
            *k = labels::ZONE.to_string();
        }
    };
    p.spread
        .iter_mut()
        .for_each(|t: &mut TopologySpread| rekey(&mut t.topology_key));
    p.affinity
        .iter_mut()
        .chain(p.anti_affinity.iter_mut())
        .for_each(|t| rekey(&mut t.topology_key));
    p.preferred_affinity
        .iter_mut()
        .chain(p.preferred_anti_affinity.iter_mut())
        .for_each(|(_, t)| rekey(&mut t.topology_key));
}

fn resolve_selector(s: &mut NodeSelector, ids: &ZoneIds) {
    for t in &mut s.terms {
        resolve_requirements(t, ids);
    }
}

/// Replaces `r`'s constraint on the zone ID by the zone names whose IDs it allows. A zone
/// whose ID is not known has no zone ID label: it stays allowed only where the constraint
/// allows the label to be absent (`NotIn`, `DoesNotExist`).
pub fn resolve_requirements(r: &mut Requirements, ids: &ZoneIds) {
    let Some(c) = r.remove(labels::ZONE_ID) else {
        return;
    };
    let zones: BTreeSet<String> = ids
        .iter()
        .filter(|(_, id)| c.matches(Some(id.as_str())) != c.allow_absent)
        .map(|(zone, _)| zone.clone())
        .collect();
    let zone = Constraint {
        // Nodes always carry a zone; a `NotIn` stays one, as users write it on the zone.
        allow_absent: c.allow_absent,
        values: if c.allow_absent {
            // Every zone but those whose ID the constraint refuses.
            ValueSet::NotIn(zones)
        } else {
            ValueSet::In(zones)
        },
        gt: None,
        lt: None,
    };
    r.add_constraint(labels::ZONE, zone);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Operator;

    fn ids() -> ZoneIds {
        [("us-east-1a", "use1-az4"), ("us-east-1b", "use1-az6")]
            .into_iter()
            .map(|(z, i)| (z.to_string(), i.to_string()))
            .collect()
    }

    fn zones_of(r: &Requirements) -> String {
        format!("{r}")
    }

    #[test]
    fn each_operator_becomes_the_zones_it_allows() {
        let cases = [
            (
                Operator::In,
                vec!["use1-az6"],
                "topology.kubernetes.io/zone In [us-east-1b]",
            ),
            (
                Operator::In,
                vec!["use1-az9"],
                "topology.kubernetes.io/zone In []",
            ),
            (
                Operator::NotIn,
                vec!["use1-az6"],
                "topology.kubernetes.io/zone NotIn [us-east-1b]",
            ),
            (
                Operator::Exists,
                vec![],
                "topology.kubernetes.io/zone In [us-east-1a,us-east-1b]",
            ),
            (
                Operator::DoesNotExist,
                vec![],
                "topology.kubernetes.io/zone NotIn [us-east-1a,us-east-1b]",
            ),
        ];
        for (op, values, want) in cases {
            let mut r = Requirements::new().with(labels::ZONE_ID, op, &values);
            resolve_requirements(&mut r, &ids());
            assert_eq!(zones_of(&r), want, "{op:?} {values:?}");
            assert!(r.get(labels::ZONE_ID).is_none());
        }
    }

    #[test]
    fn the_zones_an_id_allows_meet_a_zone_requirement_already_there() {
        let mut r = Requirements::new()
            .with(labels::ZONE, Operator::In, &["us-east-1a"])
            .with(labels::ZONE_ID, Operator::In, &["use1-az6"]);
        resolve_requirements(&mut r, &ids());
        assert!(!r.satisfiable(), "{r}");
    }
}
