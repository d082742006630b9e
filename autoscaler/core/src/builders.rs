//! Test and fixture builders: `pod("p").gpus(2).model("H100")`, `itype("g5.xlarge")...`.
//!
//! They panic on malformed literals, so use them only with literals in tests, fixtures and
//! benchmarks, never on user input.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::instance::{CapacityType, GpuSpec, InstanceType, Offering};
use crate::labels;
use crate::model::{
    ClusterLimit, DaemonSet, DisruptionPolicy, GpuShare, GpuSharing, HostPort, Limits, Node, Pod,
    PodAffinityTerm, PodKey, Pool, TermNamespaces, TopologySpread,
};
use crate::quantity::Quantity;
use crate::requirements::{Labels, NodeSelector, Operator, Requirements};
use crate::resources::{Resources, names};
use crate::taints::{Effect, Taint, Toleration};

fn parse_into(r: &mut Resources, name: &str, q: &str) {
    let q = Quantity::parse(q).expect("literal quantity");
    r.set(name, 0);
    r.add_quantity(name, q).expect("literal resource");
}

/// Starts a pod in namespace `default` requesting one pod slot and nothing else.
pub fn pod(name: &str) -> PodBuilder {
    let mut p = Pod::new(PodKey {
        namespace: "default".into(),
        name: name.into(),
    });
    p.owner_kind = Some("ReplicaSet".into());
    PodBuilder(p)
}

/// A term over `key` about pods labelled `app=<app>` in `namespaces`.
fn app_term(key: &str, app: &str, namespaces: TermNamespaces) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: key.into(),
        selector: Requirements::new().with("app", Operator::In, &[app]),
        namespaces,
        held: false,
    }
}

/// Builder for [`Pod`].
#[derive(Clone, Debug)]
pub struct PodBuilder(pub Pod);

