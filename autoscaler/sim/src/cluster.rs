//! The simulated cluster: pods and nodes with their lifecycles, binding with per-device GPU
//! accounting, and the [`Snapshot`] the controller would build from it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use autoscaler_core::disruption::DO_NOT_DISRUPT;
use autoscaler_core::model::{DaemonSet, Group, InFlightClaim, Node, Pdb, Pod, Pool, Snapshot};
use autoscaler_core::requirements::{Labels, Operator, Requirements};
use autoscaler_core::resources::{Resources, is_gpu_class, names};
use autoscaler_core::taints::Taint;
use autoscaler_core::{CapacityType, labels};

use crate::workload::Workload;

/// Index of a pod in [`Cluster::pods`] (the same as in [`Workload::pods`]).
pub type PodId = usize;
/// Index of a node in [`Cluster::nodes`].
pub type NodeId = usize;

/// Where a pod is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    /// Not created yet.
    Waiting,
    /// Created, not bound, since the given time.
    Pending {
        /// Since when.
        since: i64,
    },
    /// Bound to a node since the given time.
    Bound {
        /// The node.
        node: NodeId,
        /// Since when.
        since: i64,
    },
    /// Completed or deleted.
    Done,
}

/// A pod's state.
#[derive(Clone, Debug)]
pub struct PodState {
    /// The pod as the planner sees it; `None` before arrival and after completion.
    pub pod: Option<Pod>,
    /// Phase.
    pub phase: PodPhase,
    /// Bumped at every bind and unbind, so stale completion events can be recognised.
    pub generation: u32,
    /// Device indices (of `nvidia.com/gpu` units) the pod holds while bound.
    pub devices: Vec<usize>,
    /// Physical GPUs the pod holds while bound (shares, MIG slices and replicas as fractions).
    pub gpu_equiv: f64,
    /// DRA devices its claims hold while bound.
    pub claim_devices: Vec<crate::dra::Taken>,
}

/// A node's lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NodePhase {
    /// Instance requested, not registered.
    Launching,
    /// Ready, device plugin (or startup taints) pending: still in flight for the planner.
    Registered,
    /// Initialized.
    Ready,
    /// Terminated.
    Gone,
}

/// A node (and the claim it was launched for).
#[derive(Clone, Debug)]
pub struct NodeState {
    /// Node name.
    pub name: String,
    /// NodeClaim name.
    pub claim: String,
    /// Provider id from the fake cloud.
    pub provider_id: String,
    /// Index of its pool in the scenario; `None` for an existing node no NodePool manages.
    pub pool: Option<usize>,
    /// Pool name (empty when `pool` is `None`).
    pub pool_name: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// Labels (shared: what-if copies of nodes are made often and never relabel).
    pub labels: Arc<Labels>,
    /// Taints (pool taints and, while present, startup taints and the disruption taint).
    pub taints: Vec<Taint>,
    /// Startup taints still present.
    pub startup_taints: Vec<Taint>,
    /// Allocatable once initialized (GPU sharing applied).
    pub allocatable: Resources,
    /// Requests of bound pods (DaemonSet pods included), `nvidia.com/gpu` excluded: whole and
    /// shared devices are tracked in `devices`.
    pub used: Resources,
    /// Thousandths used of each advertised `nvidia.com/gpu` unit.
    pub devices: Vec<u32>,
    /// Bound pods, in bind order.
    pub pods: Vec<PodId>,
    /// DaemonSet pods (shared, for cheap what-if copies).
    pub ds_pods: Arc<Vec<Pod>>,
    /// Lifecycle phase.
    pub phase: NodePhase,
    /// Cordoned.
    pub cordoned: bool,
    /// Marked for deletion (disruption taint on).
    pub deleting: bool,
    /// When the instance was requested.
    pub launched_at: i64,
    /// When it was terminated.
    pub gone_at: Option<i64>,
    /// When its device plugin advertised its GPUs and its startup taints went (it became
    /// Ready); `None` until then.
    pub ready_at: Option<i64>,
    /// Bound pods holding some GPU (whole, share, slice or replica).
    pub gpu_pods: u32,
    /// Since when `gpu_pods` has been above 0 (meaningless while it is 0).
    pub gpu_busy_since: i64,
    /// Seconds, closed intervals only, during which some pod held a GPU of the node.
    pub gpu_busy_s: i64,
    /// Physical GPUs.
    pub gpus: u32,
    /// Last time a pod was bound to or left the node.
    pub last_pod_change: i64,
    /// Booked ProvisioningRequest capacity on the node: per phantom, the request's group and
    /// the pod it stands for (renamed `<pod>.booked`, no group). Phantoms are in every
    /// snapshot the policies plan with (on the in-flight claim until the node is initialized,
    /// then on the node), the node is listed as booked, and the engine's scheduler keeps other
    /// pods off the capacity. Empty when nothing is booked.
    pub held: Vec<(u32, Pod)>,
    /// Bumped whenever `held` changes, so the kept snapshot knows to refresh the node.
    pub hold_version: u64,
    /// DRA devices published (once Ready) and taken.
    pub dra: crate::dra::NodeDra,
}

