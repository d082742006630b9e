//! Expiration: nodes older than their NodePool's `expireAfter`, which are removed whatever
//! they run (Karpenter v1's expiration controller, `pkg/controllers/nodeclaim/expiration`).
//!
//! Expiration is forceful in Karpenter: the NodeClaim is deleted once it is old enough, with
//! no disruption budget, no replacement launched first and no consolidation check; its pods
//! are evicted by the termination flow within their PodDisruptionBudgets (and wait for pods
//! that may not be disrupted), then planned again like any pending pod.

use crate::model::Snapshot;

/// A node past its NodePool's `expireAfter`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    /// The node.
    pub node: String,
    /// Its NodeClaim, the object to delete.
    pub claim: String,
    /// Its NodePool.
    pub pool: String,
    /// Its age, seconds.
    pub age_s: i64,
    /// The NodePool's `expireAfter`, seconds.
    pub expire_after_s: i64,
}

/// Every managed node of `snap` whose age at `now` (seconds on the clock of the nodes'
/// `created_at`) has reached its NodePool's `expireAfter`, in node order. Nodes already being
/// removed, nodes no NodeClaim manages and pools that never expire are left out.
pub fn expired(snap: &Snapshot, now: i64) -> Vec<Expired> {
    snap.nodes
        .iter()
        .filter(|n| !n.deleting)
        .filter_map(|n| {
            let pool = snap
                .pools
                .iter()
                .find(|p| Some(&p.name) == n.pool.as_ref())?;
            let after = pool.disruption.expire_after_s?;
            let claim = n.claim.clone()?;
            let age = now.saturating_sub(n.created_at);
            (age >= after).then(|| Expired {
                node: n.name.clone(),
                claim,
                pool: pool.name.clone(),
                age_s: age,
                expire_after_s: after,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::{itype, node, pool};
    use crate::model::DisruptionPolicy;

    #[test]
    fn nodes_of_an_expiring_pool_expire_at_their_age_and_others_never() {
        let m5 = itype("m5.large").cpu("2").mem("8Gi").build();
        let expiring = pool("short", vec![m5.clone()])
            .disruption(DisruptionPolicy {
                expire_after_s: Some(3600),
                ..DisruptionPolicy::default()
            })
            .build();
        let forever = pool("long", vec![m5.clone()]).build();
        let mut nodes = Vec::new();
        for (name, p, created, claim, deleting) in [
            ("old", "short", 0, true, false),
            ("exact", "short", 400, true, false),
            ("young", "short", 401, true, false),
            ("going", "short", 0, true, true),
            ("unmanaged", "short", 0, false, false),
            ("kept", "long", 0, true, false),
        ] {
            let mut n = node(name, &m5, "a").pool(p).created(created).build();
            n.claim = claim.then(|| format!("claim-{name}"));
            n.deleting = deleting;
            nodes.push(n);
        }
        let snap = Snapshot {
            pools: vec![expiring, forever],
            nodes,
            ..Snapshot::default()
        };
        let out = expired(&snap, 4000);
        let names: Vec<&str> = out.iter().map(|e| e.node.as_str()).collect();
        assert_eq!(names, ["old", "exact"]);
        assert_eq!(
            out[1],
            Expired {
                node: "exact".into(),
                claim: "claim-exact".into(),
                pool: "short".into(),
                age_s: 3600,
                expire_after_s: 3600,
            }
        );
        // A clock behind the nodes' creation expires nothing.
        assert!(expired(&snap, -5).is_empty());
    }
}
