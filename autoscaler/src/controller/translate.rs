//! Translation of Kubernetes objects into the planning core's vocabulary, one object at a time.
//!
//! Every function here is pure: an object in, a core value (or a [`TranslateError`] naming the
//! field) out. The snapshot builder ([`super::snapshot`]) assembles the results.
//!
//! Rules worth knowing:
//! - **Requests** follow the scheduler: `max(sum of containers + restartable init containers,
//!   the largest init container plus the sidecars started before it) + overhead`, `pods = 1`.
//!   Pod-level `spec.resources.requests` (Kubernetes 1.34) replace the container sum for the
//!   resources they name.
//! - **GPU shares** (a fraction of one device): HAMi's `nvidia.com/gpucores` (percent of the
//!   device's cores, with `nvidia.com/gpu: 1`) becomes a share of `gpucores × 10` thousandths;
//!   the project annotation [`GPU_SHARE_ANNOTATION`] (thousandths, `"1".."1000"`) wins over it.
//!   Either way the pod's whole-device `nvidia.com/gpu` request and HAMi's `gpucores` / `gpumem`
//!   / `gpumem-percentage` pseudo-resources are removed from its requests: the share is
//!   accounted per device by the core instead.
//! - **Node selection**: `nodeSelector` AND (OR of required node-affinity terms); a term's
//!   `matchFields` on `metadata.name` is read as the `kubernetes.io/hostname` label (the two are
//!   equal on every node this autoscaler manages).
//! - **Groups**: gang membership is read by [`super::gangs`] (this project's annotations,
//!   Volcano, YuniKorn).
//!
//! # Summary
//!
//! `translate`: one Kubernetes object at a time into core values (pod requests as the scheduler
//! computes them, containers' `hostPort`s (pods and DaemonSets), the pod's `status.startTime` only
//! when its do-not-disrupt value is a duration (so replicas still share a translation), GPU shares
//! from HAMi's `nvidia.com/gpucores` or the `gpu-autoscaler.dev/gpu-share` annotation, selectors,
//! affinity, spread, PDBs with a computed `disruptionsAllowed` when no status exists). A field that
//! does not translate gives a `TranslateError` with the field path
//! (`spec.containers[0].resources.requests["cpu"]`), the value as JSON (cut to 200 characters) and
//! why. A pod's `spec.resourceClaims` (DRA) are carried by source (template or shared claim) and
//! resolved each round against the DRA objects (`dra`). `snapshot` assembles a `Snapshot` from the reflectors' stores.
//! A claim that is not Initialized is *in flight*; its registered Node is listed uninitialized and
//! counted once.

use std::collections::BTreeMap;

use autoscaler_core::error::CoreError;
use autoscaler_core::labels as core_labels;
use autoscaler_core::model::{
    DaemonSet as CoreDaemonSet, GpuShare, HostPort, Pdb, Pod as CorePod, PodAffinityTerm, PodKey,
    PodShape, TermNamespaces, TopologySpread,
};
use autoscaler_core::quantity::Quantity as CoreQuantity;
use autoscaler_core::requirements::{Labels, NodeSelector, Operator, Requirements, ValueSet};
use autoscaler_core::resources::{Resources, names};
use autoscaler_core::taints::{Effect, Taint as CoreTaint, Toleration as CoreToleration};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Container, Node, NodeSelectorTerm, Pod, PodSpec, Taint, Toleration, Volume,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use thiserror::Error;

