//! Zone preference for all-or-nothing groups: a gang's new claims are narrowed to one zone.
//!
//! The planner places a group's members as it places any pod, so each new claim may keep
//! offerings in several zones and the cloud may spread a gang across zones, where its
//! collective traffic is slow and billed. After planning, [`prefer_one_zone`] looks at every
//! group whose members were all placed and, when one zone can hold every member (the zones of
//! the existing nodes and in-flight claims used, and a zone every new claim offers), narrows the
//! group's new claims to the cheapest such zone. A group that fits on one new node is left as
//! planned: it is in one zone anyway, and the other zones stay as launch fallbacks. It only removes offerings, never members, so a
//! plan that was feasible stays feasible; groups with a hard zone topology spread are left alone
//! because one zone would break their spread, and so are groups in a pool with `minValues`.

use std::collections::{BTreeMap, BTreeSet};

use crate::labels;
use crate::model::{PodKey, Snapshot};
use crate::plan::{NewClaim, Plan};
use crate::requirements::Operator;

/// Narrows each all-or-nothing group's new claims to one zone when one zone can hold the group.
///
/// Guarantees: only offerings are removed; every narrowed claim keeps at least one option;
/// claims shared with pods of other groups or with ungrouped pods are narrowed too (those pods
/// accept any zone the claim offers, which the narrowed claim still does); ties between zones
/// are broken by zone name, so the result is deterministic.
pub fn prefer_one_zone(snap: &Snapshot, plan: &mut Plan) {
    let mut group_of: BTreeMap<&PodKey, &str> = BTreeMap::new();
    let mut spread: BTreeSet<&str> = BTreeSet::new();
    for p in &snap.pending {
        if let Some(g) = &p.group {
            group_of.insert(&p.key, g.as_str());
            if p.spread
                .iter()
                .any(|t| t.hard && t.topology_key == labels::ZONE)
            {
                spread.insert(g.as_str());
            }
        }
    }
    if group_of.is_empty() {
        return;
    }
    let group_key = |pod: &PodKey| group_of.get(pod).copied();
    // Zones each group is already tied to by existing nodes and in-flight claims.
    let mut fixed: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    // Members placed outside new claims, per group.
    let mut elsewhere: BTreeMap<&str, usize> = BTreeMap::new();
    for pl in &plan.existing {
        let Some(g) = group_key(&pl.pod) else {
            continue;
        };
        *elsewhere.entry(g).or_default() += 1;
        let zone = snap
            .nodes
            .iter()
            .find(|n| n.name == pl.target)
            .and_then(|n| n.labels.get(labels::ZONE).cloned());
        if let Some(z) = zone {
            fixed.entry(g).or_default().insert(z);
        }
    }
    for pl in &plan.in_flight {
        let Some(g) = group_key(&pl.pod) else {
            continue;
        };
        *elsewhere.entry(g).or_default() += 1;
        let zone = snap
            .in_flight
            .iter()
            .find(|c| c.name == pl.target)
            .and_then(|c| c.requirements.get(labels::ZONE))
            .and_then(|c| c.single_value().map(str::to_string));
        if let Some(z) = zone {
            fixed.entry(g).or_default().insert(z);
        }
    }
    // The new claims of each group.
    let mut claims_of: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (ci, c) in plan.new_claims.iter().enumerate() {
        let groups: BTreeSet<&str> = c.pods.iter().filter_map(&group_key).collect();
        for g in groups {
            claims_of.entry(g).or_default().push(ci);
        }
    }
    let placed: BTreeSet<&str> = claims_of.keys().copied().collect();
    for g in placed {
        if spread.contains(g) {
            continue;
        }
        let claims = &claims_of[g];
        // Narrowing drops instance types without an offering in the zone: a pool's minValues
        // (flexibility the user demands) outranks this preference.
        if claims.iter().any(|ci| {
            snap.pools
                .iter()
                .any(|p| p.name == plan.new_claims[*ci].pool && !p.min_values.is_empty())
        }) {
            continue;
        }
        // A gang on a single new node is in one zone whichever the cloud picks: narrowing it
        // would only take away the launch's fallback zones.
        if claims.len() == 1 && !elsewhere.contains_key(g) {
            continue;
        }
        let mut zones: Option<BTreeSet<String>> = fixed.get(g).cloned();
        for &ci in claims {
            let offered = claim_zones(&plan.new_claims[ci]);
            zones = Some(match zones {
                None => offered,
                Some(z) => z.intersection(&offered).cloned().collect(),
            });
        }
        let Some(zones) = zones else { continue };
        // Already in one zone, or no zone holds everything: nothing to prefer.
        if zones.is_empty()
            || claims
                .iter()
                .all(|ci| claim_zones(&plan.new_claims[*ci]).len() <= 1)
        {
            continue;
        }
        let best = zones
            .iter()
            .map(|z| {
                let cost: f64 = claims
                    .iter()
                    .map(|ci| cheapest_in(&plan.new_claims[*ci], z))
                    .sum();
                (cost, z.clone())
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let Some((_, zone)) = best else { continue };
        for &ci in claims {
            narrow(snap, &mut plan.new_claims[ci], &zone);
        }
    }
}

/// Clears `NewClaim::group` on the claims of a group whose claims may land in more than one
/// zone (a hard zone spread, or a pool's `minValues` kept them apart): cloud placement groups
/// live in one zone, so one member's zone would refuse the others.
pub fn placement_only_in_one_zone(plan: &mut Plan) {
    let mut zones: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for c in &plan.new_claims {
        if let Some(g) = &c.group {
            zones.entry(g.clone()).or_default().extend(claim_zones(c));
        }
    }
    for c in &mut plan.new_claims {
        if c.group.as_ref().is_some_and(|g| zones[g].len() > 1) {
            c.group = None;
        }
    }
}

fn claim_zones(c: &NewClaim) -> BTreeSet<String> {
    c.instance_types
        .iter()
        .flat_map(|o| o.offerings.iter().map(|(z, _, _)| z.to_string()))
        .collect()
}

fn cheapest_in(c: &NewClaim, zone: &str) -> f64 {
    c.instance_types
        .iter()
        .flat_map(|o| o.offerings.iter())
        .filter(|(z, _, _)| &**z == zone)
        .map(|(_, _, p)| *p)
        .fold(f64::INFINITY, f64::min)
}

/// Keeps only `zone`'s offerings, re-sorts options by price and records the zone in the
/// claim's requirements (so the launched node and any later re-plan agree).
fn narrow(snap: &Snapshot, c: &mut NewClaim, zone: &str) {
    for o in &mut c.instance_types {
        o.retain_offerings(|(z, _, _)| &**z == zone);
        o.price = o.offerings.first().map_or(f64::INFINITY, |x| x.2);
    }
    c.instance_types.retain(|o| !o.offerings.is_empty());
    c.instance_types.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
    });
    c.price = c.instance_types.first().map_or(0.0, |o| o.price);
    // A zone taken from the claim's own offerings is always a valid label value.
    let _ = c
        .requirements
        .add(labels::ZONE, Operator::In, &[zone.to_string()]);
    if let Some(first) = c.instance_types.first() {
        c.gpus = snap
            .pools
            .iter()
            .find(|p| p.name == c.pool)
            .and_then(|p| {
                p.instance_types
                    .iter()
                    .find(|t| *t.name == *first.instance_type)
            })
            .and_then(|t| t.gpu.as_ref())
            .map_or(c.gpus, |g| g.count);
    }
}
