//! The NodeClaim objects written for a plan: the claim of a planned node, and the API forms of
//! its requirements and resources.

use std::collections::BTreeMap;

use autoscaler_core::labels;
use autoscaler_core::plan::NewClaim;
use autoscaler_core::requirements::{Requirements, ValueSet};
use autoscaler_core::resources::Resources;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodepools::{
    NodeClaim, NodeClaimSpec, NodePool, NodeSelectorRequirement, ResourceRequirements,
    Taint as ApiTaint,
};

use crate::controller::keys;

/// The NodeClaim to create for a planned claim of `cluster`: the claim of a group's node
/// carries the group's placement group ([`keys::PLACEMENT_GROUP_ANNOTATION`]), a claim for
/// pods with DRA claims [`keys::DRA_ANNOTATION`], a claim planned below its pool's
/// `minValues` ([`NewClaim::min_values_relaxed`]) the lowered numbers and
/// [`keys::MIN_VALUES_RELAXED_ANNOTATION`].
pub fn claim_object(nc: &NewClaim, pool: &NodePool, cluster: &str) -> NodeClaim {
    let mut requirements = requirement_exprs(&nc.requirements);
    requirements.retain(|r| r.key != labels::INSTANCE_TYPE);
    requirements.push(NodeSelectorRequirement {
        key: labels::INSTANCE_TYPE.into(),
        operator: "In".into(),
        values: nc
            .instance_types
            .iter()
            .map(|o| o.instance_type.to_string())
            .collect(),
        min_values: None,
    });
    // The pool's minValues travel with the claim, as Karpenter's do, so the claim says what
    // flexibility it was planned with (the planner kept at least that many values); a rule the
    // plan lowered travels lowered, and one lowered to nothing is left off (the CRD asks for
    // at least 1).
    for r in &mut requirements {
        let Some(m) = pool
            .spec
            .template
            .requirements
            .iter()
            .filter(|p| p.key == r.key)
            .filter_map(|p| p.min_values)
            .max()
        else {
            continue;
        };
        let m = match nc.min_values_relaxed.get(&r.key) {
            Some(0) => continue,
            Some(&n) => i32::try_from(n).unwrap_or(m).min(m),
            None => m,
        };
        let holds = match r.operator.as_str() {
            "In" => r.values.len() >= m as usize,
            "Exists" => true,
            _ => false,
        };
        if holds {
            r.min_values = Some(m);
        }
    }
    let mut claim_labels = nc.labels.clone();
    claim_labels.insert(keys::POOL_LABEL.into(), nc.pool.clone());
    let taint = |t: &autoscaler_core::Taint| ApiTaint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: format!("{:?}", t.effect),
    };
    let mut annotations = BTreeMap::new();
    if let Some(g) = &nc.group {
        annotations.insert(
            keys::PLACEMENT_GROUP_ANNOTATION.to_string(),
            providers::placement_group_name(cluster, g),
        );
    }
    // Its Node must publish its DRA devices before it is initialized (a disruption's
    // replacement too: it is built here from the planner's claim).
    if nc.dra {
        annotations.insert(keys::DRA_ANNOTATION.to_string(), "true".to_string());
    }
    if !nc.min_values_relaxed.is_empty() {
        annotations.insert(
            keys::MIN_VALUES_RELAXED_ANNOTATION.to_string(),
            "true".to_string(),
        );
    }
    // What drift compares later with the NodePool's template hash then (Karpenter's
    // annotations; a disruption's replacement records the template it is launched from too).
    annotations.insert(
        keys::NODEPOOL_HASH_ANNOTATION.to_string(),
        pool.spec.template.drift_hash(),
    );
    annotations.insert(
        keys::NODEPOOL_HASH_VERSION_ANNOTATION.to_string(),
        keys::NODEPOOL_HASH_VERSION.to_string(),
    );
    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", nc.pool)),
            labels: Some(claim_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![keys::FINALIZER.into()]),
            ..Default::default()
        },
        spec: NodeClaimSpec {
            node_pool: nc.pool.clone(),
            requirements,
            resources: ResourceRequirements {
                requests: quantities(&nc.requests),
            },
            taints: nc.taints.iter().map(taint).collect(),
            startup_taints: nc.startup_taints.iter().map(taint).collect(),
            node_class_ref: pool.spec.template.node_class_ref.clone(),
            // As Karpenter's NodeClaim template: fixed at launch, so a later edit of the
            // NodePool changes only the nodes launched after it.
            termination_grace_period: pool.spec.template.termination_grace_period.clone(),
        },
        status: None,
    }
}

/// A NodePool's limits as written: `spec.limits` then `spec.gpuLimits` (`gpuLimits.H100=8`).
pub(super) fn limits_text(np: &NodePool) -> String {
    let mut parts: Vec<String> = np
        .spec
        .limits
        .iter()
        .map(|(k, q)| format!("{k}={}", q.0))
        .collect();
    parts.extend(
        np.spec
            .gpu_limits
            .iter()
            .map(|(model, n)| format!("gpuLimits.{model}={n}")),
    );
    parts.join(", ")
}

/// Resources as a Kubernetes resource map.
pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    providers::kwok::quantities(r)
}

/// Requirements as API expressions (one key may need two: `Exists` plus `NotIn`).
pub fn requirement_exprs(r: &Requirements) -> Vec<NodeSelectorRequirement> {
    let mut out = Vec::new();
    let expr = |key: &str, op: &str, values: Vec<String>| NodeSelectorRequirement {
        key: key.to_string(),
        operator: op.to_string(),
        values,
        min_values: None,
    };
    for (key, c) in r.iter() {
        match &c.values {
            ValueSet::In(set) if set.is_empty() => {
                if c.allow_absent {
                    out.push(expr(key, "DoesNotExist", vec![]));
                }
            }
            ValueSet::In(set) => out.push(expr(key, "In", set.iter().cloned().collect())),
            ValueSet::NotIn(set) => {
                if !c.allow_absent && c.gt.is_none() && c.lt.is_none() {
                    out.push(expr(key, "Exists", vec![]));
                }
                if !set.is_empty() {
                    out.push(expr(key, "NotIn", set.iter().cloned().collect()));
                }
                if let Some(g) = c.gt {
                    out.push(expr(key, "Gt", vec![g.to_string()]));
                }
                if let Some(l) = c.lt {
                    out.push(expr(key, "Lt", vec![l.to_string()]));
                }
            }
        }
    }
    out
}