/// Pod annotation: the pod's share of one GPU in thousandths (`"250"` = a quarter device).
pub const GPU_SHARE_ANNOTATION: &str = "gpu-autoscaler.dev/gpu-share";
pub use super::gangs::{POD_GROUP_ANNOTATION, POD_GROUP_MIN_ANNOTATION};
/// HAMi's per-device core percentage.
pub const HAMI_GPU_CORES: &str = "nvidia.com/gpucores";
/// HAMi's per-device memory in MiB.
pub const HAMI_GPU_MEM: &str = "nvidia.com/gpumem";
/// HAMi's per-device memory percentage.
pub const HAMI_GPU_MEM_PERCENT: &str = "nvidia.com/gpumem-percentage";
/// Annotation the kubelet puts on mirror (static) pods.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// An object field that could not be translated, or that asks for something the autoscaler
/// cannot plan for yet. Its text names the field and the value, so it can be shown to the
/// object's owner as it is (the pod events of [`super::pod_problems`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {value}: {why}")]
pub struct TranslateError {
    /// Path of the offending field, e.g. `spec.containers[0].resources.requests["cpu"]`.
    pub field: String,
    /// The offending value as JSON (strings quoted), cut to [`VALUE_CHARS`] characters.
    pub value: String,
    /// What is wrong with it.
    pub why: Why,
}

/// Longest rendering of a value kept in a [`TranslateError`]: an annotation may hold 256 KiB,
/// and the error is kept with the pod and sent in an event.
pub const VALUE_CHARS: usize = 200;

/// Why a field could not be translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The value is not valid (the core says why).
    Invalid(CoreError),
    /// Valid Kubernetes the planner has no model of yet; the pod must not be planned as if the
    /// field were absent.
    Unsupported(&'static str),
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Invalid(e) => e.fmt(f),
            Why::Unsupported(what) => f.write_str(what),
        }
    }
}

/// `value` as JSON, cut to [`VALUE_CHARS`] characters.
fn render(value: &impl serde::Serialize) -> String {
    let text = serde_json::to_string(value).unwrap_or_else(|e| format!("<{e}>"));
    if text.chars().count() <= VALUE_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(VALUE_CHARS).collect();
    cut.push('…');
    cut
}

/// Wraps a core error into a [`TranslateError`] for `field` holding `value`.
fn at(
    field: impl Into<String>,
    value: &impl serde::Serialize,
) -> impl FnOnce(CoreError) -> TranslateError {
    let field = field.into();
    let value = render(value);
    move |e| TranslateError {
        field,
        value,
        why: Why::Invalid(e),
    }
}

/// Seconds since the Unix epoch of a Kubernetes timestamp (the core's clock).
pub fn epoch_seconds(t: &Time) -> i64 {
    t.0.as_second()
}

/// Adds every `name: quantity` of a request map to `into`.
///
/// `path` names the map for an error; it is only worked out for one (every pod of a list
/// comes through here).
fn add_map(
    into: &mut Resources,
    map: Option<&BTreeMap<String, Quantity>>,
    path: &dyn Fn() -> String,
) -> Result<(), TranslateError> {
    for (name, q) in map.into_iter().flatten() {
        let fail = |e: CoreError| at(format!("{}[{name:?}]", path()), &q.0)(e);
        let parsed = CoreQuantity::parse(&q.0)
            .map_err(|source| CoreError::ParseQuantity {
                resource: name.clone(),
                source,
            })
            .map_err(fail)?;
        into.add_quantity(name, parsed).map_err(fail)?;
    }
    Ok(())
}

/// Parses a resource map (node capacity or allocatable, DaemonSet requests...).
///
/// # Errors
/// [`TranslateError`] naming the first bad quantity.
pub fn resources(
    map: Option<&BTreeMap<String, Quantity>>,
    path: &str,
) -> Result<Resources, TranslateError> {
    let mut r = Resources::new();
    add_map(&mut r, map, &|| path.to_string())?;
    Ok(r)
}

