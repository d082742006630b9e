//! NodePool status conditions and the controller's gauges.
//!
//! A NodePool's conditions: `ValidationSucceeded` and `Ready` (its spec), `CapacityDelivered`
//! (its nodes came up with what they were launched for) and `InstanceTypesAvailable` (its
//! requirements admit an instance type of its node class's catalog with an offering available
//! now, [`instance_types_condition`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use autoscaler_core::labels;
use autoscaler_core::provision::{AdmittedTypes, admitted_types};
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
        let pools = self.stores.pools.state();
        // A pool no pending pod has needed a catalog for yet still gets its
        // InstanceTypesAvailable condition: fetch missing catalogs, at most once a minute.
        if pools
            .iter()
            .any(|np| !self.types.contains_key(&super::class_of(np)))
            && due(&mut self.last_catalog_fetch, Duration::from_secs(60))
        {
            self.refresh_catalogs(&pools).await;
        }
        let catalogs = self.cached_instance_types(&pools);
        for np in pools {
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
            // Without a catalog yet, or with an invalid spec (ValidationSucceeded says why),
            // the condition stays as it was.
            if let Some(types) = catalogs.get(&name)
                && let Ok(pool) = np.to_core(types.clone())
            {
                let (ok, reason, message) =
                    instance_types_condition(admitted_types(&pool), types.len());
                set_condition(
                    &mut conds,
                    (conditions::INSTANCE_TYPES_AVAILABLE, ok),
                    reason,
                    &message,
                    ts,
                    np.metadata.generation,
                );
            }
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

/// The NodePool's `InstanceTypesAvailable` condition from what its requirements admit of a
/// catalog of `catalog` instance types: status, reason and a message that changes only when
/// the counts do (the status is written only on change).
fn instance_types_condition(counts: AdmittedTypes, catalog: usize) -> (bool, &'static str, String) {
    if counts.admitted == 0 {
        (
            false,
            reasons::NO_INSTANCE_TYPE_MATCHES,
            format!(
                "the requirements admit none of the {catalog} instance types of the node class's \
                 catalog (instance labels, zones and capacity types; `gpu-autoscaler catalog` \
                 lists them)"
            ),
        )
    } else if counts.available == 0 {
        (
            false,
            reasons::OFFERINGS_UNAVAILABLE,
            format!(
                "every offering of the {} instance type(s) the requirements admit is unavailable \
                 now (the cloud refused it recently, or the type delivered too little); they are \
                 tried again when that expires",
                counts.admitted
            ),
        )
    } else {
        (
            true,
            reasons::INSTANCE_TYPES_FOUND,
            format!(
                "{} of the {catalog} instance types match, {} with an available offering",
                counts.admitted, counts.available
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_types_condition_names_what_is_missing() {
        let c = |admitted, available| {
            instance_types_condition(
                AdmittedTypes {
                    admitted,
                    available,
                },
                40,
            )
        };
        let (ok, reason, message) = c(0, 0);
        assert_eq!((ok, reason), (false, reasons::NO_INSTANCE_TYPE_MATCHES));
        assert!(message.contains("none of the 40"), "{message}");
        let (ok, reason, message) = c(3, 0);
        assert_eq!((ok, reason), (false, reasons::OFFERINGS_UNAVAILABLE));
        assert!(message.contains("3 instance type(s)"), "{message}");
        let (ok, reason, message) = c(3, 2);
        assert_eq!((ok, reason), (true, reasons::INSTANCE_TYPES_FOUND));
        assert_eq!(
            message,
            "3 of the 40 instance types match, 2 with an available offering"
        );
    }
}
