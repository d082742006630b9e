//! Parsing the API types into the planning core's vocabulary, recording every problem with its
//! field path. Validation is the same walk with the result thrown away.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use autoscaler_core::dra::AttributeValue;
use autoscaler_core::dra::template::check_attribute;
use autoscaler_core::error::CoreError;
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{
    Budget, BudgetSchedule, BudgetValue, ConsolidationPolicy, DisruptionPolicy, DisruptionReason,
    GpuSharing, Limits, MigSharing, MigStrategy, Pool, ScaleDownDelays, TimeSlicing,
};
use autoscaler_core::quantity::Quantity;
use autoscaler_core::requirements::{Constraint, Labels, Operator, Requirements};
use autoscaler_core::resources::Resources;
use autoscaler_core::taints::{Effect, Taint as CoreTaint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use regex::Regex;

use super::common::{NodeSelectorRequirement, Taint};
use super::nodeclaim::{NodeClaim, NodeClaimSpec};
use super::nodepool::{
    BUDGET_DURATION_PATTERN, BUDGET_WINDOW_RULE, BudgetSpec, DisruptionSpec, DraSpec,
    GpuSharingSpec, NodePool, NodePoolTemplate,
};
use crate::duration::{self, Duration};
use crate::error::{FieldPath, ValidationErrors};
use crate::{mig, names};

/// The resource name under `limits` that bounds the node count.
pub const NODES_LIMIT: &str = "nodes";

impl NodePool {
    /// Parses the NodePool into the core's [`Pool`], with the instance types its node class can
    /// launch (before GPU sharing is applied).
    ///
    /// The pool's nodes are labelled with [`labels::NODEPOOL`]` = <name>` in addition to the
    /// template's labels. `consolidateAfter: Never` becomes `i64::MAX` seconds.
    ///
    /// # Errors
    /// Every problem found, each with its field path (`spec.limits["cpu"]: must not be
    /// negative`); the walk never stops at the first one and never panics.
    pub fn to_core(
        &self,
        instance_types: Arc<Vec<InstanceType>>,
    ) -> Result<Pool, ValidationErrors> {
        let mut errs = ValidationErrors::default();
        let name = required_name(&self.metadata, &mut errs);
        let spec = FieldPath::root("spec");
        let s = &self.spec;
        let template = parse_template(&spec.field("template"), &s.template, &mut errs);
        let sharing = s
            .gpu_sharing
            .as_ref()
            .map(|g| parse_sharing(&spec.field("gpuSharing"), g, &mut errs))
            .unwrap_or_default();
        let limits = parse_limits(
            &spec.field("limits"),
            &s.limits,
            &spec.field("gpuLimits"),
            &s.gpu_limits,
            &mut errs,
        );
        let mut disruption = parse_disruption(&spec.field("disruption"), &s.disruption, &mut errs);
        // `expireAfter` sits in the template, as in Karpenter, but is a disruption setting.
        if let Some(text) = s.template.expire_after.as_deref() {
            let path = spec.field("template").field("expireAfter");
            disruption.expire_after_s = match parse_duration(&path, text, true, &mut errs) {
                i64::MAX => None,
                s => Some(s),
            };
        }
        disruption.termination_grace_period_s = optional_duration(
            &spec.field("template").field("terminationGracePeriod"),
            s.template.termination_grace_period.as_deref(),
            &mut errs,
        );
        let weight = match s.weight {
            None => 0,
            Some(w) if (1..=100).contains(&w) => w,
            Some(w) => {
                errs.push(&spec.field("weight"), format!("{w} is outside [1, 100]"));
                0
            }
        };
        let min_nodes = u32::try_from(s.min_nodes).unwrap_or_else(|_| {
            errs.push(&spec.field("minNodes"), "must not be negative");
            0
        });
        if let (Some(max), true) = (limits.nodes, s.min_nodes >= 0)
            && i64::from(s.min_nodes) > max
        {
            errs.push(
                &spec.field("minNodes"),
                format!("{} exceeds limits[\"nodes\"] = {max}", s.min_nodes),
            );
        }
        let atomic_nodes = s.atomic_scale_up.as_ref().and_then(|a| {
            let path = spec.field("atomicScaleUp").field("nodes");
            let n = match u32::try_from(a.nodes) {
                Ok(n) if (1..=1000).contains(&n) => n,
                _ => {
                    errs.push(&path, format!("{} is outside [1, 1000]", a.nodes));
                    return None;
                }
            };
            if min_nodes != 0 && min_nodes != n {
                errs.push(
                    &spec.field("minNodes"),
                    format!("{min_nodes} must be 0 or atomicScaleUp.nodes ({n})"),
                );
            }
            if let Some(max) = limits.nodes
                && max < i64::from(n)
            {
                errs.push(
                    &path,
                    format!("{n} exceeds limits[\"nodes\"] = {max}: the pool could never scale up"),
                );
            }
            Some(n)
        });
        let dra_attributes = s
            .dra
            .as_ref()
            .map(|d| parse_dra(&spec.field("dra"), d, &mut errs))
            .unwrap_or_default();
        let mut pool_labels = template.labels;
        pool_labels.insert(labels::NODEPOOL.to_string(), name.clone());
        // The GPU Operator's MIG manager applies the geometry a Node's `nvidia.com/mig.config`
        // names, so the pool's nodes carry the one they are sized for; a template label
        // naming another would have them partitioned one way and planned another.
        if let Some(m) = &sharing.mig
            && m.config != autoscaler_core::gpu::mig::DISABLED
        {
            match pool_labels.get(labels::NVIDIA_MIG_CONFIG) {
                Some(v) if *v != m.config => errs.push(
                    &spec
                        .field("template")
                        .field("metadata")
                        .field("labels")
                        .key(labels::NVIDIA_MIG_CONFIG),
                    format!(
                        "{v:?} differs from gpuSharing.mig.config {:?}: the MIG manager would \
                         apply {v:?} to nodes sized for {:?} (leave the label out: the pool's \
                         nodes get gpuSharing.mig.config)",
                        m.config, m.config
                    ),
                ),
                Some(_) => {}
                None => {
                    pool_labels.insert(labels::NVIDIA_MIG_CONFIG.to_string(), m.config.clone());
                }
            }
        }
        errs.finish(Pool {
            name,
            weight,
            labels: pool_labels,
            taints: template.taints,
            startup_taints: template.startup_taints,
            requirements: template.requirements,
            sharing,
            limits,
            min_nodes,
            min_values: template.min_values,
            disruption,
            instance_types,
            atomic_nodes,
            dra_attributes,
            template_hash: Some(s.template.drift_hash()),
        })
    }

    /// Checks the NodePool: the same walk as [`Self::to_core`], without a catalog.
    ///
    /// # Errors
    /// Every problem found, each with its field path.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        self.to_core(Arc::new(Vec::new())).map(|_| ())
    }
}

