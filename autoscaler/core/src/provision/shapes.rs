//! Shapes: an instance type as a node of one pool would offer it, and the fit of pods'
//! resources onto its devices.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use crate::gpu::apply_sharing_cow;
use crate::instance::{CapacityType, InstanceType, Offering};
use crate::labels;
use crate::model::{ClusterLimit, GpuShare, HostPort, Pod, Pool, Snapshot};
use crate::plan::NewClaim;
use crate::quota::selects;
use crate::requirements::{Constraint, Labels, Requirements, ValueSet};
use crate::resources::Resources;
use crate::taints::untolerated;

/// An instance type as a node of one pool would offer it: sharing applied, pool labels added,
/// offerings restricted to the pool's requirements, DaemonSet overhead and reserve removed.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Index of the pool in the snapshot.
    pub pool: usize,
    /// Instance type name, shared with the options of the claims written from the shape.
    pub name: std::sync::Arc<str>,
    /// Node labels (type, pool, GPU Operator labels), without zone and capacity type.
    pub labels: Labels,
    /// What pods can use: capacity − reserve − DaemonSet overhead.
    pub allocatable: Resources,
    /// What the DaemonSets that land on it request (taken out of `allocatable`).
    pub daemonsets: Resources,
    /// Capacity after sharing, counted against limits.
    pub capacity: Resources,
    /// Available offerings allowed by the pool, cheapest first.
    pub offerings: Vec<Offering>,
    /// `offerings` as a claim's option lists them (zone, capacity type, price), shared with
    /// the options of the claims that accept all of them (a plan writes hundreds of thousands
    /// of options).
    pub written: std::sync::Arc<[(std::sync::Arc<str>, CapacityType, f64)]>,
    /// Physical GPUs and their model.
    pub gpus: (u32, Option<String>),
    /// Whether the shape offers any GPU-class resource.
    pub has_gpu: bool,
    /// Host ports the DaemonSets reserved on it bind, with the DaemonSet's name.
    pub host_ports: Vec<(HostPort, String)>,
    /// The pool's requirements on labels it gives its nodes itself ([`pool_defined_labels`]):
    /// a pod's constraint on such a key holds when it agrees with the pool's, and the new
    /// node gets a value both allow.
    pub pool_defined: std::sync::Arc<Requirements>,
}

impl Shape {
    /// Cheapest offering price allowed by `reqs` (zone and capacity type), if any.
    pub(super) fn price_under(&self, reqs: &Requirements) -> Option<f64> {
        let (zc, cc) = offering_constraints(reqs);
        self.price_allowed(zc, cc)
    }

    /// [`Self::price_under`] given the zone and capacity-type constraints
    /// ([`offering_constraints`]): a loop pricing many shapes under one set of requirements
    /// looks them up once rather than once per shape.
    pub(super) fn price_allowed(
        &self,
        zc: Option<&Constraint>,
        cc: Option<&Constraint>,
    ) -> Option<f64> {
        self.offerings
            .iter()
            .find(|o| offering_allowed(o, zc, cc))
            .map(|o| o.price)
    }
}

/// `cands` (indexes into `shapes`) with an offering `reqs` allows, each with its cheapest such
/// price, cheapest first (ties by index): the order every claim keeps its candidates in.
pub(super) fn priced_candidates(
    shapes: &[Shape],
    cands: &[usize],
    reqs: &Requirements,
) -> Vec<(f64, usize)> {
    let (zc, cc) = offering_constraints(reqs);
    let mut priced: Vec<(f64, usize)> = Vec::with_capacity(cands.len());
    priced.extend(
        cands
            .iter()
            .filter_map(|c| shapes[*c].price_allowed(zc, cc).map(|p| (p, *c))),
    );
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    priced
}

/// The constraints of `reqs` that decide which offerings are allowed: zone and capacity type.
pub(super) fn offering_constraints(
    reqs: &Requirements,
) -> (Option<&Constraint>, Option<&Constraint>) {
    (reqs.get(labels::ZONE), reqs.get(labels::CAPACITY_TYPE))
}

impl Shape {
    /// What one node of this shape counts against a limit: one node, its capacity, its GPUs.
    pub(super) fn usage(&self) -> crate::quota::Usage {
        crate::quota::Usage {
            nodes: 1,
            resources: self.capacity.clone(),
            models: match &self.gpus {
                (n, Some(m)) => BTreeMap::from([(m.clone(), i64::from(*n))]),
                _ => BTreeMap::new(),
            },
        }
    }
}

