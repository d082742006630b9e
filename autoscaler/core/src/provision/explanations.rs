//! Explanations: the reason a pod gets no place, summarised for its event; and, for
//! `explain`, every pool and instance type a pod was considered for with what refused each
//! ([`Planner::consider`]) and where a pool stands ([`pool_standing`]), decided by the same
//! predicates the planner places pods with.

use std::collections::{BTreeMap, HashMap};

use crate::explain::{LimitUse, PoolConsidered, Refusal, RefusalKind, TypeConsidered};
use crate::instance::InstanceType;
use crate::labels;
use crate::model::{Pool, Snapshot};
use crate::requirements::{Constraint, Requirements, ValueSet};
use crate::resources::{Resources, format_amount};
use crate::taints::untolerated;

use super::classes::{Bar, class_bar};
use super::shapes::{
    Devices, Excluded, Shape, demand, node_requirements, pool_defined_labels, shape_for,
    term_fits_shape,
};
use super::{PlanOptions, Planner};

/// `key <constraint>` as requirements print it (`node.kubernetes.io/instance-type In [a,b]`).
fn constraint_words(key: &str, c: &Constraint) -> String {
    let mut r = Requirements::new();
    r.add_constraint(key, c.clone());
    r.to_string()
}

/// What a type's label `key` holds, as a clause (`; the type has key=value`); nothing for the
/// instance-type label, whose value is the type's name, so that the types one requirement
/// refuses share one message.
fn has_words(key: &str, value: Option<&String>) -> String {
    match value {
        _ if key == labels::INSTANCE_TYPE => String::new(),
        Some(v) => format!("; the type has {key}={v}"),
        None => format!("; the type has no {key} label"),
    }
}

/// The zones and capacity types of `offerings` (`us-east-1a/on-demand, ...`), unavailable ones
/// marked.
fn offering_words<'o>(
    offerings: impl IntoIterator<Item = &'o crate::instance::Offering>,
) -> String {
    let mut seen: Vec<String> = Vec::new();
    for o in offerings {
        let w = format!(
            "{}/{}{}",
            o.zone,
            o.capacity_type,
            if o.available { "" } else { " (unavailable)" }
        );
        if !seen.contains(&w) {
            seen.push(w);
        }
    }
    if seen.is_empty() {
        "none".into()
    } else {
        seen.join(", ")
    }
}

/// What `reqs` say of zones and capacity types, or `any zone and capacity type`.
fn zone_words(reqs: &Requirements) -> String {
    let parts: Vec<String> = [labels::ZONE, labels::CAPACITY_TYPE]
        .iter()
        .filter_map(|k| reqs.get(k).map(|c| constraint_words(k, c)))
        .collect();
    if parts.is_empty() {
        "any zone and capacity type".into()
    } else {
        parts.join(", ")
    }
}

/// Why `term` does not hold on a new node of `shape` ([`term_fits_shape`] is false): the first
/// label it refuses, with the values allowed and the one the type has, or the offerings.
fn term_words(term: &Requirements, shape: &Shape) -> Refusal {
    for (k, c) in term.iter() {
        if k == labels::ZONE || k == labels::CAPACITY_TYPE {
            continue;
        }
        if k == labels::HOSTNAME {
            if !(c.allow_absent || matches!(c.values, ValueSet::NotIn(_))) {
                return Refusal::new(
                    RefusalKind::Requirements,
                    format!(
                        "the pod requires {}; a new node's name is not known before it exists",
                        constraint_words(k, c)
                    ),
                );
            }
            continue;
        }
        let v = shape.labels.get(k);
        if !c.matches(v.map(String::as_str)) {
            return Refusal::new(
                RefusalKind::Requirements,
                format!(
                    "the pod requires {}{}",
                    constraint_words(k, c),
                    has_words(k, v)
                ),
            );
        }
    }
    Refusal::new(
        RefusalKind::Offerings,
        format!(
            "no offering the pod allows ({}); offered: {}",
            zone_words(term),
            offering_words(&shape.offerings)
        ),
    )
}