/// A container's requests; a resource with a limit but no request is requested at its limit,
/// as API defaulting does (extended resources such as GPUs are usually written as limits only).
fn container_requests(
    c: &Container,
    path: &dyn Fn() -> String,
) -> Result<Resources, TranslateError> {
    let r = c.resources.as_ref();
    let requests = r.and_then(|r| r.requests.as_ref());
    let mut out = Resources::new();
    add_map(&mut out, requests, &|| {
        format!("{}.resources.requests", path())
    })?;
    for (name, q) in r.and_then(|r| r.limits.as_ref()).into_iter().flatten() {
        if requests.is_some_and(|m| m.contains_key(name)) {
            continue;
        }
        let one = BTreeMap::from([(name.clone(), q.clone())]);
        add_map(&mut out, Some(&one), &|| {
            format!("{}.resources.limits", path())
        })?;
    }
    Ok(out)
}

/// Effective requests of a pod spec, without the `pods` slot and before GPU shares are taken
/// out: see the module docs for the rule.
///
/// # Errors
/// [`TranslateError`] naming the first bad quantity.
pub fn effective_requests(spec: &PodSpec) -> Result<Resources, TranslateError> {
    let mut sum = Resources::new();
    for (i, c) in spec.containers.iter().enumerate() {
        sum.add(&container_requests(c, &|| format!("spec.containers[{i}]"))?);
    }
    // Restartable init containers (sidecars) run for the pod's whole life: they add to the
    // steady state, and to every init container started after them.
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_requests(c, &|| format!("spec.initContainers[{i}]"))?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            init_peak = init_peak.max(&sidecars);
        } else {
            init_peak = init_peak.max(&r.plus(&sidecars));
        }
    }
    let mut total = sum.plus(&sidecars).max(&init_peak);
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let pod_level = resources(Some(pod_level), "spec.resources.requests")?;
        for (name, amount) in pod_level.iter() {
            total.set(name, amount);
        }
    }
    add_map(&mut total, spec.overhead.as_ref(), &|| {
        "spec.overhead".into()
    })?;
    Ok(total)
}

/// Converts a label selector (`matchLabels` + `matchExpressions`) into requirements.
///
/// # Errors
/// [`TranslateError`] for an unknown operator or values the operator cannot take.
pub fn label_selector(sel: &LabelSelector, path: &str) -> Result<Requirements, TranslateError> {
    let mut r = Requirements::from_labels(&sel.match_labels.clone().unwrap_or_default());
    for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
        let field = format!("{path}.matchExpressions[{i}]");
        let op =
            Operator::parse(&e.operator).map_err(at(format!("{field}.operator"), &e.operator))?;
        r.add(&e.key, op, e.values.as_deref().unwrap_or_default())
            .map_err(at(field, e))?;
    }
    Ok(r)
}

/// One node selector term's requirements (`matchFields` on `metadata.name` read as the
/// hostname label).
///
/// # Errors
/// [`TranslateError`] naming the expression under `path` that does not parse.
pub(crate) fn node_selector_term(
    term: &NodeSelectorTerm,
    path: &str,
) -> Result<Requirements, TranslateError> {
    let mut r = Requirements::new();
    for (i, e) in term.match_expressions.iter().flatten().enumerate() {
        let field = format!("{path}.matchExpressions[{i}]");
        let op =
            Operator::parse(&e.operator).map_err(at(format!("{field}.operator"), &e.operator))?;
        r.add(&e.key, op, e.values.as_deref().unwrap_or_default())
            .map_err(at(field, e))?;
    }
    for (i, e) in term.match_fields.iter().flatten().enumerate() {
        let field = format!("{path}.matchFields[{i}]");
        // metadata.name is the only field node affinity may select on; it equals the hostname
        // label on the nodes this autoscaler launches.
        let key = if e.key == "metadata.name" {
            core_labels::HOSTNAME
        } else {
            e.key.as_str()
        };
        let op =
            Operator::parse(&e.operator).map_err(at(format!("{field}.operator"), &e.operator))?;
        r.add(key, op, e.values.as_deref().unwrap_or_default())
            .map_err(at(field, e))?;
    }
    Ok(r)
}

