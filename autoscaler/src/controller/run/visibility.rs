//! Decisions made visible: each disruption round's verdicts as `Consolidatable` NodeClaim
//! conditions and each claim's drift as its `Drifted` condition (both written only when they
//! change, in one patch), `DisruptionBlocked` events (once per node and
//! reason per [`consolidatable::EVENT_EVERY_S`]) and `gpu_autoscaler_unremovable_nodes`; and
//! the cluster status ConfigMap, written every `--status-configmap-interval`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use autoscaler_core::Snapshot;
use autoscaler_core::disruption::{
    DisruptionConfig, Drift, Verdict, drifted, utilization_by_resource,
};
use kube::ResourceExt;
use nodepools::NodeClaim;
use nodepools::conditions;
use providers::CloudProvider;

use crate::controller::actuator::{reference, set_condition};
use crate::controller::cluster_status::{
    self, ClusterStatus, Decision, Decisions, NodeCounts, PoolSummary,
};
use crate::controller::consolidatable::{self, Desired, EventLimiter};
use crate::controller::lifecycle::{self, Phase};

use super::{Controller, due};

/// A claim's condition as this leader last wrote it: the store may not show it yet.
const STORE_LAG: Duration = Duration::from_secs(30);

/// The leader's memory of what it made visible.
#[derive(Debug, Default)]
pub(super) struct Visibility {
    /// Per claim, the conditions last written (`Consolidatable`, `Drifted`) and when.
    written: HashMap<String, (Desired, Option<Drift>, Instant)>,
    /// When each node was last told each blocking reason.
    events: EventLimiter,
    /// When each NodePool was last told `LimitReached`.
    pub(super) limits: EventLimiter,
    /// Per pool, the last disruption round's kept nodes by reason and its candidates.
    kept: BTreeMap<String, (BTreeMap<String, i64>, i64)>,
    /// When disruption last ran (seconds).
    last_disruption: Option<i64>,
    /// The last scale-ups and scale-downs.
    pub(super) decisions: Decisions,
    /// When the status ConfigMap was last written.
    last_status: Option<Instant>,
}

impl Visibility {
    /// Records a scale-up or scale-down for the status summary.
    pub(super) fn decided(
        &mut self,
        now: i64,
        action: &'static str,
        pool: &str,
        objects: Vec<String>,
        detail: String,
    ) {
        self.decisions.push(Decision {
            time: consolidatable::at(now),
            action,
            node_pool: pool.to_string(),
            objects,
            detail,
        });
    }
}