impl NodeState {
    /// Makes `self` a copy of `src`, reusing `self`'s allocations: the what-if overlay
    /// ([`crate::scheduler::Scratch`]) refreshes its copies this way, and allocating and
    /// freeing every copy's strings was a tenth of the baselines' consolidation.
    pub fn copy_from(&mut self, src: &NodeState) {
        // Destructured in full, so that a new field cannot be forgotten here.
        let NodeState {
            name,
            claim,
            provider_id,
            pool,
            pool_name,
            instance_type,
            zone,
            capacity_type,
            price,
            labels,
            taints,
            startup_taints,
            allocatable,
            used,
            devices,
            pods,
            ds_pods,
            phase,
            cordoned,
            deleting,
            launched_at,
            gone_at,
            ready_at,
            gpu_pods,
            gpu_busy_since,
            gpu_busy_s,
            gpus,
            last_pod_change,
            held,
            hold_version,
            dra,
        } = src;
        self.name.clone_from(name);
        self.claim.clone_from(claim);
        self.provider_id.clone_from(provider_id);
        self.pool = *pool;
        self.pool_name.clone_from(pool_name);
        self.instance_type.clone_from(instance_type);
        self.zone.clone_from(zone);
        self.capacity_type = *capacity_type;
        self.price = *price;
        self.labels.clone_from(labels);
        self.taints.clone_from(taints);
        self.startup_taints.clone_from(startup_taints);
        self.allocatable.clone_from(allocatable);
        self.used.clone_from(used);
        self.devices.clone_from(devices);
        self.pods.clone_from(pods);
        self.ds_pods.clone_from(ds_pods);
        self.phase = *phase;
        self.cordoned = *cordoned;
        self.deleting = *deleting;
        self.launched_at = *launched_at;
        self.gone_at = *gone_at;
        self.ready_at = *ready_at;
        self.gpu_pods = *gpu_pods;
        self.gpu_busy_since = *gpu_busy_since;
        self.gpu_busy_s = *gpu_busy_s;
        self.gpus = *gpus;
        self.last_pod_change = *last_pod_change;
        self.held.clone_from(held);
        self.hold_version = *hold_version;
        self.dra.clone_from(dra);
    }

    /// Whether the node exists as a Kubernetes Node.
    pub fn registered(&self) -> bool {
        matches!(self.phase, NodePhase::Registered | NodePhase::Ready)
    }

    /// Whether the node's instance is alive (costing money).
    pub fn alive(&self) -> bool {
        self.phase != NodePhase::Gone
    }

