//! Preference relaxation, as Karpenter's scheduler does it: a pending pod's preferred pod
//! affinity and anti-affinity terms and its `ScheduleAnyway` spreads are held as required
//! while the planner tries them, and given up one at a time for the pods they leave without
//! a place.
//!
//! Karpenter (`pkg/controllers/provisioning/scheduling/preferences.go`, `Relax`) gives up, in
//! this order: preferred pod affinity terms (heaviest first), preferred pod anti-affinity
//! terms (heaviest first), preferred node affinity terms (heaviest first), `ScheduleAnyway`
//! spreads, and last adds a toleration of `PreferNoSchedule` taints. Of the preferred node
//! affinity terms only the heaviest one not given up is held as required, as Karpenter's
//! `NewPodRequirements` holds it, against existing nodes, claims in flight and the claims of
//! the plan alike; the others stay preferences, which the planner weighs when NodePools
//! compete for a new node (see [`super`]), as it weighs `PreferNoSchedule` taints.
//! Karpenter relaxes a pod as soon as it fails and tries it again at once; this planner packs
//! a batch, so it plans the batch again instead: each pass gives up one more preference of
//! every pod the last pass left unplaced, and after [`ONE_STEP_PASSES`] passes every
//! preference of the pods still unplaced goes at once (the others keep what they hold), so a
//! round plans at most `ONE_STEP_PASSES + 3` times, and once when no pending pod states a
//! preference.
//!
//! A held anti-affinity term binds only its own pod (`PodAffinityTerm::held`): as in
//! Karpenter, which tracks no inverse preferred anti-affinity, the pods it selects are free
//! to join that pod's domain.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::model::{Pod, PodAffinityTerm, PodShape, Snapshot};
use crate::plan::Plan;

/// Passes that each give up one preference of every pod left unplaced.
const ONE_STEP_PASSES: usize = 3;

/// The preferences of `pod` this module relaxes, in the order they are given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Soft {
    /// Index into `preferred_affinity`.
    Affinity(usize),
    /// Index into `preferred_anti_affinity`.
    Anti(usize),
    /// Index into `preferred` (node affinity).
    Node(usize),
    /// Index into `spread` (a `ScheduleAnyway` one).
    Spread(usize),
}

/// `pod`'s preferences in Karpenter's order of giving up: affinity, anti-affinity and node
/// affinity terms, each heaviest first (equal weights in their written order), then
/// `ScheduleAnyway` spreads in their written order.
fn give_up_order(pod: &PodShape) -> Vec<Soft> {
    fn by_weight<T>(terms: &[(i32, T)]) -> Vec<usize> {
        let mut ix: Vec<usize> = (0..terms.len()).collect();
        ix.sort_by_key(|i| std::cmp::Reverse(terms[*i].0));
        ix
    }
    let mut out: Vec<Soft> = by_weight(&pod.preferred_affinity)
        .into_iter()
        .map(Soft::Affinity)
        .collect();
    out.extend(
        by_weight(&pod.preferred_anti_affinity)
            .into_iter()
            .map(Soft::Anti),
    );
    out.extend(by_weight(&pod.preferred).into_iter().map(Soft::Node));
    out.extend(
        pod.spread
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.hard)
            .map(|(i, _)| Soft::Spread(i)),
    );
    out
}

/// Whether `pod` has a preference this module holds and gives up.
pub(crate) fn relaxable(pod: &PodShape) -> bool {
    steps(pod) > 0
}

/// How many preferences of `pod` can be given up.
fn steps(pod: &PodShape) -> usize {
    pod.preferred_affinity.len()
        + pod.preferred_anti_affinity.len()
        + pod.preferred.len()
        + pod.spread.iter().filter(|t| !t.hard).count()
}

