//! The `CapacityQuota` custom resource: a cluster-scoped limit on the summed capacity of the
//! nodes a label selector matches, across every NodePool (and nodes no NodePool manages), in
//! the shape of the Cluster Autoscaler's CapacityQuota proposal (`spec.selector`,
//! `spec.limits.resources`, with `nodes` for the node count).

use std::collections::BTreeMap;

use autoscaler_core::model::ClusterLimit;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::NodeSelectorRequirement;
use super::convert::{NODES_LIMIT, parse_limits, parse_requirements};
use super::schema;
use crate::error::{FieldPath, ValidationErrors};
use crate::names::{self, LABEL_VALUE_MAX, QUALIFIED_NAME_MAX, QUALIFIED_NAME_PATTERN};
use autoscaler_core::requirements::{Operator, Requirements};

/// A limit on the nodes a selector matches: launching a node that would take their summed
/// capacity above a limit is refused, whatever NodePool it belongs to.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gpu-autoscaler.dev",
    version = "v1alpha1",
    kind = "CapacityQuota",
    plural = "capacityquotas",
    category = "gpu-autoscaler",
    derive = "PartialEq",
    derive = "Default",
    doc = "A CapacityQuota bounds the summed capacity (cpu, memory, GPUs, any resource, and `nodes`) of the nodes its label selector matches, counted across every NodePool, including nodes being launched; gpu-autoscaler launches no node that would exceed it.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityQuotaSpec {
    /// Which nodes the limits apply to, by their labels (as a node would have them, so nodes
    /// being launched count too); absent selects every node of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The limits.
    pub limits: CapacityQuotaLimits,
}

/// The limits of a CapacityQuota.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityQuotaLimits {
    /// Resource name (`cpu`, `memory`, `nvidia.com/gpu`, any extended resource, and `nodes`
    /// for the node count) to the most the selected nodes may have together.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::nonnegative_quantity_map")]
    pub resources: BTreeMap<String, Quantity>,
}

/// A standard Kubernetes label selector: every `matchLabels` entry and every expression must
/// hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels the node must carry with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::label_map")]
    pub match_labels: BTreeMap<String, String>,
    /// Expressions over the node's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `key operator values` expression of a label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key.
    #[schemars(length(min = 1, max = QUALIFIED_NAME_MAX), pattern(QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[schemars(extend("enum" = ["In", "NotIn", "Exists", "DoesNotExist"]))]
    pub operator: String,
    /// The values: at least one for `In`/`NotIn`, none for `Exists`/`DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(max = LABEL_VALUE_MAX)))]
    pub values: Vec<String>,
}

impl CapacityQuota {
    /// The quota in the core's vocabulary: a [`ClusterLimit`] named `CapacityQuota <name>`
    /// with maximums only.
    ///
    /// # Errors
    /// Every problem found (a bad selector expression, quantity or resource name), each with
    /// its field path.
    pub fn to_core(&self) -> Result<ClusterLimit, ValidationErrors> {
        let mut errs = ValidationErrors::default();
        let name = self.metadata.name.clone().unwrap_or_default();
        let spec = FieldPath::root("spec");
        let mut selector = Requirements::new();
        if let Some(sel) = &self.spec.selector {
            let path = spec.field("selector");
            for (k, v) in &sel.match_labels {
                let p = path.field("matchLabels").key(k);
                let problem = names::check_qualified_name(k)
                    .err()
                    .or_else(|| names::check_label_value(v).err());
                match problem {
                    Some(e) => errs.push(&p, e),
                    None => selector = selector.with(k, Operator::In, &[v.as_str()]),
                }
            }
            let exprs: Vec<NodeSelectorRequirement> = sel
                .match_expressions
                .iter()
                .map(|e| NodeSelectorRequirement {
                    key: e.key.clone(),
                    operator: e.operator.clone(),
                    values: e.values.clone(),
                    min_values: None,
                })
                .collect();
            let exprs_path = path.field("matchExpressions");
            for (i, e) in exprs.iter().enumerate() {
                if matches!(e.operator.as_str(), "Gt" | "Lt") {
                    errs.push(
                        &exprs_path.index(i).field("operator"),
                        format!(
                            "{} is not a label selector operator (expected In, NotIn, Exists or DoesNotExist)",
                            e.operator
                        ),
                    );
                }
            }
            selector = selector.intersect(&parse_requirements(&exprs_path, &exprs, &mut errs));
        }
        let max = parse_limits(
            &spec.field("limits").field("resources"),
            &self.spec.limits.resources,
            &spec.field("limits").field("gpus"),
            &BTreeMap::new(),
            &mut errs,
        );
        if max.is_empty() && errs.is_empty() {
            errs.push(
                &spec.field("limits").field("resources"),
                format!("no limit set (name a resource such as cpu, memory, nvidia.com/gpu or {NODES_LIMIT})"),
            );
        }
        errs.finish(ClusterLimit {
            name: format!("CapacityQuota {name}"),
            selector,
            max,
            min: Default::default(),
        })
    }
}