/// A NodeClaim's spec in the core's vocabulary.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimSpec {
    /// The owning NodePool.
    pub node_pool: String,
    /// The acceptable instance types, zones, capacity types...
    pub requirements: Requirements,
    /// What the node must be able to hold.
    pub requests: Resources,
    /// Taints the node registers with.
    pub taints: Vec<CoreTaint>,
    /// Taints removed during initialization.
    pub startup_taints: Vec<CoreTaint>,
    /// `spec.terminationGracePeriod`, seconds: how long the node's drain may take once its
    /// deletion began. `None`: as long as its pods need.
    pub termination_grace_period_s: Option<i64>,
}

impl NodeClaimSpec {
    /// Parses the spec into the core's vocabulary. Paths in errors start at `spec`.
    ///
    /// # Errors
    /// Every problem found, each with its field path.
    pub fn to_core(&self) -> Result<ClaimSpec, ValidationErrors> {
        let mut errs = ValidationErrors::default();
        let spec = FieldPath::root("spec");
        if self.node_pool.is_empty() {
            errs.push(&spec.field("nodePool"), "must be set");
        }
        let requirements =
            parse_requirements(&spec.field("requirements"), &self.requirements, &mut errs);
        let requests = parse_resources(
            &spec.field("resources").field("requests"),
            &self.resources.requests,
            &mut errs,
        );
        let (taints, startup_taints) = parse_taint_lists(
            &spec.field("taints"),
            &self.taints,
            &spec.field("startupTaints"),
            &self.startup_taints,
            &mut errs,
        );
        let termination_grace_period_s = optional_duration(
            &spec.field("terminationGracePeriod"),
            self.termination_grace_period.as_deref(),
            &mut errs,
        );
        errs.finish(ClaimSpec {
            node_pool: self.node_pool.clone(),
            requirements,
            requests,
            taints,
            startup_taints,
            termination_grace_period_s,
        })
    }