/// `pod` as the planner tries it with its first `given_up` preferences given up: the others
/// held as required (held terms marked [`PodAffinityTerm::held`]), but for the preferred node
/// affinity terms past the heaviest one kept, which stay preferences; the given-up ones gone.
fn holding(pod: &PodShape, given_up: usize) -> PodShape {
    let order = give_up_order(pod);
    let kept: BTreeSet<usize> = (given_up..order.len()).collect();
    let mut out = pod.clone();
    out.preferred_affinity.clear();
    out.preferred_anti_affinity.clear();
    out.preferred.clear();
    out.spread.clear();
    let mut held_node = None;
    let held = |t: &PodAffinityTerm| PodAffinityTerm {
        held: true,
        ..t.clone()
    };
    for (at, soft) in order.iter().enumerate() {
        if !kept.contains(&at) {
            continue;
        }
        match *soft {
            Soft::Affinity(i) => out.affinity.push(held(&pod.preferred_affinity[i].1)),
            Soft::Anti(i) => out
                .anti_affinity
                .push(held(&pod.preferred_anti_affinity[i].1)),
            Soft::Node(i) => {
                held_node.get_or_insert(i);
            }
            Soft::Spread(_) => {}
        }
    }
    // Kept node terms stay in their written order; the one held is still met by every node
    // the pod may use, so the planner's weighing of NodePools is unchanged by keeping it.
    for (i, term) in pod.preferred.iter().enumerate() {
        let at = order.iter().position(|s| *s == Soft::Node(i));
        if at.is_some_and(|at| kept.contains(&at)) {
            out.preferred.push(term.clone());
        }
    }
    if let Some(i) = held_node {
        out.require_any(std::slice::from_ref(&pod.preferred[i].1));
    }
    for (i, t) in pod.spread.iter().enumerate() {
        let soft_at = order.iter().position(|s| *s == Soft::Spread(i));
        match soft_at {
            None => out.spread.push(t.clone()),
            Some(at) if kept.contains(&at) => {
                let mut t = t.clone();
                t.hard = true;
                out.spread.push(t);
            }
            Some(_) => {}
        }
    }
    out
}

/// What [`plan_relaxing`] returns: the last pass's plan (made on the snapshot with the pods
/// as that pass tried them), what the planning function returned with it, and per pending pod
/// how many of its preferences that pass had given up ([`given_up`] says which).
pub(crate) struct Relaxed<T> {
    pub(crate) plan: Plan,
    pub(crate) extra: T,
    pub(crate) given_up: Vec<usize>,
}

/// The first `n` preferences `pod` gives up, in words, for `explain`.
pub(crate) fn given_up(pod: &PodShape, n: usize) -> Vec<String> {
    let term = |kind: &str, w: i32, t: &PodAffinityTerm| {
        format!(
            "preferred pod {kind} (weight {w}) over {} with pods {}",
            t.topology_key, t.selector
        )
    };
    give_up_order(pod)
        .into_iter()
        .take(n)
        .map(|soft| match soft {
            Soft::Affinity(i) => {
                let (w, t) = &pod.preferred_affinity[i];
                term("affinity", *w, t)
            }
            Soft::Anti(i) => {
                let (w, t) = &pod.preferred_anti_affinity[i];
                term("anti-affinity", *w, t)
            }
            Soft::Node(i) => {
                let (w, r) = &pod.preferred[i];
                format!("preferred node affinity (weight {w}) {r}")
            }
            Soft::Spread(i) => {
                let t = &pod.spread[i];
                format!(
                    "ScheduleAnyway topology spread over {} (maxSkew {}) of pods {}",
                    t.topology_key, t.max_skew, t.selector
                )
            }
        })
        .collect()
}

/// Plans `snapshot` with `plan`, relaxing preferences as the module documentation says.
///
/// A pod an earlier plan nominated to a claim still in flight ([`Snapshot::nominated`]) is
/// planned with every preference given up: that plan already chose its place, and holding it
/// to a preference it was relieved of could open a second node for it. A nomination to a
/// claim that is gone (its launch failed) counts for nothing.
///
/// Copies the snapshot once when some pending pod states a preference;
/// [`plan_relaxing_in`] lends its own instead.
pub(crate) fn plan_relaxing<T>(
    snapshot: &Snapshot,
    mut plan: impl FnMut(&Snapshot) -> (Plan, T),
) -> Relaxed<T> {
    if !snapshot.pending.iter().any(|p| relaxable(p)) {
        let (plan, extra) = plan(snapshot);
        return unrelaxed(snapshot, plan, extra);
    }
    plan_relaxing_in(&mut snapshot.clone(), plan)
}

/// [`plan_relaxing`] on a snapshot the caller lends: its pending pods are swapped for the
/// ones each pass tries, and put back before it returns, so nothing is copied (disruption
/// plans once per candidate).
pub(crate) fn plan_relaxing_in<T>(
    snapshot: &mut Snapshot,
    mut plan: impl FnMut(&Snapshot) -> (Plan, T),
) -> Relaxed<T> {
    if !snapshot.pending.iter().any(|p| relaxable(p)) {
        let (plan, extra) = plan(snapshot);
        return unrelaxed(snapshot, plan, extra);
    }
    let settled = settled(snapshot);
    let pending = std::mem::take(&mut snapshot.pending);
    let out = relax(&pending, &settled, |pods| {
        snapshot.pending = pods;
        plan(snapshot)
    });
    snapshot.pending = pending;
    out
}