/// Why an instance type is not a node of `pool` at all ([`shape_for`] left it out).
fn excluded_words(why: &Excluded<'_>, pool: &Pool, it: &InstanceType) -> Refusal {
    match why {
        Excluded::Sharing(e) => Refusal::new(
            RefusalKind::Sharing,
            format!("the NodePool's gpuSharing does not apply to this type: {e}"),
        ),
        Excluded::Requirement(k) => {
            let c = pool
                .requirements
                .get(k)
                .cloned()
                .unwrap_or_else(Constraint::any);
            let v = pool.labels.get(*k).or_else(|| it.labels.get(*k));
            Refusal::new(
                RefusalKind::Requirements,
                format!(
                    "the NodePool requires {}{}",
                    constraint_words(k, &c),
                    has_words(k, v)
                ),
            )
        }
        Excluded::Label(k) => Refusal::new(
            RefusalKind::Requirements,
            format!(
                "the NodePool labels its nodes {k}={}{}",
                pool.labels.get(*k).map_or("", String::as_str),
                has_words(k, it.labels.get(*k))
            ),
        ),
        Excluded::NoOffering => Refusal::new(
            RefusalKind::Offerings,
            format!(
                "no available offering the NodePool allows ({}); offered: {}",
                zone_words(&node_requirements(pool)),
                offering_words(&it.offerings)
            ),
        ),
    }
}

/// A pool's usage (per resource, in Kubernetes notation), its limits against it, its node
/// count, and every instance type of its catalog.
pub(crate) type Standing = (
    BTreeMap<String, String>,
    Vec<LimitUse>,
    i64,
    Vec<TypeConsidered>,
);

/// Where NodePool `name` stands: its usage (per resource, in Kubernetes notation), each limit
/// against it, its node count, and for every instance type of its catalog the price of one
/// more node or why there can be none. Usage counts what the planner counts against limits:
/// existing nodes and claims in flight. `None` for an unknown pool.
pub(crate) fn pool_standing(snapshot: &Snapshot, name: &str) -> Option<Standing> {
    let pi = snapshot.pools.iter().position(|p| p.name == name)?;
    // The pool's own standing, before any pending pod is planned.
    let mut bare = snapshot.clone();
    bare.pending.clear();
    let options = PlanOptions::default();
    // No pending pod: no DRA templates are needed.
    let templates = super::dra::Templates::default();
    let planner = Planner::new(
        &bare,
        &options,
        &templates,
        std::sync::Arc::new(super::build_shapes(&bare)),
    );
    let pool = &bare.pools[pi];
    let u = &planner.state.usage[pi];
    let usage: BTreeMap<String, String> = u
        .resources
        .iter()
        .map(|(k, v)| (k.to_string(), format_amount(k, v)))
        .collect();
    // A limit is reached when not even the pool's smallest node (in that resource) fits
    // under it any more: what stops the pool launching, rather than usage equal to the limit.
    let own: Vec<&Shape> = planner.shapes.iter().filter(|s| s.pool == pi).collect();
    let smallest = |of: &dyn Fn(&Shape) -> Option<i64>| own.iter().filter_map(|s| of(s)).min();
    let mut limits = Vec::new();
    if let Some(n) = pool.limits.nodes {
        limits.push(LimitUse {
            name: "nodes".into(),
            used: u.nodes.to_string(),
            limit: n.to_string(),
            reached: u.nodes + 1 > n,
        });
    }
    for (k, l) in &pool.limits.resources {
        let used = u.resources.get(k);
        let step = smallest(&|s| Some(s.capacity.get(k))).unwrap_or(0);
        limits.push(LimitUse {
            name: k.clone(),
            used: format_amount(k, used),
            limit: format_amount(k, *l),
            reached: used + step > *l || used >= *l,
        });
    }
    for (m, l) in &pool.limits.gpus_by_model {
        let used = u.models.get(m).copied().unwrap_or(0);
        let step =
            smallest(&|s| (s.gpus.1.as_deref() == Some(m.as_str())).then_some(i64::from(s.gpus.0)))
                .unwrap_or(0);
        limits.push(LimitUse {
            name: format!("gpu/{m}"),
            used: used.to_string(),
            limit: l.to_string(),
            reached: used + step > *l || used >= *l,
        });
    }
    let defined = std::sync::Arc::new(pool_defined_labels(pool));
    let types = pool
        .instance_types
        .iter()
        .map(|it| {
            let (price, refused, excluded) = match shape_for(pi, pool, it, &bare, &defined) {
                Err(why) => (None, Some(excluded_words(&why, pool, it)), true),
                Ok(shape) => match planner.fits_limits(pi, &shape, &pool.requirements) {
                    Err(e) => (None, Some(Refusal::new(RefusalKind::Limits, e)), false),
                    Ok(()) => (shape.offerings.first().map(|o| o.price), None, false),
                },
            };
            TypeConsidered {
                instance_type: it.name.clone(),
                price,
                refused,
                excluded,
            }
        })
        .collect();
    Some((usage, limits, u.nodes, types))
}

