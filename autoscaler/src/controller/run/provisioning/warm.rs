//! Warm capacity in the provisioning round (`--enforce-node-group-min-size`): when a round
//! brings the NodePools up to their `minNodes`, and what it tells of it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use autoscaler_core::plan::Plan;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodepools::{NodeClaim, NodePool};
use providers::CloudProvider;

use crate::controller::actuator::reference;
use crate::controller::batcher::Window;
use crate::controller::lifecycle::{self, Phase};
use crate::controller::warm_backoff::Blocked;

use super::super::{Controller, due, epoch};

/// How long a warm claim written but not in the claim cache holds the next warm plan back: a
/// watch that lost the claim's event (it was deleted at once, say) holds it no longer.
const UNSEEN_PATIENCE: Duration = Duration::from_secs(60);

/// The Normal event on a NodePool for each node launched to reach its `minNodes`.
pub const SCALED_UP_TO_MIN_NODES: &str = "ScaledUpToMinNodes";
/// The Warning event on a NodePool a plan could not bring up to its `minNodes`.
pub const MIN_NODES_NOT_REACHED: &str = "MinNodesNotReached";
/// The throttle key of the `MinNodesNotReached` events of the warm back-off.
const WARM_BACKOFF_KEY: &str = "MinNodesNotReached/WarmBackoff";

impl<P: CloudProvider + 'static> Controller<P> {
    /// Whether this round's plan also brings the NodePools up to their `minNodes`: the flag is
    /// on, some pool has a minimum, no batch window is gathering pods (the round that closes
    /// it plans them with the pools, so that the nodes they need count first), every warm
    /// claim created before is in the claim cache, and the last such plan is at least
    /// `--replan-interval` old (this round's is then the last).
    /// Every round it also tells the warm back-off the phases of `claims`.
    pub(super) fn warm_round(
        &mut self,
        pools: &[Arc<NodePool>],
        claims: &[Arc<NodeClaim>],
    ) -> bool {
        if !self.args.enforce_node_group_min_size || !pools.iter().any(|p| p.spec.min_nodes > 0) {
            return false;
        }
        // Most rounds follow nothing: no list of every claim is made for them.
        if !self.warm_backoff.is_empty() {
            let phases: Vec<(String, Phase)> = claims
                .iter()
                .map(|c| (c.name_any(), lifecycle::phase(c)))
                .collect();
            let generations: Vec<(String, i64)> = pools
                .iter()
                .map(|p| (p.name_any(), p.metadata.generation.unwrap_or(0)))
                .collect();
            self.warm_backoff.observe(
                phases.iter().map(|(n, p)| (n.as_str(), *p)),
                generations.iter().map(|(n, g)| (n.as_str(), *g)),
                epoch(),
            );
        }
        if *self.batcher.window() != Window::Closed {
            return false;
        }
        if !self.warm_unseen.is_empty() {
            let names: HashSet<&str> = claims
                .iter()
                .filter_map(|c| c.metadata.name.as_deref())
                .collect();
            self.warm_unseen.retain(|(name, at)| {
                !names.contains(name.as_str()) && at.elapsed() < UNSEEN_PATIENCE
            });
        }
        self.warm_unseen.is_empty() && due(&mut self.last_warm, self.args.replan_interval)
    }

    /// Warm claim `name` of `pool` (planned from the NodePool at `generation`) was created: no
    /// plan brings the pools up again before the claim cache shows it, and it is followed
    /// until it comes up.
    pub(super) fn warm_created(&mut self, name: &str, pool: &str, generation: i64) {
        self.warm_unseen.push((name.to_string(), Instant::now()));
        self.warm_backoff.created(name, pool, generation, epoch());
    }

    /// Drops the plan's warm claims of pools backing off after warm nodes that did not come
    /// up ([`crate::controller::warm_backoff::WarmBackoff`]), with a `MinNodesNotReached`
    /// Warning on each such pool (throttled on its own key, apart from the plan's).
    pub(super) fn hold_warm_claims(
        &mut self,
        plan: &mut Plan,
        pools: &[Arc<NodePool>],
        events: &mut Vec<(ObjectReference, bool, &'static str, String)>,
    ) {
        let now = epoch();
        let mut held: BTreeMap<String, (usize, Blocked)> = BTreeMap::new();
        plan.new_claims.retain(|nc| {
            let blocked = nc
                .warm
                .then(|| self.warm_backoff.blocked(&nc.pool, now))
                .flatten();
            match blocked {
                Some(b) => {
                    held.entry(nc.pool.clone()).or_insert((0, b)).0 += 1;
                    false
                }
                None => true,
            }
        });
        for (pool, (count, b)) in held {
            let Some(np) = pools.iter().find(|p| p.name_any() == pool) else {
                continue;
            };
            // Throttled apart from the plan's own `MinNodesNotReached` (a limit), so that
            // neither hides the other.
            if !self.visibility.limits.allow(&pool, WARM_BACKOFF_KEY, now) {
                continue;
            }
            let note = format!(
                "{count} node(s) short of minNodes {}: {} warm node(s) in a row did not come up \
                 (the last, NodeClaim {}: {}); no warm launch for {}s",
                np.spec.min_nodes,
                b.failures.count,
                b.failures.claim,
                b.failures.why,
                b.until.saturating_sub(now)
            );
            tracing::info!(%pool, %note, "MinNodesNotReached");
            events.push((reference(np.as_ref()), true, MIN_NODES_NOT_REACHED, note));
        }
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