/// `nodeSelector` AND (OR of required node-affinity terms), plus the preferred terms.
///
/// # Errors
/// [`TranslateError`] for a malformed expression.
pub fn node_selection(
    spec: &PodSpec,
) -> Result<(NodeSelector, Vec<(i32, Requirements)>), TranslateError> {
    let base: Labels = spec.node_selector.clone().unwrap_or_default();
    let na = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let mut terms = Vec::new();
    if let Some(req) = na.and_then(|n| {
        n.required_during_scheduling_ignored_during_execution
            .as_ref()
    }) {
        for (i, t) in req.node_selector_terms.iter().enumerate() {
            terms.push(node_selector_term(
                t,
                &format!(
                    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                ),
            )?);
        }
    }
    let mut preferred = Vec::new();
    for (i, p) in na
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .enumerate()
    {
        preferred.push((
            p.weight,
            node_selector_term(
                &p.preference,
                &format!(
                    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
                ),
            )?,
        ));
    }
    Ok((NodeSelector::new(&base, terms), preferred))
}

/// Converts a toleration.
///
/// # Errors
/// [`TranslateError`] for an unknown operator or effect.
pub fn toleration(t: &Toleration, path: &str) -> Result<CoreToleration, TranslateError> {
    CoreToleration::parse(
        t.key.as_deref().unwrap_or_default(),
        t.operator.as_deref().unwrap_or_default(),
        t.value.as_deref().unwrap_or_default(),
        t.effect.as_deref().unwrap_or_default(),
    )
    .map_err(at(path, t))
}

/// Converts a node taint.
///
/// # Errors
/// [`TranslateError`] for an unknown effect.
pub fn taint(t: &Taint, path: &str) -> Result<CoreTaint, TranslateError> {
    let effect = Effect::parse(&t.effect).map_err(at(format!("{path}.effect"), &t.effect))?;
    Ok(CoreTaint::new(
        &t.key,
        t.value.as_deref().unwrap_or_default(),
        effect,
    ))
}

/// The Kubernetes taint of a core taint.
pub fn kube_taint(t: &CoreTaint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: format!("{:?}", t.effect),
        time_added: None,
    }
}

/// A selector no object matches: what Kubernetes makes of a null `labelSelector` in a pod
/// (anti-)affinity term or a topology spread constraint, and of a PodDisruptionBudget's null
/// `selector` (an empty one, `{}`, matches everything).
fn matches_nothing() -> Requirements {
    let mut r = Requirements::new();
    r.add_constraint(
        "gpu-autoscaler.dev/null-selector",
        autoscaler_core::requirements::Constraint {
            allow_absent: false,
            values: autoscaler_core::requirements::ValueSet::In(Default::default()),
            gt: None,
            lt: None,
        },
    );
    r
}

/// Narrows `selector` to pods sharing the pod's value of each of `same` (`matchLabelKeys`)
/// and not sharing it for each of `other` (`mismatchLabelKeys`): the scheduler's way of
/// telling a Deployment's revisions apart. A key the pod does not carry is ignored.
fn with_label_keys(
    mut selector: Requirements,
    pod_labels: &Labels,
    same: Option<&Vec<String>>,
    other: Option<&Vec<String>>,
) -> Requirements {
    for (keys, op) in [(same, Operator::In), (other, Operator::NotIn)] {
        for k in keys.into_iter().flatten() {
            if let Some(v) = pod_labels.get(k) {
                selector = selector.with(k, op, &[v.as_str()]);
            }
        }
    }
    selector
}

/// The pod (anti-)affinity terms; `anti` drops terms with a null selector, which match no pod
/// and so forbid nothing (a required affinity term with one is never met, and is kept).
fn affinity_terms(
    terms: Option<&Vec<k8s_openapi::api::core::v1::PodAffinityTerm>>,
    path: &str,
    anti: bool,
    pod_labels: &Labels,
) -> Result<Vec<PodAffinityTerm>, TranslateError> {
    let mut out = Vec::new();
    for (i, t) in terms.into_iter().flatten().enumerate() {
        out.extend(affinity_term(t, &format!("{path}[{i}]"), anti, pod_labels)?);
    }
    Ok(out)
}