impl<'a> Planner<'a> {
    pub(super) fn summarize(&self, mut reasons: Vec<String>) -> String {
        if self.snap.pools.is_empty() {
            return "no NodePool exists".into();
        }
        if !reasons.is_empty() && reasons.iter().all(|r| r.starts_with("taint ")) {
            let mut taints: Vec<String> = reasons
                .iter()
                .filter_map(|r| {
                    r.strip_prefix("taint ")
                        .and_then(|r| r.split(" of NodePool").next())
                        .map(str::to_string)
                })
                .collect();
            taints.dedup();
            return format!(
                "taint {} not tolerated by any NodePool the pod can use",
                taints.join(", ")
            );
        }
        reasons.dedup();
        if reasons.is_empty() {
            return "no NodePool can launch a node for this pod".into();
        }
        reasons.join("; ")
    }

    pub(super) fn no_fit_reason(
        &self,
        pi: usize,
        ci: usize,
        term: &Requirements,
        need: &Resources,
    ) -> String {
        let pool = &self.snap.pools[pi];
        let compatible: Vec<&Shape> = self
            .shapes
            .iter()
            .enumerate()
            .filter(|(s, sh)| {
                sh.pool == pi && self.classes[ci].shape_ok[*s] && term_fits_shape(term, sh)
            })
            .map(|(_, sh)| sh)
            .collect();
        if compatible.is_empty() {
            if self.classes[ci].several && super::classes::one_replica_each(pool) {
                return one_replica_reason(pool);
            }
            if self.classes[ci].share && !pool.sharing.fractional {
                return format!(
                    "NodePool {} does not offer fractional GPU shares (gpuSharing.fractional)",
                    pool.name
                );
            }
            let class = &self.classes[ci];
            let port_taken = self
                .shapes
                .iter()
                .filter(|sh| sh.pool == pi && term_fits_shape(term, sh))
                .flat_map(|sh| sh.host_ports.iter())
                .find(|(h, _)| class.host_ports.iter().any(|w| w.conflicts(h)));
            if let Some((port, ds)) = port_taken {
                return format!(
                    "host port {} is taken by DaemonSet {ds} on the nodes of NodePool {}",
                    port.describe(),
                    pool.name
                );
            }
            let any_in_pool = self.shapes.iter().any(|s| s.pool == pi);
            if !any_in_pool {
                return format!(
                    "NodePool {} has no instance type with an available offering",
                    pool.name
                );
            }
            let unlabelled = class.spread_keys.iter().find(|k| {
                !self.shapes.iter().any(|s| {
                    s.pool == pi
                        && (s.labels.contains_key(k.as_str()) || s.pool_defined.get(k).is_some())
                })
            });
            if let Some(k) = unlabelled {
                return format!(
                    "no instance type in NodePool {} carries the label {k} the pod's topology \
                     spread counts by (the scheduler places it only on nodes with that label)",
                    pool.name
                );
            }
            if !class.pins.is_empty() {
                return format!(
                    "no instance type in NodePool {} matches the pod's node selector and affinity \
                     where its topology spread or pod (anti-)affinity lets it go ({})",
                    pool.name,
                    class.pins.join(", ")
                );
            }
            return format!(
                "no instance type in NodePool {} matches the pod's node selector and affinity",
                pool.name
            );
        }
        // The resource that fails everywhere decides the message, as users read it.
        for (name, amount) in need.iter() {
            if compatible.iter().all(|s| s.allocatable.get(name) < amount) {
                return format!(
                    "no instance type in NodePool {} offers {} {name}",
                    pool.name,
                    format_amount(name, amount)
                );
            }
        }
        format!(
            "no instance type in NodePool {} fits the pod's requests {need} together",
            pool.name
        )
    }