    /// Checks the spec: the same walk as [`Self::to_core`].
    ///
    /// # Errors
    /// Every problem found, each with its field path.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        self.to_core().map(|_| ())
    }
}

impl NodeClaim {
    /// Checks the NodeClaim's name and spec.
    ///
    /// # Errors
    /// Every problem found, each with its field path.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::default();
        if self.metadata.name.as_deref().is_none_or(str::is_empty) {
            errs.push(&FieldPath::root("metadata").field("name"), "must be set");
        }
        if let Err(e) = self.spec.validate() {
            errs.errors.extend(e.errors);
        }
        errs.finish(())
    }
}

struct Template {
    labels: Labels,
    taints: Vec<CoreTaint>,
    startup_taints: Vec<CoreTaint>,
    requirements: Requirements,
    min_values: BTreeMap<String, u32>,
}

fn parse_template(path: &FieldPath, t: &NodePoolTemplate, errs: &mut ValidationErrors) -> Template {
    let labels_path = path.field("metadata").field("labels");
    let mut labels = Labels::new();
    for (k, v) in &t.metadata.labels {
        let p = labels_path.key(k);
        let mut ok = true;
        if let Err(e) = names::check_qualified_name(k) {
            errs.push(&p, e);
            ok = false;
        }
        if k == labels::NODEPOOL {
            errs.push(&p, "is set by the autoscaler and must not be given");
            ok = false;
        }
        if let Err(e) = names::check_label_value(v) {
            errs.push(&p, e);
            ok = false;
        }
        if ok {
            labels.insert(k.clone(), v.clone());
        }
    }
    let requirements = parse_requirements(&path.field("requirements"), &t.requirements, errs);
    // Out-of-range values were reported above; the strictest of repeated keys wins.
    let mut min_values = BTreeMap::new();
    for r in &t.requirements {
        if let Some(m) = r.min_values.and_then(|m| u32::try_from(m).ok())
            && (1..=50).contains(&m)
        {
            let e = min_values.entry(r.key.clone()).or_insert(0);
            *e = (*e).max(m);
        }
    }
    for (k, v) in &labels {
        if let Some(c) = requirements.get(k)
            && !c.matches(Some(v))
        {
            errs.push(
                &labels_path.key(k),
                format!("value {v:?} is excluded by the requirements on {k:?}"),
            );
        }
    }
    let (taints, startup_taints) = parse_taint_lists(
        &path.field("taints"),
        &t.taints,
        &path.field("startupTaints"),
        &t.startup_taints,
        errs,
    );
    if let Some(r) = &t.node_class_ref {
        let p = path.field("nodeClassRef");
        for (field, value) in [("group", &r.group), ("kind", &r.kind), ("name", &r.name)] {
            if value.is_empty() {
                errs.push(&p.field(field), "must be set");
            }
        }
    }
    Template {
        labels,
        taints,
        startup_taints,
        requirements,
        min_values,
    }
}

/// Parses requirements, reporting each bad expression at `path[i]` and, when every expression
/// is valid but they contradict each other, the first key no node can satisfy.
/// `metadata.name`, reported when absent or empty.
pub(super) fn required_name(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    errs: &mut ValidationErrors,
) -> String {
    match meta.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => {
            errs.push(&FieldPath::root("metadata").field("name"), "must be set");
            String::new()
        }
    }
}