/// One pod (anti-)affinity term at `path`; `None` for an anti-affinity term with a null
/// selector (see [`affinity_terms`]).
fn affinity_term(
    t: &k8s_openapi::api::core::v1::PodAffinityTerm,
    path: &str,
    anti: bool,
    pod_labels: &Labels,
) -> Result<Option<PodAffinityTerm>, TranslateError> {
    let selector = match &t.label_selector {
        Some(s) => with_label_keys(
            label_selector(s, &format!("{path}.labelSelector"))?,
            pod_labels,
            t.match_label_keys.as_ref(),
            t.mismatch_label_keys.as_ref(),
        ),
        None if anti => return Ok(None),
        None => matches_nothing(),
    };
    Ok(Some(PodAffinityTerm {
        held: false,
        topology_key: t.topology_key.clone(),
        selector,
        namespaces: term_namespaces(t, path)?,
    }))
}

/// The preferred pod (anti)-affinity terms with their weights.
fn preferred_affinity_terms(
    terms: Option<&Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>>,
    path: &str,
    anti: bool,
    pod_labels: &Labels,
) -> Result<Vec<(i32, PodAffinityTerm)>, TranslateError> {
    let mut out = Vec::new();
    for (i, w) in terms.into_iter().flatten().enumerate() {
        let at = format!("{path}[{i}].podAffinityTerm");
        let t = affinity_term(&w.pod_affinity_term, &at, anti, pod_labels)?;
        out.extend(t.map(|t| (w.weight, t)));
    }
    Ok(out)
}

/// The namespaces a pod (anti)-affinity term looks in: its `namespaces` list and the
/// namespaces its `namespaceSelector` selects (`{}`: every one); the pod's own when neither
/// is set. A selector whose one requirement is on `kubernetes.io/metadata.name`, which every
/// namespace carries with its name (`matchLabels`, `In`, `NotIn`, `Exists`, `DoesNotExist`),
/// is read here; one on other namespace labels is kept as [`TermNamespaces::Matching`], which
/// each round resolves against the Namespaces then (their labels can change while the pod
/// waits).
fn term_namespaces(
    t: &k8s_openapi::api::core::v1::PodAffinityTerm,
    path: &str,
) -> Result<TermNamespaces, TranslateError> {
    let mut names: std::collections::BTreeSet<String> =
        t.namespaces.iter().flatten().cloned().collect();
    let Some(sel) = &t.namespace_selector else {
        return Ok(if names.is_empty() {
            TermNamespaces::Own
        } else {
            TermNamespaces::Listed(names)
        });
    };
    let field = format!("{path}.namespaceSelector");
    let r = label_selector(sel, &field)?;
    if r.is_empty() {
        return Ok(TermNamespaces::All);
    }
    // Every namespace has the name label, so whether the selector lets it be absent does
    // not matter: `DoesNotExist` is an empty `In`, `Exists` an empty `NotIn`.
    let by_name = match r.get(autoscaler_core::labels::NAMESPACE_NAME) {
        Some(c) if r.iter().count() == 1 && c.gt.is_none() && c.lt.is_none() => Some(&c.values),
        _ => None,
    };
    let Some(values) = by_name else {
        return Ok(TermNamespaces::Matching {
            listed: names,
            selector: r,
        });
    };
    Ok(match values {
        ValueSet::In(selected) => {
            names.extend(selected.iter().cloned());
            TermNamespaces::Listed(names)
        }
        // Listed namespaces are looked in whatever the selector leaves out.
        ValueSet::NotIn(left_out) => {
            let left_out: std::collections::BTreeSet<String> =
                left_out.difference(&names).cloned().collect();
            if left_out.is_empty() {
                TermNamespaces::All
            } else {
                TermNamespaces::AllBut(left_out)
            }
        }
    })
}