    /// Allocatable as the kubelet reports it now: no GPU-class resources until the device
    /// plugin is up.
    pub fn effective_allocatable(&self) -> Resources {
        if self.phase == NodePhase::Ready {
            return self.allocatable.clone();
        }
        let mut r = self.allocatable.clone();
        let gpu: Vec<String> = r
            .extended
            .keys()
            .filter(|k| is_gpu_class(k))
            .cloned()
            .collect();
        for k in gpu {
            r.set(&k, 0);
        }
        r
    }

    /// Allocatable amount of `name` now, without building the whole vector (the scheduler
    /// asks this for every pod and node it considers).
    pub fn alloc_get(&self, name: &str) -> i64 {
        if self.phase != NodePhase::Ready && is_gpu_class(name) {
            0
        } else {
            self.allocatable.get(name)
        }
    }

    /// Physical GPUs one unit of `resource` stands for on this node.
    pub fn phys_per_unit(&self, resource: &str) -> f64 {
        if let Some(profile) = resource.strip_prefix("nvidia.com/mig-") {
            // `<n>g.<mem>`: n of the GPU's 7 compute slices.
            let n: f64 = profile
                .split('g')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1.0);
            return n / 7.0;
        }
        let alloc = self.allocatable.get(resource);
        if alloc > 0 && self.gpus > 0 {
            f64::from(self.gpus) / alloc as f64
        } else {
            1.0
        }
    }

    /// Number of advertised `nvidia.com/gpu` units not used at all.
    pub fn free_devices(&self) -> usize {
        self.devices.iter().filter(|d| **d == 0).count()
    }
}

/// Pods, nodes and the indices the engine needs.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Every pod of the workload.
    pub pods: Vec<PodState>,
    /// Every node ever launched.
    pub nodes: Vec<NodeState>,
    /// Pending pods (ordered, so iteration is deterministic).
    pub pending: BTreeSet<PodId>,
    /// When each pod was first bound (what `bench fidelity` compares with the controller).
    pub first_bound: BTreeMap<PodId, i64>,
    /// The node each pod was first bound to (`bench fidelity` names a launch's pods with it).
    pub first_node: BTreeMap<PodId, NodeId>,
    /// Nodes not gone.
    pub live_nodes: BTreeSet<NodeId>,
    /// Template of each pod.
    pub template_of: Vec<u32>,
    /// Per template: pods that exist (arrived, not done) and pods bound.
    pub template_counts: Vec<(i32, i32)>,
    /// Bound pods with required anti-affinity (which every placement must then respect).
    pub anti_bound: usize,
    /// Groups of the ProvisioningRequests whose booking is live: their pending pods consume
    /// the booking and, as in the controller, never enter a provisioning batch.
    pub live_bookings: BTreeSet<u32>,
    /// Cluster-wide limits, copied into every snapshot.
    pub limits: Vec<autoscaler_core::model::ClusterLimit>,
    /// DeviceClasses (empty when no workload uses DRA: the snapshot then has no DRA part).
    pub device_classes: Arc<BTreeMap<String, autoscaler_core::dra::DeviceClass>>,
}

/// Why a bind failed the capacity check (a scheduler bug guard).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverCapacity(pub String);

impl Cluster {
    /// A cluster for the pods of `workload`, all waiting.
    pub fn new(workload: &Workload) -> Self {
        let n = workload.pods.len();
        Cluster {
            template_of: workload.pods.iter().map(|p| p.template).collect(),
            template_counts: vec![(0, 0); workload.templates.len()],
            pods: vec![
                PodState {
                    pod: None,
                    phase: PodPhase::Waiting,
                    generation: 0,
                    devices: vec![],
                    gpu_equiv: 0.0,
                    claim_devices: vec![],
                };
                n
            ],
            ..Default::default()
        }
    }

    /// Creates pod `id` as pending at `now`.
    pub fn arrive(&mut self, id: PodId, pod: Pod, now: i64) {
        self.pods[id].pod = Some(pod);
        self.pods[id].phase = PodPhase::Pending { since: now };
        self.pending.insert(id);
        self.template_counts[self.template_of[id] as usize].0 += 1;
    }