/// Whether a node of `shape`, launched under `reqs`, may be one `limit` selects: its labels,
/// with the zone and capacity type of some offering `reqs` allow when the selector asks about
/// them (a claim not pinned to a zone counts against a zone's limit, to be safe).
pub(super) fn may_select(limit: &ClusterLimit, shape: &Shape, reqs: &Requirements) -> bool {
    if limit.selector.is_empty() {
        return true;
    }
    let asks_offering = limit.selector.get(labels::ZONE).is_some()
        || limit.selector.get(labels::CAPACITY_TYPE).is_some();
    if !asks_offering {
        return selects(limit, &shape.labels);
    }
    let zc = reqs.get(labels::ZONE);
    let cc = reqs.get(labels::CAPACITY_TYPE);
    let mut node_labels = shape.labels.clone();
    shape
        .offerings
        .iter()
        .filter(|o| offering_allowed(o, zc, cc))
        .any(|o| {
            node_labels.insert(labels::ZONE.into(), o.zone.clone());
            node_labels.insert(
                labels::CAPACITY_TYPE.into(),
                o.capacity_type.as_str().to_string(),
            );
            selects(limit, &node_labels)
        })
}

pub(super) fn offering_allowed(
    o: &Offering,
    zc: Option<&Constraint>,
    cc: Option<&Constraint>,
) -> bool {
    zc.is_none_or(|c| c.matches(Some(&o.zone)))
        && cc.is_none_or(|c| c.matches(Some(o.capacity_type.as_str())))
}

/// How many distinct values of `key` the candidate shapes span: their labels for instance
/// keys, their offerings allowed under `reqs` for zone and capacity type.
pub(super) fn distinct_values(
    shapes: &[Shape],
    cands: &[usize],
    key: &str,
    reqs: &Requirements,
) -> usize {
    let zc = reqs.get(labels::ZONE);
    let cc = reqs.get(labels::CAPACITY_TYPE);
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for c in cands {
        let s = &shapes[*c];
        if key == labels::ZONE || key == labels::CAPACITY_TYPE {
            for o in s.offerings.iter().filter(|o| offering_allowed(o, zc, cc)) {
                seen.insert(if key == labels::ZONE {
                    o.zone.as_str()
                } else {
                    o.capacity_type.as_str()
                });
            }
        } else if let Some(v) = s.labels.get(key) {
            seen.insert(v.as_str());
        }
    }
    seen.len()
}

/// Whether a planned claim's options (after offerings were removed from it) still span the
/// distinct values its pool's `minValues` demand, or, for a `minValues` the claim was planned
/// below ([`NewClaim::min_values_relaxed`]), as many as it was planned with: Karpenter checks
/// a replacement's price-filtered types against the requirements its simulation relaxed.
pub fn claim_meets_min_values(pool: &Pool, claim: &NewClaim) -> bool {
    pool.min_values.iter().all(|(key, &need)| {
        let need = claim.min_values_relaxed.get(key).copied().unwrap_or(need);
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for o in &claim.instance_types {
            if key == labels::ZONE {
                seen.extend(o.offerings.iter().map(|x| &*x.0));
            } else if key == labels::CAPACITY_TYPE {
                seen.extend(o.offerings.iter().map(|x| x.1.as_str()));
            } else if let Some(v) = pool.labels.get(key).or_else(|| {
                pool.instance_types
                    .iter()
                    .find(|t| *t.name == *o.instance_type)
                    .and_then(|t| t.labels.get(key))
            }) {
                seen.insert(v.as_str());
            }
        }
        seen.len() >= need as usize
    })
}

