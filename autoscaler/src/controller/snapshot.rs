//! Assembling the core's [`Snapshot`] from the reflectors' objects.
//!
//! Pods arrive already translated ([`super::cache::CachedPod`], translated once when the
//! reflector receives them), so a planning round over a large, mostly unchanged cluster clones
//! translated pods instead of re-parsing them. Objects that do not translate are left out and
//! reported in [`Built::problems`] (an event or log line names them), never failing the round.
//!
//! Managed Nodes are tied to their NodeClaim by providerID. A claim that is not Initialized
//! (and not being deleted or failed) is *in flight*: its Node, if it registered, is in
//! [`Snapshot::nodes`] with `initialized = false` and the claim in [`Snapshot::in_flight`], which
//! the planner counts once, as the claim.
//!
//! A DaemonSet's overhead on new nodes is sized by its newest pod when it has one
//! ([`translate::daemonset`]): the same pass that sorts pods into pending and bound finds each
//! DaemonSet's newest pod by the UID the pod cache keeps.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{
    Group, InFlightClaim, Node as CoreNode, Pod as CorePod, PodKey, PodShape, Pool, Snapshot,
    TermNamespaces,
};
use autoscaler_core::requirements::{Labels, Operator, Requirements};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use nodepools::{NodeClaim, NodePool};

use super::cache::CachedPod;
use super::keys;
use super::lifecycle::{self, Phase};
use super::translate;

/// The objects a snapshot is built from, as the reflectors hold them.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// Every pod.
    pub pods: &'a [Arc<CachedPod>],
    /// Every node.
    pub nodes: &'a [Arc<Node>],
    /// Every NodePool.
    pub pools: &'a [Arc<NodePool>],
    /// Every NodeClaim.
    pub claims: &'a [Arc<NodeClaim>],
    /// Every DaemonSet.
    pub daemonsets: &'a [Arc<DaemonSet>],
    /// Every PodDisruptionBudget.
    pub pdbs: &'a [Arc<PodDisruptionBudget>],
    /// Instance types per NodePool name (insufficient-capacity cache already applied).
    pub instance_types: &'a BTreeMap<String, Arc<Vec<InstanceType>>>,
    /// The pods to plan for (the batch); others pending are left out.
    pub pending: &'a BTreeSet<PodKey>,
    /// What gang objects (Volcano and Kubernetes PodGroups) say of gang minimums.
    pub gangs: &'a super::gangs::GangObjects,
    /// The DRA objects, translated for this round (empty where DRA is not served).
    pub dra: &'a super::dra::DraIndex,
    /// The storage objects, for volume topology.
    pub volumes: &'a super::volumes::VolumeIndex,
}

/// A built snapshot and what could not be translated.
#[derive(Clone, Debug, Default)]
pub struct Built {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// `(object, problem)` for every object left out.
    pub problems: Vec<(String, String)>,
    /// NodePools whose spec does not validate, with every problem (they are left out).
    pub invalid_pools: BTreeMap<String, String>,
    /// Pending pods left out because a DRA claim of theirs does not resolve, a volume claim
    /// of theirs cannot be provisioned for, or the PodGroup they name does not exist yet,
    /// and why.
    pub refused: Vec<(PodKey, String)>,
}

/// Builds snapshots.
#[derive(Debug, Default)]
pub struct SnapshotBuilder {
    /// Drop every pod's preferences from the snapshots it builds
    /// ([`autoscaler_core::model::Snapshot::ignore_preferences`]; `--preference-policy=ignore`).
    pub ignore_preferences: bool,
    /// The policy of the snapshots it builds for `minValues` that cannot be met
    /// ([`autoscaler_core::model::Snapshot::min_values_policy`]; `--min-values-policy`).
    pub min_values_policy: autoscaler_core::model::MinValuesPolicy,
    /// Each Namespace's labels, by name: pod (anti-)affinity terms whose `namespaceSelector`
    /// reads namespace labels are resolved against them
    /// ([`autoscaler_core::model::Snapshot::resolve_namespace_selectors`]).
    pub namespaces: BTreeMap<String, Labels>,
}