    /// Puts a pod (bound or not) back to pending at `now`.
    pub fn make_pending(&mut self, id: PodId, now: i64) {
        self.unbind(id, now);
        self.pods[id].phase = PodPhase::Pending { since: now };
        self.pending.insert(id);
    }

    /// Completes or deletes pod `id`.
    pub fn finish(&mut self, id: PodId, now: i64) {
        if matches!(self.pods[id].phase, PodPhase::Waiting | PodPhase::Done) {
            return;
        }
        self.unbind(id, now);
        self.pending.remove(&id);
        self.pods[id].phase = PodPhase::Done;
        self.pods[id].pod = None;
        self.pods[id].generation += 1;
        self.template_counts[self.template_of[id] as usize].0 -= 1;
    }

    /// The pod's spec; panics if it has not arrived (an engine bug).
    pub fn pod(&self, id: PodId) -> &Pod {
        self.pods[id].pod.as_ref().expect("pod has arrived")
    }

    /// Binds `pod` to `node`, putting shares on `device` (chosen by the scheduler). Returns
    /// an error describing the overflow if the node ends up over capacity (the bind happens
    /// anyway, so the violation is counted and visible).
    pub fn bind(
        &mut self,
        pod: PodId,
        node: NodeId,
        devices: Vec<usize>,
        now: i64,
    ) -> Result<(), OverCapacity> {
        let p = self.pods[pod].pod.as_ref().expect("pod has arrived");
        let mut req = p.requests.clone();
        req.set(names::NVIDIA_GPU, 0);
        let share = p.gpu_share.as_ref().map(|s| s.milli);
        let whole = p.requests.get(names::NVIDIA_GPU);
        let n = &mut self.nodes[node];
        let mut gpu_equiv = 0.0;
        for (k, v) in p.requests.iter() {
            if is_gpu_class(k) {
                gpu_equiv += v as f64 * n.phys_per_unit(k);
            }
        }
        if let Some(s) = &p.gpu_share {
            gpu_equiv += f64::from(s.milli) / 1000.0 * n.phys_per_unit(&s.resource);
        }
        n.used.add(&req);
        for d in &devices {
            match (share, whole) {
                (Some(m), _) if devices.len() == 1 && whole == 0 => {
                    n.devices[*d] += m;
                }
                _ => n.devices[*d] += 1000,
            }
        }
        n.pods.push(pod);
        n.last_pod_change = now;
        let mut problem = None;
        let mut claim_devices = Vec::new();
        if !p.claims.is_empty() {
            // The scheduler's allocator, run again on the node as it is now: the bind takes
            // what the filter found free (or reports that the claims do not fit).
            match crate::dra::allocate(p, &n.dra).filter(|_| n.phase == NodePhase::Ready) {
                Some(t) => {
                    n.dra.mark(&t, true);
                    gpu_equiv += crate::dra::gpu_equivalent(&n.dra, &t);
                    claim_devices = t;
                }
                None => {
                    problem = Some(format!(
                        "node {}: the pod's resource claims cannot be allocated there",
                        n.name
                    ));
                }
            }
        }
        let alloc = n.effective_allocatable();
        let mut check = n.used.clone();
        check.set(names::NVIDIA_GPU, 0);
        let mut a2 = alloc.clone();
        a2.set(names::NVIDIA_GPU, 0);
        if let Err(s) = check.fits_in(&a2)
            && problem.is_none()
        {
            problem = Some(format!("node {} over capacity: {s}", n.name));
        }
        if n.devices.iter().any(|d| *d > 1000) {
            problem = Some(format!("node {}: a GPU is shared beyond 1000/1000", n.name));
        }
        if (n.devices.len() as i64) > alloc.get(names::NVIDIA_GPU) && !devices.is_empty() {
            problem = Some(format!(
                "node {}: GPU bound before the device plugin",
                n.name
            ));
        }
        self.template_counts[self.template_of[pod] as usize].1 += 1;
        if !self.pods[pod]
            .pod
            .as_ref()
            .is_some_and(|p| p.anti_affinity.is_empty())
        {
            self.anti_bound += 1;
        }
        self.first_bound.entry(pod).or_insert(now);
        self.first_node.entry(pod).or_insert(node);
        let st = &mut self.pods[pod];
        st.phase = PodPhase::Bound { node, since: now };
        // A do-not-disrupt duration counts from here (the simulated pod starts on binding).
        if let Some(p) = st.pod.as_mut()
            && p.annotations.contains_key(DO_NOT_DISRUPT)
        {
            p.started_at = Some(now);
        }
        st.devices = devices;
        st.gpu_equiv = gpu_equiv;
        if gpu_equiv > 0.0 {
            let n = &mut self.nodes[node];
            if n.gpu_pods == 0 {
                n.gpu_busy_since = now;
            }
            n.gpu_pods += 1;
        }
        if let Some(p) = st.pod.as_mut() {
            let n = &self.nodes[node];
            for (i, c) in p.claims.iter_mut().enumerate() {
                c.allocation = Some(autoscaler_core::dra::Allocation {
                    node: Some(n.name.clone()),
                    devices: crate::dra::results(&n.dra, &claim_devices, i),
                });
            }
        }
        st.claim_devices = claim_devices;
        st.generation += 1;
        self.pending.remove(&pod);
        match problem {
            Some(p) => Err(OverCapacity(p)),
            None => Ok(()),
        }
    }

