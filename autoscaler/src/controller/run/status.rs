//! NodePool status conditions and the controller's gauges.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use autoscaler_core::labels;
use autoscaler_core::resources::{Resources, is_gpu_class};
use kube::ResourceExt;
use nodepools::conditions::{self, reasons};
use nodepools::{NodeClaim, NodePool};
use providers::CloudProvider;
use serde_json::json;

use crate::controller::actuator::set_condition;
use crate::controller::lifecycle::{self, Phase};
use crate::controller::metrics::{ModelLabel, PhaseLabel};
use crate::controller::translate;

use super::provisioning::*;
use super::{Controller, due, epoch};

impl<P: CloudProvider + 'static> Controller<P> {
    /// The stage: NodePool status and gauges. They walk every claim, node and pod: every few
    /// seconds is plenty.
    pub(super) async fn status_stage(&mut self) {
        if due(&mut self.last_pool_status, Duration::from_secs(5)) {
            self.pool_status().await;
            self.update_metrics();
        }
    }

    async fn pool_status(&mut self) {
        let claims = self.stores.claims.state();
        for np in self.stores.pools.state() {
            let name = np.name_any();
            let mine: Vec<&Arc<NodeClaim>> = claims
                .iter()
                .filter(|c| c.spec.node_pool == name && lifecycle::phase(c) != Phase::Deleting)
                .collect();
            let mut total = Resources::new();
            for c in &mine {
                if let Some(s) = &c.status
                    && let Ok(r) = translate::resources(Some(&s.capacity), "status.capacity")
                {
                    total.add(&r);
                }
            }
            self.pool_metrics(&np, &total, mine.len() as i64);
            let mut conds = np.status.clone().unwrap_or_default().conditions;
            let ts = jiff::Timestamp::now();
            match np.validate() {
                Ok(()) => {
                    set_condition(
                        &mut conds,
                        (conditions::VALIDATION_SUCCEEDED, true),
                        reasons::VALID,
                        "",
                        ts,
                        np.metadata.generation,
                    );
                    set_condition(
                        &mut conds,
                        (conditions::READY, true),
                        reasons::VALID,
                        "",
                        ts,
                        np.metadata.generation,
                    );
                }
                Err(e) => {
                    let msg = e.to_string();
                    set_condition(
                        &mut conds,
                        (conditions::VALIDATION_SUCCEEDED, false),
                        reasons::INVALID_SPEC,
                        &msg,
                        ts,
                        np.metadata.generation,
                    );
                    set_condition(
                        &mut conds,
                        (conditions::READY, false),
                        reasons::INVALID_SPEC,
                        &msg,
                        ts,
                        np.metadata.generation,
                    );
                }
            }
            let (healthy, reason, message) = self.health_condition();
            set_condition(
                &mut conds,
                (conditions::CLUSTER_HEALTHY, healthy),
                reason,
                &message,
                ts,
                np.metadata.generation,
            );
            let (delivered, reason, message) = self.delivered_condition(&name, epoch());
            set_condition(
                &mut conds,
                (conditions::CAPACITY_DELIVERED, delivered),
                reason,
                &message,
                ts,
                np.metadata.generation,
            );
            let status = nodepools::NodePoolStatus {
                conditions: conds,
                nodes: mine.len() as i64,
                resources: quantities(&total),
            };
            if np.status.as_ref() == Some(&status) {
                continue;
            }
            if let Err(e) = self
                .shared
                .actuator
                .patch_pool_status(&name, &json!(status))
                .await
            {
                tracing::warn!(pool = %name, error = %e, "NodePool status");
            }
        }
    }

    /// A NodePool's usage and limit gauges.
    fn pool_metrics(&self, np: &NodePool, usage: &Resources, nodes: i64) {
        let m = &self.shared.metrics;
        let name = np.name_any();
        m.set_pool_usage(&name, usage, nodes);
        let (node_limit, others): (BTreeMap<_, _>, BTreeMap<_, _>) = np
            .spec
            .limits
            .clone()
            .into_iter()
            .partition(|(k, _)| k == "nodes");
        // An unparsable limit is reported by the pool's ValidationSucceeded condition.
        if let Ok(limits) = translate::resources(Some(&others), "spec.limits") {
            let nodes = node_limit
                .get("nodes")
                .and_then(|q| autoscaler_core::quantity::Quantity::parse(&q.0).ok())
                .and_then(|q| i64::try_from(q.units_ceil()).ok());
            m.set_pool_limits(&name, &limits, nodes);
        }
    }

    fn update_metrics(&self) {
        let m = &self.shared.metrics;
        let claims = self.stores.claims.state();
        let mut by_phase: BTreeMap<Phase, i64> = Phase::ALL.iter().map(|p| (*p, 0)).collect();
        for c in &claims {
            *by_phase.entry(lifecycle::phase(c)).or_default() += 1;
        }
        for (p, n) in by_phase {
            m.nodeclaims
                .get_or_create(&PhaseLabel {
                    phase: p.as_str().into(),
                })
                .set(n);
        }
        let mut alloc: BTreeMap<String, i64> = BTreeMap::new();
        let mut used: BTreeMap<String, i64> = BTreeMap::new();
        let mut model_of: HashMap<String, String> = HashMap::new();
        for n in self.stores.nodes.state() {
            let model = n
                .labels()
                .get(labels::NVIDIA_PRODUCT)
                .or_else(|| n.labels().get(labels::GPU_NAME))
                .cloned()
                .unwrap_or_else(|| "unknown".into());
            if let Ok(r) = translate::node_allocatable(&n) {
                let g: i64 = r
                    .extended
                    .iter()
                    .filter(|(k, _)| is_gpu_class(k))
                    .map(|(_, v)| *v)
                    .sum();
                if g > 0 {
                    *alloc.entry(model.clone()).or_default() += g;
                    model_of.insert(n.name_any(), model);
                }
            }
        }
        for p in self.stores.pods.state() {
            let Some(model) = p.node_name.as_deref().and_then(|n| model_of.get(n)) else {
                continue;
            };
            if !p.active {
                continue;
            }
            let g: i64 = p
                .requests()
                .extended
                .iter()
                .filter(|(k, _)| is_gpu_class(k))
                .map(|(_, v)| *v)
                .sum();
            *used.entry(model.clone()).or_default() += g;
        }
        for (model, v) in alloc {
            let u = used.get(&model).copied().unwrap_or(0);
            m.gpu_allocatable
                .get_or_create(&ModelLabel {
                    model: model.clone(),
                })
                .set(v);
            m.gpu_allocated.get_or_create(&ModelLabel { model }).set(u);
        }
    }
}