/// The first `minValues` rule of `pool` the candidates cannot meet, as a reason for the pod;
/// a rule `relaxed` names asks for its number there instead (a claim opened below it under
/// `BestEffort`). A claim lists at most `max_types` instance types
/// ([`super::PlanOptions::max_instance_types`]), each with one value of a label, so a rule on a
/// label (not zone or capacity type, which one type's offerings may span) asking for more
/// values than that is never met, as Karpenter fails a claim whose truncation breaks its
/// `minValues`.
pub(super) fn min_values_short(
    pool: &Pool,
    relaxed: &BTreeMap<String, u32>,
    shapes: &[Shape],
    cands: &[usize],
    reqs: &Requirements,
    max_types: usize,
) -> Option<String> {
    pool.min_values.iter().find_map(|(key, &need)| {
        let need = relaxed.get(key).copied().unwrap_or(need);
        let per_type = key != labels::ZONE && key != labels::CAPACITY_TYPE;
        if per_type && need as usize > max_types {
            return Some(format!(
                "NodePool {} needs {need} distinct values of {key} among a node's instance types \
                 (minValues); a NodeClaim lists at most {max_types} instance types",
                pool.name
            ));
        }
        let have = distinct_values(shapes, cands, key, reqs);
        (have < need as usize).then(|| {
            format!(
                "NodePool {} needs {need} distinct values of {key} among a node's instance types \
                 (minValues); only {have} fit",
                pool.name
            )
        })
    })
}

/// Under `BestEffort`, the `minValues` of `pool` that candidates `cands` under `reqs` fall
/// short of, each lowered to the distinct values they span, and for a label no more than a
/// claim of `max_types` types can list (truncation needs no check of its own then, as
/// Karpenter's does not under `BestEffort`). Empty when every rule is met.
pub(super) fn relaxed_min_values(
    pool: &Pool,
    shapes: &[Shape],
    cands: &[usize],
    reqs: &Requirements,
    max_types: usize,
) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for (key, &need) in &pool.min_values {
        let mut have = distinct_values(shapes, cands, key, reqs);
        if key != labels::ZONE && key != labels::CAPACITY_TYPE {
            have = have.min(max_types);
        }
        let have = u32::try_from(have).unwrap_or(u32::MAX);
        if have < need {
            out.insert(key.clone(), have);
        }
    }
    out
}

/// Builds the shapes of every pool: what the planner and disruption both launch from.
///
/// Instance types whose sharing configuration is invalid for their GPU are left out (NodePool
/// validation reports those to the user).
pub fn build_shapes(snapshot: &Snapshot) -> Vec<Shape> {
    let mut shapes = Vec::new();
    for (pi, pool) in snapshot.pools.iter().enumerate() {
        let defined = std::sync::Arc::new(pool_defined_labels(pool));
        for it in pool.instance_types.iter() {
            if let Ok(s) = shape_for(pi, pool, it, snapshot, &defined) {
                shapes.push(s);
            }
        }
    }
    shapes
}

/// The planner's GPU-avoidance rule: a pod whose demand alone (`need`) has no GPU-class
/// resource joins no GPU claim the usual way, nor makes one dearer, when some GPU-less shape it
/// `may_use` (by index: selector, tolerations, pool) holds it alone. A CPU pod on a GPU node
/// would keep that node from scaling down. It may still ride in the room a GPU claim planned
/// for other pods leaves (`Planner::rides`). Its own claim keeps off GPU types where its
/// NodePool has a GPU-less type that holds it (`Planner::open_claim_candidates`).
pub(super) fn keeps_off_gpu(
    need: &Resources,
    shapes: &[Shape],
    may_use: impl Fn(usize) -> bool,
) -> bool {
    !need.has_gpu_class()
        && shapes
            .iter()
            .enumerate()
            .any(|(s, sh)| !sh.has_gpu && may_use(s) && need.fits(&sh.allocatable))
}

/// The shapes of the last snapshot a caller planned, kept for its next plan: a caller that
/// plans again and again with the same NodePools and DaemonSets (the simulator, every few
/// virtual seconds) need not build every instance type's node anew each time.
///
/// Exact, not approximate: [`ShapeCache::shapes`] compares the snapshot's pools and DaemonSets
/// with those it built from, in full (offerings, availability and prices included), and builds
/// again on any difference, so a plan made with the cache equals one made without.
#[derive(Debug, Default)]
pub struct ShapeCache {
    built_from: Option<(Vec<Pool>, Vec<crate::model::DaemonSet>)>,
    shapes: std::sync::Arc<Vec<Shape>>,
}

impl ShapeCache {
    /// The shapes of `snapshot` ([`build_shapes`]), from the cache when its pools and
    /// DaemonSets equal the last ones.
    pub fn shapes(&mut self, snapshot: &Snapshot) -> std::sync::Arc<Vec<Shape>> {
        let same = self.built_from.as_ref().is_some_and(|(pools, ds)| {
            same_pools(pools, &snapshot.pools) && *ds == snapshot.daemonsets
        });
        if !same {
            self.shapes = std::sync::Arc::new(build_shapes(snapshot));
            self.built_from = Some((snapshot.pools.clone(), snapshot.daemonsets.clone()));
        }
        self.shapes.clone()
    }
}