impl<P: CloudProvider + 'static> Controller<P> {
    /// Publishes one disruption round's verdicts: conditions, events, the metric.
    pub(super) async fn publish_verdicts(
        &mut self,
        snap: &Snapshot,
        verdicts: &[Verdict],
        config: &DisruptionConfig,
        now: i64,
    ) {
        let claims = self.stores.claims.state();
        let by_node: HashMap<&str, &Arc<NodeClaim>> = claims
            .iter()
            .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c)))
            .collect();
        let nodes = self.stores.nodes.state();
        let mut unremovable: BTreeMap<(String, String), i64> = BTreeMap::new();
        let mut kept: BTreeMap<String, (BTreeMap<String, i64>, i64)> = BTreeMap::new();
        let drifts: HashMap<String, Drift> = drifted(snap)
            .into_iter()
            .map(|d| (d.node, d.drift))
            .collect();
        self.visibility.events.prune(now);
        for v in verdicts {
            let Some(pool) = &v.pool else { continue };
            let by_resource = snap
                .nodes
                .iter()
                .find(|n| n.name == v.node)
                .map(|n| utilization_by_resource(n, config).0)
                .unwrap_or_default();
            let want = consolidatable::condition(v, &by_resource);
            let entry = kept.entry(pool.clone()).or_default();
            if want.status {
                entry.1 += 1;
            } else {
                *entry.0.entry(want.reason.to_string()).or_default() += 1;
                *unremovable
                    .entry((pool.clone(), want.reason.to_string()))
                    .or_default() += 1;
            }
            if consolidatable::blocks(v.kind)
                && self.visibility.events.allow(&v.node, want.reason, now)
            {
                let note = format!("cannot disrupt node: {}", v.reason);
                if let Some(n) = nodes.iter().find(|n| n.name_any() == v.node) {
                    self.blocked_event(&reference(n.as_ref()), &note).await;
                }
                if let Some(c) = by_node.get(v.node.as_str()) {
                    self.blocked_event(&reference(c.as_ref()), &note).await;
                }
            }
            if let Some(c) = by_node.get(v.node.as_str()) {
                self.write_condition(c, want, drifts.get(&v.node)).await;
            }
        }
        self.shared.metrics.set_unremovable(unremovable);
        self.visibility.kept = kept;
        self.visibility.last_disruption = Some(now);
        let live: std::collections::HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
        self.visibility
            .written
            .retain(|name, _| live.contains(name));
    }

    async fn blocked_event(
        &self,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
        note: &str,
    ) {
        self.shared
            .actuator
            .event(
                regarding,
                false,
                consolidatable::BLOCKED_EVENT,
                "Disrupt",
                note.to_string(),
            )
            .await;
    }

    /// Writes the claim's `Consolidatable` condition, and its `Drifted` condition (true with
    /// the drift's reason when `drift` is set, removed when not, as Karpenter clears it),
    /// unless the store, or this leader's own write the store has not caught up with, already
    /// says both.
    async fn write_condition(
        &mut self,
        claim: &Arc<NodeClaim>,
        want: Desired,
        drift: Option<&Drift>,
    ) {
        if claim.metadata.deletion_timestamp.is_some() {
            return;
        }
        let name = claim.name_any();
        let status = claim.status.clone().unwrap_or_default();
        let consolidatable_shown = status
            .conditions
            .iter()
            .any(|c| c.type_ == consolidatable::CONDITION && want.matches(c));
        let drift_shown = drift_condition_shown(&status.conditions, drift);
        if consolidatable_shown && drift_shown {
            return;
        }
        if self
            .visibility
            .written
            .get(&name)
            .is_some_and(|(w, d, at)| *w == want && d.as_ref() == drift && at.elapsed() < STORE_LAG)
        {
            return;
        }
        let mut conds = status.conditions;
        set_condition(
            &mut conds,
            (consolidatable::CONDITION, want.status),
            want.reason,
            &want.message,
            jiff::Timestamp::now(),
            claim.metadata.generation,
        );
        match drift {
            Some(d) => set_condition(
                &mut conds,
                (conditions::DRIFTED, true),
                d.reason.as_str(),
                &d.detail,
                jiff::Timestamp::now(),
                claim.metadata.generation,
            ),
            None => conds.retain(|c| c.type_ != conditions::DRIFTED),
        }
        match self
            .shared
            .actuator
            .patch_claim_conditions(claim, &conds)
            .await
        {
            Ok(_) => {
                self.visibility
                    .written
                    .insert(name, (want, drift.cloned(), Instant::now()));
            }
            // A 409 (the claim changed since it was read) is retried next round.
            Err(e) => tracing::debug!(claim = %name, error = %e, "Consolidatable condition"),
        }
    }

    /// Writes the status ConfigMap when due.
    pub(super) async fn cluster_status_stage(&mut self, last_round_ms: i64) {
        let every = self.args.status_configmap_interval;
        if every.is_zero() || !due(&mut self.visibility.last_status, every) {
            return;
        }
        let summary = self.cluster_status(last_round_ms);
        let data = BTreeMap::from([(cluster_status::KEY.to_string(), summary.render())]);
        if let Err(e) = self
            .shared
            .actuator
            .apply_configmap(&self.args.namespace, cluster_status::CONFIGMAP, &data)
            .await
        {
            tracing::warn!(error = %e, "writing the status ConfigMap");
        }
    }

    fn cluster_status(&self, last_round_ms: i64) -> ClusterStatus {
        let claims = self.stores.claims.state();
        let mut problems = Vec::new();
        let mut pools = Vec::new();
        for np in self.stores.pools.state() {
            let name = np.name_any();
            let mut counts = NodeCounts::default();
            for c in claims.iter().filter(|c| c.spec.node_pool == name) {
                match lifecycle::phase(c) {
                    Phase::Initialized => counts.ready += 1,
                    Phase::Deleting => counts.deleting += 1,
                    _ => counts.launching += 1,
                }
            }
            let status = np.status.clone().unwrap_or_default();
            for c in status.conditions.iter().filter(|c| {
                c.status == "False"
                    && (c.type_ == conditions::VALIDATION_SUCCEEDED
                        || c.type_ == conditions::CAPACITY_DELIVERED)
            }) {
                problems.push(format!(
                    "NodePool {name}: {} False ({}): {}",
                    c.type_, c.reason, c.message
                ));
            }
            let (kept, consolidatable) =
                self.visibility.kept.get(&name).cloned().unwrap_or_default();
            let text = |m: &BTreeMap<
                String,
                k8s_openapi::apimachinery::pkg::api::resource::Quantity,
            >| { m.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect() };
            pools.push(PoolSummary {
                name,
                nodes: counts,
                usage: text(&status.resources),
                limits: text(&np.spec.limits),
                kept,
                consolidatable,
            });
        }
        pools.sort_by(|a, b| a.name.cmp(&b.name));
        ClusterStatus {
            time: jiff::Timestamp::now().to_string(),
            leader: self.identity.clone(),
            health: ClusterStatus::health_of(&problems, self.halted()),
            problems,
            readiness: self.health.as_ref().map(cluster_status::Readiness::from),
            last_round: jiff::Timestamp::from_millisecond(last_round_ms)
                .map_or_else(|_| String::new(), |t| t.to_string()),
            last_disruption_round: self.visibility.last_disruption.map(consolidatable::at),
            pending_pods: self.shared.metrics.pending_pods.get(),
            node_pools: pools,
            recent_decisions: self.visibility.decisions.newest_first(),
        }
    }
}

/// Whether `conds` already say `drift`: a true `Drifted` condition of its reason and words, or
/// none when the node does not drift.
fn drift_condition_shown(
    conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    drift: Option<&Drift>,
) -> bool {
    let shown = conds.iter().find(|c| c.type_ == conditions::DRIFTED);
    match (drift, shown) {
        (None, None) => true,
        (Some(d), Some(c)) => {
            c.status == "True" && c.reason == d.reason.as_str() && c.message == d.detail
        }
        _ => false,
    }
}