    /// Removes a bound pod from its node; the caller sets the new phase.
    pub fn unbind(&mut self, pod: PodId, now: i64) {
        let PodPhase::Bound { node, .. } = self.pods[pod].phase else {
            return;
        };
        let p = self.pods[pod].pod.as_ref().expect("bound pod exists");
        let mut req = p.requests.clone();
        req.set(names::NVIDIA_GPU, 0);
        let share = p.gpu_share.as_ref().map(|s| s.milli);
        let whole = p.requests.get(names::NVIDIA_GPU);
        let devices = std::mem::take(&mut self.pods[pod].devices);
        let n = &mut self.nodes[node];
        n.used.sub(&req);
        for d in &devices {
            let amount = match (share, whole) {
                (Some(m), 0) if devices.len() == 1 => m,
                _ => 1000,
            };
            n.devices[*d] = n.devices[*d].saturating_sub(amount);
        }
        n.pods.retain(|p| *p != pod);
        n.last_pod_change = now;
        if self.pods[pod].gpu_equiv > 0.0 && n.gpu_pods > 0 {
            n.gpu_pods -= 1;
            if n.gpu_pods == 0 {
                n.gpu_busy_s += now - n.gpu_busy_since;
            }
        }
        // The pod's claims are released (a template's claim goes with its pod).
        n.dra
            .mark(&std::mem::take(&mut self.pods[pod].claim_devices), false);
        if let Some(p) = self.pods[pod].pod.as_mut() {
            for c in &mut p.claims {
                c.allocation = None;
            }
        }
        self.template_counts[self.template_of[pod] as usize].1 -= 1;
        if !self.pods[pod]
            .pod
            .as_ref()
            .is_some_and(|p| p.anti_affinity.is_empty())
        {
            self.anti_bound -= 1;
        }
        let st = &mut self.pods[pod];
        st.generation += 1;
        st.gpu_equiv = 0.0;
    }

    /// Builds the controller's snapshot of the cluster from scratch (the reference that
    /// [`SnapshotCache`] keeps up to date incrementally).
    pub fn snapshot(
        &self,
        pools: &[Pool],
        daemonsets: &[DaemonSet],
        workload: &Workload,
        include_pending: bool,
    ) -> Snapshot {
        let mut snap = Snapshot::default();
        self.fill_small_parts(&mut snap, pools, daemonsets, workload, include_pending);
        for ni in &self.live_nodes {
            let n = &self.nodes[*ni];
            if n.phase != NodePhase::Ready {
                snap.in_flight.push(self.in_flight_claim(*ni));
            }
            if n.registered() {
                snap.nodes.push(self.core_node(*ni));
            }
        }
        snap
    }