/// Folding bound pods for provisioning.
///
/// Provisioning reads a bound pod on an existing node for three things: its requests (used
/// capacity), its labels when a pending pod's topology spread or pod (anti-)affinity term
/// selects pods of its namespace, and its own anti-affinity terms and GPU share. A pod with
/// no GPU share and no anti-affinity, in a namespace no pending pod's term looks at, is read
/// only as requests; the requests of all such pods on a node are summed into one pod in no
/// namespace (which no term can select). Every other pod is kept as it is.
/// Which bound pods a build folds (see [`Fold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Folding {
    /// None: the whole snapshot.
    None,
    /// Plain pods on every node (provisioning).
    Plain,
    /// Plain pods on nodes no NodePool manages (disruption).
    Unmanaged,
}

#[derive(Default)]
struct Fold {
    /// Namespaces whose pods a pending pod's topology terms select.
    selected: BTreeSet<String>,
    /// A term selects pods in every namespace: no pod is folded.
    every: bool,
    /// Some node limits a driver's volumes: pods with claims are kept whole, so that the
    /// volumes they attach are counted where they run.
    volumes: bool,
}

impl Fold {
    fn for_pending(pending: &[CorePod], namespaces: &BTreeMap<String, Labels>) -> Self {
        Fold::default().and_movable(pending, namespaces)
    }

    /// Also keeps whole the namespaces that `pods` (the pods disruption may move) select:
    /// their own, where their topology terms look, and every one another namespace's term
    /// names or selects by label now (`namespaces`: each Namespace's labels).
    fn and_movable<'a>(
        mut self,
        pods: impl IntoIterator<Item = &'a CorePod>,
        namespaces: &BTreeMap<String, Labels>,
    ) -> Self {
        for p in pods {
            if !p.spread.is_empty() || !p.affinity.is_empty() || !p.anti_affinity.is_empty() {
                self.selected.insert(p.key.namespace.clone());
            }
            for t in p.affinity.iter().chain(&p.anti_affinity) {
                match &t.namespaces {
                    TermNamespaces::Own => {}
                    TermNamespaces::Listed(names) => self.selected.extend(names.iter().cloned()),
                    TermNamespaces::All | TermNamespaces::AllBut(_) => self.every = true,
                    m @ TermNamespaces::Matching { .. } => match m.with_namespaces(namespaces) {
                        TermNamespaces::Listed(names) => self.selected.extend(names),
                        _ => self.every = true,
                    },
                }
            }
        }
        self
    }

    fn keeps(&self, p: &CorePod) -> bool {
        // DRA claims are kept whole: disruption re-allocates them where a pod would move.
        self.every
            || p.gpu_share.is_some()
            || !p.claims.is_empty()
            || !p.anti_affinity.is_empty()
            || self.selected.contains(&p.key.namespace)
    }

    /// The pods of one node, plain ones folded; `whole` gives a pod kept whole.
    fn apply(
        &self,
        pods: &[&CachedPod],
        mut whole: impl FnMut(&CachedPod) -> Option<CorePod>,
    ) -> Vec<CorePod> {
        let mut out = Vec::new();
        let mut folded: Option<(CorePod, usize)> = None;
        for p in pods {
            let Ok(c) = p.core.as_ref() else {
                continue;
            };
            if self.keeps(c) || (self.volumes && !p.volume_claims.is_empty()) {
                out.extend(whole(p));
                continue;
            }
            match &mut folded {
                Some((f, n)) => {
                    f.requests.add(&c.requests);
                    // Ports bound on the node stay bound, whichever pod holds them.
                    f.host_ports.extend(c.host_ports.iter().cloned());
                    *n += 1;
                }
                None => {
                    // Starting from a copy keeps every field the core may add later; those
                    // that could tie the sum to other pods are cleared.
                    let mut f = c.clone();
                    f.labels.clear();
                    f.annotations.clear();
                    f.preferred.clear();
                    f.spread.clear();
                    f.affinity.clear();
                    f.group = None;
                    f.owner_kind = None;
                    f.mirror = false;
                    f.local_storage = false;
                    f.started_at = None;
                    folded = Some((f, 1));
                }
            }
        }
        if let Some((mut f, n)) = folded {
            f.key = PodKey {
                namespace: String::new(),
                name: format!("{n} folded pods"),
            };
            out.push(f);
        }
        out
    }
}