/// Whether two lists of NodePools are equal (`a == b`), a catalog two pools share by pointer
/// not compared entry by entry: callers that keep what they derived from the pools use it to
/// know whether to derive it again.
pub fn same_pools(a: &[Pool], b: &[Pool]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_pool(a, b))
}

/// `a == b`, but a catalog both pools share is not compared entry by entry (catalogs hold
/// prices, so `Arc`'s own equality cannot take that shortcut). Every field is named, so a field
/// added to [`Pool`] cannot be forgotten here.
pub(crate) fn same_pool(a: &Pool, b: &Pool) -> bool {
    let Pool {
        name,
        weight,
        labels,
        taints,
        startup_taints,
        requirements,
        sharing,
        limits,
        min_nodes,
        min_values,
        disruption,
        instance_types,
        atomic_nodes,
        dra_attributes,
        // What drift compares, not what provisioning plans with.
        template_hash: _,
    } = a;
    (std::sync::Arc::ptr_eq(instance_types, &b.instance_types)
        || **instance_types == *b.instance_types)
        && *name == b.name
        && *weight == b.weight
        && *labels == b.labels
        && *taints == b.taints
        && *startup_taints == b.startup_taints
        && *requirements == b.requirements
        && *sharing == b.sharing
        && *limits == b.limits
        && *min_nodes == b.min_nodes
        && *min_values == b.min_values
        && *disruption == b.disruption
        && *atomic_nodes == b.atomic_nodes
        && *dra_attributes == b.dra_attributes
}

/// Why an instance type is not a node its pool can launch: what [`build_shapes`] leaves out.
/// Cheap to make (no words); [`super::explanations`] words it for `explain`.
#[derive(Debug)]
pub(crate) enum Excluded<'a> {
    /// The pool's GPU sharing does not apply to the type's GPU.
    Sharing(crate::CoreError),
    /// The pool's requirement on this label key refuses the type's value.
    Requirement(&'a str),
    /// The pool labels its nodes with another value of this key than the type carries.
    Label(&'a str),
    /// No available offering in the zones and capacity types the pool allows.
    NoOffering,
}

/// Label domains a NodePool may not invent values for: Karpenter's own (`karpenter.sh`, the
/// only domain its v1 API restricts, `pkg/apis/v1/labels.go`, and the AWS provider's
/// `karpenter.k8s.aws`), this project's, and the GPU labels that come from the hardware
/// (`nvidia.com`, set by GPU feature discovery, and `cloud.google.com`): a NodePool's
/// requirement on such a key picks instance types that carry it, never labels a node with it.
/// `kubernetes.io` and `k8s.io` are not restricted, as in Karpenter v1: a NodePool requiring
/// `kubernetes.io/team In [ml]` labels its nodes so (its well-known keys, carried by every
/// instance type, are never invented; see [`pool_defined_labels`]).
pub fn restricted_domain(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    // `d` itself or a subdomain of it, without building the dotted suffix for each check.
    let under = |d: &str| {
        domain == d
            || (domain.len() > d.len()
                && domain.ends_with(d)
                && domain.as_bytes()[domain.len() - d.len() - 1] == b'.')
    };
    [
        "karpenter.sh",
        "karpenter.k8s.aws",
        "gpu-autoscaler.dev",
        "nvidia.com",
        "cloud.google.com",
    ]
    .iter()
    .any(|d| under(d))
}

/// Labels every node carries from its instance type, offering or cloud, which a NodePool
/// requirement only selects by (Karpenter's `WellKnownLabels`, and the deprecated spellings it
/// normalizes, `NormalizedLabels`).
const WELL_KNOWN: [&str; 12] = [
    labels::ZONE,
    labels::REGION,
    labels::INSTANCE_TYPE,
    labels::ARCH,
    labels::OS,
    labels::CAPACITY_TYPE,
    "node.kubernetes.io/windows-build",
    labels::ZONE_BETA,
    labels::REGION_BETA,
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
];

/// The requirements of `pool` on labels it gives its nodes itself: keys no instance type of its
/// catalog carries, that its `labels` do not set and that lie outside the restricted domains
/// ([`restricted_domain`]). `team In [ml]` on a NodePool is such a label, as in Karpenter: the
/// pool's types are not refused for lacking it, a pod asking for `team=ml` may use the pool, and
/// the node is labelled with a value the pool and the pods allow (`finish` picks it).
pub fn pool_defined_labels(pool: &Pool) -> Requirements {
    let mut out = Requirements::new();
    for (k, c) in pool.requirements.iter() {
        let own = WELL_KNOWN.contains(&k)
            || k == labels::HOSTNAME
            || k == labels::NODEPOOL
            || restricted_domain(k)
            || pool.labels.contains_key(k)
            || pool.instance_types.iter().any(|t| t.labels.contains_key(k));
        if !own {
            out.add_constraint(k, c.clone());
        }
    }
    out
}

/// The value a new node of a claim with requirements `reqs` gets for each label its pool
/// defines (`defined`): one value the claim allows ([`Constraint::some_value`]), also where it
/// allows the label to be absent (`NotIn`), as Karpenter labels a node with some value outside
/// a `NotIn` list; none for `DoesNotExist`.
pub(crate) fn pool_defined_values(defined: &Requirements, reqs: &Requirements) -> Labels {
    let mut out = Labels::new();
    for (k, c) in defined.iter() {
        let c = reqs.get(k).unwrap_or(c);
        if let Some(v) = c.some_value() {
            out.insert(k.to_string(), v);
        }
    }
    out
}

/// The requirements every new node of `pool` meets: its own, and the zone and capacity type
/// its labels set (`In` their value, as Karpenter reads template labels). Those two are chosen
/// per offering, so without the requirement a launch could take an offering elsewhere and
/// label the node with the pool's value. Borrowed when the pool labels neither.
pub(crate) fn node_requirements(pool: &Pool) -> Cow<'_, Requirements> {
    let pinned: Vec<(&str, &String)> = [labels::ZONE, labels::CAPACITY_TYPE]
        .into_iter()
        .filter_map(|k| pool.labels.get(k).map(|v| (k, v)))
        .collect();
    if pinned.is_empty() {
        return Cow::Borrowed(&pool.requirements);
    }
    let mut reqs = pool.requirements.clone();
    for (k, v) in pinned {
        if let Ok(c) = Constraint::from_operator(
            k,
            crate::requirements::Operator::In,
            std::slice::from_ref(v),
        ) {
            reqs.add_constraint(k, c);
        }
    }
    Cow::Owned(reqs)
}