/// Takes the GPU share out of `requests`, per the module docs.
fn gpu_share(
    requests: &mut Resources,
    annotations: &Labels,
) -> Result<Option<GpuShare>, TranslateError> {
    let cores = requests.get(HAMI_GPU_CORES);
    let share = match annotations.get(GPU_SHARE_ANNOTATION) {
        Some(v) => {
            let milli: u32 = v
                .trim()
                .parse()
                .ok()
                .filter(|m| (1..=1000).contains(m))
                .ok_or_else(|| {
                    at(format!("metadata.annotations[{GPU_SHARE_ANNOTATION:?}]"), v)(
                        CoreError::InvalidResource {
                            resource: names::NVIDIA_GPU.into(),
                            why: "a GPU share must be a whole number of thousandths in 1..=1000"
                                .into(),
                        },
                    )
                })?;
            Some(milli)
        }
        None if cores > 0 && cores < 100 && requests.get(names::NVIDIA_GPU) <= 1 => {
            Some(u32::try_from(cores * 10).unwrap_or(1000))
        }
        None => None,
    };
    for hami in [HAMI_GPU_CORES, HAMI_GPU_MEM, HAMI_GPU_MEM_PERCENT] {
        requests.set(hami, 0);
    }
    Ok(share.map(|milli| {
        requests.set(names::NVIDIA_GPU, 0);
        GpuShare {
            resource: names::NVIDIA_GPU.into(),
            milli,
        }
    }))
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> PodKey {
    PodKey {
        namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: pod.metadata.name.clone().unwrap_or_default(),
    }
}

/// The pod annotations the core pod keeps: those disruption and the ProvisioningRequest loop
/// read. Any other would only make pods that are otherwise alike translate apart, defeating
/// the sharing of translations in the pod cache.
pub const KEPT_ANNOTATIONS: [&str; 5] = [
    autoscaler_core::disruption::DO_NOT_DISRUPT,
    autoscaler_core::disruption::SAFE_TO_EVICT,
    autoscaler_core::disruption::POD_DELETION_COST,
    super::provreq::CONSUME_ANNOTATION,
    super::provreq::CONSUME_ANNOTATION_CA,
];

/// The host ports a pod's containers bind (`spec.containers[].ports[].hostPort`; init
/// containers do not hold theirs while the pod runs). `prefix` is the spec's field path.
///
/// # Errors
/// [`TranslateError`] naming a port outside 1..=65535 or an unknown protocol.
pub fn host_ports(spec: &PodSpec, prefix: &str) -> Result<Vec<HostPort>, TranslateError> {
    let mut out = Vec::new();
    for (ci, c) in spec.containers.iter().enumerate() {
        for (pi, p) in c.ports.iter().flatten().enumerate() {
            let Some(port) = p.host_port.filter(|p| *p != 0) else {
                continue;
            };
            let field = format!("{prefix}.containers[{ci}].ports[{pi}]");
            let port = u16::try_from(port).ok().filter(|p| *p > 0).ok_or_else(|| {
                at(format!("{field}.hostPort"), &port)(CoreError::InvalidHostPort(format!(
                    "{port} is outside 1..=65535"
                )))
            })?;
            let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            if !matches!(protocol.as_str(), "TCP" | "UDP" | "SCTP") {
                return Err(at(format!("{field}.protocol"), &protocol)(
                    CoreError::InvalidHostPort(format!(
                        "protocol {protocol:?} is not TCP, UDP or SCTP"
                    )),
                ));
            }
            out.push(HostPort {
                port,
                protocol,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// When a pod started running, kept only for a pod with a `karpenter.sh/do-not-disrupt`
/// value other than `"true"` (a duration counts from it): every other pod leaves it out so
/// that replicas still translate alike and share one translation in the pod cache.
fn started_at(p: &Pod, annotations: &Labels) -> Option<i64> {
    annotations
        .get(autoscaler_core::disruption::DO_NOT_DISRUPT)
        .filter(|v| v.as_str() != "true")?;
    p.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(epoch_seconds)
}

/// Translates a pod.
///
/// Its DRA claims (`spec.resourceClaims`) are carried by source only: the round resolves
/// their specs and allocations from the DRA objects (`super::dra`).
///
/// # Errors
/// [`TranslateError`] naming the first field that does not parse.
pub fn pod(p: &Pod) -> Result<CorePod, TranslateError> {
    let empty = PodSpec::default();
    let spec = p.spec.as_ref().unwrap_or(&empty);
    let claims =
        super::dra::pod_claims(spec, p.status.as_ref()).map_err(|(i, why)| TranslateError {
            field: format!("spec.resourceClaims[{i}]"),
            value: render(&spec.resource_claims.as_ref().map(|c| &c[i])),
            why: Why::Unsupported(why),
        })?;
    let annotations: Labels = p.metadata.annotations.clone().unwrap_or_default();
    let pod_labels: Labels = p.metadata.labels.clone().unwrap_or_default();
    let mut requests = effective_requests(spec)?;
    requests.set(names::PODS, 1);
    let gpu_share = gpu_share(&mut requests, &annotations)?;
    let (node_selector, preferred) = node_selection(spec)?;
    let mut tolerations = Vec::new();
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        tolerations.push(toleration(t, &format!("spec.tolerations[{i}]"))?);
    }
    let mut spread = Vec::new();
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let path = format!("spec.topologySpreadConstraints[{i}]");
        // A null selector counts no pod; the constraint stays, as in the scheduler, which
        // still keeps the pod off nodes without the key.
        let selector = match &c.label_selector {
            Some(s) => with_label_keys(
                label_selector(s, &format!("{path}.labelSelector"))?,
                &pod_labels,
                c.match_label_keys.as_ref(),
                None,
            ),
            None => matches_nothing(),
        };
        spread.push(TopologySpread {
            max_skew: u32::try_from(c.max_skew).unwrap_or(1).max(1),
            topology_key: c.topology_key.clone(),
            selector,
            hard: c.when_unsatisfiable == "DoNotSchedule",
            min_domains: c
                .min_domains
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            ignore_node_affinity: c.node_affinity_policy.as_deref() == Some("Ignore"),
        });
    }
    let aff = spec.affinity.as_ref();
    let affinity = affinity_terms(
        aff.and_then(|a| a.pod_affinity.as_ref()).and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }),
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        false,
        &pod_labels,
    )?;
    let anti_affinity = affinity_terms(
        aff.and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        true,
        &pod_labels,
    )?;
    let preferred_affinity = preferred_affinity_terms(
        aff.and_then(|a| a.pod_affinity.as_ref()).and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        }),
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        false,
        &pod_labels,
    )?;
    let preferred_anti_affinity = preferred_affinity_terms(
        aff.and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        true,
        &pod_labels,
    )?;
    // The Cluster Autoscaler's annotation makes a pod count as a DaemonSet pod (node agents
    // started by other means), for utilization and drains alike.
    let ca_daemonset = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CA_DAEMONSET_POD))
        .is_some_and(|v| v == "true");
    let owner_kind = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.kind.clone())
        .filter(|_| !ca_daemonset)
        .or_else(|| ca_daemonset.then(|| "DaemonSet".to_string()));
    let local_storage = blocking_local_storage(spec, &annotations);
    let host_ports = host_ports(spec, "spec")?;
    let started_at = started_at(p, &annotations);
    Ok(CorePod::with_shape(
        pod_key(p),
        PodShape {
            requests,
            gpu_share,
            labels: pod_labels,
            mirror: is_mirror(p),
            group: super::gangs::gang_of(p, None).map(|g| g.id),
            annotations: annotations
                .into_iter()
                .filter(|(k, _)| KEPT_ANNOTATIONS.contains(&k.as_str()))
                .collect(),
            node_selector,
            strict_node_selector: None,
            preferred,
            tolerations,
            spread,
            anti_affinity,
            affinity,
            preferred_affinity,
            preferred_anti_affinity,
            priority: spec.priority.unwrap_or(0),
            owner_kind,
            local_storage,
            host_ports,
            started_at,
            claims,
        },
    ))
}