/// Pods narrowed by their volumes ([`autoscaler_core::model::PodShape::require_any`]),
/// sharing one shape per translation and alternatives, so replicas whose volumes are in the
/// same zone stay one shape for the planner. Each entry keeps the shape it was narrowed from
/// alive: a shape copied for one pod (its DRA claims resolved) is freed once the pod is
/// narrowed, and another copy at the same address must not find this entry.
#[derive(Default)]
#[allow(clippy::type_complexity)]
struct VolumeShapes(HashMap<(*const PodShape, Vec<Requirements>), (Arc<PodShape>, Arc<PodShape>)>);

impl VolumeShapes {
    /// `pod` narrowed to `alternatives` (unchanged when there are none).
    fn narrow(&mut self, pod: &mut CorePod, alternatives: Vec<Requirements>) {
        if alternatives.is_empty() {
            return;
        }
        let shape = self
            .0
            .entry((Arc::as_ptr(pod.shape()), alternatives))
            .or_insert_with_key(|(_, alts)| {
                let mut s = PodShape::clone(pod.shape());
                s.require_any(alts);
                (pod.shape().clone(), Arc::new(s))
            })
            .1
            .clone();
        *pod = pod.with_shared_shape(shape);
    }

    /// A bound pod as disruption may move it: its translation, narrowed to where its bound
    /// volumes allow ([`super::volumes::VolumeIndex::for_bound`]).
    fn bound_pod(
        &mut self,
        p: &CachedPod,
        volumes: &super::volumes::VolumeIndex,
    ) -> Option<CorePod> {
        let mut c = p.core_pod().ok()?;
        if !p.volume_claims.is_empty() && !volumes.is_empty() {
            self.narrow(
                &mut c,
                // A generic ephemeral volume's claim goes with the pod: moved, the pod gets
                // a new one wherever it lands, as Karpenter reads it.
                volumes.for_bound(&p.key.namespace, p.volume_claims.persistent()),
            );
            if volumes.any_limits() {
                c.volumes = volumes.attachments(&p.key.namespace, p.volume_claims.all());
            }
        }
        Some(c)
    }
}

/// The newest pod of each DaemonSet, by the DaemonSet's UID, gathered in the one pass a build
/// makes over every pod.
///
/// Karpenter sizes a DaemonSet's overhead by the pod its cluster state keeps for it: of the
/// pods the DaemonSet controls, whichever phase, the one created last (`UpdateDaemonSet` in
/// its `state/cluster.go`). Here the pick is made afresh each build, so a pod that left stops
/// counting at once; pods created in the same millisecond are told apart by key, so the same
/// objects always give the same snapshot. A pod that does not translate is never picked.
#[derive(Default)]
struct DaemonPods<'a>(HashMap<&'a str, &'a CachedPod>);

impl<'a> DaemonPods<'a> {
    fn offer(&mut self, p: &'a CachedPod) {
        let Some(uid) = p.daemonset_uid.as_deref() else {
            return;
        };
        if !p.core.is_ok() {
            return;
        }
        let newer = |a: &CachedPod, b: &CachedPod| {
            (a.created_ms, std::cmp::Reverse(&a.key)) > (b.created_ms, std::cmp::Reverse(&b.key))
        };
        self.0
            .entry(uid)
            .and_modify(|cur| {
                if newer(p, cur) {
                    *cur = p;
                }
            })
            .or_insert(p);
    }

    /// The translation of `ds`'s newest pod, if it has one.
    fn newest(&self, ds: &DaemonSet) -> Option<&'a CorePod> {
        let uid = ds.metadata.uid.as_deref()?;
        self.0.get(uid).and_then(|p| p.core.as_ref().ok())
    }
}

/// The claim a node belongs to, by providerID.
pub fn claims_by_provider_id(claims: &[Arc<NodeClaim>]) -> HashMap<&str, &NodeClaim> {
    claims
        .iter()
        .filter_map(|c| lifecycle::provider_id(c).map(|p| (p, c.as_ref())))
        .collect()
}