    /// Every pool, in the order the planner tries them, and every instance type of each, as
    /// pending pod `i` finds them now: the pool-wide refusals of `open_claim_candidates`
    /// (taints, `PreferNoSchedule`, requirements in conflict, `minValues`), then per type what
    /// its filter checks (the class's bars and selectors, requests, limits, GPU types kept
    /// for GPU pods).
    pub(super) fn consider(&self, i: usize) -> Vec<PoolConsidered> {
        let pod = &self.snap.pending[i];
        let ci = self.class_of[i];
        let class = &self.classes[ci];
        let need = demand(pod, &Devices::default());
        let mut out = Vec::new();
        for &pi in &self.pool_order {
            let pool = &self.snap.pools[pi];
            let mut considered = PoolConsidered {
                pool: pool.name.clone(),
                weight: pool.weight,
                refused: None,
                min_values_relaxed: None,
                instance_types: Vec::new(),
            };
            if let Some(t) = untolerated(&class.tolerations, &pool.taints) {
                considered.refused = Some(Refusal::new(
                    RefusalKind::Taint,
                    format!("the pod does not tolerate the NodePool's taint {t}"),
                ));
                out.push(considered);
                continue;
            }
            if self.avoids(ci, &pool.taints) {
                considered.refused = Some(Refusal::new(
                    RefusalKind::PreferNoSchedule,
                    "the NodePool has a PreferNoSchedule taint the pod does not tolerate; \
                     it is used only when no other place takes the pod",
                ));
                out.push(considered);
                continue;
            }
            let node_reqs = node_requirements(pool);
            let terms: Vec<&Requirements> = class
                .terms
                .iter()
                .filter(|t| node_reqs.conflict_with(t).is_none())
                .collect();
            if terms.is_empty() {
                let term = &class.terms[0];
                let key = node_reqs.conflict_with(term).unwrap_or_default();
                let words = |r: &Requirements| {
                    r.get(&key).map_or_else(
                        || format!("{key} (no constraint)"),
                        |c| constraint_words(&key, c),
                    )
                };
                considered.refused = Some(Refusal::new(
                    RefusalKind::Requirements,
                    format!(
                        "the NodePool requires {} and the pod {}",
                        words(&node_reqs),
                        words(term)
                    ),
                ));
                out.push(considered);
                continue;
            }
            let shape_of: HashMap<&str, usize> = self
                .shapes
                .iter()
                .enumerate()
                .filter(|(_, sh)| sh.pool == pi)
                .map(|(s, sh)| (&*sh.name, s))
                .collect();
            let mut fitting: Vec<usize> = Vec::new();
            let defined = std::sync::Arc::new(pool_defined_labels(pool));
            for it in pool.instance_types.iter() {
                let (price, refused, excluded) = match shape_of.get(it.name.as_str()) {
                    None => {
                        let why = shape_for(pi, pool, it, self.snap, &defined)
                            .err()
                            .map(|e| excluded_words(&e, pool, it));
                        (None, why, true)
                    }
                    Some(&s) => match self.type_refusal(i, pi, &terms, &need, s) {
                        Ok(price) => {
                            fitting.push(s);
                            (Some(price), None, false)
                        }
                        Err(r) => (None, Some(r), false),
                    },
                };
                considered.instance_types.push(TypeConsidered {
                    instance_type: it.name.clone(),
                    price,
                    refused,
                    excluded,
                });
            }
            // A pod that needs no GPU gets no GPU node of its own while a GPU-less one fits,
            // unless dropping them breaks minValues (as `open_claim_candidates` narrows).
            let reqs = node_requirements(pool).intersect(terms[0]);
            let cpu_only: Vec<usize> = fitting
                .iter()
                .copied()
                .filter(|s| !self.shapes[*s].has_gpu)
                .collect();
            if !need.has_gpu_class()
                && !cpu_only.is_empty()
                && cpu_only.len() < fitting.len()
                && self.min_values_short(pool, &cpu_only, &reqs).is_none()
            {
                for t in considered.instance_types.iter_mut() {
                    let gpu = shape_of
                        .get(t.instance_type.as_str())
                        .is_some_and(|s| self.shapes[*s].has_gpu);
                    if gpu && t.refused.is_none() {
                        t.price = None;
                        t.refused = Some(Refusal::new(
                            RefusalKind::GpuLastResort,
                            "a GPU type, never launched for a pod that needs no GPU while a GPU-less type fits (it may take room a GPU node planned for other pods leaves)",
                        ));
                    }
                }
                fitting = cpu_only;
            }
            if !fitting.is_empty()
                && let Some(why) = self.min_values_short(pool, &fitting, &reqs)
            {
                if self.best_effort() {
                    considered.min_values_relaxed = Some(why);
                } else {
                    considered.refused = Some(Refusal::new(RefusalKind::MinValues, why));
                }
            }
            out.push(considered);
        }
        out
    }

