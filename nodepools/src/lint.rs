//! Everything wrong with one object of this API as a user wrote it, for `gpu-autoscaler
//! validate`: what the API server would refuse (the CRD's OpenAPI schema and its CEL
//! `x-kubernetes-validations` rules), fields it would silently drop, what the controller would
//! refuse (the Rust validation, [`NodePool::validate`], [`CapacityQuota::to_core`],
//! [`NodeOverlay::validate`]), and names a catalog does not have (instance types, zones,
//! capacity types, GPU models and other label values the requirements of NodePools, NodeClaims
//! and NodeOverlays and `gpuLimits` name), each with its field path and, where one is close,
//! the name meant.

use std::sync::Arc;

use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{Pool, Snapshot};
use autoscaler_core::provision::{build_shapes, restricted_domain};
use autoscaler_core::vocabulary::{self, MODEL_KEY, Vocabulary, closest, did_you_mean};
use kube::core::cel::Validator;
use serde_json::Value;

use crate::error::FieldError;
use crate::openapi::{self, Checks};
use crate::{
    API_VERSION, CapacityQuota, GROUP, NodeClaim, NodeOverlay, NodePool, NodeSelectorRequirement,
};

/// The kinds [`Linter::check`] knows.
pub const KINDS: [&str; 4] = ["NodePool", "NodeClaim", "CapacityQuota", "NodeOverlay"];

/// What became of one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An object of this API (or one that claims to be), with every problem found; none means
    /// it is valid.
    Checked {
        /// One of [`KINDS`] (as written, when it is none of them).
        kind: String,
        /// `metadata.name`, empty when absent.
        name: String,
        /// Every problem, schema first, then CEL rules, the controller's validation and the
        /// catalog.
        problems: Vec<FieldError>,
    },
    /// An object of another API group (a Deployment in the same directory): not ours to judge.
    Skipped {
        /// `apiVersion/kind` as written.
        what: String,
    },
}

/// Checks objects against the CRDs and one catalog.
pub struct Linter {
    types: Arc<Vec<InstanceType>>,
    catalog: Vocabulary,
    cel: Validator,
}

fn problem(path: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.into(),
        message: message.into(),
        restates: None,
    }
}

impl Linter {
    /// A linter against the instance types of a catalog.
    pub fn new(types: Vec<InstanceType>) -> Self {
        Linter {
            catalog: Vocabulary::of_instance_types(&types),
            types: Arc::new(types),
            cel: Validator::new(),
        }
    }

    /// Every problem of one document (a YAML document read as JSON).
    pub fn check(&self, object: &Value) -> Outcome {
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let version = object.get("apiVersion").and_then(Value::as_str);
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let ours = version.is_none_or(|v| v.split('/').next() == Some(GROUP));
        if !ours {
            return Outcome::Skipped {
                what: format!("{}/{kind}", version.unwrap_or_default()),
            };
        }
        let mut problems = Vec::new();
        if !object.is_object() {
            problems.push(problem("<root>", "is not a Kubernetes object (a mapping)"));
        } else if version != Some(API_VERSION) {
            problems.push(problem(
                "apiVersion",
                format!(
                    "{} is not {API_VERSION}",
                    version.map_or("absent".to_string(), |v| format!("{v:?}"))
                ),
            ));
        }
        let Some(schema) = openapi::schema_of(kind) else {
            let hint = closest(kind, KINDS)
                .map(|k| format!(" (did you mean {k}?)"))
                .unwrap_or_default();
            problems.push(problem(
                "kind",
                format!(
                    "{kind:?} is not a kind of {GROUP} ({}){hint}",
                    KINDS.join(", ")
                ),
            ));
            return Outcome::Checked {
                kind: kind.to_string(),
                name,
                problems,
            };
        };
        problems.extend(openapi::check(schema, object, Checks::ALL));
        let by_schema = problems.len();
        let decodable = !problems.iter().any(|p| {
            p.message.starts_with("must be of type")
                || p.message.starts_with("must not be null")
                || p.message.starts_with("must be an integer")
        });
        if decodable && let Err(errors) = self.cel.validate(schema, object, None) {
            for e in errors.iter() {
                let path = if e.field_path.is_empty() {
                    "<root>"
                } else {
                    &e.field_path
                };
                problems.push(problem(path, &e.message));
            }
        }
        let mut more = Vec::new();
        match kind {
            "NodePool" => {
                if let Some(pool) = decode::<NodePool>(object, decodable, &mut more) {
                    self.nodepool(&pool, &mut more);
                }
            }
            // Its selector is not checked against the catalog: nodes carry labels of their
            // own (their NodePool's, or any of an unmanaged node).
            "CapacityQuota" => {
                if let Some(Err(e)) =
                    decode::<CapacityQuota>(object, decodable, &mut more).map(|q| q.to_core())
                {
                    more.extend(e.errors);
                }
            }
            "NodeOverlay" => {
                if let Some(o) = decode::<NodeOverlay>(object, decodable, &mut more) {
                    if let Err(e) = o.validate() {
                        more.extend(e.errors);
                    }
                    let reqs = &o.spec.requirements;
                    self.requirements("spec.requirements", reqs, &self.catalog, &mut more);
                }
            }
            _ => {
                if let Some(claim) = decode::<NodeClaim>(object, decodable, &mut more) {
                    if let Err(e) = claim.validate() {
                        more.extend(e.errors);
                    }
                    let reqs = &claim.spec.requirements;
                    self.requirements("spec.requirements", reqs, &self.catalog, &mut more);
                }
            }
        }
        // The controller's validation and the catalog repeat some of the schema's checks and
        // each other's: a field already refused is reported once. A controller check that
        // restates a CEL rule is left to the rule's words when the rule fired, at its path or
        // the field within it; when it did not (kube-cel's `has()` is true on an explicit
        // null, which the controller reads as absent), it is the only report of the problem
        // and stays beside any other problem of its field.
        let within = |p: &FieldError, s: &FieldError| {
            p.path
                .strip_prefix(&s.path)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        };
        for p in more {
            let covered = problems[..by_schema].iter().any(|s| within(&p, s))
                || match p.restates {
                    None => problems.iter().any(|q| q.path == p.path),
                    Some(rule) => problems[by_schema..]
                        .iter()
                        .any(|q| q.message == rule && within(&p, q)),
                };
            if !covered {
                problems.push(p);
            }
        }
        Outcome::Checked {
            kind: kind.to_string(),
            name,
            problems,
        }
    }