/// Takes the pod events this process's watch saw (`events`: node name to seconds since the
/// epoch, [`super::cache::PodStore::pod_events`]) into the nodes' `last_pod_event`, which the
/// snapshot read from the claims. The claims carry what survives a restart, but their writes
/// skip events that follow the last one within a few seconds: without the watch's own
/// record, `consolidateAfter` could run out that much early.
pub fn take_pod_events(snap: &mut Snapshot, events: &HashMap<Arc<str>, i64>) {
    for n in &mut snap.nodes {
        if let Some(&t) = events.get(n.name.as_str()) {
            n.last_pod_event = Some(n.last_pod_event.map_or(t, |p| p.max(t)));
        }
    }
}

/// The hourly price of a node from its pool's catalog and its labels.
pub fn node_price(types: &[InstanceType], node_labels: &Labels) -> Option<f64> {
    let it = types
        .iter()
        .find(|t| Some(&t.name) == node_labels.get(labels::INSTANCE_TYPE))?;
    let zone = node_labels.get(labels::ZONE);
    let ct = node_labels.get(labels::CAPACITY_TYPE);
    it.offerings
        .iter()
        .find(|o| Some(&o.zone) == zone && Some(o.capacity_type.as_str()) == ct.map(String::as_str))
        .or_else(|| {
            it.offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::OnDemand)
                .min_by(|a, b| a.price.total_cmp(&b.price))
        })
        .map(|o| o.price)
}

/// Each Namespace's labels, by name: what [`SnapshotBuilder::namespaces`] resolves pod
/// affinity terms' namespace selectors against.
pub fn namespace_labels<'a>(
    namespaces: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::Namespace>,
) -> BTreeMap<String, Labels> {
    namespaces
        .into_iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            (name, n.metadata.labels.clone().unwrap_or_default())
        })
        .collect()
}

/// The disruption taint ([`keys::DISRUPTION_TAINT`], `NoSchedule`) as the API writes it on
/// a Node.
pub fn disruption_taint() -> k8s_openapi::api::core::v1::Taint {
    k8s_openapi::api::core::v1::Taint {
        key: keys::DISRUPTION_TAINT.into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

/// Whether a node carries the disruption taint.
pub fn has_disruption_taint(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == keys::DISRUPTION_TAINT))
}

impl SnapshotBuilder {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds the whole snapshot, every bound pod included.
    pub fn build(&mut self, inputs: &Inputs<'_>) -> Built {
        self.build_with(inputs, Folding::None)
    }

    /// Builds the snapshot disruption plans on: as [`Self::build`], except that on nodes no
    /// NodePool manages (never disruption candidates, only places pods may move to) the plain
    /// bound pods are folded, with the namespaces selected by the pods of managed nodes (the
    /// pods disruption may move) and of pending pods kept whole.
    pub fn build_for_disruption(&mut self, inputs: &Inputs<'_>) -> Built {
        self.build_with(inputs, Folding::Unmanaged)
    }

    /// Builds the snapshot provisioning plans on: as [`Self::build`], except that on each
    /// node the bound pods provisioning reads only as used capacity are folded into one
    /// pod (see [`Fold`]). Planning on it gives the plan the whole snapshot gives, without a
    /// copy of every pod in the cluster each round.
    pub fn build_for_provisioning(&mut self, inputs: &Inputs<'_>) -> Built {
        self.build_with(inputs, Folding::Plain)
    }

