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
}