    /// The controller's validation and the catalog checks of a NodePool.
    fn nodepool(&self, np: &NodePool, out: &mut Vec<FieldError>) {
        let parsed = np.to_core(self.types.clone());
        // What the pool's nodes can carry: the catalog's labels with the pool's GPU sharing
        // applied (GPU Operator labels), and the pool's own labels.
        let mut known = self.catalog.clone();
        match &parsed {
            Ok(pool) => {
                known.add_labels(&pool.labels);
                for t in self.types.iter() {
                    if let Ok(shared) = autoscaler_core::gpu::apply_sharing(t, &pool.sharing) {
                        known.add_labels(&shared.labels);
                    }
                }
            }
            Err(e) => {
                out.extend(e.errors.iter().cloned());
                known.add_labels(&np.spec.template.metadata.labels);
                known.add_value(labels::NODEPOOL, np.metadata.name.as_deref().unwrap_or(""));
            }
        }
        let before = out.len();
        let reqs = &np.spec.template.requirements;
        self.requirements("spec.template.requirements", reqs, &known, out);
        for model in np.spec.gpu_limits.keys() {
            if !self.catalog.has_value(MODEL_KEY, model) {
                let s = self.catalog.suggest(MODEL_KEY, model);
                let hint = if s.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", did_you_mean(MODEL_KEY, model, &s))
                };
                out.push(problem(
                    format!("spec.gpuLimits[{model:?}]"),
                    format!("no GPU model {model:?} in the catalog{hint}"),
                ));
            }
        }
        if let (Ok(pool), true) = (&parsed, out.len() == before)
            && !self.types.is_empty()
            && !launches_anything(pool)
        {
            out.push(problem(
                "spec.template.requirements",
                "no instance type of the catalog satisfies the requirements (with their zones and capacity types)",
            ));
        }
    }

    /// Label keys and values of `reqs` that no node can carry.
    fn requirements(
        &self,
        path: &str,
        reqs: &[NodeSelectorRequirement],
        known: &Vocabulary,
        out: &mut Vec<FieldError>,
    ) {
        for (i, r) in reqs.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let selects = matches!(r.operator.as_str(), "In" | "Exists" | "Gt" | "Lt");
            // A deprecated spelling is read as its stable key, values and all.
            let key = labels::normalized(&r.key);
            if key == labels::HOSTNAME {
                continue;
            }
            if !known.has_key(key) {
                let near = closest(key, known.keys());
                // A key outside the restricted domains is a label the NodePool gives its nodes
                // itself (`team In [ml]`), unless it looks like a misspelt known key.
                if (selects && restricted_domain(key)) || near.is_some() {
                    let hint = near
                        .map(|k| format!(" (did you mean {k}?)"))
                        .unwrap_or_default();
                    out.push(problem(
                        format!("{at}.key"),
                        format!(
                            "no instance type in the catalog has the label {}{hint}",
                            r.key
                        ),
                    ));
                }
                continue;
            }
            if !matches!(r.operator.as_str(), "In" | "NotIn") {
                continue;
            }
            for (j, v) in r.values.iter().enumerate() {
                if known.has_value(key, v) {
                    continue;
                }
                let s = known.suggest(key, v);
                let hint = if s.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", vocabulary::did_you_mean(key, v, &s))
                };
                out.push(problem(
                    format!("{at}.values[{j}]"),
                    format!("{v:?} is not a value of {key} in the catalog{hint}"),
                ));
            }
        }
    }
}