/// An instance type as a node of `pool`, when the pool's requirements admit it: sharing
/// applied, its node labels, and the offerings in the zones and capacity types the pool allows
/// (available or not). Requirements on labels the pool defines (`defined`) do not refuse types.
fn admitted<'p, 'i>(
    pool: &'p Pool,
    it: &'i InstanceType,
    defined: &Requirements,
) -> Result<(Cow<'i, InstanceType>, Labels, Vec<Offering>), Excluded<'p>> {
    let shared = apply_sharing_cow(it, &pool.sharing).map_err(Excluded::Sharing)?;
    // The pool's requirements on the node's labels (zone and capacity type are per offering),
    // checked before the labels are written out: most types of a large catalog fail here.
    let label = |k: &str| -> Option<&str> {
        if k == labels::NODEPOOL {
            return Some(pool.name.as_str());
        }
        pool.labels
            .get(k)
            .or_else(|| shared.labels.get(k))
            .map(String::as_str)
    };
    for (k, c) in pool.requirements.iter() {
        if k == labels::ZONE
            || k == labels::CAPACITY_TYPE
            || k == labels::HOSTNAME
            || defined.get(k).is_some()
        {
            continue;
        }
        if !c.matches(label(k)) {
            return Err(Excluded::Requirement(k));
        }
    }
    // A label the pool sets is a requirement too, as Karpenter reads template labels (`In`
    // their value): a type labelled otherwise is refused (by its own label or the one its
    // GPU sharing gives it), and a labelled zone or capacity type keeps only its offerings
    // ([`node_requirements`]). Otherwise the node would carry the pool's value while the plan
    // counted it elsewhere (a zone spread over a pool labelled with one zone).
    for (k, v) in &pool.labels {
        let differs = |l: &Labels| l.get(k).is_some_and(|t| t != v);
        if differs(&it.labels) && differs(&shared.labels) {
            return Err(Excluded::Label(k));
        }
    }
    let mut labels = shared.labels.clone();
    for (k, v) in &pool.labels {
        labels.insert(k.clone(), v.clone());
    }
    labels.insert(labels::NODEPOOL.into(), pool.name.clone());
    let reqs = node_requirements(pool);
    let (zc, cc) = offering_constraints(&reqs);
    let offerings: Vec<Offering> = shared
        .offerings
        .iter()
        .filter(|o| offering_allowed(o, zc, cc))
        .cloned()
        .collect();
    if offerings.is_empty() {
        return Err(Excluded::NoOffering);
    }
    Ok((shared, labels, offerings))
}

/// Instance type `it` as a node of `pool` looks: sharing applied, the node's labels (the
/// type's, the pool's own, its name, and each label the pool defines itself with a single
/// allowed value), and every offering of the type. `None` when the pool's requirements refuse
/// the type or leave it no offering in an allowed zone and capacity type. The same admission
/// as the planner's shapes, for callers that model nodes of their own (the simulator's
/// baselines and existing nodes).
pub fn pool_node_type(pool: &Pool, it: &InstanceType) -> Option<InstanceType> {
    let defined = pool_defined_labels(pool);
    let (shared, mut labels, _) = admitted(pool, it, &defined).ok()?;
    // Only a single value is certain; a label with several is chosen per claim at planning.
    for (k, c) in defined.iter() {
        if let Some(v) = c.single_value() {
            labels.insert(k.to_string(), v.to_string());
        }
    }
    Some(InstanceType {
        labels,
        ..shared.into_owned()
    })
}

/// How many instance types of `pool.instance_types` its requirements admit (sharing valid,
/// labels matching, an offering in an allowed zone and capacity type), and how many of those
/// have such an offering available now: the NodePool's `InstanceTypesAvailable` condition.
/// The planner launches only from the second kind.
pub fn admitted_types(pool: &Pool) -> AdmittedTypes {
    let mut out = AdmittedTypes::default();
    let defined = pool_defined_labels(pool);
    for it in pool.instance_types.iter() {
        if let Ok((_, _, offerings)) = admitted(pool, it, &defined) {
            out.admitted += 1;
            if offerings.iter().any(|o| o.available) {
                out.available += 1;
            }
        }
    }
    out
}

/// The counts of [`admitted_types`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdmittedTypes {
    /// Instance types the pool's requirements admit.
    pub admitted: usize,
    /// Of those, types with an offering available now.
    pub available: usize,
}