impl PodBuilder {
    /// Sets the namespace.
    pub fn ns(mut self, ns: &str) -> Self {
        self.0.key.namespace = ns.into();
        self
    }
    /// Requests cpu (`"500m"`).
    pub fn cpu(mut self, q: &str) -> Self {
        parse_into(&mut self.0.requests, names::CPU, q);
        self
    }
    /// Requests memory (`"2Gi"`).
    pub fn mem(mut self, q: &str) -> Self {
        parse_into(&mut self.0.requests, names::MEMORY, q);
        self
    }
    /// Requests any resource.
    pub fn res(mut self, name: &str, q: &str) -> Self {
        parse_into(&mut self.0.requests, name, q);
        self
    }
    /// Requests `n` whole `nvidia.com/gpu` and tolerates the usual GPU taint.
    pub fn gpus(mut self, n: i64) -> Self {
        self.0.requests.set(names::NVIDIA_GPU, n);
        self.0
            .tolerations
            .push(Toleration::exists(names::NVIDIA_GPU));
        self
    }
    /// Asks for `milli`/1000 of one `nvidia.com/gpu` and tolerates the usual GPU taint.
    pub fn gpu_share(mut self, milli: u32) -> Self {
        self.0.gpu_share = Some(GpuShare {
            resource: names::NVIDIA_GPU.into(),
            milli,
        });
        self.0
            .tolerations
            .push(Toleration::exists(names::NVIDIA_GPU));
        self
    }
    /// Requires the GPU model label `gpu-autoscaler.dev/instance-gpu-name` (lower-cased).
    pub fn model(self, model: &str) -> Self {
        self.select(labels::GPU_NAME, &model.to_lowercase())
    }
    /// Adds `key: value` to the nodeSelector (ANDed into every affinity term).
    pub fn select(mut self, key: &str, value: &str) -> Self {
        let mut l = Labels::new();
        l.insert(key.into(), value.into());
        let base = Requirements::from_labels(&l);
        if self.0.node_selector.terms.is_empty() {
            self.0.node_selector = NodeSelector::single(base);
        } else {
            for t in &mut self.0.node_selector.terms {
                *t = t.intersect(&base);
            }
        }
        self
    }
    /// Replaces the required node affinity with these OR-ed terms.
    pub fn affinity_terms(mut self, terms: Vec<Requirements>) -> Self {
        self.0.node_selector = NodeSelector { terms };
        self
    }
    /// Adds one `key op values` to every required term.
    pub fn require(mut self, key: &str, op: Operator, values: &[&str]) -> Self {
        let r = Requirements::new().with(key, op, values);
        if self.0.node_selector.terms.is_empty() {
            self.0.node_selector = NodeSelector::single(r);
        } else {
            for t in &mut self.0.node_selector.terms {
                *t = t.intersect(&r);
            }
        }
        self
    }
    /// Adds a preferred node-affinity term.
    pub fn prefer(mut self, weight: i32, term: Requirements) -> Self {
        self.0.preferred.push((weight, term));
        self
    }
    /// Adds a toleration.
    pub fn tolerate(mut self, t: Toleration) -> Self {
        self.0.tolerations.push(t);
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    /// Adds an annotation.
    pub fn annotate(mut self, k: &str, v: &str) -> Self {
        self.0.annotations.insert(k.into(), v.into());
        self
    }
    /// Adds a hard topology spread over `key` for pods labelled `app=<app>`.
    pub fn spread(mut self, key: &str, max_skew: u32, app: &str) -> Self {
        self.0.spread.push(TopologySpread {
            max_skew,
            topology_key: key.into(),
            selector: Requirements::new().with("app", Operator::In, &[app]),
            hard: true,
            min_domains: 0,
            honor_taints: false,
            ignore_node_affinity: false,
        });
        self
    }
    /// Sets `nodeAffinityPolicy: Ignore` on the last spread constraint added.
    pub fn ignore_node_affinity(mut self) -> Self {
        if let Some(s) = self.0.spread.last_mut() {
            s.ignore_node_affinity = true;
        }
        self
    }
    /// Sets `nodeTaintsPolicy: Honor` on the last spread constraint added.
    pub fn honor_taints(mut self) -> Self {
        if let Some(s) = self.0.spread.last_mut() {
            s.honor_taints = true;
        }
        self
    }
    /// Makes the last spread constraint added `ScheduleAnyway`.
    pub fn schedule_anyway(mut self) -> Self {
        if let Some(s) = self.0.spread.last_mut() {
            s.hard = false;
        }
        self
    }
    /// Adds preferred pod affinity of `weight` over `key` to pods labelled `app=<app>`.
    pub fn prefer_affinity(mut self, weight: i32, key: &str, app: &str) -> Self {
        let term = app_term(key, app, TermNamespaces::Own);
        self.0.preferred_affinity.push((weight, term));
        self
    }
    /// Adds preferred pod anti-affinity of `weight` over `key` against pods labelled
    /// `app=<app>`.
    pub fn prefer_anti_affinity(mut self, weight: i32, key: &str, app: &str) -> Self {
        let term = app_term(key, app, TermNamespaces::Own);
        self.0.preferred_anti_affinity.push((weight, term));
        self
    }
    /// Sets `minDomains` on the last spread constraint added.
    pub fn min_domains(mut self, n: u32) -> Self {
        if let Some(s) = self.0.spread.last_mut() {
            s.min_domains = n;
        }
        self
    }
    /// Adds required anti-affinity over `key` against pods labelled `app=<app>`.
    pub fn anti_affinity(self, key: &str, app: &str) -> Self {
        self.anti_affinity_in(key, app, TermNamespaces::Own)
    }
    /// Adds required anti-affinity over `key` against pods labelled `app=<app>` in
    /// `namespaces`.
    pub fn anti_affinity_in(mut self, key: &str, app: &str, namespaces: TermNamespaces) -> Self {
        self.0.anti_affinity.push(app_term(key, app, namespaces));
        self
    }
    /// Adds required affinity over `key` to pods labelled `app=<app>`.
    pub fn affinity(self, key: &str, app: &str) -> Self {
        self.affinity_in(key, app, TermNamespaces::Own)
    }
    /// Adds required affinity over `key` to pods labelled `app=<app>` in `namespaces`.
    pub fn affinity_in(mut self, key: &str, app: &str, namespaces: TermNamespaces) -> Self {
        self.0.affinity.push(app_term(key, app, namespaces));
        self
    }

    /// Puts the pod in an all-or-nothing group.
    pub fn group(mut self, g: &str) -> Self {
        self.0.group = Some(g.into());
        self
    }
    /// Sets the priority.
    pub fn priority(mut self, p: i32) -> Self {
        self.0.priority = p;
        self
    }
    /// Sets the owner kind (`None` for a bare pod).
    pub fn owner(mut self, kind: Option<&str>) -> Self {
        self.0.owner_kind = kind.map(str::to_string);
        self
    }
    /// Binds a TCP host port on every address.
    pub fn host_port(mut self, port: u16) -> Self {
        self.0.host_ports.push(HostPort::tcp(port));
        self
    }
    /// Sets when the pod started running.
    pub fn started(mut self, t: i64) -> Self {
        self.0.started_at = Some(t);
        self
    }
    /// Adds a DRA claim (see [`crate::dra::builders`]: `claim().request(..).from_template("gpu")`).
    pub fn claim(mut self, c: crate::dra::PodClaim) -> Self {
        self.0.claims.push(c);
        self
    }
    /// Attaches volume `id` (a claim, `namespace/name`) of CSI driver `driver`.
    pub fn volume(mut self, driver: &str, id: &str) -> Self {
        self.0.volumes.push(crate::model::AttachedVolume {
            driver: driver.into(),
            id: id.into(),
        });
        self
    }
    /// Finishes.
    pub fn build(self) -> Pod {
        self.0
    }
}

impl From<PodBuilder> for Pod {
    fn from(b: PodBuilder) -> Pod {
        b.0
    }
}

/// Starts an instance type with no resources, `amd64`, offered nowhere.
pub fn itype(name: &str) -> TypeBuilder {
    let mut l = Labels::new();
    l.insert(labels::INSTANCE_TYPE.into(), name.into());
    l.insert(labels::ARCH.into(), "amd64".into());
    l.insert(labels::OS.into(), "linux".into());
    if let Some((fam, size)) = name.split_once('.') {
        l.insert(labels::INSTANCE_FAMILY.into(), fam.into());
        l.insert(labels::INSTANCE_SIZE.into(), size.into());
    }
    TypeBuilder(InstanceType {
        name: name.into(),
        arch: "amd64".into(),
        capacity: Resources::new().with(names::PODS, 110),
        overhead: Resources::new(),
        gpu: None,
        labels: l,
        offerings: vec![],
    })
}

/// Builder for [`InstanceType`].
#[derive(Clone, Debug)]
pub struct TypeBuilder(pub InstanceType);

impl TypeBuilder {
    /// Sets cpu capacity.
    pub fn cpu(mut self, q: &str) -> Self {
        parse_into(&mut self.0.capacity, names::CPU, q);
        self
    }
    /// Sets memory capacity.
    pub fn mem(mut self, q: &str) -> Self {
        parse_into(&mut self.0.capacity, names::MEMORY, q);
        self
    }
    /// Sets any capacity.
    pub fn res(mut self, name: &str, q: &str) -> Self {
        parse_into(&mut self.0.capacity, name, q);
        self
    }
    /// Sets the pod slots.
    pub fn max_pods(mut self, n: i64) -> Self {
        self.0.capacity.pods = n;
        self
    }
    /// Adds `n` NVIDIA GPUs of `model` with `mem_gib` each, with the labels the catalog sets.
    pub fn gpus(mut self, n: u32, model: &str, mem_gib: u64) -> Self {
        self.0.capacity.set(names::NVIDIA_GPU, i64::from(n));
        self.0.gpu = Some(GpuSpec {
            vendor: "nvidia".into(),
            model: model.into(),
            count: n,
            memory_mib: mem_gib * 1024,
            resource: names::NVIDIA_GPU.into(),
        });
        let l = &mut self.0.labels;
        l.insert(labels::GPU_NAME.into(), model.to_lowercase());
        l.insert(labels::GPU_MANUFACTURER.into(), "nvidia".into());
        l.insert(labels::GPU_COUNT.into(), n.to_string());
        l.insert(labels::GPU_MEMORY.into(), (mem_gib * 1024).to_string());
        l.insert(labels::NVIDIA_PRODUCT.into(), format!("NVIDIA-{model}"));
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    /// Sets the kubelet/system overhead.
    pub fn overhead(mut self, cpu: &str, mem: &str) -> Self {
        parse_into(&mut self.0.overhead, names::CPU, cpu);
        parse_into(&mut self.0.overhead, names::MEMORY, mem);
        self
    }
    /// Adds an available offering.
    pub fn offer(mut self, zone: &str, ct: CapacityType, price: f64) -> Self {
        self.0.offerings.push(Offering {
            zone: zone.into(),
            zone_id: None,
            capacity_type: ct,
            price,
            available: true,
        });
        self
    }
    /// Adds on-demand offerings in each zone at `price`.
    pub fn on_demand(mut self, zones: &[&str], price: f64) -> Self {
        for z in zones {
            self = self.offer(z, CapacityType::OnDemand, price);
        }
        self
    }
    /// Gives every offering in `zone` (added so far) the zone ID `id`.
    pub fn zone_id(mut self, zone: &str, id: &str) -> Self {
        for o in self.0.offerings.iter_mut().filter(|o| o.zone == zone) {
            o.zone_id = Some(id.into());
        }
        self
    }
    /// Marks every offering in `zone` unavailable.
    pub fn unavailable_in(mut self, zone: &str) -> Self {
        for o in &mut self.0.offerings {
            if o.zone == zone {
                o.available = false;
            }
        }
        self
    }
    /// Finishes.
    pub fn build(self) -> InstanceType {
        self.0
    }
}

/// Starts a NodePool with weight 0, no taints and the given instance types.
pub fn pool(name: &str, types: Vec<InstanceType>) -> PoolBuilder {
    PoolBuilder(Pool {
        name: name.into(),
        weight: 0,
        labels: Labels::new(),
        taints: vec![],
        startup_taints: vec![],
        requirements: Requirements::new(),
        sharing: GpuSharing::default(),
        limits: Limits::default(),
        min_nodes: 0,
        min_values: Default::default(),
        disruption: DisruptionPolicy::default(),
        instance_types: Arc::new(types),
        atomic_nodes: None,
        dra_attributes: Default::default(),
        template_hash: None,
    })
}

/// Builder for [`Pool`].
#[derive(Clone, Debug)]
pub struct PoolBuilder(pub Pool);

impl PoolBuilder {
    /// Sets the weight.
    pub fn weight(mut self, w: i32) -> Self {
        self.0.weight = w;
        self
    }
    /// Adds a `key=value:NoSchedule` taint.
    pub fn taint(mut self, key: &str, value: &str) -> Self {
        self.0
            .taints
            .push(Taint::new(key, value, Effect::NoSchedule));
        self
    }
    /// Adds a startup taint.
    pub fn startup_taint(mut self, key: &str, value: &str) -> Self {
        self.0
            .startup_taints
            .push(Taint::new(key, value, Effect::NoSchedule));
        self
    }
    /// Adds a requirement.
    pub fn require(mut self, key: &str, op: Operator, values: &[&str]) -> Self {
        self.0.requirements = self.0.requirements.clone().with(key, op, values);
        self
    }
    /// Adds a node label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    /// Limits a resource (`"nvidia.com/gpu"`, `"64"`).
    pub fn limit(mut self, name: &str, q: &str) -> Self {
        let mut r = Resources::new();
        parse_into(&mut r, name, q);
        self.0.limits.resources.insert(name.into(), r.get(name));
        self
    }
    /// Limits node count.
    pub fn limit_nodes(mut self, n: i64) -> Self {
        self.0.limits.nodes = Some(n);
        self
    }
    /// Limits physical GPUs of one model.
    pub fn limit_model(mut self, model: &str, n: i64) -> Self {
        self.0.limits.gpus_by_model.insert(model.into(), n);
        self
    }
    /// An attribute every NVIDIA DRA device of the pool's nodes gets.
    pub fn dra_attribute(mut self, name: &str, value: crate::dra::AttributeValue) -> Self {
        self.0.dra_attributes.insert(name.into(), value);
        self
    }
    /// GPU sharing.
    pub fn sharing(mut self, s: GpuSharing) -> Self {
        self.0.sharing = s;
        self
    }
    /// Requires `n` distinct values of `key` among a new claim's instance types (`minValues`).
    pub fn min_values(mut self, key: &str, n: u32) -> Self {
        self.0.min_values.insert(key.into(), n);
        self
    }
    /// Sets minNodes.
    pub fn min_nodes(mut self, n: u32) -> Self {
        self.0.min_nodes = n;
        self
    }
    /// Makes the pool atomic: no node or exactly `n` (`atomicScaleUp.nodes`).
    pub fn atomic(mut self, n: u32) -> Self {
        self.0.atomic_nodes = Some(n);
        self
    }
    /// Sets the hash of the pool's template now ([`Pool::template_hash`]).
    pub fn template_hash(mut self, h: &str) -> Self {
        self.0.template_hash = Some(h.into());
        self
    }
    /// Sets the disruption policy.
    pub fn disruption(mut self, d: DisruptionPolicy) -> Self {
        self.0.disruption = d;
        self
    }
    /// Finishes.
    pub fn build(self) -> Pool {
        self.0
    }
}

/// Starts a node in zone `zone` with the labels of `it`, `allocatable = it.allocatable()`,
/// initialized, owned by no pool.
pub fn node(name: &str, it: &InstanceType, zone: &str) -> NodeBuilder {
    let mut l = it.labels.clone();
    l.insert(labels::HOSTNAME.into(), name.into());
    l.insert(labels::ZONE.into(), zone.into());
    let price = it
        .offerings
        .iter()
        .filter(|o| o.zone == zone)
        .map(|o| o.price)
        .fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.min(p))));
    NodeBuilder(Node {
        name: name.into(),
        labels: l,
        annotations: BTreeMap::new(),
        taints: vec![],
        allocatable: it.allocatable(),
        pods: vec![],
        unschedulable: false,
        deleting: false,
        pool: None,
        instance_type: Some(it.name.clone()),
        price,
        created_at: 0,
        last_pod_event: None,
        initialized: true,
        ready: true,
        claim: None,
        volume_limits: BTreeMap::new(),
    })
}