pub(super) fn parse_requirements(
    path: &FieldPath,
    list: &[NodeSelectorRequirement],
    errs: &mut ValidationErrors,
) -> Requirements {
    let before = errs.len();
    let mut reqs = Requirements::new();
    for (i, r) in list.iter().enumerate() {
        let p = path.index(i);
        let key_ok = match names::check_qualified_name(&r.key) {
            Ok(()) => true,
            Err(e) => {
                errs.push(&p.field("key"), e);
                false
            }
        };
        let op = match Operator::parse(&r.operator) {
            Ok(op) => Some(op),
            Err(e) => {
                errs.push(&p.field("operator"), e);
                None
            }
        };
        if matches!(op, Some(Operator::In | Operator::NotIn)) {
            for (j, v) in r.values.iter().enumerate() {
                if let Err(e) = names::check_label_value(v) {
                    errs.push(&p.field("values").index(j), e);
                } else if r.key == labels::CAPACITY_TYPE && v != "spot" && v != "on-demand" {
                    errs.push(
                        &p.field("values").index(j),
                        format!("capacity type {v:?} is not spot or on-demand"),
                    );
                }
            }
        }
        if let Some(m) = r.min_values {
            if !(1..=50).contains(&m) {
                errs.push(&p.field("minValues"), format!("{m} is outside [1, 50]"));
            } else if op == Some(Operator::In) && m as usize > r.values.len() {
                errs.push(
                    &p.field("minValues"),
                    format!("{m} exceeds the {} values given", r.values.len()),
                );
            }
        }
        let Some(op) = op else { continue };
        match Constraint::from_operator(&r.key, op, &r.values) {
            Ok(c) if key_ok => reqs.add_constraint(&r.key, c),
            Ok(_) => {}
            Err(CoreError::InvalidRequirement { why, .. }) => {
                errs.push(&p.field("values"), format!("{op} {why}"));
            }
            Err(e) => errs.push(&p, e),
        }
    }
    if errs.len() == before
        && let Some(key) = reqs.conflict()
    {
        errs.push(
            path,
            format!("the requirements on {key:?} contradict each other: no node can satisfy them"),
        );
    }
    reqs
}

fn parse_effect(path: &FieldPath, effect: &str, errs: &mut ValidationErrors) -> Option<Effect> {
    match Effect::parse(effect) {
        Ok(e) => Some(e),
        Err(_) => {
            errs.push(
                path,
                format!(
                    "unknown effect {effect:?} (expected NoSchedule, PreferNoSchedule or NoExecute)"
                ),
            );
            None
        }
    }
}

/// Parses taints and startup taints; a (key, effect) pair may appear once across both lists.
fn parse_taint_lists(
    taints_path: &FieldPath,
    taints: &[Taint],
    startup_path: &FieldPath,
    startup: &[Taint],
    errs: &mut ValidationErrors,
) -> (Vec<CoreTaint>, Vec<CoreTaint>) {
    let mut seen: Vec<(FieldPath, CoreTaint)> = Vec::new();
    let mut out = [Vec::new(), Vec::new()];
    for (list_no, (path, list)) in [(taints_path, taints), (startup_path, startup)]
        .into_iter()
        .enumerate()
    {
        for (i, t) in list.iter().enumerate() {
            let p = path.index(i);
            let mut ok = true;
            if let Err(e) = names::check_qualified_name(&t.key) {
                errs.push(&p.field("key"), e);
                ok = false;
            }
            if let Err(e) = names::check_label_value(&t.value) {
                errs.push(&p.field("value"), e);
                ok = false;
            }
            let Some(effect) = parse_effect(&p.field("effect"), &t.effect, errs) else {
                continue;
            };
            let taint = CoreTaint::new(&t.key, &t.value, effect);
            if let Some((first, _)) = seen
                .iter()
                .find(|(_, o)| o.key == taint.key && o.effect == taint.effect)
            {
                errs.push(
                    &p,
                    format!(
                        "duplicate taint key {:?} effect {:?} (already at {first})",
                        taint.key, taint.effect
                    ),
                );
                continue;
            }
            seen.push((p, taint.clone()));
            if ok {
                out[list_no].push(taint);
            }
        }
    }
    let [a, b] = out;
    (a, b)
}