fn unrelaxed<T>(snapshot: &Snapshot, plan: Plan, extra: T) -> Relaxed<T> {
    Relaxed {
        plan,
        extra,
        given_up: vec![0; snapshot.pending.len()],
    }
}

/// Per pending pod: nominated by an earlier plan to a claim still in flight.
fn settled(snapshot: &Snapshot) -> Vec<bool> {
    snapshot
        .pending
        .iter()
        .map(|p| {
            snapshot
                .nominated
                .get(&p.key)
                .is_some_and(|claim| snapshot.in_flight.iter().any(|c| &c.name == claim))
        })
        .collect()
}

/// The passes: `plan_pods` plans the batch with the pods as given. Only pods a pass leaves
/// unplaced give up more; the last pass's plan stands, whatever it leaves unplaced.
fn relax<T>(
    pending: &[Pod],
    settled: &[bool],
    mut plan_pods: impl FnMut(Vec<Pod>) -> (Plan, T),
) -> Relaxed<T> {
    let most: Vec<usize> = pending.iter().map(|p| steps(p)).collect();
    let mut given_up: Vec<usize> = most
        .iter()
        .zip(settled)
        .map(|(n, s)| if *s { *n } else { 0 })
        .collect();
    let mut pass = 0;
    loop {
        let (out, extra) = plan_pods(held_pods(pending, &given_up));
        let failed: BTreeSet<&crate::model::PodKey> =
            out.unschedulable.iter().map(|u| &u.pod).collect();
        let mut changed = false;
        for (i, p) in pending.iter().enumerate() {
            if given_up[i] < most[i] && failed.contains(&p.key) {
                given_up[i] = if pass < ONE_STEP_PASSES {
                    given_up[i] + 1
                } else {
                    most[i]
                };
                changed = true;
            }
        }
        if !changed {
            return Relaxed {
                plan: out,
                extra,
                given_up,
            };
        }
        // Past the one-step passes a failed pod gives up everything at once; a pass after
        // that can only fail pods placed before, and they get one more pass, the last.
        if pass > ONE_STEP_PASSES {
            let (plan, extra) = plan_pods(held_pods(pending, &given_up));
            return Relaxed {
                plan,
                extra,
                given_up,
            };
        }
        pass += 1;
    }
}