/// The object as `T`; when it does not decode although the schema found no type error, why.
fn decode<T: serde::de::DeserializeOwned>(
    object: &Value,
    decodable: bool,
    out: &mut Vec<FieldError>,
) -> Option<T> {
    match serde_json::from_value::<T>(object.clone()) {
        Ok(v) => Some(v),
        Err(e) => {
            if decodable {
                out.push(problem("<root>", e.to_string()));
            }
            None
        }
    }
}

/// Whether some instance type of the pool's catalog can be launched under its requirements
/// (the planner's own shapes, so zone and capacity-type requirements count).
fn launches_anything(pool: &Pool) -> bool {
    let snapshot = Snapshot {
        pools: vec![pool.clone()],
        ..Snapshot::default()
    };
    !build_shapes(&snapshot).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoscaler_core::builders::itype;
    use serde_json::json;

    fn linter() -> Linter {
        let mut h100 = itype("p5.48xlarge")
            .gpus(8, "H100", 80)
            .on_demand(&["us-east-1a"], 98.0)
            .build();
        h100.labels.insert(labels::GPU_NAME.into(), "h100".into());
        let cpu = itype("m5.large").on_demand(&["us-east-1a"], 0.1).build();
        Linter::new(vec![h100, cpu])
    }

    fn problems(o: Outcome) -> Vec<String> {
        match o {
            Outcome::Checked { problems, .. } => problems.iter().map(ToString::to_string).collect(),
            Outcome::Skipped { what } => vec![format!("skipped {what}")],
        }
    }

    fn pool(spec: Value) -> Value {
        json!({"apiVersion": API_VERSION, "kind": "NodePool", "metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn a_valid_pool_has_no_problems() {
        let p = pool(json!({
            "template": {"requirements": [
                {"key": labels::GPU_NAME, "operator": "In", "values": ["h100"]},
                {"key": labels::ZONE, "operator": "In", "values": ["us-east-1a"]},
                // A label of the pool's own: its nodes get it.
                {"key": "example.com/team", "operator": "In", "values": ["ml", "research"]},
            ]},
            "gpuLimits": {"H100": 16},
        }));
        assert_eq!(problems(linter().check(&p)), Vec::<String>::new());
    }

    #[test]
    fn a_pool_may_not_invent_labels_of_restricted_domains() {
        let p = pool(json!({"template": {"requirements": [
            {"key": "example.karpenter.sh/team", "operator": "In", "values": ["ml"]},
            {"key": "example.kubernetes.io/team", "operator": "In", "values": ["ml"]},
        ]}}));
        assert_eq!(
            problems(linter().check(&p)),
            [
                "spec.template.requirements[0].key: no instance type in the catalog has the label example.karpenter.sh/team",
            ]
        );
    }

    #[test]
    fn a_deprecated_key_is_checked_as_its_stable_key() {
        let p = pool(json!({"template": {"requirements": [
            {"key": "failure-domain.beta.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]},
            {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1z"]},
        ]}}));
        assert_eq!(
            problems(linter().check(&p)),
            [
                // Both name the zone, so they must agree.
                "spec.template.requirements: the requirements on \"topology.kubernetes.io/zone\" contradict each other: no node can satisfy them",
                "spec.template.requirements[1].values[0]: \"us-east-1z\" is not a value of topology.kubernetes.io/zone in the catalog (did you mean \"us-east-1a\"?)",
            ]
        );
    }

    #[test]
    fn every_layer_reports_with_paths() {
        let p = pool(json!({
            "template": {
                "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}],
                "requirements": [
                    {"key": labels::GPU_NAME, "operator": "In", "values": ["H100"]},
                    {"key": labels::ZONE, "operator": "In", "values": ["us-east-1z"]},
                    {"key": "gpu-autoscaler.dev/instance-gpu-nam", "operator": "Exists"},
                ],
            },
            "gpuLimits": {"h100": 8},
            "disruption": {"gpuUtilisationThreshold": 0.3, "utilizationThreshold": 2},
        }));
        assert_eq!(
            problems(linter().check(&p)),
            [
                "spec.disruption.gpuUtilisationThreshold: unknown field (did you mean gpuUtilizationThreshold?)",
                "spec.disruption.utilizationThreshold: 2 is greater than 1",
                "spec.template: taints must not repeat a key and effect",
                "spec.template.taints[1]: duplicate taint key \"a\" effect NoSchedule (already at spec.template.taints[0])",
                "spec.template.requirements[0].values[0]: \"H100\" is not a value of gpu-autoscaler.dev/instance-gpu-name in the catalog (did you mean \"h100\"? GPU names in labels are lower case)",
                "spec.template.requirements[1].values[0]: \"us-east-1z\" is not a value of topology.kubernetes.io/zone in the catalog (did you mean \"us-east-1a\"?)",
                "spec.template.requirements[2].key: no instance type in the catalog has the label gpu-autoscaler.dev/instance-gpu-nam (did you mean gpu-autoscaler.dev/instance-gpu-name?)",
                "spec.gpuLimits[\"h100\"]: no GPU model \"h100\" in the catalog (did you mean \"H100\"? GPU models are named as in the catalog)",
            ]
        );
    }

    #[test]
    fn requirements_no_type_satisfies() {
        let p = pool(json!({"template": {"requirements": [
            {"key": labels::GPU_NAME, "operator": "In", "values": ["h100"]},
            {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]},
        ]}}));
        assert_eq!(
            problems(linter().check(&p)),
            [
                "spec.template.requirements: no instance type of the catalog satisfies the requirements (with their zones and capacity types)"
            ]
        );
    }

    #[test]
    fn kinds_and_versions() {
        let l = linter();
        assert_eq!(
            problems(l.check(&json!({"apiVersion": "v1", "kind": "ConfigMap"}))),
            ["skipped v1/ConfigMap"]
        );
        assert_eq!(
            problems(l.check(
                &json!({"apiVersion": API_VERSION, "kind": "NodePol", "metadata": {"name": "x"}})
            )),
            [
                "kind: \"NodePol\" is not a kind of gpu-autoscaler.dev (NodePool, NodeClaim, CapacityQuota, NodeOverlay) (did you mean NodePool?)"
            ]
        );
        let claim = json!({"apiVersion": "gpu-autoscaler.dev/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"nodePool": "p", "requirements": [{"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.larg"]}]}});
        assert_eq!(
            problems(l.check(&claim)),
            [
                "apiVersion: \"gpu-autoscaler.dev/v1\" is not gpu-autoscaler.dev/v1alpha1",
                "spec.requirements[0].values[0]: \"m5.larg\" is not a value of node.kubernetes.io/instance-type in the catalog (did you mean \"m5.large\"?)",
            ]
        );
    }

    #[test]
    fn capacity_quotas_and_overlays_are_checked() {
        let l = linter();
        let quota = json!({"apiVersion": API_VERSION, "kind": "CapacityQuota", "metadata": {"name": "q"},
            "spec": {"selector": {"matchExpressions": [{"key": "team", "operator": "Gt", "values": ["1"]}]},
                     "limits": {"resources": {"nvidia.com/gpu": "16", "nodes": "x"}}}});
        assert_eq!(
            problems(l.check(&quota)),
            [
                "spec.limits.resources[\"nodes\"]: \"x\" does not match ^\\+?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
                "spec.selector.matchExpressions[0].operator: \"Gt\" is not one of \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\"",
            ]
        );
        let good = json!({"apiVersion": API_VERSION, "kind": "CapacityQuota", "metadata": {"name": "q"},
            "spec": {"limits": {"resources": {"nvidia.com/gpu": "16"}}}});
        assert_eq!(problems(l.check(&good)), Vec::<String>::new());
        let overlay = json!({"apiVersion": API_VERSION, "kind": "NodeOverlay", "metadata": {"name": "o"},
            "spec": {"requirements": [{"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.larg"]}],
                     "price": "1.5", "priceAdjustment": "+10%",
                     "capacity": {"cpu": "2", "example.com/slice": "4"}, "weight": 0}});
        assert_eq!(
            problems(l.check(&overlay)),
            [
                "spec.weight: 0 is less than 1",
                "spec: price and priceAdjustment are mutually exclusive",
                "spec.capacity[\"cpu\"]: cpu is not an extended resource; an overlay cannot change it",
                "spec.requirements[0].values[0]: \"m5.larg\" is not a value of node.kubernetes.io/instance-type in the catalog (did you mean \"m5.large\"?)",
            ]
        );
        let good = json!({"apiVersion": API_VERSION, "kind": "NodeOverlay", "metadata": {"name": "o"},
            "spec": {"requirements": [{"key": labels::GPU_NAME, "operator": "In", "values": ["h100"]}],
                     "priceAdjustment": "-20%"}});
        assert_eq!(problems(l.check(&good)), Vec::<String>::new());
    }
}