/// Builder for [`Node`].
#[derive(Clone, Debug)]
pub struct NodeBuilder(pub Node);

impl NodeBuilder {
    /// Binds a pod.
    pub fn with_pod(mut self, p: impl Into<Pod>) -> Self {
        self.0.pods.push(p.into());
        self
    }
    /// Sets the owning pool (and its label).
    pub fn pool(mut self, p: &str) -> Self {
        self.0.pool = Some(p.into());
        self.0.labels.insert(labels::NODEPOOL.into(), p.into());
        self
    }
    /// Adds a taint.
    pub fn taint(mut self, t: Taint) -> Self {
        self.0.taints.push(t);
        self
    }
    /// Lets CSI driver `driver` attach at most `n` volumes here (the node's CSINode).
    pub fn volume_limit(mut self, driver: &str, n: u32) -> Self {
        self.0.volume_limits.insert(driver.into(), n);
        self
    }
    /// Cordons the node.
    pub fn cordoned(mut self) -> Self {
        self.0.unschedulable = true;
        self
    }
    /// Marks the node as being deleted.
    pub fn deleting(mut self) -> Self {
        self.0.deleting = true;
        self
    }
    /// Sets creation time.
    pub fn created(mut self, t: i64) -> Self {
        self.0.created_at = t;
        self
    }
    /// Sets when a pod was last bound to or removed from the node.
    pub fn pod_event(mut self, t: i64) -> Self {
        self.0.last_pod_event = Some(t);
        self
    }
    /// Adds an annotation.
    pub fn annotate(mut self, k: &str, v: &str) -> Self {
        self.0.annotations.insert(k.into(), v.into());
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    /// Records the NodePool template hash `h` its NodeClaim was launched with (the two
    /// annotations the controller copies from the NodeClaim, of the current version).
    pub fn launched_with(self, h: &str) -> Self {
        self.annotate(crate::keys::NODEPOOL_HASH_ANNOTATION, h)
            .annotate(
                crate::keys::NODEPOOL_HASH_VERSION_ANNOTATION,
                crate::keys::NODEPOOL_HASH_VERSION,
            )
    }
    /// Sets initialization.
    pub fn initialized(mut self, i: bool) -> Self {
        self.0.initialized = i;
        self
    }
    /// Marks the node not ready (its `Ready` condition not `True`).
    pub fn unready(mut self) -> Self {
        self.0.ready = false;
        self
    }
    /// Finishes.
    pub fn build(self) -> Node {
        self.0
    }
}

/// A DaemonSet running everywhere it tolerates, requesting `cpu` and `mem`.
pub fn daemonset(name: &str, cpu: &str, mem: &str, tolerations: Vec<Toleration>) -> DaemonSet {
    let mut r = Resources::new().with(names::PODS, 1);
    parse_into(&mut r, names::CPU, cpu);
    parse_into(&mut r, names::MEMORY, mem);
    DaemonSet {
        name: name.into(),
        requests: r,
        node_selector: NodeSelector::default(),
        tolerations,
        host_ports: vec![],
    }
}

/// Starts a cluster-wide limit named `name` (`"cluster limit"`, `"CapacityQuota gpu"`) on
/// every node, bounding nothing yet.
pub fn cluster_limit(name: &str) -> LimitBuilder {
    LimitBuilder(ClusterLimit {
        name: name.into(),
        ..ClusterLimit::default()
    })
}

/// Builder for [`ClusterLimit`].
#[derive(Clone, Debug)]
pub struct LimitBuilder(pub ClusterLimit);

impl LimitBuilder {
    /// Counts only nodes whose labels meet this requirement.
    pub fn select(mut self, key: &str, op: Operator, values: &[&str]) -> Self {
        self.0.selector = self.0.selector.clone().with(key, op, values);
        self
    }
    /// At most `n` nodes.
    pub fn max_nodes(mut self, n: i64) -> Self {
        self.0.max.nodes = Some(n);
        self
    }
    /// At most `q` of resource `name` (`"cpu"`, `"64"`).
    pub fn max(mut self, name: &str, q: &str) -> Self {
        let mut r = Resources::new();
        parse_into(&mut r, name, q);
        self.0.max.resources.insert(name.into(), r.get(name));
        self
    }
    /// At least `q` of resource `name` kept by disruption.
    pub fn min(mut self, name: &str, q: &str) -> Self {
        let mut r = Resources::new();
        parse_into(&mut r, name, q);
        self.0.min.resources.insert(name.into(), r.get(name));
        self
    }
    /// At most `n` physical GPUs of `model`.
    pub fn max_gpus(mut self, model: &str, n: i64) -> Self {
        self.0.max.gpus_by_model.insert(model.into(), n);
        self
    }
    /// Finishes.
    pub fn build(self) -> ClusterLimit {
        self.0
    }
}

/// The capacity types `spot` and `on-demand`, for offering loops.
pub const BOTH: [CapacityType; 2] = [CapacityType::Spot, CapacityType::OnDemand];