pub(crate) fn shape_for<'p>(
    pi: usize,
    pool: &'p Pool,
    it: &InstanceType,
    snapshot: &Snapshot,
    defined: &std::sync::Arc<Requirements>,
) -> Result<Shape, Excluded<'p>> {
    let (shared, labels, mut offerings) = admitted(pool, it, defined)?;
    offerings.retain(|o| o.available);
    if offerings.is_empty() {
        return Err(Excluded::NoOffering);
    }
    offerings.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.zone.cmp(&b.zone))
            .then_with(|| a.capacity_type.cmp(&b.capacity_type))
    });
    let mut allocatable = shared.allocatable();
    // DaemonSets that may run on this node: selector and affinity can match (in some zone and
    // capacity type it may be bought in, with a value of a label its pool defines) and the
    // pool's taints are tolerated. Room is kept for any DaemonSet that may land, as Karpenter
    // does for a NodeClaim whose zone is not chosen yet. Startup taints do not count: a
    // DaemonSet that does not tolerate them still lands once they are removed, and the node
    // must have room for it then.
    let may_match = |t: &Requirements| {
        let labels_ok = t.iter().all(|(k, c)| {
            if k == labels::ZONE || k == labels::CAPACITY_TYPE {
                true
            } else if let Some(p) = defined.get(k) {
                c.intersect(p).satisfiable()
            } else {
                c.matches(labels.get(k).map(String::as_str))
            }
        });
        let zc = t.get(labels::ZONE);
        let cc = t.get(labels::CAPACITY_TYPE);
        labels_ok && offerings.iter().any(|o| offering_allowed(o, zc, cc))
    };
    let mut host_ports = Vec::new();
    let mut daemonsets = Resources::new();
    for ds in &snapshot.daemonsets {
        let lands =
            ds.node_selector.terms.is_empty() || ds.node_selector.terms.iter().any(may_match);
        if lands && untolerated(&ds.tolerations, &pool.taints).is_none() {
            allocatable.sub(&ds.requests);
            daemonsets.add(&ds.requests);
            host_ports.extend(ds.host_ports.iter().map(|p| (p.clone(), ds.name.clone())));
        }
    }
    // A DaemonSet asking for what the type does not have (a GPU on a CPU type) is not part
    // of what a claim of it requests: the node would wait for that resource for ever.
    daemonsets
        .extended
        .retain(|k, _| shared.capacity.get(k) > 0);
    let has_gpu = shared.capacity.has_gpu_class();
    Ok(Shape {
        pool: pi,
        name: shared.name.as_str().into(),
        labels,
        allocatable,
        daemonsets,
        capacity: shared.capacity.clone(),
        written: offerings
            .iter()
            .map(|o| (o.zone.as_str().into(), o.capacity_type, o.price))
            .collect(),
        offerings,
        gpus: (
            shared.gpu.as_ref().map_or(0, |g| g.count),
            shared.gpu.as_ref().map(|g| g.model.clone()),
        ),
        has_gpu,
        host_ports,
        pool_defined: defined.clone(),
    })
}

