//! Consolidation method 3, replace: one underutilized node at a time, replaced by one strictly
//! cheaper node that holds its pods. A replacement keeps only offerings priced below the node
//! it replaces, so a capacity fallback cannot cost more; a spot node is replaced spot-to-spot
//! as Karpenter allows it.

use std::collections::BTreeSet;

use crate::labels;
use crate::model::{DisruptionReason, Node, Snapshot};
use crate::plan::NewClaim;

use super::candidates::movable;
use super::simulate::nowhere_to_go;
use super::{Blocker, Command, Method, Pass, VerdictKind};

impl Pass<'_> {
    /// Replaces node `n` (`removed`, its index in the working cluster) by a strictly cheaper
    /// node. False when the node is left over: no such replacement (the verdict says why).
    pub(super) fn replace(&mut self, n: &Node, removed: &BTreeSet<usize>) -> bool {
        let snap = self.snap;
        let plan = self.simulate(removed, true);
        let price = n.price.unwrap_or(0.0);
        // Right-sizing asks for a real saving, and keeps only offerings that make it.
        let right_size = self.right_size.get(&n.name).cloned();
        let bound = right_size
            .as_ref()
            .map_or(price, |(r, _)| price * (1.0 - r));
        let mut replacement = (plan.unschedulable.is_empty()
            && plan.new_claims.len() == 1
            && plan.new_claims[0].price < bound)
            .then(|| cheaper_only(snap, plan.new_claims[0].clone(), bound))
            .flatten();
        if is_spot(n)
            && let Some(claim) = replacement.take()
        {
            match spot_to_spot(snap, claim, self.config.min_spot_to_spot_types) {
                Ok(claim) => replacement = Some(claim),
                Err(why) => {
                    self.keep(&n.name, Blocker::new(VerdictKind::NoPlaceForPods, why));
                    return false;
                }
            }
        }
        let Some(claim) = replacement else {
            let why = match &right_size {
                // Above its threshold, the node is needed unless it can be right-sized.
                Some((r, above)) => Blocker::new(
                    VerdictKind::AboveThreshold,
                    format!(
                        "{above}, and no node {:.0} % cheaper holds its pods",
                        r * 100.0
                    ),
                ),
                None => Blocker::new(
                    VerdictKind::NoPlaceForPods,
                    plan.unschedulable
                        .first()
                        .map(nowhere_to_go)
                        .unwrap_or_else(|| "no strictly cheaper replacement".into()),
                ),
            };
            self.keep(&n.name, why);
            return false;
        };
        if let Err(e) =
            self.allowance
                .admit(snap, &[n], DisruptionReason::Underutilized, true, true)
        {
            self.keep(&n.name, e);
            return true;
        }
        let pods = movable(n).iter().map(|p| p.key.clone()).collect();
        self.apply(removed, &plan);
        self.gone.insert(n.name.clone());
        self.disrupt(
            &n.name,
            VerdictKind::Underutilized,
            match &right_size {
                Some((_, above)) => format!(
                    "right-sized: {above}, replaced by a cheaper node ({:.3} < {price:.3} per hour)",
                    claim.price
                ),
                None => format!(
                    "underutilized: replaced by a cheaper node ({:.3} < {price:.3} per hour)",
                    claim.price
                ),
            },
        );
        self.out.commands.push(Command {
            reason: DisruptionReason::Underutilized,
            method: Method::Replace,
            nodes: vec![n.name.clone()],
            pods,
            savings: price - claim.price,
            replacement: Some(claim),
            decided_at: self.now,
        });
        true
    }
}

/// Keeps only the offerings of a replacement priced below `below` (what the replaced nodes
/// cost), so that whichever one the launch falls back to when cheaper ones are out of capacity,
/// the replacement is still strictly cheaper. The cheapest option is below by construction, so
/// the claim's price and GPU count do not change. `None` when what is left no longer meets the
/// pool's `minValues`, or the lower ones the claim was planned with under `BestEffort`
/// ([`crate::provision::claim_meets_min_values`]), as Karpenter's consolidation filters by
/// price against the requirements its simulation relaxed.
pub(super) fn cheaper_only(snap: &Snapshot, mut claim: NewClaim, below: f64) -> Option<NewClaim> {
    for o in &mut claim.instance_types {
        o.retain_offerings(|(_, _, p)| *p < below);
    }
    claim.instance_types.retain(|o| !o.offerings.is_empty());
    let pool = snap.pools.iter().find(|p| p.name == claim.pool)?;
    crate::provision::claim_meets_min_values(pool, &claim).then_some(claim)
}

/// Whether a node runs on spot capacity.
pub(super) fn is_spot(n: &Node) -> bool {
    n.labels.get(labels::CAPACITY_TYPE).map(String::as_str)
        == Some(crate::instance::CapacityType::Spot.as_str())
}

/// The replacement for one spot node, as Karpenter's spot-to-spot consolidation allows it:
/// when the replacement could launch as spot it must (its on-demand offerings are dropped),
/// and then at least `min_types` instance types must offer spot below the node's price, so
/// the launch has room to pick a type that is not the next to be interrupted. A replacement
/// with only on-demand offerings is an ordinary (strictly cheaper) replacement.
pub(super) fn spot_to_spot(
    snap: &Snapshot,
    mut claim: NewClaim,
    min_types: usize,
) -> Result<NewClaim, String> {
    let spot = crate::instance::CapacityType::Spot;
    if !claim
        .instance_types
        .iter()
        .any(|o| o.offerings.iter().any(|x| x.1 == spot))
    {
        return Ok(claim);
    }
    for o in &mut claim.instance_types {
        o.retain_offerings(|x| x.1 == spot);
        if let Some(first) = o.offerings.first() {
            o.price = first.2;
        }
    }
    claim.instance_types.retain(|o| !o.offerings.is_empty());
    claim.instance_types.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
    });
    if let Ok(c) = crate::requirements::Constraint::from_operator(
        labels::CAPACITY_TYPE,
        crate::requirements::Operator::In,
        &[spot.as_str().to_string()],
    ) {
        claim.requirements.add_constraint(labels::CAPACITY_TYPE, c);
    }
    let count = claim.instance_types.len();
    if count < min_types {
        return Err(format!(
            "spot-to-spot replacement needs at least {min_types} cheaper spot instance types \
             that fit its pods; only {count} found"
        ));
    }
    if let Some(first) = claim.instance_types.first() {
        claim.price = first.price;
    }
    let pool = snap.pools.iter().find(|p| p.name == claim.pool);
    let meets = |c: &NewClaim| pool.is_none_or(|p| crate::provision::claim_meets_min_values(p, c));
    if !meets(&claim) {
        return Err("spot-to-spot replacement would not meet the NodePool's minValues".into());
    }
    // Only the cheapest `min_types` are offered, as in Karpenter: the flexibility asked for,
    // without launching on a type far dearer than the cheapest. Where the pool's minValues
    // needs more of them, the fewest cheapest that meet it (Karpenter truncates to the larger
    // of the two counts).
    if min_types > 0 {
        for keep in min_types..count {
            let mut cut = claim.clone();
            cut.instance_types.truncate(keep);
            if meets(&cut) {
                claim = cut;
                break;
            }
        }
    }
    Ok(claim)
}