/// Whether a volume is local storage as the Cluster Autoscaler counts it (its
/// `isLocalVolume`): a hostPath, or an emptyDir on the node's disk. A `Memory` emptyDir is a
/// tmpfs whose contents die with the pod anyway; the other sources (ConfigMap, Secret,
/// projected, PVCs, generic ephemeral volumes) are rebuilt where the pod starts again or
/// bound through a claim the scheduler follows, so upstream does not count them either.
fn is_local_volume(v: &Volume) -> bool {
    v.host_path.is_some()
        || v.empty_dir
            .as_ref()
            .is_some_and(|e| e.medium.as_deref() != Some("Memory"))
}

/// Whether the pod has a local volume its `safe-to-evict-local-volumes` annotation does not
/// name: only then does its local storage keep it on its node, as in the Cluster Autoscaler.
///
/// The list is split on commas and each name compared as written, as upstream does: a name
/// with spaces around it (`"a, b"`) names no volume (volume names are DNS labels), so `b`
/// still blocks, and a name that is no local volume of the pod waives nothing. Both
/// autoscalers then agree on which pods pin their nodes during a migration.
fn blocking_local_storage(spec: &PodSpec, annotations: &Labels) -> bool {
    let listed: Vec<&str> = annotations
        .get(autoscaler_core::keys::SAFE_TO_EVICT_LOCAL_VOLUMES)
        .map(|v| v.split(',').collect())
        .unwrap_or_default();
    spec.volumes
        .iter()
        .flatten()
        .any(|v| is_local_volume(v) && !listed.contains(&v.name.as_str()))
}