/// `spec.dra`: the attributes, each checked as the API server checks a slice's.
fn parse_dra(
    path: &FieldPath,
    d: &DraSpec,
    errs: &mut ValidationErrors,
) -> BTreeMap<String, AttributeValue> {
    let mut out = BTreeMap::new();
    let path = path.field("attributes");
    if d.attributes.len() > 32 {
        errs.push(
            &path,
            format!(
                "{} attributes, more than a device may have (32)",
                d.attributes.len()
            ),
        );
    }
    for (name, v) in &d.attributes {
        let at = path.key(name);
        let value = match (&v.bool, &v.int, &v.string, &v.version) {
            (Some(b), None, None, None) => AttributeValue::Bool(*b),
            (None, Some(i), None, None) => AttributeValue::Int(*i),
            (None, None, Some(s), None) => AttributeValue::String(s.clone()),
            (None, None, None, Some(s)) => AttributeValue::Version(s.clone()),
            _ => {
                errs.push(&at, "needs exactly one of bool, int, string and version");
                continue;
            }
        };
        match check_attribute(name, &value) {
            Ok(()) => {
                out.insert(name.clone(), value);
            }
            Err(why) => errs.push(&at, why),
        }
    }
    out
}

fn parse_sharing(path: &FieldPath, g: &GpuSharingSpec, errs: &mut ValidationErrors) -> GpuSharing {
    if g.time_slicing.is_some() && g.mig.is_some() {
        errs.push(path, "timeSlicing and mig cannot both be set");
    }
    if g.mps.is_some() && (g.time_slicing.is_some() || g.mig.is_some()) {
        errs.push(path, "mps cannot be set with timeSlicing or mig");
    }
    let replicas = |field: &str, replicas: i32, most: u32, errs: &mut ValidationErrors| {
        let p = path.field(field).field("replicas");
        match u32::try_from(replicas) {
            Ok(r) if (2..=most).contains(&r) => Some(r),
            _ => {
                errs.push(&p, format!("{replicas} is outside [2, {most}]"));
                None
            }
        }
    };
    let time_slicing = g.time_slicing.as_ref().and_then(|t| {
        replicas("timeSlicing", t.replicas, 1024, errs).map(|r| TimeSlicing {
            replicas: r,
            rename: t.rename_by_default,
            fail_requests_greater_than_one: t.fail_requests_greater_than_one,
            mps: false,
        })
    });
    let mps = g.mps.as_ref().and_then(|m| {
        replicas("mps", m.replicas, 48, errs).map(|r| TimeSlicing {
            replicas: r,
            rename: m.rename_by_default,
            fail_requests_greater_than_one: true,
            mps: true,
        })
    });
    let time_slicing = time_slicing.or(mps);
    let mig = g.mig.as_ref().and_then(|m| {
        let p = path.field("mig");
        let strategy = match m.strategy.as_str() {
            "single" => Some(MigStrategy::Single),
            "mixed" => Some(MigStrategy::Mixed),
            other => {
                errs.push(
                    &p.field("strategy"),
                    format!("unknown MIG strategy {other:?} (expected single or mixed)"),
                );
                None
            }
        };
        let known = mig::is_known_config(&m.config);
        if !known {
            errs.push(
                &p.field("config"),
                format!(
                    "unknown MIG configuration {:?} (expected all-disabled, all-balanced or all-<profile> such as all-1g.10gb)",
                    m.config
                ),
            );
        }
        strategy.filter(|_| known).map(|strategy| MigSharing {
            config: m.config.clone(),
            strategy,
        })
    });
    GpuSharing {
        time_slicing,
        mig,
        fractional: g.fractional,
    }
}

/// Parses one quantity of resource `name`, reporting problems at `path`.
fn parse_quantity(
    path: &FieldPath,
    name: &str,
    q: &KubeQuantity,
    into: &mut Resources,
    errs: &mut ValidationErrors,
) -> bool {
    let parsed = match Quantity::parse(&q.0) {
        Ok(p) => p,
        Err(e) => {
            errs.push(path, e);
            return false;
        }
    };
    match into.add_quantity(name, parsed) {
        Ok(()) => true,
        Err(CoreError::InvalidResource { why, .. }) => {
            errs.push(path, why);
            false
        }
        Err(e) => {
            errs.push(path, e);
            false
        }
    }
}

pub(super) fn parse_resources(
    path: &FieldPath,
    map: &BTreeMap<String, KubeQuantity>,
    errs: &mut ValidationErrors,
) -> Resources {
    let mut r = Resources::new();
    for (name, q) in map {
        let p = path.key(name);
        if let Err(e) = names::check_qualified_name(name) {
            errs.push(&p, e);
            continue;
        }
        parse_quantity(&p, name, q, &mut r, errs);
    }
    r
}

