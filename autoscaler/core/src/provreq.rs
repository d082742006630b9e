//! The ProvisioningRequest trial plan, shared by the controller and the simulator: a request's
//! pods are planned on their own, as one all-or-nothing group, against the cluster with every
//! other booking held; a check-capacity request is planned without NodePools, so that only
//! existing and in-flight capacity can answer it.

use std::collections::BTreeMap;

use crate::model::{Group, Pod, Snapshot};
use crate::plan::Plan;
use crate::provision::plan_provisioning;

/// The snapshot a request is planned in: `snap` with the request's `pods` as the only pending
/// ones, in one all-or-nothing group named `group`; without NodePools when `existing_only`
/// (check-capacity).
pub fn trial(snap: &Snapshot, group: &str, pods: Vec<Pod>, existing_only: bool) -> Snapshot {
    let mut trial = snap.clone();
    trial.groups = BTreeMap::from([(
        group.to_string(),
        Group {
            name: group.to_string(),
            min_count: u32::try_from(pods.len()).unwrap_or(u32::MAX),
        },
    )]);
    trial.pending = pods;
    if existing_only {
        // Existing and in-flight capacity only: no NodePool to launch from.
        trial.pools.clear();
    }
    trial
}

/// The request's plan: [`plan_provisioning`] of its [`trial`], and when some pod has no place,
/// why, in the words the request's condition carries.
pub fn plan(
    snap: &Snapshot,
    group: &str,
    pods: Vec<Pod>,
    existing_only: bool,
) -> (Plan, Option<String>) {
    let count = pods.len();
    let plan = plan_provisioning(&trial(snap, group, pods, existing_only));
    let why = plan.unschedulable.first().map(|u| {
        if existing_only {
            // The planner saw no NodePool because this class never launches; NodePools may
            // well exist.
            format!(
                "{} of {count} pod(s) do not fit on existing or launching nodes (check-capacity never launches nodes)",
                plan.unschedulable.len(),
            )
        } else {
            format!("pod {} {}", u.pod.name, u.reason)
        }
    });
    (plan, why)
}

/// The most pods one ProvisioningRequest may ask for unless the controller is told otherwise
/// (`--provreq-max-pods`): a larger request is refused before any of its pods is built, and a
/// simulated scenario may not ask for one either.
pub const MAX_PODS: u64 = 10_000;

/// What a booking still holds once some of its request's pods are bound, the rule the
/// controller and the simulator share: `targets` are the booked places in booking order, each
/// with how many of the request's pods it was to take; `bound_on` has one entry per bound pod,
/// the target it is on (`None`: a place not booked, for kube-scheduler binds a request's pods
/// wherever they fit). A pod first frees a place on its own target, the room it took; a pod
/// bound elsewhere frees one on the last target still holding one. Freeing by count alone
/// (the last places first, whatever the pods took) left a phantom on a node beside the pod
/// that had taken its room, and counted a place still needed as free.
pub fn unconsumed<T: Ord + Clone>(
    targets: &[(T, u32)],
    bound_on: impl IntoIterator<Item = Option<T>>,
) -> Vec<(T, u32)> {
    let mut left: Vec<(T, u32)> = targets.to_vec();
    // Each target's entries in booking order and the first that may still hold a place: a
    // request of thousands of pods would otherwise search the booking once per bound pod.
    let mut entries: BTreeMap<&T, (Vec<usize>, usize)> = BTreeMap::new();
    for (i, (t, _)) in targets.iter().enumerate() {
        entries.entry(t).or_default().0.push(i);
    }
    let mut elsewhere = 0u32;
    for on in bound_on {
        let hit = on.and_then(|t| {
            let (at, first) = entries.get_mut(&t)?;
            while at.get(*first).is_some_and(|i| left[*i].1 == 0) {
                *first += 1;
            }
            at.get(*first).copied()
        });
        match hit {
            Some(i) => left[i].1 -= 1,
            None => elsewhere += 1,
        }
    }
    for (_, n) in left.iter_mut().rev() {
        let take = elsewhere.min(*n);
        *n -= take;
        elsewhere -= take;
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::{pod, pool};

    /// A check-capacity request is planned without NodePools and says so when it does not fit;
    /// a best-effort-atomic one may open claims.
    #[test]
    fn check_capacity_never_launches() {
        let snap = Snapshot {
            pools: vec![pool("default", vec![]).build()],
            ..Default::default()
        };
        let pods = vec![pod("a").build(), pod("b").build()];
        let t = trial(&snap, "req", pods.clone(), true);
        assert!(t.pools.is_empty());
        assert_eq!(t.groups["req"].min_count, 2);
        let (p, why) = plan(&snap, "req", pods, true);
        assert!(p.new_claims.is_empty());
        assert_eq!(
            why.as_deref(),
            Some(
                "2 of 2 pod(s) do not fit on existing or launching nodes (check-capacity never launches nodes)"
            )
        );
        let t = trial(&snap, "req", vec![], false);
        assert_eq!(t.pools.len(), 1);
    }

    /// Each case: booked places, where the bound pods are, what stays held.
    #[test]
    fn a_bound_pod_frees_its_own_place_first() {
        let booked = [("node-a", 1), ("claim-b", 1), ("claim-c", 2)];
        let cases: [(&[Option<&str>], [u32; 3]); 6] = [
            (&[], [1, 1, 2]),
            // On its own place.
            (&[Some("node-a")], [0, 1, 2]),
            (&[Some("claim-c"), Some("claim-c")], [1, 1, 0]),
            // Elsewhere: the last place still held goes.
            (&[None], [1, 1, 1]),
            (&[Some("claim-c"), None, None], [1, 0, 0]),
            // More on one place than it had: the extra counts as elsewhere.
            (&[Some("node-a"), Some("node-a")], [0, 1, 1]),
        ];
        for (bound, want) in cases {
            let left = unconsumed(&booked, bound.iter().copied());
            let got: Vec<u32> = left.iter().map(|(_, n)| *n).collect();
            assert_eq!(got, want, "bound on {bound:?}");
            assert!(
                left.iter()
                    .map(|(t, _)| *t)
                    .eq(booked.iter().map(|(t, _)| *t))
            );
        }
        let all = [Some("node-a"), None, None, None, None];
        assert!(unconsumed(&booked, all).iter().all(|(_, n)| *n == 0));
    }

    /// A target booked in two entries gives up its first entry's places first, then its
    /// second's, before a pod on it counts as bound elsewhere.
    #[test]
    fn a_target_in_two_entries_frees_them_in_booking_order() {
        let booked = [("a", 1), ("b", 1), ("a", 2)];
        let left = |bound: &[&str]| -> Vec<u32> {
            let on = bound.iter().map(|t| Some(*t));
            unconsumed(&booked, on).iter().map(|(_, n)| *n).collect()
        };
        assert_eq!(left(&["a"]), [0, 1, 2]);
        assert_eq!(left(&["a", "a"]), [0, 1, 1]);
        assert_eq!(left(&["a", "a", "a", "b"]), [0, 0, 0]);
        assert_eq!(left(&["a", "a", "a", "a"]), [0, 0, 0]);
        assert_eq!(left(&["b", "b"]), [1, 0, 1]);
    }
}