/// The pending pods as a pass tries them. Pods sharing a shape and a number of preferences
/// given up share the held shape too (a workload's replicas stay one shape).
fn held_pods(pending: &[Pod], given_up: &[usize]) -> Vec<Pod> {
    let mut shared: HashMap<(*const PodShape, usize), Arc<PodShape>> = HashMap::new();
    pending
        .iter()
        .zip(given_up)
        .map(|(p, g)| {
            if steps(p) == 0 {
                return p.clone();
            }
            let shape = shared
                .entry((Arc::as_ptr(p.shape()), *g))
                .or_insert_with(|| Arc::new(holding(p, *g)));
            p.with_shared_shape(shape.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::pod;
    use crate::labels::{ARCH, HOSTNAME, ZONE};
    use crate::requirements::{Labels, Operator, Requirements};

    fn labels(kv: &[(&str, &str)]) -> Labels {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn preferences_go_affinity_then_anti_affinity_heaviest_first_then_soft_spreads() {
        let p = pod("p")
            .spread(ZONE, 1, "web")
            .schedule_anyway()
            .spread(HOSTNAME, 1, "web")
            .prefer_anti_affinity(1, HOSTNAME, "a1")
            .prefer_anti_affinity(10, ZONE, "a10")
            .prefer_affinity(5, ZONE, "f5")
            .prefer_affinity(50, HOSTNAME, "f50")
            .build();
        assert_eq!(
            give_up_order(&p),
            vec![
                Soft::Affinity(1),
                Soft::Affinity(0),
                Soft::Anti(1),
                Soft::Anti(0),
                Soft::Spread(0)
            ]
        );
        assert_eq!(steps(&p), 5);
        let apps = |ts: &[PodAffinityTerm]| -> Vec<String> {
            ts.iter().map(|t| format!("{:?}", t.selector)).collect()
        };
        // Nothing given up: every preference held, marked as held; required terms unmarked.
        let all = holding(&p, 0);
        assert_eq!(all.affinity.len(), 2);
        assert_eq!(all.anti_affinity.len(), 2);
        assert!(
            all.affinity
                .iter()
                .chain(&all.anti_affinity)
                .all(|t| t.held)
        );
        assert!(all.spread.iter().all(|t| t.hard));
        assert_eq!(all.spread.len(), 2);
        assert!(all.preferred_affinity.is_empty() && all.preferred_anti_affinity.is_empty());
        // Three given up: both affinity terms and the heavier anti-affinity term.
        let three = holding(&p, 3);
        assert!(three.affinity.is_empty());
        let lighter = [p.preferred_anti_affinity[0].1.clone()];
        assert_eq!(apps(&three.anti_affinity), apps(&lighter));
        assert_eq!(three.spread.len(), 2);
        // Everything given up: the soft spread is gone, the hard one stays.
        let none = holding(&p, 5);
        assert!(none.affinity.is_empty() && none.anti_affinity.is_empty());
        assert_eq!(none.spread.len(), 1);
        assert_eq!(none.spread[0].topology_key, HOSTNAME);
        assert!(none.spread[0].hard);
    }

    #[test]
    fn the_heaviest_node_preference_left_is_held_and_the_strict_selection_kept() {
        let z = |v: &str| Requirements::new().with(ZONE, Operator::In, &[v]);
        let p = pod("p")
            .select(ARCH, "amd64")
            .prefer(1, z("a"))
            .prefer(7, z("b"))
            .prefer_anti_affinity(3, HOSTNAME, "web")
            .build();
        // Pod (anti-)affinity goes before node affinity, whatever the weights.
        assert_eq!(
            give_up_order(&p),
            vec![Soft::Anti(0), Soft::Node(1), Soft::Node(0)]
        );
        // Held: zone b (weight 7) is required beside the pod's own arch; zone a stays a
        // preference; the pod's own selection is kept for its spreads.
        let held = holding(&p, 1);
        assert!(
            held.node_selector
                .matches(&labels(&[(ARCH, "amd64"), (ZONE, "b")]))
        );
        assert!(
            !held
                .node_selector
                .matches(&labels(&[(ARCH, "amd64"), (ZONE, "a")]))
        );
        assert_eq!(held.preferred.len(), 2);
        assert_eq!(held.strict_node_selector.as_ref(), Some(&p.node_selector));
        assert_eq!(held.own_node_selector(), &p.node_selector);
        // One more given up: zone a is held, and b is gone.
        let next = holding(&p, 2);
        assert!(
            next.node_selector
                .matches(&labels(&[(ARCH, "amd64"), (ZONE, "a")]))
        );
        assert_eq!(next.preferred, vec![(1, z("a"))]);
        // All given up: the pod as it is, without its preferences.
        let none = holding(&p, 3);
        assert_eq!(none.node_selector, p.node_selector);
        assert!(none.preferred.is_empty() && none.strict_node_selector.is_none());
        assert_eq!(
            given_up(&p, 2)[1],
            "preferred node affinity (weight 7) topology.kubernetes.io/zone In [b]"
        );
    }

    #[test]
    fn a_held_node_preference_that_conflicts_matches_no_node() {
        let p = pod("p")
            .select(ZONE, "a")
            .prefer(1, Requirements::new().with(ZONE, Operator::In, &["b"]))
            .build();
        let held = holding(&p, 0);
        assert_eq!(held.node_selector.terms.len(), 1);
        assert!(!held.node_selector.matches(&labels(&[(ZONE, "a")])));
        assert!(!held.node_selector.matches(&labels(&[(ZONE, "b")])));
    }

    #[test]
    fn replicas_share_their_held_shape_and_plain_pods_keep_theirs() {
        let a = pod("a").prefer_anti_affinity(1, HOSTNAME, "web").build();
        let mut b = a.clone();
        b.key.name = "b".into();
        let plain = pod("c").build();
        let snap = Snapshot {
            pending: vec![a, b, plain.clone()],
            ..Snapshot::default()
        };
        let held = held_pods(&snap.pending, &[0, 0, 0]);
        assert!(held[0].shares_shape_with(&held[1]));
        assert!(held[2].shares_shape_with(&plain));
        assert_eq!(held[0].anti_affinity.len(), 1);
        let apart = held_pods(&snap.pending, &[0, 1, 0]);
        assert!(!apart[0].shares_shape_with(&apart[1]));
        assert!(apart[1].anti_affinity.is_empty());
    }
}