pub(super) fn parse_limits(
    path: &FieldPath,
    map: &BTreeMap<String, KubeQuantity>,
    gpu_path: &FieldPath,
    gpu_map: &BTreeMap<String, i64>,
    errs: &mut ValidationErrors,
) -> Limits {
    let mut limits = Limits::default();
    for (name, q) in map {
        let p = path.key(name);
        if let Err(e) = names::check_qualified_name(name) {
            errs.push(&p, e);
            continue;
        }
        let mut r = Resources::new();
        // Node counts are whole, like any extended resource; `nodes` parses as one.
        if parse_quantity(&p, name, q, &mut r, errs) {
            if name == NODES_LIMIT {
                limits.nodes = Some(r.get(name));
            } else {
                limits.resources.insert(name.clone(), r.get(name));
            }
        }
    }
    for (model, n) in gpu_map {
        if model.is_empty() {
            errs.push(&gpu_path.key(model), "the GPU model must not be empty");
        } else if *n < 0 {
            errs.push(&gpu_path.key(model), "must not be negative");
        } else {
            limits.gpus_by_model.insert(model.clone(), *n);
        }
    }
    limits
}

fn parse_threshold(path: &FieldPath, v: f64, errs: &mut ValidationErrors) -> f64 {
    if (0.0..=1.0).contains(&v) {
        v
    } else {
        errs.push(path, format!("{v} is outside [0, 1]"));
        0.5
    }
}

fn parse_duration(
    path: &FieldPath,
    text: &str,
    allow_never: bool,
    errs: &mut ValidationErrors,
) -> i64 {
    match duration::parse(text, allow_never) {
        Ok(Duration::Seconds(s)) => s,
        Ok(Duration::Never) => i64::MAX,
        Err(e) => {
            errs.push(path, e);
            0
        }
    }
}

/// An optional duration field (no `Never`): absent stays absent.
fn optional_duration(
    path: &FieldPath,
    text: Option<&str>,
    errs: &mut ValidationErrors,
) -> Option<i64> {
    text.map(|t| parse_duration(path, t, false, errs))
}

fn parse_budget(path: &FieldPath, b: &BudgetSpec, errs: &mut ValidationErrors) -> Option<Budget> {
    let nodes_path = path.field("nodes");
    let bad = |errs: &mut ValidationErrors| {
        errs.push(
            &nodes_path,
            format!(
                "{:?} is neither a node count (\"5\") nor a percentage in [0%, 100%] (\"10%\")",
                b.nodes
            ),
        );
        None
    };
    let nodes = match b.nodes.strip_suffix('%') {
        Some(pct) if (1..=3).contains(&pct.len()) && pct.bytes().all(|c| c.is_ascii_digit()) => {
            match pct.parse::<u32>() {
                Ok(p) if p <= 100 && (pct.len() < 3 || p == 100) => Some(BudgetValue::Percent(p)),
                _ => bad(errs),
            }
        }
        None if !b.nodes.is_empty() && b.nodes.bytes().all(|c| c.is_ascii_digit()) => {
            match b.nodes.parse::<u32>() {
                Ok(n) => Some(BudgetValue::Count(n)),
                Err(_) => {
                    errs.push(&nodes_path, format!("{:?} is too large", b.nodes));
                    None
                }
            }
        }
        _ => bad(errs),
    };
    let mut reasons = Vec::new();
    for (i, r) in b.reasons.iter().enumerate() {
        let reason = match r.as_str() {
            "Empty" => DisruptionReason::Empty,
            "Underutilized" => DisruptionReason::Underutilized,
            "Drifted" => DisruptionReason::Drifted,
            other => {
                errs.push(
                    &path.field("reasons").index(i),
                    format!("unknown disruption reason {other:?} (expected Empty, Underutilized or Drifted)"),
                );
                continue;
            }
        };
        if reasons.contains(&reason) {
            errs.push(
                &path.field("reasons").index(i),
                format!("duplicate reason {r:?}"),
            );
            continue;
        }
        reasons.push(reason);
    }
    let schedule = parse_budget_window(path, b, errs);
    nodes.map(|nodes| Budget {
        nodes,
        reasons,
        schedule,
    })
}

