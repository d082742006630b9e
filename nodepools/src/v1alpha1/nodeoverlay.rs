//! The `NodeOverlay` custom resource: price and extended-resource overrides of the instance
//! types its requirements select, in the shape of Karpenter's `NodeOverlay` (v1alpha1:
//! `spec.requirements`, `spec.price` or `spec.priceAdjustment`, `spec.capacity`, `spec.weight`).
//! How overlays combine is the core's ([`autoscaler_core::overlay`]).

use std::collections::BTreeMap;

use autoscaler_core::overlay::{Overlay, PriceChange};
use autoscaler_core::resources::names as resource_names;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::NodeSelectorRequirement;
use super::convert::{parse_requirements, parse_resources, required_name};
use super::schema;
use crate::error::{FieldPath, ValidationErrors};

/// The most requirements one overlay may have (Karpenter's limit).
pub const MAX_OVERLAY_REQUIREMENTS: usize = 100;

/// Overrides of the instance types (and offerings) the requirements select, as the planner,
/// `explain` and the launch order see them.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gpu-autoscaler.dev",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    category = "gpu-autoscaler",
    derive = "PartialEq",
    derive = "Default",
    doc = "A NodeOverlay changes the price of the offerings its requirements select (a fixed price, or an adjustment by an amount or a percentage) and sets extended resources on the instance types they belong to, before gpu-autoscaler plans with them; of several overlays, the higher weight (then the name first in order) decides.",
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!(has(self.price) && has(self.priceAdjustment))",
        "message": "price and priceAdjustment are mutually exclusive",
    },
]))]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlaySpec {
    /// Which offerings the overlay applies to: the instance type's labels with the offering's
    /// zone (`topology.kubernetes.io/zone`) and capacity type (`karpenter.sh/capacity-type`);
    /// empty selects every offering.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub requirements: Vec<NodeSelectorRequirement>,
    /// The price (USD per hour) the selected offerings are planned at, replacing the catalog's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub price: Option<String>,
    /// A change of the selected offerings' price: an amount (`"+0.50"`, `"-1"`) or a
    /// percentage (`"+10%"`, `"-5%"`, at least `-100%`). The result is never below zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[+-]?[0-9]+(\.[0-9]+)?%?$"))]
    pub price_adjustment: Option<String>,
    /// Extended resources (`nvidia.com/mig-1g.10gb`, `example.com/device`) the selected
    /// instance types' nodes have besides the catalog's: added where the catalog lists none of
    /// the resource, never replacing what it lists (not `cpu`, `memory`, `ephemeral-storage`
    /// or `pods`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::nonnegative_quantity_map")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Precedence among overlays selecting the same offering: higher first; equal weights go
    /// by name. Absent is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

impl NodeOverlay {
    /// The overlay in the core's vocabulary.
    ///
    /// # Errors
    /// Every problem found (a bad requirement, price, adjustment or capacity entry, both a
    /// price and an adjustment, nothing to change), each with its field path.
    pub fn to_core(&self) -> Result<Overlay, ValidationErrors> {
        let mut errs = ValidationErrors::default();
        let name = required_name(&self.metadata, &mut errs);
        let spec = FieldPath::root("spec");
        let s = &self.spec;
        if s.requirements.len() > MAX_OVERLAY_REQUIREMENTS {
            errs.push(
                &spec.field("requirements"),
                format!(
                    "{} requirements; at most {MAX_OVERLAY_REQUIREMENTS}",
                    s.requirements.len()
                ),
            );
        }
        let requirements =
            parse_requirements(&spec.field("requirements"), &s.requirements, &mut errs);
        for (i, r) in s.requirements.iter().enumerate() {
            if r.min_values.is_some() {
                errs.push(
                    &spec.field("requirements").index(i).field("minValues"),
                    "has no meaning in a NodeOverlay",
                );
            }
        }
        let price = match (&s.price, &s.price_adjustment) {
            (Some(_), Some(_)) => {
                errs.push(&spec, "price and priceAdjustment are mutually exclusive");
                None
            }
            (Some(p), None) => PriceChange::parse_price(p)
                .map_err(|e| errs.push(&spec.field("price"), e))
                .ok(),
            (None, Some(a)) => PriceChange::parse_adjustment(a)
                .map_err(|e| errs.push(&spec.field("priceAdjustment"), e))
                .ok(),
            (None, None) => None,
        };
        let cap_path = spec.field("capacity");
        let standard = [
            resource_names::CPU,
            resource_names::MEMORY,
            resource_names::EPHEMERAL_STORAGE,
            resource_names::PODS,
        ];
        let mut extended = BTreeMap::new();
        for (k, q) in &s.capacity {
            if standard.contains(&k.as_str()) {
                errs.push(
                    &cap_path.key(k),
                    format!("{k} is not an extended resource; an overlay cannot change it"),
                );
            } else if !k.contains('/') {
                errs.push(
                    &cap_path.key(k),
                    "an extended resource name has a domain prefix (example.com/device)",
                );
            } else {
                extended.insert(k.clone(), q.clone());
            }
        }
        let capacity = parse_resources(&cap_path, &extended, &mut errs);
        let weight = match s.weight {
            None => 0,
            Some(w) if (1..=10000).contains(&w) => w,
            Some(w) => {
                errs.push(&spec.field("weight"), format!("{w} is outside [1, 10000]"));
                0
            }
        };
        if price.is_none() && s.capacity.is_empty() && errs.is_empty() {
            errs.push(
                &spec,
                "changes nothing (set price, priceAdjustment or capacity)",
            );
        }
        errs.finish(Overlay {
            name,
            weight,
            requirements,
            price,
            capacity,
        })
    }

    /// Checks the overlay: the same walk as [`Self::to_core`].
    ///
    /// # Errors
    /// Every problem found, each with its field path.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        self.to_core().map(|_| ())
    }
}