/// Whether the scheduler has given up on the pod: `PodScheduled=False`,
/// `reason=Unschedulable`, not bound, not terminating, not finished.
pub fn is_unschedulable(p: &Pod) -> bool {
    let bound = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if bound || p.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let status = p.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
}

/// Whether `p` is a mirror of a static pod: the kubelet's annotation, or an owner of kind
/// `Node` (Karpenter's `IsOwnedByNode`). The API server cannot evict or delete the static pod
/// itself, so a drain leaves it.
pub fn is_mirror(p: &Pod) -> bool {
    let annotated = p
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
    annotated
        || p.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Node" && o.api_version == "v1")
}

/// Whether a bound pod still occupies its node (not finished).
pub fn is_active(p: &Pod) -> bool {
    !matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The node a pod is bound to.
pub fn node_name(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Pod annotation with which the Cluster Autoscaler treats a pod as a DaemonSet pod.
pub const CA_DAEMONSET_POD: &str = "cluster-autoscaler.kubernetes.io/daemonset-pod";

/// Whether a node's `Ready` condition is `True`.
pub fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// A node's taints in the core's vocabulary; unknown effects are skipped (the API server
/// rejects them, so only a broken object has one).
pub fn node_taints(n: &Node) -> Vec<CoreTaint> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, t)| taint(t, &format!("spec.taints[{i}]")).ok())
        .collect()
}

/// A node's allocatable.
///
/// # Errors
/// [`TranslateError`] naming the bad quantity.
pub fn node_allocatable(n: &Node) -> Result<Resources, TranslateError> {
    resources(
        n.status.as_ref().and_then(|s| s.allocatable.as_ref()),
        "status.allocatable",
    )
}

mod workloads;
pub use workloads::{daemonset, pdb};

#[cfg(test)]
mod tests;