    /// Everything of the snapshot but its nodes and in-flight claims: pools, DaemonSets,
    /// pending pods and their groups, booked nodes and PDBs. These are small or change at
    /// every call, so they are rebuilt each time.
    fn fill_small_parts(
        &self,
        snap: &mut Snapshot,
        pools: &[Pool],
        daemonsets: &[DaemonSet],
        workload: &Workload,
        include_pending: bool,
    ) {
        // Copied again only when they differ: copying every pool for each pass was a
        // twentieth of a replay. Pools whose catalogs are not the same `Arc` are copied
        // rather than compared (the engine marks unavailable offerings on a fresh copy).
        if snap.daemonsets != daemonsets {
            snap.daemonsets = daemonsets.to_vec();
        }
        let shared_catalogs = snap.pools.len() == pools.len()
            && snap
                .pools
                .iter()
                .zip(pools)
                .all(|(a, b)| Arc::ptr_eq(&a.instance_types, &b.instance_types));
        if !shared_catalogs || !autoscaler_core::provision::same_pools(&snap.pools, pools) {
            snap.pools = pools.to_vec();
        }
        snap.cluster_limits.clone_from(&self.limits);
        snap.pending.clear();
        snap.groups.clear();
        if include_pending {
            let mut group_counts: BTreeMap<String, u32> = BTreeMap::new();
            for id in &self.pending {
                if workload
                    .pods
                    .get(*id)
                    .and_then(|p| p.group)
                    .is_some_and(|g| self.live_bookings.contains(&g))
                {
                    continue;
                }
                let p = self.pod(*id);
                if let Some(g) = &p.group {
                    *group_counts.entry(g.clone()).or_default() += 1;
                }
                snap.pending.push(p.clone());
            }
            for (name, n) in group_counts {
                snap.groups
                    .insert(name.clone(), Group { name, min_count: n });
            }
        }
        snap.booked_nodes.clear();
        for ni in &self.live_nodes {
            let n = &self.nodes[*ni];
            if n.registered() && !n.held.is_empty() {
                snap.booked_nodes.insert(n.name.clone());
            }
        }
        snap.pdbs = self.pdbs(workload);
        snap.dra = Arc::new(self.dra_snapshot());
    }

    /// The DRA objects the controller would see: the classes, the slices Ready nodes publish
    /// and the claims of bound pods. Empty when the scenario has no DRA.
    fn dra_snapshot(&self) -> autoscaler_core::dra::Dra {
        use autoscaler_core::dra::{Dra, ResourceClaim};
        if self.device_classes.is_empty() {
            return Dra::default();
        }
        let mut dra = Dra {
            classes: (*self.device_classes).clone(),
            ..Dra::default()
        };
        for ni in &self.live_nodes {
            let n = &self.nodes[*ni];
            let Some(d) = n.dra.devices.as_deref() else {
                continue;
            };
            if n.phase == NodePhase::Ready {
                dra.slices.push(d.slice.clone());
            }
            for pid in &n.pods {
                let p = self.pod(*pid);
                for c in &p.claims {
                    dra.claims.push(ResourceClaim {
                        namespace: p.key.namespace.clone(),
                        name: format!("{}-{}", p.key.name, c.name),
                        spec: c.spec.clone(),
                        allocation: c.allocation.clone(),
                        reserved_for: vec![p.key.clone()],
                    });
                }
            }
        }
        dra
    }

    /// The pods the API server shows on a node: DaemonSet pods, then bound pods in bind order.
    fn node_pods(&self, ni: NodeId) -> Vec<Pod> {
        let n = &self.nodes[ni];
        n.ds_pods
            .iter()
            .cloned()
            .chain(n.pods.iter().map(|p| self.pod(*p).clone()))
            .collect()
    }

