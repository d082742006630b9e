//! Warm capacity in the provisioning round (`--enforce-node-group-min-size`): when a round
//! brings the NodePools up to their `minNodes`, and what it tells of it.

use std::sync::Arc;

use autoscaler_core::plan::Plan;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodepools::NodePool;
use providers::CloudProvider;

use crate::controller::actuator::reference;

use super::super::{Controller, due, epoch};

/// The Normal event on a NodePool for each node launched to reach its `minNodes`.
pub const SCALED_UP_TO_MIN_NODES: &str = "ScaledUpToMinNodes";
/// The Warning event on a NodePool a plan could not bring up to its `minNodes`.
pub const MIN_NODES_NOT_REACHED: &str = "MinNodesNotReached";

impl<P: CloudProvider + 'static> Controller<P> {
    /// Whether this round's plan also brings the NodePools up to their `minNodes`: the flag is
    /// on, some pool has a minimum, and the last such plan is at least `--replan-interval`
    /// old (this round's is then the last). Spacing them so, a claim the last one wrote is in
    /// the cache before it is counted again.
    pub(super) fn warm_round(&mut self, pools: &[Arc<NodePool>]) -> bool {
        self.args.enforce_node_group_min_size
            && pools.iter().any(|p| p.spec.min_nodes > 0)
            && due(&mut self.last_warm, self.args.replan_interval)
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
