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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{
    Group, InFlightClaim, Node as CoreNode, Pod as CorePod, PodKey, Pool, Snapshot,
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
    /// Pending pods left out because a DRA claim of theirs does not resolve, and why.
    pub refused: Vec<(PodKey, String)>,
}

/// Builds snapshots.
#[derive(Debug, Default)]
pub struct SnapshotBuilder {}

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

struct Fold {
    /// Namespaces whose pods a pending pod's topology terms select.
    selected: BTreeSet<String>,
}

impl Fold {
    fn for_pending(pending: &[CorePod]) -> Self {
        Fold {
            selected: pending
                .iter()
                .filter(|p| {
                    !(p.spread.is_empty() && p.affinity.is_empty() && p.anti_affinity.is_empty())
                })
                .map(|p| p.key.namespace.clone())
                .collect(),
        }
    }

    /// Also keeps whole the namespaces that `pods` (the pods disruption may move) select.
    fn and_movable<'a>(mut self, pods: impl IntoIterator<Item = &'a CorePod>) -> Self {
        self.selected.extend(
            pods.into_iter()
                .filter(|p| {
                    !(p.spread.is_empty() && p.affinity.is_empty() && p.anti_affinity.is_empty())
                })
                .map(|p| p.key.namespace.clone()),
        );
        self
    }

    fn keeps(&self, p: &CorePod) -> bool {
        // DRA claims are kept whole: disruption re-allocates them where a pod would move.
        p.gpu_share.is_some()
            || !p.claims.is_empty()
            || !p.anti_affinity.is_empty()
            || self.selected.contains(&p.key.namespace)
    }

    /// The pods of one node, plain ones folded.
    fn apply(&self, pods: &[&CachedPod]) -> Vec<CorePod> {
        let mut out = Vec::new();
        let mut folded: Option<(CorePod, usize)> = None;
        for p in pods {
            let Ok(c) = p.core.as_ref() else {
                continue;
            };
            if self.keeps(c) {
                out.extend(p.core_pod().ok());
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

/// The claim a node belongs to, by providerID.
pub fn claims_by_provider_id(claims: &[Arc<NodeClaim>]) -> HashMap<&str, &NodeClaim> {
    claims
        .iter()
        .filter_map(|c| lifecycle::provider_id(c).map(|p| (p, c.as_ref())))
        .collect()
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

pub use autoscaler_core::keys::FOREIGN_REMOVAL_TAINTS;

/// Whether another autoscaler is removing `n` ([`FOREIGN_REMOVAL_TAINTS`]).
pub fn has_foreign_removal_taint(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| FOREIGN_REMOVAL_TAINTS.contains(&t.key.as_str()))
        })
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
        let mut groups: BTreeMap<String, Group> = BTreeMap::new();
        let mut ns_pods: BTreeMap<&str, Vec<(&Labels, bool)>> = BTreeMap::new();
        for p in inputs.pods.iter() {
            let key = &p.key;
            if p.active
                && !p.deleting
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
                // Without a known minimum every pending member counts (the core's default).
                if let Some(g) = &p.group {
                    match inputs.gangs.minimum(g) {
                        Ok(Some(min)) => {
                            groups.insert(
                                g.id.clone(),
                                Group {
                                    name: g.id.clone(),
                                    min_count: min,
                                },
                            );
                        }
                        Ok(None) => {}
                        // A Kubernetes PodGroup with the basic policy: scheduled pod by pod.
                        Err(()) => core.group = None,
                    }
                }
                out.snapshot.pending.push(core);
                continue;
            };
            bound.entry(n).or_default().push(p);
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
        let fold = match folding {
            Folding::None => None,
            Folding::Plain => Some(Fold::for_pending(&out.snapshot.pending)),
            Folding::Unmanaged => Some(
                Fold::for_pending(&out.snapshot.pending).and_movable(
                    inputs
                        .nodes
                        .iter()
                        .filter(|n| managed(n))
                        .filter_map(|n| bound.get(n.metadata.name.as_deref().unwrap_or_default()))
                        .flatten()
                        .filter_map(|p| p.core.as_ref().ok()),
                ),
            ),
        };
        out.snapshot.dra = inputs.dra.dra.clone();
        let pods_of = |pods: Option<&Vec<&CachedPod>>, fold: Option<&Fold>| -> Vec<CorePod> {
            let pods = pods.map_or(&[][..], Vec::as_slice);
            let mut out = match fold {
                Some(f) => f.apply(pods),
                None => pods
                    .iter()
                    .filter_map(|p| p.core_pod().ok())
                    .collect::<Vec<_>>(),
            };
            // A bound pod's claims are allocated: resolved, they pin it where it runs. One
            // that does not resolve (its claim gone) counts as its other requests only.
            for p in out.iter_mut().filter(|p| !p.claims.is_empty()) {
                if inputs.dra.resolve(&p.key.namespace, &mut p.claims).is_err() {
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
                None => translate::node_ready(n),
            };
            let price = pool
                .as_deref()
                .and_then(|p| pool_by_name.get(p))
                .and_then(|p| node_price(&p.instance_types, &node_labels));
            out.snapshot.nodes.push(CoreNode {
                labels: node_labels.clone(),
                annotations: n.metadata.annotations.clone().unwrap_or_default(),
                taints: translate::node_taints(n),
                allocatable,
                pods: pods_of(
                    bound.get(name.as_str()),
                    fold.as_ref()
                        .filter(|_| folding == Folding::Plain || pool.is_none()),
                ),
                unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
                deleting: n.metadata.deletion_timestamp.is_some()
                    || has_disruption_taint(n)
                    || has_foreign_removal_taint(n),
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
                name,
            });
        }
        out.snapshot.nodes.sort_by(|a, b| a.name.cmp(&b.name));

        for ds in inputs.daemonsets {
            match translate::daemonset(ds) {
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
        out
    }
}

#[cfg(test)]
mod tests {
    use autoscaler_core::builders::itype;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;

    fn arc<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn registered_claim_is_in_flight_and_its_node_not_initialized() {
        let pool: Arc<NodePool> = arc(json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
            "metadata": {"name": "gpu"},
            "spec": {"template": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}}
        }));
        let claim: Arc<NodeClaim> = arc(json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "gpu-a", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodePool": "gpu", "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g4dn.xlarge"]}
            ]},
            "status": {"providerID": "kwok://gpu-a", "nodeName": "gpu-a", "instanceType": "g4dn.xlarge",
                "zone": "us-east-1a", "capacityType": "on-demand",
                "conditions": [
                    {"type": "Launched", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                    {"type": "Registered", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-01-01T00:00:02Z"}
                ]}
        }));
        let node: Arc<Node> = arc(json!({
            "metadata": {"name": "gpu-a", "uid": "n1", "labels": {
                "gpu-autoscaler.dev/nodepool": "gpu",
                "node.kubernetes.io/instance-type": "g4dn.xlarge",
                "topology.kubernetes.io/zone": "us-east-1a",
                "karpenter.sh/capacity-type": "on-demand"
            }},
            "spec": {"providerID": "kwok://gpu-a"},
            "status": {"allocatable": {"cpu": "4", "nvidia.com/gpu": "0"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        }));
        let pending: Arc<Pod> = arc(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "p1", "resourceVersion": "5"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }));
        let not_batched: Arc<Pod> = arc(json!({
            "metadata": {"name": "q", "namespace": "default", "uid": "p2"},
            "spec": {"containers": [{"name": "c"}]}
        }));
        let g4dn = itype("g4dn.xlarge")
            .cpu("4")
            .mem("16Gi")
            .gpus(1, "T4", 16)
            .on_demand(&["us-east-1a"], 0.526)
            .build();
        let types = BTreeMap::from([("gpu".to_string(), Arc::new(vec![g4dn]))]);
        let batch = BTreeSet::from([translate::pod_key(&pending)]);
        let cached = |p: &Arc<Pod>| Arc::new(CachedPod::from(p.as_ref().clone()));
        let mut b = SnapshotBuilder::new();
        let built = b.build(&Inputs {
            pods: &[cached(&pending), cached(&not_batched)],
            nodes: &[node],
            pools: &[pool],
            claims: &[claim],
            daemonsets: &[],
            pdbs: &[],
            instance_types: &types,
            pending: &batch,
            gangs: &Default::default(),
            dra: &Default::default(),
        });
        assert!(built.problems.is_empty(), "{:?}", built.problems);
        let s = &built.snapshot;
        assert_eq!(s.pending.len(), 1);
        assert_eq!(s.in_flight.len(), 1);
        assert_eq!(
            s.in_flight[0].instance_types,
            vec!["g4dn.xlarge".to_string()]
        );
        assert_eq!(s.nodes.len(), 1);
        assert!(!s.nodes[0].initialized);
        assert_eq!(s.nodes[0].claim.as_deref(), Some("gpu-a"));
        assert_eq!(s.nodes[0].pool.as_deref(), Some("gpu"));
        let plan = autoscaler_core::plan_provisioning(s);
        assert!(plan.new_claims.is_empty(), "{}", plan.render());
        assert_eq!(plan.in_flight.len(), 1, "{}", plan.render());
    }

    fn node_json(name: &str) -> serde_json::Value {
        json!({
            "metadata": {"name": name, "uid": name, "labels": {
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "topology.kubernetes.io/zone": "us-east-1a",
                "gpu-autoscaler.dev/nodepool": "general"
            }},
            "spec": {"providerID": format!("existing://{name}")},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        })
    }

    /// Inputs of nothing but pods, nodes, NodePools and the pending batch.
    fn plain_inputs<'a>(
        pods: &'a [Arc<CachedPod>],
        nodes: &'a [Arc<Node>],
        pools: &'a [Arc<NodePool>],
        types: &'a BTreeMap<String, Arc<Vec<InstanceType>>>,
        pending: &'a BTreeSet<PodKey>,
    ) -> Inputs<'a> {
        static NO_DRA: std::sync::LazyLock<crate::controller::dra::DraIndex> =
            std::sync::LazyLock::new(Default::default);
        static NO_GANGS: std::sync::LazyLock<crate::controller::gangs::GangObjects> =
            std::sync::LazyLock::new(Default::default);
        Inputs {
            pods,
            nodes,
            pools,
            claims: &[],
            daemonsets: &[],
            pdbs: &[],
            instance_types: types,
            pending,
            gangs: &NO_GANGS,
            dra: &NO_DRA,
        }
    }

    /// NodePool `general` of m5.xlarge nodes (empty nodes removable at once), with its catalog.
    fn general_pool() -> (Arc<NodePool>, BTreeMap<String, Arc<Vec<InstanceType>>>) {
        let pool = arc(json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
            "metadata": {"name": "general"},
            "spec": {"template": {}, "disruption": {"consolidateAfter": "0s", "unneededTime": "0s",
                     "budgets": [{"nodes": "100%"}]}}
        }));
        let m5 = itype("m5.xlarge")
            .cpu("4")
            .mem("16Gi")
            .on_demand(&["us-east-1a"], 0.192)
            .build();
        (
            pool,
            BTreeMap::from([("general".to_string(), Arc::new(vec![m5]))]),
        )
    }

    /// A pod in `ns` labelled `app`, bound to `node` or pending, with extra spec fields.
    fn pod_json(
        ns: &str,
        name: &str,
        app: &str,
        node: Option<&str>,
        cpu: &str,
        extra: serde_json::Value,
    ) -> Arc<CachedPod> {
        let mut spec = json!({"containers": [{"name": "c",
            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        let status = match node {
            Some(_) => json!({"phase": "Running"}),
            None => json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable"}]}),
        };
        arc(json!({
            "metadata": {"name": name, "namespace": ns, "uid": name, "labels": {"app": app},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                    "uid": format!("rs-{app}"), "controller": true}]},
            "spec": spec, "status": status
        }))
    }

    #[test]
    fn folding_plain_bound_pods_plans_as_the_whole_snapshot() {
        let (pool, types) = general_pool();
        let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}}]});
        let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "solo"}}}]}}});
        let mut pods = Vec::new();
        for i in 0..8 {
            pods.push(pod_json(
                "a",
                &format!("plain-{i}"),
                "x",
                Some("n1"),
                "300m",
                json!({}),
            ));
        }
        for i in 0..5 {
            pods.push(pod_json(
                "a",
                &format!("other-{i}"),
                "x",
                Some("n2"),
                "500m",
                json!({}),
            ));
        }
        for i in 0..2 {
            pods.push(pod_json(
                "b",
                &format!("web-{i}"),
                "web",
                Some("n1"),
                "100m",
                json!({}),
            ));
        }
        pods.push(pod_json(
            "c",
            "solo-0",
            "solo",
            Some("n2"),
            "100m",
            anti.clone(),
        ));
        for i in 0..4 {
            pods.push(pod_json(
                "b",
                &format!("new-web-{i}"),
                "web",
                None,
                "500m",
                spread.clone(),
            ));
        }
        for i in 1..3 {
            pods.push(pod_json(
                "c",
                &format!("solo-{i}"),
                "solo",
                None,
                "200m",
                anti.clone(),
            ));
        }
        for i in 0..3 {
            pods.push(pod_json(
                "d",
                &format!("batch-{i}"),
                "batch",
                None,
                "1",
                json!({}),
            ));
        }
        let batch: BTreeSet<PodKey> = pods
            .iter()
            .filter(|p| p.node_name.is_none())
            .map(|p| p.key.clone())
            .collect();
        let nodes: Vec<Arc<Node>> = ["n1", "n2"].iter().map(|n| arc(node_json(n))).collect();
        let pools = [pool];
        let inputs = plain_inputs(&pods, &nodes, &pools, &types, &batch);
        let mut b = SnapshotBuilder::new();
        let whole = b.build(&inputs);
        let folded = b.build_for_provisioning(&inputs);
        assert!(whole.problems.is_empty(), "{:?}", whole.problems);
        let counts = |s: &Snapshot| s.nodes.iter().map(|n| n.pods.len()).collect::<Vec<_>>();
        assert_eq!(counts(&whole.snapshot), vec![10, 6]);
        // n1: the web pods stay (a pending pod's spread selects namespace b), the rest folds;
        // n2: the anti-affinity pod stays.
        assert_eq!(counts(&folded.snapshot), vec![3, 2]);
        let sum = |s: &Snapshot, i: usize| {
            let mut r = autoscaler_core::resources::Resources::new();
            s.nodes[i].pods.iter().for_each(|p| r.add(&p.requests));
            r
        };
        for i in 0..2 {
            assert_eq!(sum(&whole.snapshot, i), sum(&folded.snapshot, i));
        }
        let a = autoscaler_core::plan_provisioning(&whole.snapshot);
        let b = autoscaler_core::plan_provisioning(&folded.snapshot);
        assert!(
            !a.existing.is_empty() && !a.new_claims.is_empty(),
            "{}",
            a.render()
        );
        assert_eq!(a.render(), b.render());
    }

    #[test]
    fn folded_pods_keep_the_host_ports_they_bind() {
        let (pool, types) = general_pool();
        let port = |p: u16| {
            json!({"containers": [{"name": "c", "ports": [{"containerPort": p, "hostPort": p}],
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]})
        };
        let pods = vec![
            pod_json("a", "first", "x", Some("n1"), "100m", port(9000)),
            pod_json("a", "second", "x", Some("n1"), "100m", port(9001)),
            pod_json("d", "wants-9001", "y", None, "100m", port(9001)),
        ];
        let batch: BTreeSet<PodKey> = pods
            .iter()
            .filter(|p| p.node_name.is_none())
            .map(|p| p.key.clone())
            .collect();
        let nodes: Vec<Arc<Node>> = vec![arc(node_json("n1"))];
        let pools = [pool];
        let inputs = plain_inputs(&pods, &nodes, &pools, &types, &batch);
        let mut b = SnapshotBuilder::new();
        let folded = b.build_for_provisioning(&inputs);
        // Both bound pods fold into one, which still binds both ports.
        assert_eq!(folded.snapshot.nodes[0].pods.len(), 1);
        let plan = autoscaler_core::plan_provisioning(&folded.snapshot);
        assert!(plan.existing.is_empty(), "{}", plan.render());
        assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
        let whole = autoscaler_core::plan_provisioning(&b.build(&inputs).snapshot);
        assert_eq!(plan.render(), whole.render());
    }

    /// Mixed clusters: a node the Cluster Autoscaler or Karpenter is removing is not capacity,
    /// and a pod the Cluster Autoscaler's annotation calls a DaemonSet pod is one.
    #[test]
    fn the_cluster_autoscalers_and_karpenters_vocabulary_on_foreign_objects() {
        let (pool, types) = general_pool();
        let mut pods = vec![pod_json("a", "web", "web", None, "1", json!({}))];
        let raw: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "a", "uid": "agent",
                "annotations": {"cluster-autoscaler.kubernetes.io/daemonset-pod": "true"}},
            "spec": {"nodeName": "n-ca", "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let agent = CachedPod::from(raw);
        pods.push(Arc::new(agent));
        let mut nodes = Vec::new();
        for (name, key, effect) in [
            ("n-ca", "ToBeDeletedByClusterAutoscaler", "NoSchedule"),
            (
                "n-cand",
                "DeletionCandidateOfClusterAutoscaler",
                "PreferNoSchedule",
            ),
            ("n-karp", "karpenter.sh/disrupted", "NoSchedule"),
        ] {
            let mut n = node_json(name);
            n["spec"]["taints"] = json!([{"key": key, "value": "1700000000", "effect": effect}]);
            nodes.push(arc(n));
        }
        let batch = BTreeSet::from([PodKey {
            namespace: "a".into(),
            name: "web".into(),
        }]);
        let pools = [pool];
        let inputs = plain_inputs(&pods, &nodes, &pools, &types, &batch);
        let built = SnapshotBuilder::new().build(&inputs);
        let s = &built.snapshot;
        assert!(s.nodes.iter().all(|n| n.deleting), "{:?}", s.nodes);
        let agent = s.nodes[0]
            .pods
            .iter()
            .find(|p| p.key.name == "agent")
            .expect("agent");
        assert!(agent.is_daemonset(), "{agent:?}");
        // The pending pod gets a new node: none of the three is capacity.
        let plan = autoscaler_core::plan_provisioning(s);
        assert_eq!(plan.new_claims.len(), 1, "{}", plan.render());
    }

    #[test]
    fn disruption_folds_only_nodes_no_nodepool_manages() {
        let (pool, types) = general_pool();
        // web-1 must share a host with a web pod: it can move only next to web-0, so web-0
        // must survive the folding for the plans to agree.
        let with_web = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}}});
        let mut pods = Vec::new();
        // The unmanaged node: plain pods (fold) and a web pod that a movable pod's affinity
        // selects (kept).
        for i in 0..6 {
            pods.push(pod_json(
                "a",
                &format!("plain-{i}"),
                "x",
                Some("static"),
                "250m",
                json!({}),
            ));
        }
        pods.push(pod_json(
            "b",
            "web-0",
            "web",
            Some("static"),
            "100m",
            json!({}),
        ));
        // The managed node: a lightly used candidate whose pods may move.
        pods.push(pod_json(
            "b",
            "web-1",
            "web",
            Some("managed"),
            "100m",
            with_web,
        ));
        pods.push(pod_json(
            "a",
            "plain-m",
            "x",
            Some("managed"),
            "200m",
            json!({}),
        ));
        let mut unmanaged = node_json("static");
        unmanaged["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("gpu-autoscaler.dev/nodepool");
        unmanaged["spec"] = json!({});
        let nodes = vec![arc(unmanaged), arc(node_json("managed"))];
        let batch = BTreeSet::new();
        let pools = [pool];
        let inputs = plain_inputs(&pods, &nodes, &pools, &types, &batch);
        let mut b = SnapshotBuilder::new();
        let whole = b.build(&inputs);
        let folded = b.build_for_disruption(&inputs);
        let counts = |s: &Snapshot| s.nodes.iter().map(|n| n.pods.len()).collect::<Vec<_>>();
        // Nodes by name: managed, static.
        assert_eq!(counts(&whole.snapshot), vec![2, 7]);
        // managed: untouched; static: six plain pods fold into one, web-0 stays.
        assert_eq!(counts(&folded.snapshot), vec![2, 2]);
        let config = autoscaler_core::disruption::DisruptionConfig::default();
        let state = autoscaler_core::disruption::DisruptionState::default();
        let a = autoscaler_core::disruption::plan_disruption(&whole.snapshot, &state, 0, &config);
        let c = autoscaler_core::disruption::plan_disruption(&folded.snapshot, &state, 0, &config);
        assert!(
            !a.commands.is_empty(),
            "the managed node's pods fit on the static node: {:?}",
            a.verdicts
        );
        assert_eq!(a.commands, c.commands);
        assert_eq!(a.verdicts, c.verdicts);
    }
}