    /// The node's booked phantoms.
    fn phantoms(&self, ni: NodeId) -> impl Iterator<Item = Pod> + '_ {
        self.nodes[ni].held.iter().map(|(_, p)| p.clone())
    }

    /// The Node object of a registered node.
    fn core_node(&self, ni: NodeId) -> Node {
        let n = &self.nodes[ni];
        Node {
            name: n.name.clone(),
            labels: (*n.labels).clone(),
            annotations: Labels::new(),
            taints: n.taints.clone(),
            allocatable: n.effective_allocatable(),
            // Phantoms of a booking sit on the Node once it is initialized (before, on its
            // in-flight claim), as the controller's `provreq::hold` puts them.
            pods: if n.phase == NodePhase::Ready {
                let mut pods = self.node_pods(ni);
                pods.extend(self.phantoms(ni));
                pods
            } else {
                self.node_pods(ni)
            },
            unschedulable: n.cordoned,
            deleting: n.deleting,
            pool: n.pool.map(|_| n.pool_name.clone()),
            instance_type: (!n.instance_type.is_empty()).then(|| n.instance_type.clone()),
            price: Some(n.price),
            created_at: n.launched_at,
            last_pod_event: Some(n.last_pod_change),
            initialized: n.phase == NodePhase::Ready,
            // Simulated nodes never break down after they start (and before, `initialized`
            // is what the core reads).
            ready: true,
            claim: Some(n.claim.clone()),
            // Scenarios carry no volumes.
            volume_limits: Default::default(),
        }
    }

    /// The in-flight claim of a node not initialized yet (its pods once registered).
    fn in_flight_claim(&self, ni: NodeId) -> InFlightClaim {
        let n = &self.nodes[ni];
        let mut reqs = Requirements::new()
            .with(labels::ZONE, Operator::In, &[&n.zone])
            .with(
                labels::CAPACITY_TYPE,
                Operator::In,
                &[n.capacity_type.as_str()],
            );
        reqs.add(
            labels::INSTANCE_TYPE,
            Operator::In,
            std::slice::from_ref(&n.instance_type),
        )
        .expect("one value");
        // A NodeClaim's requirements carry what the plan pinned it to (a label its NodePool
        // defines, an instance type's arch): without them the planner saw a claim that might
        // not meet a pod's topology pins and launched another for the pod every round.
        for (k, v) in n.labels.iter() {
            if k != labels::HOSTNAME && reqs.get(k).is_none() {
                reqs.add(k, Operator::In, std::slice::from_ref(v))
                    .expect("one value");
            }
        }
        InFlightClaim {
            name: n.claim.clone(),
            pool: n.pool_name.clone(),
            instance_types: vec![n.instance_type.clone()],
            requirements: reqs,
            pods: if n.registered() {
                self.node_pods(ni)
            } else {
                vec![]
            }
            .into_iter()
            .chain(self.phantoms(ni))
            .collect(),
            created_at: n.launched_at,
        }
    }

    /// The PodDisruptionBudgets with `disruptionsAllowed` as the API server computes it:
    /// `maxUnavailable - (existing pods - bound pods)`.
    pub fn pdbs(&self, workload: &Workload) -> Vec<Pdb> {
        workload
            .pdbs
            .iter()
            .map(|b| {
                let (existing, bound) = b.templates.iter().fold((0, 0), |(e, d), t| {
                    let (te, tb) = self.template_counts[*t as usize];
                    (e + te, d + tb)
                });
                Pdb {
                    namespace: b.namespace.clone(),
                    name: b.name.clone(),
                    selector: b.selector.clone(),
                    disruptions_allowed: b.max_unavailable as i32 - (existing - bound),
                }
            })
            .collect()
    }
}

mod snapshot_cache;
pub use snapshot_cache::SnapshotCache;

#[cfg(test)]
mod tests;
