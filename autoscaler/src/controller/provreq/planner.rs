//! What a ProvisioningRequest puts into the planner's snapshot: its pods (one translated shape
//! per pod set, copied under the size bound), the phantoms that hold a booking's capacity on its
//! nodes and claims, the booking read back from a plan, and the [`PIN_LABEL`] offered to pods
//! pinned to a request's nodes. Pure: the lifecycle that decides when these apply is the parent
//! module's.

use std::collections::BTreeMap;

use autoscaler_core::model::{Pod as CorePod, PodKey, Snapshot};
use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    Booking, CONSUME_ANNOTATION, CONSUME_ANNOTATION_CA, PIN_LABEL, ProvisioningRequest, Target,
    group_id, total_pods,
};

/// Why a request's pods cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodsError {
    /// A PodTemplate does not exist (yet): worth retrying.
    Missing(String),
    /// A PodTemplate exists but cannot be translated, or the request is too large: retrying
    /// cannot help. The message names the field.
    Invalid(String),
}

impl std::fmt::Display for PodsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PodsError::Missing(m) | PodsError::Invalid(m) => f.write_str(m),
        }
    }
}

/// The request's pod shapes: one translated pod per pod set (named `<request>-<set>`, in the
/// request's group) with its count. Nothing is built per pod here, whatever the counts say.
///
/// # Errors
/// [`PodsError`] naming the missing template or the untranslatable field.
pub fn shapes(
    pr: &ProvisioningRequest,
    templates: &BTreeMap<(String, String), &PodTemplate>,
) -> Result<Vec<(CorePod, u32)>, PodsError> {
    let ns = pr
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = pr.metadata.name.clone().unwrap_or_default();
    let group = group_id(pr);
    let mut out = Vec::with_capacity(pr.spec.pod_sets.len());
    for (si, set) in pr.spec.pod_sets.iter().enumerate() {
        let tname = set.pod_template_ref.name.clone().ok_or_else(|| {
            PodsError::Invalid(format!("spec.podSets[{si}].podTemplateRef.name is empty"))
        })?;
        let t = templates.get(&(ns.clone(), tname.clone())).ok_or_else(|| {
            PodsError::Missing(format!(
                "PodTemplate {ns}/{tname} (spec.podSets[{si}]) not found"
            ))
        })?;
        let tpl = t.template.as_ref().ok_or_else(|| {
            PodsError::Invalid(format!("PodTemplate {ns}/{tname} has no template"))
        })?;
        let meta = tpl.metadata.clone().unwrap_or_default();
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(format!("{name}-{si}")),
                namespace: Some(ns.clone()),
                labels: meta.labels,
                annotations: meta.annotations,
                ..Default::default()
            },
            spec: tpl.spec.clone(),
            status: None,
        };
        let mut core = crate::controller::translate::pod(&pod)
            .map_err(|e| PodsError::Invalid(format!("PodTemplate {ns}/{tname}: template.{e}")))?;
        core.group = Some(group.clone());
        out.push((core, u32::try_from(set.count).unwrap_or(0)));
    }
    Ok(out)
}

/// The request's pods for the planner (`<request>-<set>-<i>`): copies of its [`shapes`],
/// their pod affinity terms' namespace selectors resolved against `namespaces` (each
/// Namespace's labels, as the snapshot's pods are), refused above `max_pods` before any copy
/// is made.
///
/// # Errors
/// [`PodsError`] as [`shapes`], and [`PodsError::Invalid`] for more than `max_pods` pods.
pub fn pods(
    pr: &ProvisioningRequest,
    templates: &BTreeMap<(String, String), &PodTemplate>,
    max_pods: u64,
    namespaces: &BTreeMap<String, autoscaler_core::requirements::Labels>,
) -> Result<Vec<CorePod>, PodsError> {
    let total = total_pods(pr);
    if total > max_pods {
        return Err(PodsError::Invalid(format!(
            "the request asks for {total} pods; at most {max_pods} per request (--provreq-max-pods)"
        )));
    }
    let mut shapes = shapes(pr, templates)?;
    autoscaler_core::model::resolve_namespace_selectors(
        shapes.iter_mut().map(|(p, _)| p),
        namespaces,
    );
    let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for (shape, count) in shapes {
        let base = shape.key.name.clone();
        for i in 0..count {
            let mut p = shape.clone();
            p.key.name = format!("{base}-{i}");
            out.push(p);
        }
    }
    Ok(out)
}

/// Whether a pod consumes a request's capacity, and which (`namespace/name`).
pub fn consumed_request(p: &CorePod) -> Option<String> {
    let name = p
        .annotations
        .get(CONSUME_ANNOTATION)
        .or_else(|| p.annotations.get(CONSUME_ANNOTATION_CA))?;
    Some(format!("{}/{name}", p.key.namespace))
}