    fn build_with(&mut self, inputs: &Inputs<'_>, folding: Folding) -> Built {
        let mut out = Built::default();

        // Pools.
        for np in inputs.pools {
            let name = np.metadata.name.clone().unwrap_or_default();
            if np.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let types = inputs
                .instance_types
                .get(&name)
                .cloned()
                .unwrap_or_default();
            match np.to_core(types) {
                Ok(pool) => out.snapshot.pools.push(pool),
                Err(e) => {
                    out.invalid_pools.insert(name, e.to_string());
                }
            }
        }
        out.snapshot.pools.sort_by(|a, b| a.name.cmp(&b.name));
        let pool_by_name: HashMap<&str, &Pool> = out
            .snapshot
            .pools
            .iter()
            .map(|p| (p.name.as_str(), p))
            .collect();

        // Pods: pending ones from the batch, bound ones per node, groups.
        let pdb_namespaces: BTreeSet<&str> = inputs
            .pdbs
            .iter()
            .filter_map(|b| b.metadata.namespace.as_deref())
            .collect();
        let mut bound: HashMap<&str, Vec<&CachedPod>> = HashMap::new();
        let mut volume_shapes = VolumeShapes::default();
        let mut groups: BTreeMap<String, Group> = BTreeMap::new();
        let mut running: HashMap<&str, u32> = HashMap::new();
        let mut ns_pods: BTreeMap<&str, Vec<(&Labels, bool)>> = BTreeMap::new();
        let mut daemon_pods = DaemonPods::default();
        for p in inputs.pods.iter() {
            let key = &p.key;
            daemon_pods.offer(p);
            if p.active
                && !p.deleting()
                && pdb_namespaces.contains(key.namespace.as_str())
                && let Ok(c) = p.core.as_ref()
            {
                ns_pods
                    .entry(key.namespace.as_str())
                    .or_default()
                    .push((&c.labels, p.ready));
            }
            let node = p.node_name.as_deref();
            let pending = node.is_none() && inputs.pending.contains(key);
            if !(pending || (node.is_some() && p.active)) {
                continue;
            }
            if let Err(e) = p.core.as_ref() {
                out.problems.push((format!("pod {key}"), e.to_string()));
                continue;
            }
            let Some(n) = node else {
                let Ok(mut core) = p.core_pod() else {
                    continue;
                };
                if !core.claims.is_empty()
                    && let Err(why) = inputs.dra.resolve(&key.namespace, &mut core.claims)
                {
                    out.refused.push((key.clone(), why));
                    continue;
                }
                if !p.volume_claims.is_empty() {
                    match inputs
                        .volumes
                        .for_pending(&key.namespace, p.volume_claims.all())
                    {
                        Ok(alternatives) => volume_shapes.narrow(&mut core, alternatives),
                        Err(why) => {
                            out.refused.push((key.clone(), format!("waiting: {why}")));
                            continue;
                        }
                    }
                    // Counted only where some node limits a driver (CSINode).
                    if inputs.volumes.any_limits() {
                        core.volumes = inputs
                            .volumes
                            .attachments(&key.namespace, p.volume_claims.all());
                    }
                }
                if let Some(g) = &p.group {
                    use super::gangs::Minimum;
                    match inputs.gangs.minimum(g) {
                        Minimum::Known(min) => {
                            groups.insert(
                                g.id.clone(),
                                Group {
                                    name: g.id.clone(),
                                    min_count: min,
                                },
                            );
                        }
                        // Every pending member counts (the core's default).
                        Minimum::Unknown => {}
                        Minimum::NotAGang => core.group = None,
                        Minimum::Missing(why) => {
                            out.refused.push((key.clone(), format!("waiting: {why}")));
                            continue;
                        }
                    }
                }
                out.snapshot.pending.push(core);
                continue;
            };
            if let Some(g) = &p.group {
                *running.entry(g.id.as_str()).or_default() += 1;
            }
            bound.entry(n).or_default().push(p);
        }
        // A gang scheduler counts members already running toward the minimum: the pending
        // ones need only the rest, and none at all once the minimum runs.
        let mut satisfied: BTreeSet<String> = BTreeSet::new();
        groups.retain(|id, g| {
            let have = running.get(id.as_str()).copied().unwrap_or(0);
            g.min_count = g.min_count.saturating_sub(have);
            if g.min_count == 0 {
                satisfied.insert(id.clone());
            }
            g.min_count > 0
        });
        for pod in &mut out.snapshot.pending {
            if pod.group.as_ref().is_some_and(|id| satisfied.contains(id)) {
                pod.group = None;
            }
        }
        out.snapshot.pending.sort_by(|a, b| a.key.cmp(&b.key));
        out.snapshot.groups = groups;
        let by_pid = claims_by_provider_id(inputs.claims);
        let managed = |n: &Node| {
            n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| by_pid.contains_key(p))
                || n.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(keys::POOL_LABEL))
        };
        // The pending pods' terms read as the namespaces they select now, so that folding
        // keeps whole only those namespaces (the nodes' pods are resolved below).
        autoscaler_core::model::resolve_namespace_selectors(
            &mut out.snapshot.pending,
            &self.namespaces,
        );
        let fold = match folding {
            Folding::None => None,
            Folding::Plain => Some(Fold::for_pending(&out.snapshot.pending, &self.namespaces)),
            Folding::Unmanaged => Some(
                Fold::for_pending(&out.snapshot.pending, &self.namespaces).and_movable(
                    inputs
                        .nodes
                        .iter()
                        .filter(|n| managed(n))
                        .filter_map(|n| bound.get(n.metadata.name.as_deref().unwrap_or_default()))
                        .flatten()
                        .filter_map(|p| p.core.as_ref().ok()),
                    &self.namespaces,
                ),
            ),
        };
        let fold = fold.map(|mut f| {
            f.volumes = inputs.volumes.any_limits();
            f
        });
        out.snapshot.dra = inputs.dra.dra.clone();
        let mut pods_of = |pods: Option<&Vec<&CachedPod>>, fold: Option<&Fold>| -> Vec<CorePod> {
            let pods = pods.map_or(&[][..], Vec::as_slice);
            let mut whole = |p: &CachedPod| volume_shapes.bound_pod(p, inputs.volumes);
            let mut out = match fold {
                Some(f) => f.apply(pods, whole),
                None => pods.iter().filter_map(|p| whole(p)).collect::<Vec<_>>(),
            };
            // A bound pod's claims are allocated: resolved, they pin it where it runs. One
            // that does not resolve (its claim gone) counts as its other requests only.
            for p in out.iter_mut().filter(|p| !p.claims.is_empty()) {
                let ns = p.key.namespace.clone();
                if inputs.dra.resolve(&ns, &mut p.claims).is_err() {
                    p.claims.clear();
                }
            }
            out
        };

        // Claims.
        let mut in_flight_names = BTreeSet::new();
        for c in inputs.claims {
            let phase = lifecycle::phase(c);
            if matches!(phase, Phase::Initialized | Phase::Deleting | Phase::Failed) {
                continue;
            }
            let name = c.metadata.name.clone().unwrap_or_default();
            let spec = match c.spec.to_core() {
                Ok(s) => s,
                Err(e) => {
                    out.problems
                        .push((format!("nodeclaim {name}"), e.to_string()));
                    continue;
                }
            };
            let status = c.status.clone().unwrap_or_default();
            let instance_types = match &status.instance_type {
                Some(t) => vec![t.clone()],
                None => spec
                    .requirements
                    .get(labels::INSTANCE_TYPE)
                    .and_then(|k| match &k.values {
                        autoscaler_core::requirements::ValueSet::In(v) => {
                            Some(v.iter().cloned().collect())
                        }
                        _ => None,
                    })
                    .unwrap_or_default(),
            };
            let mut requirements = spec.requirements.clone();
            for (key, value) in [
                (labels::ZONE, &status.zone),
                (labels::CAPACITY_TYPE, &status.capacity_type),
            ] {
                if let Some(v) = value {
                    requirements.add_constraint(
                        key,
                        Requirements::new()
                            .with(key, Operator::In, &[v.as_str()])
                            .get(key)
                            .cloned()
                            .expect("just added"),
                    );
                }
            }
            // The claim's own pods are few and stay whole.
            let pods = pods_of(status.node_name.as_deref().and_then(|n| bound.get(n)), None);
            in_flight_names.insert(name.clone());
            out.snapshot.in_flight.push(InFlightClaim {
                name,
                pool: spec.node_pool,
                instance_types,
                requirements,
                pods,
                created_at: c
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(translate::epoch_seconds)
                    .unwrap_or(0),
            });
        }

        // Nodes.
        for n in inputs.nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            let allocatable = match translate::node_allocatable(n) {
                Ok(a) => a,
                Err(e) => {
                    out.problems.push((format!("node {name}"), e.to_string()));
                    continue;
                }
            };
            let node_labels: Labels = n.metadata.labels.clone().unwrap_or_default();
            let pid = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            let claim = pid.and_then(|p| by_pid.get(p)).copied();
            let pool = claim
                .map(|c| c.spec.node_pool.clone())
                .or_else(|| node_labels.get(keys::POOL_LABEL).cloned());
            let initialized = match claim {
                Some(c) => lifecycle::phase(c) == Phase::Initialized,
                // Labelled for one of our pools but no claim records its instance: it
                // registered before its claim's launch was written down (that write failed
                // and the launch is retried), or its claim is gone. Not a candidate, as
                // Karpenter disrupts only nodes a NodeClaim manages: deleting it would leave
                // the instance to register again under the same name.
                None if node_labels.contains_key(keys::POOL_LABEL) => false,
                None => translate::node_ready(n),
            };
            let price = pool
                .as_deref()
                .and_then(|p| pool_by_name.get(p))
                .and_then(|p| node_price(&p.instance_types, &node_labels));
            let mut node_annotations = n.metadata.annotations.clone().unwrap_or_default();
            // The template hash its NodeClaim was launched with, for drift: the claim's record
            // wins over whatever the Node says.
            for key in [
                keys::NODEPOOL_HASH_ANNOTATION,
                keys::NODEPOOL_HASH_VERSION_ANNOTATION,
            ] {
                match claim.and_then(|c| c.metadata.annotations.as_ref()?.get(key)) {
                    Some(v) => node_annotations.insert(key.to_string(), v.clone()),
                    None => node_annotations.remove(key),
                };
            }
            out.snapshot.nodes.push(CoreNode {
                labels: node_labels.clone(),
                annotations: node_annotations,
                taints: translate::node_taints(n),
                allocatable,
                pods: pods_of(
                    bound.get(name.as_str()),
                    fold.as_ref()
                        .filter(|_| folding == Folding::Plain || pool.is_none()),
                ),
                unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
                // Another autoscaler's removal taints stay on the node: the core reads
                // them, with their age where it matters (`keys::foreign_removal`).
                deleting: n.metadata.deletion_timestamp.is_some() || has_disruption_taint(n),
                pool,
                instance_type: node_labels.get(labels::INSTANCE_TYPE).cloned(),
                price,
                created_at: n
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(translate::epoch_seconds)
                    .unwrap_or(0),
                // Persisted on the claim, so a restart does not forget recent pod churn.
                last_pod_event: claim
                    .and_then(|c| c.status.as_ref())
                    .and_then(|s| s.last_pod_event_time.as_ref())
                    .map(translate::epoch_seconds),
                initialized,
                ready: translate::node_ready(n),
                claim: claim.and_then(|c| c.metadata.name.clone()),
                volume_limits: inputs.volumes.node_limits(&name),
                name,
            });
        }
        out.snapshot.nodes.sort_by(|a, b| a.name.cmp(&b.name));

        for ds in inputs.daemonsets {
            match translate::daemonset(ds, daemon_pods.newest(ds)) {
                Ok(d) => out.snapshot.daemonsets.push(d),
                Err(e) => out.problems.push((
                    format!(
                        "daemonset {}/{}",
                        ds.metadata.namespace.as_deref().unwrap_or_default(),
                        ds.metadata.name.as_deref().unwrap_or_default()
                    ),
                    e.to_string(),
                )),
            }
        }
        for b in inputs.pdbs {
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            let pods: &[(&Labels, bool)] = ns_pods.get(ns.as_str()).map_or(&[], Vec::as_slice);
            match translate::pdb(b, pods) {
                Ok(p) => out.snapshot.pdbs.push(p),
                Err(e) => out.problems.push((
                    format!(
                        "poddisruptionbudget {ns}/{}",
                        b.metadata.name.as_deref().unwrap_or_default()
                    ),
                    e.to_string(),
                )),
            }
        }
        out.snapshot.resolve_namespace_selectors(&self.namespaces);
        if self.ignore_preferences {
            out.snapshot.ignore_preferences();
        }
        out.snapshot.min_values_policy = self.min_values_policy;
        // Zone IDs read as zones once here, so that the core's entry points find nothing to
        // copy, and validation sees what the decision saw.
        autoscaler_core::zone_ids::resolve_in_place(&mut out.snapshot);
        out
    }
}

#[cfg(test)]
mod tests;
