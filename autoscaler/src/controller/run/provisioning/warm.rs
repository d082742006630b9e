//! Warm capacity in the provisioning round (`--enforce-node-group-min-size`): when a round
//! brings the NodePools up to their `minNodes`, and what it tells of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use autoscaler_core::plan::Plan;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use nodepools::NodePool;
use providers::CloudProvider;

use crate::controller::actuator::reference;
use crate::controller::batcher::Window;

use super::super::{Controller, due, epoch};

/// How long a warm claim written but not in the claim cache holds the next warm plan back: a
/// watch that lost the claim's event (it was deleted at once, say) holds it no longer.
const UNSEEN_PATIENCE: Duration = Duration::from_secs(60);

/// The Normal event on a NodePool for each node launched to reach its `minNodes`.
pub const SCALED_UP_TO_MIN_NODES: &str = "ScaledUpToMinNodes";
/// The Warning event on a NodePool a plan could not bring up to its `minNodes`.
pub const MIN_NODES_NOT_REACHED: &str = "MinNodesNotReached";

impl<P: CloudProvider + 'static> Controller<P> {
    /// Whether this round's plan also brings the NodePools up to their `minNodes`: the flag is
    /// on, some pool has a minimum, no batch window is gathering pods (the round that closes
    /// it plans them with the pools, so that the nodes they need count first), every warm
    /// claim created before is in the claim cache, and the last such plan is at least
    /// `--replan-interval` old (this round's is then the last).
    pub(super) fn warm_round(&mut self, pools: &[Arc<NodePool>]) -> bool {
        if !self.args.enforce_node_group_min_size || !pools.iter().any(|p| p.spec.min_nodes > 0) {
            return false;
        }
        if *self.batcher.window() != Window::Closed {
            return false;
        }
        let claims = &self.stores.claims;
        self.warm_unseen.retain(|(name, at)| {
            claims.get(&ObjectRef::new(name)).is_none() && at.elapsed() < UNSEEN_PATIENCE
        });
        self.warm_unseen.is_empty() && due(&mut self.last_warm, self.args.replan_interval)
    }

    /// Warm claim `name` was created: no plan brings the pools up again before the claim
    /// cache shows it.
    pub(super) fn warm_created(&mut self, name: &str) {
        self.warm_unseen.push((name.to_string(), Instant::now()));
    }

    /// A `MinNodesNotReached` Warning on each NodePool the plan left short, with the reason;
    /// once per pool per [`crate::controller::consolidatable::EVENT_EVERY_S`] while it lasts.
    pub(super) fn min_nodes_events(
        &mut self,
        plan: &Plan,
        pools: &[Arc<NodePool>],
        events: &mut Vec<(ObjectReference, bool, &'static str, String)>,
    ) {
        let now = epoch();
        for short in &plan.min_nodes_short {
            let Some(np) = pools.iter().find(|p| p.name_any() == short.pool) else {
                continue;
            };
            if !self
                .visibility
                .limits
                .allow(&short.pool, MIN_NODES_NOT_REACHED, now)
            {
                continue;
            }
            let note = format!(
                "{} node(s) short of minNodes {}: {}",
                short.missing, np.spec.min_nodes, short.reason
            );
            tracing::info!(pool = %short.pool, %note, "MinNodesNotReached");
            events.push((reference(np.as_ref()), true, MIN_NODES_NOT_REACHED, note));
        }
    }
}

/// The Normal event on `pool` for the warm claim `claim` (instance types `types`, cheapest
/// first).
pub(super) fn scaled_up_event(
    pool: &NodePool,
    claim: &str,
    types: &[&str],
) -> (ObjectReference, bool, &'static str, String) {
    (
        reference(pool),
        false,
        SCALED_UP_TO_MIN_NODES,
        format!(
            "NodeClaim {claim} created to bring the NodePool up to minNodes {} (instance types [{}])",
            pool.spec.min_nodes,
            types.join(", ")
        ),
    )
}