/// A budget's `schedule` and `duration`: both or neither (Karpenter's CEL rule), the schedule a
/// cron schedule [`autoscaler_core::cron`] parses, the duration hours and minutes as
/// Karpenter's pattern has them.
fn parse_budget_window(
    path: &FieldPath,
    b: &BudgetSpec,
    errs: &mut ValidationErrors,
) -> Option<BudgetSchedule> {
    static DURATION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(BUDGET_DURATION_PATTERN).expect("a valid pattern"));
    let cron = b.schedule.as_deref().and_then(|text| {
        autoscaler_core::cron::Cron::parse(text)
            .map_err(|e| errs.push(&path.field("schedule"), e))
            .ok()
    });
    let duration_path = path.field("duration");
    let duration_s = b.duration.as_deref().and_then(|text| {
        if !DURATION.is_match(text) {
            errs.push(
                &duration_path,
                format!("{text:?} is not hours and minutes (e.g. 8h, 30m, 1h30m)"),
            );
            return None;
        }
        match duration::parse(text, false) {
            Ok(Duration::Seconds(s)) => Some(s),
            Ok(Duration::Never) => None,
            Err(e) => {
                errs.push(&duration_path, e);
                None
            }
        }
    });
    match (&b.schedule, &b.duration) {
        (Some(_), None) => errs.push_restating(
            &path.field("schedule"),
            "set without duration: a scheduled budget needs both",
            BUDGET_WINDOW_RULE,
        ),
        (None, Some(_)) => errs.push_restating(
            &duration_path,
            "set without schedule: a scheduled budget needs both",
            BUDGET_WINDOW_RULE,
        ),
        _ => {}
    }
    Some(BudgetSchedule {
        cron: cron?,
        duration_s: duration_s?,
    })
}

fn parse_disruption(
    path: &FieldPath,
    d: &DisruptionSpec,
    errs: &mut ValidationErrors,
) -> DisruptionPolicy {
    let consolidation_policy = match d.consolidation_policy.as_str() {
        "WhenEmpty" => ConsolidationPolicy::WhenEmpty,
        "WhenEmptyOrUnderutilized" => ConsolidationPolicy::WhenEmptyOrUnderutilized,
        other => {
            errs.push(
                &path.field("consolidationPolicy"),
                format!("unknown consolidation policy {other:?} (expected WhenEmpty or WhenEmptyOrUnderutilized)"),
            );
            ConsolidationPolicy::WhenEmpty
        }
    };
    DisruptionPolicy {
        consolidation_policy,
        consolidate_after_s: parse_duration(
            &path.field("consolidateAfter"),
            &d.consolidate_after,
            true,
            errs,
        ),
        gpu_utilization_threshold: parse_threshold(
            &path.field("gpuUtilizationThreshold"),
            d.gpu_utilization_threshold,
            errs,
        ),
        utilization_threshold: parse_threshold(
            &path.field("utilizationThreshold"),
            d.utilization_threshold,
            errs,
        ),
        right_size_savings: parse_threshold(
            &path.field("rightSizeSavings"),
            d.right_size_savings,
            errs,
        ),
        unneeded_s: parse_duration(&path.field("unneededTime"), &d.unneeded_time, false, errs),
        delays: ScaleDownDelays {
            after_add_s: optional_duration(
                &path.field("scaleDownDelayAfterAdd"),
                d.scale_down_delay_after_add.as_deref(),
                errs,
            ),
            after_delete_s: optional_duration(
                &path.field("scaleDownDelayAfterDelete"),
                d.scale_down_delay_after_delete.as_deref(),
                errs,
            ),
            after_failure_s: optional_duration(
                &path.field("scaleDownDelayAfterFailure"),
                d.scale_down_delay_after_failure.as_deref(),
                errs,
            ),
        },
        budgets: d
            .budgets
            .iter()
            .enumerate()
            .filter_map(|(i, b)| parse_budget(&path.field("budgets").index(i), b, errs))
            .collect(),
        // Read from the template by the caller.
        expire_after_s: None,
        termination_grace_period_s: None,
    }
}