/// Holds a booking in a snapshot: puts `phantoms` (the request's pods not yet consumed) on its
/// targets in booking order, and marks its nodes booked. A claim's phantoms go where the
/// planner counts the claim: on its in-flight entry while it is not initialized (its registered
/// Node is then booked too), on its Node once initialized. Targets no longer in the snapshot
/// are skipped (the lifecycle revokes or rolls back the request).
pub fn hold(snap: &mut Snapshot, booking: &Booking, phantoms: Vec<CorePod>) {
    let mut phantoms = phantoms.into_iter();
    for (t, n) in &booking.targets {
        let take: Vec<CorePod> = phantoms.by_ref().take(*n as usize).collect();
        let node = match t {
            Target::Node(name) => snap.nodes.iter().position(|x| &x.name == name),
            Target::Claim(c) => snap
                .nodes
                .iter()
                .position(|x| x.claim.as_deref() == Some(c.as_str())),
        };
        if let Some(i) = node {
            snap.booked_nodes.insert(snap.nodes[i].name.clone());
        }
        let in_flight = match t {
            Target::Claim(c) => snap.in_flight.iter_mut().find(|x| &x.name == c),
            Target::Node(_) => None,
        };
        match (in_flight, node) {
            (Some(claim), _) => claim.pods.extend(take),
            (None, Some(i)) => snap.nodes[i].pods.extend(take),
            (None, None) => {}
        }
    }
}

/// What `booking` still holds once the request's pods bound on the nodes `on` (one entry per
/// pod) took their places, by [`autoscaler_core::provreq::unconsumed`]: a pod on a booked Node,
/// or on the Node of a booked claim (`claim_of` gives a Node's claim), frees that place.
pub fn places_left<'c>(
    booking: &Booking,
    on: &[&str],
    claim_of: impl Fn(&str) -> Option<&'c str>,
) -> Booking {
    let targets: Vec<(Target, u32)> = booking
        .targets
        .iter()
        .map(|(t, n)| (t.clone(), *n))
        .collect();
    let bound_on = on.iter().map(|node| {
        let as_node = Target::Node((*node).to_string());
        if booking.targets.contains_key(&as_node) {
            return Some(as_node);
        }
        claim_of(node)
            .map(|c| Target::Claim(c.to_string()))
            .filter(|t| booking.targets.contains_key(t))
    });
    Booking {
        targets: autoscaler_core::provreq::unconsumed(&targets, bound_on)
            .into_iter()
            .collect(),
        elided: booking.elided,
    }
}

/// The [`PIN_LABEL`] value a pod requires (a single value in every term of its node
/// selector), if any.
pub fn pinned_to(p: &CorePod) -> Option<&str> {
    let mut values = p
        .node_selector
        .terms
        .iter()
        .map(|t| t.get(PIN_LABEL).and_then(|c| c.single_value()));
    let first = values.next()??;
    values.all(|v| v == Some(first)).then_some(first)
}

/// Offers [`PIN_LABEL`] to the pending pods that require it: every pool of `snap` sets the
/// label to the value such pods ask for, so their new claims (and the in-flight claims
/// launched for them, which the planner sees through their pool) carry it, as Kueue's
/// `podSetUpdates` expect once the booking that pinned them has ended. One value per plan:
/// the one most pending pods ask for (ties: the smallest), so pods of a second request wait
/// for a later plan instead of landing on nodes they cannot select. The label only adds a
/// value no other pod selects, so pods that do not ask for it are placed as before.
pub fn offer_pin(snap: &mut Snapshot) {
    let mut wanted: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &snap.pending {
        if let Some(v) = pinned_to(p) {
            *wanted.entry(v).or_default() += 1;
        }
    }
    let Some(value) = wanted
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(v, _)| (*v).to_string())
    else {
        return;
    };
    for pool in &mut snap.pools {
        pool.labels.insert(PIN_LABEL.into(), value.clone());
    }
}

/// The phantom pods of a request: its pods minus as many as have been consumed, renamed so
/// they can never collide with real pods.
pub fn phantoms(mut pods: Vec<CorePod>, consumed: u32) -> Vec<CorePod> {
    let keep = pods.len().saturating_sub(consumed as usize);
    pods.truncate(keep);
    for p in &mut pods {
        p.key = PodKey {
            namespace: p.key.namespace.clone(),
            name: format!("{}.booked", p.key.name),
        };
        p.group = None;
    }
    pods
}

/// The booking of a plan for a request's pods: targets from its placements on existing nodes
/// and in-flight claims, plus the created claims (`created`: plan-local name → cluster name).
pub fn booking_of(
    plan: &autoscaler_core::plan::Plan,
    created: &BTreeMap<String, String>,
) -> Booking {
    let mut b = Booking::default();
    for p in &plan.existing {
        *b.targets.entry(Target::Node(p.target.clone())).or_insert(0) += 1;
    }
    for p in &plan.in_flight {
        *b.targets
            .entry(Target::Claim(p.target.clone()))
            .or_insert(0) += 1;
    }
    for c in &plan.new_claims {
        if let Some(name) = created.get(&c.name) {
            *b.targets.entry(Target::Claim(name.clone())).or_insert(0) += c.pods.len() as u32;
        }
    }
    b
}