/// Whether a requirement term can hold on a new node of `shape` (labels, and some offering's
/// zone and capacity type together).
pub fn term_fits_shape(term: &Requirements, shape: &Shape) -> bool {
    term.iter().all(|(k, c)| key_fits_shape(k, c, shape)) && shape.price_under(term).is_some()
}

/// [`term_fits_shape`]'s test of one key `k` constrained by `c` (zone and capacity type are
/// left to the offerings), for callers that hold a term's constraints in pieces.
pub(super) fn key_fits_shape(k: &str, c: &Constraint, shape: &Shape) -> bool {
    if k == labels::ZONE || k == labels::CAPACITY_TYPE {
        return true;
    }
    if k == labels::HOSTNAME {
        // A new node's name is unknown; only constraints that any fresh name meets hold.
        return c.allow_absent || matches!(c.values, ValueSet::NotIn(_));
    }
    if let Some(p) = shape.pool_defined.get(k) {
        return c.intersect(p).satisfiable();
    }
    c.matches(shape.labels.get(k).map(String::as_str))
}

/// Device-level GPU accounting shared by every place a pod can go: fractional shares are
/// packed per device (best fit), whole devices come from the free count.
#[derive(Clone, Debug, Default)]
pub struct Devices {
    /// Free thousandths of each partially used device, with its resource.
    pub partial: Vec<(String, u32)>,
}

impl Devices {
    /// Where a share would go: `Some(index)` into `partial`, or `None` for a fresh device.
    pub fn best_fit(&self, share: &GpuShare) -> Option<usize> {
        self.partial
            .iter()
            .enumerate()
            .filter(|(_, (r, free))| *r == share.resource && *free >= share.milli)
            .min_by_key(|(i, (_, free))| (*free, *i))
            .map(|(i, _)| i)
    }

    /// The extra whole devices a share costs: 0 when it fits a partial device, else 1.
    pub fn extra_devices(&self, share: &GpuShare) -> i64 {
        if share.milli >= 1000 {
            return 1;
        }
        i64::from(self.best_fit(share).is_none())
    }

    /// Records a share; returns the whole devices it opened (0 or 1).
    pub fn take(&mut self, share: &GpuShare) -> i64 {
        if share.milli >= 1000 {
            return 1;
        }
        match self.best_fit(share) {
            Some(i) => {
                self.partial[i].1 -= share.milli;
                if self.partial[i].1 == 0 {
                    self.partial.swap_remove(i);
                }
                0
            }
            None => {
                self.partial
                    .push((share.resource.clone(), 1000 - share.milli));
                1
            }
        }
    }
}

/// A pod's demand on a place: its requests plus the whole devices its share would open there.
///
/// Borrowed from the pod unless a share opens devices: the planner asks this of every pod at
/// every place it tries.
pub fn demand<'p>(pod: &'p Pod, devices: &Devices) -> Cow<'p, Resources> {
    let Some(share) = &pod.gpu_share else {
        return Cow::Borrowed(&pod.requests);
    };
    let extra = devices.extra_devices(share);
    if extra == 0 {
        return Cow::Borrowed(&pod.requests);
    }
    let mut r = pod.requests.clone();
    let cur = r.get(&share.resource);
    r.set(&share.resource, cur + extra);
    Cow::Owned(r)
}