    /// Whether pending pod `i` fits a new node of shape `s` of pool `pi` under one of `terms`
    /// (those not in conflict with the pool): its cheapest price there, or the first rule that
    /// refuses it, in the order `open_claim_candidates` checks them.
    fn type_refusal(
        &self,
        i: usize,
        pi: usize,
        terms: &[&Requirements],
        need: &Resources,
        s: usize,
    ) -> Result<f64, Refusal> {
        let pod = &self.snap.pending[i];
        let class = &self.classes[self.class_of[i]];
        let pool = &self.snap.pools[pi];
        let shape = &self.shapes[s];
        match class_bar(
            pool,
            shape,
            &class.tolerations,
            class.share,
            &class.host_ports,
            class.several,
        ) {
            Some(Bar::OneReplica) => {
                return Err(Refusal::new(RefusalKind::Sharing, one_replica_reason(pool)));
            }
            Some(Bar::Taint) => {
                let t = untolerated(&class.tolerations, &pool.taints)
                    .map_or_else(String::new, |t| t.to_string());
                return Err(Refusal::new(
                    RefusalKind::Taint,
                    format!("the pod does not tolerate the NodePool's taint {t}"),
                ));
            }
            Some(Bar::Sharing) => {
                return Err(Refusal::new(
                    RefusalKind::Sharing,
                    format!(
                        "the pod takes a share of one GPU; NodePool {} does not offer fractional \
                         shares (gpuSharing.fractional)",
                        pool.name
                    ),
                ));
            }
            Some(Bar::HostPort) => {
                let (port, ds) = shape
                    .host_ports
                    .iter()
                    .find(|(h, _)| pod.host_ports.iter().any(|w| w.conflicts(h)))
                    .map_or((String::new(), String::new()), |(h, d)| {
                        (h.describe(), d.clone())
                    });
                return Err(Refusal::new(
                    RefusalKind::HostPort,
                    format!("host port {port} is taken by DaemonSet {ds} on these nodes"),
                ));
            }
            None => {}
        }
        let Some(term) = terms.iter().find(|t| term_fits_shape(t, shape)) else {
            return Err(term_words(terms[0], shape));
        };
        if let Err(short) = need.fits_in(&shape.allocatable) {
            return Err(Refusal::new(
                RefusalKind::Resources,
                format!(
                    "the pod requests {} {}; a node of this type has {} for pods (after \
                     system reserve and DaemonSets)",
                    format_amount(&short.resource, short.requested),
                    short.resource,
                    format_amount(&short.resource, short.available)
                ),
            ));
        }
        // The planner's own test for a new claim's candidates (`attaches_too_many`).
        let over = self
            .shape_volume_limits
            .get(s)
            .and_then(Option::as_ref)
            .and_then(super::volume_limits::VolumeRoom::new)
            .and_then(|room| {
                room.over_limit(&pod.volumes)
                    .map(|(d, n, _, k)| (d.to_string(), n, k))
            });
        if let Some((driver, limit, needs)) = over {
            return Err(Refusal::new(
                RefusalKind::VolumeLimits,
                format!(
                    "the pod attaches {needs} volume(s) of {driver}; nodes of this type attach \
                     at most {limit} (the CSINodes of existing nodes of this type say)"
                ),
            ));
        }
        let reqs = node_requirements(pool).intersect(term);
        self.fits_limits(pi, shape, &reqs)
            .map_err(|e| Refusal::new(RefusalKind::Limits, e))?;
        Ok(shape.price_under(&reqs).unwrap_or(f64::INFINITY))
    }
}

/// Why a pod asking for several replicas of a time-sliced or MPS-shared GPU gets no node of
/// `pool`.
fn one_replica_reason(pool: &crate::model::Pool) -> String {
    if pool.sharing.time_slicing.as_ref().is_some_and(|t| t.mps) {
        return format!(
            "the pod asks for more than one GPU and NodePool {} shares its GPUs with MPS (its \
             device plugin fails requests for more than one replica)",
            pool.name
        );
    }
    format!(
        "the pod asks for more than one GPU and NodePool {} time-slices with \
         failRequestsGreaterThanOne (its device plugin fails such requests)",
        pool.name
    )
}
