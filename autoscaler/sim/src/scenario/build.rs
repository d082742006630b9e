//! Building the typed scenario from the file's shape: cluster timings, DaemonSets, the
//! compact NodePool form, arrivals, runtimes, workloads and pod templates, each checked with
//! an error naming the file, line and field.

use std::collections::BTreeSet;

use autoscaler_core::disruption::{DO_NOT_DISRUPT, SAFE_TO_EVICT};
use autoscaler_core::model::{
    Budget, BudgetValue, ClusterLimit, ConsolidationPolicy, DaemonSet, DisruptionPolicy, GpuShare,
    GpuSharing, Limits, MigSharing, MigStrategy, Pod, PodAffinityTerm, PodKey, PodShape, Pool,
    TimeSlicing, TopologySpread,
};
use autoscaler_core::quota;
use autoscaler_core::requirements::{Labels, NodeSelector, Operator, Requirements};
use autoscaler_core::resources::{Resources, is_gpu_class, names};
use autoscaler_core::taints::{Effect, Taint, Toleration};
use autoscaler_core::{CapacityType, InstanceType, labels};
use providers::OfferingKey;

use super::{
    Arrivals, ArrivalsFile, ClusterConfig, ClusterFile, Ctx, DEFAULT_ADMISSION_DELAY_S,
    DEFAULT_BOOKING_S, DaemonSetFile, DurationFile, ExistingNode, ExistingNodeFile, Generator,
    PodFile, PoolFile, ProvReqClass, ProvReqFile, ProvReqSpec, Runtime, TaintFile, WorkloadFile,
    WorkloadSpec, type_in_pool,
};
use crate::error::SimError;

mod pool;
pub(super) use pool::build_pool;

/// The cluster-wide limits of a scenario: the totals (`maxNodesTotal`, `coresTotal`,
/// `memoryTotal`, `gpuTotal`, as the `run` flags) and each of `capacityQuotas`.
fn build_cluster_limits(cx: &Ctx, f: &ClusterFile) -> Result<Vec<ClusterLimit>, SimError> {
    let range = |key: &str, v: &Option<String>| {
        v.as_deref()
            .map(quota::parse_min_max)
            .transpose()
            .map_err(|why| cx.err(&[&format!("{key}:")], format!("cluster.{key}"), why))
    };
    let mut gpus = Vec::new();
    for (i, g) in f.gpu_total.iter().enumerate() {
        gpus.push(
            quota::parse_gpu_total(g)
                .map_err(|why| cx.err(&["gpuTotal:"], format!("cluster.gpuTotal[{i}]"), why))?,
        );
    }
    let totals = quota::Totals {
        max_nodes: f.max_nodes_total,
        cores: range("coresTotal", &f.cores_total)?,
        memory_gib: range("memoryTotal", &f.memory_total)?,
        gpus,
    };
    let mut out: Vec<ClusterLimit> = totals.to_limit().into_iter().collect();
    for (i, q) in f.capacity_quotas.iter().enumerate() {
        let err = |field: &str, why: String| {
            cx.err(
                &["capacityQuotas:", &format!("name: {}", q.name)],
                format!("cluster.capacityQuotas[{i}].{field}"),
                why,
            )
        };
        let mut l = ClusterLimit {
            name: format!("CapacityQuota {}", q.name),
            ..Default::default()
        };
        for (k, v) in &q.match_labels {
            l.selector = l.selector.clone().with(k, Operator::In, &[v.as_str()]);
        }
        for (k, v) in &q.limits {
            if k == "nodes" {
                l.max.nodes = Some((v.0.millis() / 1000) as i64);
                continue;
            }
            let mut r = Resources::new();
            r.add_quantity(k, v.0)
                .map_err(|e| err(&format!("limits[{k:?}]"), e.to_string()))?;
            l.max.resources.insert(k.clone(), r.get(k));
        }
        if l.max.is_empty() {
            return Err(err("limits", "no limit set".into()));
        }
        out.push(l);
    }
    Ok(out)
}

pub(super) fn build_cluster(
    cx: &Ctx,
    f: &ClusterFile,
    catalog: &[InstanceType],
) -> Result<ClusterConfig, SimError> {
    let mut c = ClusterConfig {
        cluster_limits: build_cluster_limits(cx, f)?,
        ..ClusterConfig::default()
    };
    if let Some(l) = &f.launch {
        if let Some(d) = l.cpu {
            c.launch_cpu_s = d.0;
        }
        if let Some(d) = l.gpu {
            c.launch_gpu_s = d.0;
        }
        for (k, v) in &l.families {
            c.launch_family_s.insert(k.clone(), v.0);
        }
        if let Some(j) = l.jitter {
            if !(0.0..1.0).contains(&j) {
                return Err(cx.err(&["jitter:"], "cluster.launch.jitter", "must be in [0, 1)"));
            }
            c.launch_jitter = j;
        }
    }
    if let Some(d) = f.registration {
        c.registration_s = d.0;
    }
    if let Some(d) = f.device_plugin_delay {
        c.device_plugin_s = d.0;
    }
    if let Some(ice) = &f.insufficient_capacity {
        if !(0.0..=1.0).contains(&ice.probability) {
            return Err(cx.err(
                &["insufficientCapacity:", "probability:"],
                "cluster.insufficientCapacity.probability",
                "must be in [0, 1]",
            ));
        }
        c.ice_probability = ice.probability;
        for (i, o) in ice.offerings.iter().enumerate() {
            let Some(it) = catalog.iter().find(|t| t.name == o.instance_type) else {
                return Err(cx.err(
                    &["insufficientCapacity:", &o.instance_type],
                    format!("cluster.insufficientCapacity.offerings[{i}].instanceType"),
                    format!("unknown instance type {:?}", o.instance_type),
                ));
            };
            for off in &it.offerings {
                if o.zone.as_ref().is_none_or(|z| *z == off.zone)
                    && o.capacity_type.is_none_or(|ct| ct == off.capacity_type)
                {
                    c.ice_offerings
                        .push(OfferingKey::new(&it.name, &off.zone, off.capacity_type));
                }
            }
        }
    }
    if let Some(r) = f.spot_interruptions_per_hour {
        // Written so that NaN fails too.
        if !(r >= 0.0 && r.is_finite()) {
            return Err(cx.err(
                &["spotInterruptionsPerHour:"],
                "cluster.spotInterruptionsPerHour",
                format!("{r} is not a finite rate of at least 0"),
            ));
        }
        c.spot_interruptions_per_hour = r;
    }
    if let Some(s) = f.scheduler_score {
        c.score = s;
    }
    if let Some(d) = f.batch_idle {
        c.cadence.batch_idle_s = d.0.max(1);
    }
    if let Some(d) = f.batch_max {
        c.cadence.batch_max_s = d.0.max(1);
    }
    if let Some(d) = f.disruption_interval {
        c.cadence.disruption_interval_s = d.0.max(1);
    }
    if let Some(d) = f.validation_delay {
        c.disruption.validation_delay_s = d.0;
    }
    if let Some(d) = f.scale_down_delay_after_add {
        c.disruption.delay_after_scale_up_s = d.0;
        c.ca_delay_after_add_s = d.0;
    }
    if let Some(d) = f.scale_down_delay_after_delete {
        c.disruption.delay_after_delete_s = d.0;
    }
    if let Some(d) = f.scale_down_delay_after_failure {
        c.disruption.delay_after_failure_s = d.0;
    }
    if let Some(b) = f.ignore_daemonsets_utilization {
        c.disruption.ignore_daemonset_utilization = b;
    }
    if let Some(b) = f.ignore_mirror_pods_utilization {
        c.disruption.ignore_mirror_utilization = b;
    }
    if let Some(b) = f.node_overlays {
        c.node_overlays = b;
    }
    if let Some(b) = f.enforce_node_group_min_size {
        c.enforce_min_nodes = b;
    }
    Ok(c)
}

pub(super) fn build_daemonset(f: &DaemonSetFile) -> DaemonSet {
    let mut r = Resources::new().with(names::PODS, 1);
    if let Some(q) = f.cpu {
        let _ = r.add_quantity(names::CPU, q.0);
    }
    if let Some(q) = f.memory {
        let _ = r.add_quantity(names::MEMORY, q.0);
    }
    DaemonSet {
        name: f.name.clone(),
        requests: r,
        node_selector: NodeSelector::new(&f.node_selector, vec![]),
        tolerations: if f.tolerate_all {
            vec![Toleration::exists("")]
        } else {
            vec![]
        },
        host_ports: vec![],
    }
}

pub(super) fn parse_taint(t: &TaintFile) -> Result<Taint, String> {
    let effect = Effect::parse(&t.effect).map_err(|e| e.to_string())?;
    Ok(Taint::new(&t.key, &t.value, effect))
}

pub(super) fn build_arrivals(
    cx: &Ctx,
    wname: &str,
    field: &str,
    a: &ArrivalsFile,
) -> Result<Arrivals, SimError> {
    let err = |why: &str| {
        cx.err(
            &["workloads:", &format!("name: {wname}"), "arrivals:"],
            field,
            why,
        )
    };
    let start = a.start.map_or(0, |d| d.0);
    let end = a.end.map_or(i64::MAX, |d| d.0);
    let set = [a.per_hour.is_some(), a.every.is_some(), !a.at.is_empty()]
        .iter()
        .filter(|b| **b)
        .count();
    if set != 1 {
        return Err(err("give exactly one of perHour, every or at"));
    }
    // An empty window generates no pod at all, silently.
    if end <= start {
        return Err(err(&format!("end ({end}s) must be after start ({start}s)")));
    }
    if let Some(r) = a.per_hour {
        if !(r > 0.0 && r.is_finite()) {
            return Err(err(&format!("perHour {r} is not a finite positive rate")));
        }
        return Ok(Arrivals::Poisson {
            per_hour: r,
            start,
            end,
        });
    }
    if let Some(e) = a.every {
        if e.0 <= 0 {
            return Err(err("every must be positive"));
        }
        return Ok(Arrivals::Every {
            every: e.0,
            start,
            end,
        });
    }
    Ok(Arrivals::At(a.at.iter().map(|d| d.0).collect()))
}

pub(super) fn build_runtime(
    cx: &Ctx,
    wname: &str,
    field: &str,
    d: &DurationFile,
) -> Result<Runtime, SimError> {
    let err = |why: &str| {
        cx.err(
            &["workloads:", &format!("name: {wname}"), "duration:"],
            field,
            why,
        )
    };
    let r = match (d.fixed, d.min, d.max, d.mean) {
        (Some(f), None, None, None) => Runtime::Fixed(f.0),
        (None, Some(lo), Some(hi), None) if lo.0 <= hi.0 => Runtime::Uniform(lo.0, hi.0),
        (None, Some(_), Some(_), None) => return Err(err("min must not exceed max")),
        (None, None, None, Some(m)) => Runtime::Exponential(m.0),
        _ => return Err(err("give fixed, min and max, or mean")),
    };
    let positive = match r {
        Runtime::Fixed(v) | Runtime::Exponential(v) => v > 0,
        Runtime::Uniform(_, hi) => hi > 0,
    };
    if !positive {
        return Err(err("a runtime must be positive"));
    }
    Ok(r)
}

pub(super) fn build_workload(
    cx: &Ctx,
    i: usize,
    w: &WorkloadFile,
    pools: &[Pool],
) -> Result<WorkloadSpec, SimError> {
    let (name, kind, pod, owner) = match w {
        WorkloadFile::Deployment(d) => (&d.name, "deployment", &d.pod, "ReplicaSet"),
        WorkloadFile::Jobs(j) => (&j.name, "jobs", &j.pod, "Job"),
        WorkloadFile::Gangs(g) => (&g.name, "gangs", &g.pod, "Job"),
        WorkloadFile::ProvisioningRequests(r) => (&r.name, "provisioningRequests", &r.pod, "Job"),
    };
    let base = format!("workloads[{i}].{kind}");
    let template = build_pod(cx, name, &format!("{base}.pod"), pod, owner, pools)?;
    let generator = match w {
        WorkloadFile::Deployment(d) => {
            let mut steps: Vec<(i64, u32)> = d.replicas.iter().map(|s| (s.at.0, s.count)).collect();
            if steps.is_empty() {
                return Err(cx.err(
                    &["workloads:", &format!("name: {name}")],
                    format!("{base}.replicas"),
                    "needs at least one step",
                ));
            }
            steps.sort_by_key(|s| s.0);
            Generator::Deployment {
                steps,
                max_unavailable: d.max_unavailable,
            }
        }
        WorkloadFile::Jobs(j) => Generator::Jobs {
            arrivals: build_arrivals(cx, name, &format!("{base}.arrivals"), &j.arrivals)?,
            runtime: build_runtime(cx, name, &format!("{base}.duration"), &j.duration)?,
            limit: j.limit,
        },
        WorkloadFile::Gangs(g) => Generator::Groups {
            size: check_size(cx, name, &base, g.size)?,
            arrivals: build_arrivals(cx, name, &format!("{base}.arrivals"), &g.arrivals)?,
            runtime: build_runtime(cx, name, &format!("{base}.duration"), &g.duration)?,
            limit: g.limit,
            provisioning_request: None,
        },
        WorkloadFile::ProvisioningRequests(r) => Generator::Groups {
            size: check_request_size(cx, name, &base, r.size)?,
            arrivals: build_arrivals(cx, name, &format!("{base}.arrivals"), &r.arrivals)?,
            runtime: build_runtime(cx, name, &format!("{base}.duration"), &r.duration)?,
            limit: r.limit,
            provisioning_request: Some(build_provreq(cx, name, &base, r)?),
        },
    };
    Ok(WorkloadSpec {
        name: name.clone(),
        template,
        generator,
    })
}

pub(super) fn check_size(cx: &Ctx, name: &str, base: &str, size: u32) -> Result<u32, SimError> {
    if size == 0 {
        return Err(cx.err(
            &["workloads:", &format!("name: {name}"), "size:"],
            format!("{base}.size"),
            "must be at least 1",
        ));
    }
    Ok(size)
}

/// A request's size: as any group's, and no more pods than the controller accepts in one
/// request by default, for a scenario measures what the controller would do.
fn check_request_size(cx: &Ctx, name: &str, base: &str, size: u32) -> Result<u32, SimError> {
    let max = autoscaler_core::provreq::MAX_PODS;
    if u64::from(size) > max {
        return Err(cx.err(
            &["workloads:", &format!("name: {name}"), "size:"],
            format!("{base}.size"),
            format!(
                "{size} pods in one request; the controller refuses a request of more than {max} \
                 pods (--provreq-max-pods): split it into several requests"
            ),
        ));
    }
    check_size(cx, name, base, size)
}

pub(super) fn build_provreq(
    cx: &Ctx,
    name: &str,
    base: &str,
    r: &ProvReqFile,
) -> Result<ProvReqSpec, SimError> {
    let err = |key: &str, field: &str, why: String| {
        cx.err(
            &["workloads:", &format!("name: {name}"), key],
            format!("{base}.{field}"),
            why,
        )
    };
    let class = match &r.class {
        None => ProvReqClass::BestEffortAtomic,
        Some(c) => ProvReqClass::parse(c).ok_or_else(|| {
            err(
                "class:",
                "class",
                format!(
                    "unknown provisioning class {c:?} (known: best-effort-atomic, check-capacity)"
                ),
            )
        })?,
    };
    let booking_s = r.booking_duration.map_or(DEFAULT_BOOKING_S, |d| d.0);
    if booking_s <= 0 {
        return Err(err(
            "bookingDuration:",
            "bookingDuration",
            "must be positive (capacity booked for no time could never be consumed)".into(),
        ));
    }
    Ok(ProvReqSpec {
        class,
        booking_s,
        admission_delay_s: r.admission_delay.map_or(DEFAULT_ADMISSION_DELAY_S, |d| d.0),
    })
}

pub(super) fn build_pod(
    cx: &Ctx,
    wname: &str,
    base: &str,
    f: &PodFile,
    owner: &str,
    pools: &[Pool],
) -> Result<Pod, SimError> {
    let err = |field: &str, key: &str, why: String| {
        cx.err(
            &["workloads:", &format!("name: {wname}"), key],
            format!("{base}.{field}"),
            why,
        )
    };
    let mut requests = Resources::new().with(names::PODS, 1);
    if let Some(q) = f.cpu {
        requests
            .add_quantity(names::CPU, q.0)
            .map_err(|e| err("cpu", "cpu:", e.to_string()))?;
    }
    if let Some(q) = f.memory {
        requests
            .add_quantity(names::MEMORY, q.0)
            .map_err(|e| err("memory", "memory:", e.to_string()))?;
    }
    if let Some(n) = f.gpus {
        requests.set(names::NVIDIA_GPU, i64::from(n));
    }
    for (k, q) in &f.resources {
        requests
            .add_quantity(k, q.0)
            .map_err(|e| err(&format!("resources[{k:?}]"), k, e.to_string()))?;
    }
    let gpu_share = match f.gpu_share {
        None => None,
        Some(m) if (1..=1000).contains(&m) => Some(GpuShare {
            resource: names::NVIDIA_GPU.into(),
            milli: m,
        }),
        Some(m) => {
            return Err(err(
                "gpuShare",
                "gpuShare:",
                format!("{m} is outside 1..=1000 (thousandths of one GPU)"),
            ));
        }
    };
    let app = wname.to_string();
    let mut pod_labels: Labels = f.labels.clone().into_iter().collect();
    pod_labels.insert("app".into(), app.clone());
    let mut annotations: Labels = f.annotations.clone().into_iter().collect();
    if f.do_not_disrupt {
        annotations.insert(DO_NOT_DISRUPT.into(), "true".into());
    }
    if let Some(s) = f.safe_to_evict {
        annotations.insert(SAFE_TO_EVICT.into(), s.to_string());
    }
    let mut selector: Labels = f.node_selector.clone().into_iter().collect();
    let mut pinned: Option<&Pool> = None;
    if let Some(np) = &f.node_pool {
        let Some(p) = pools.iter().find(|p| &p.name == np) else {
            let known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            return Err(err(
                "nodePool",
                "nodePool:",
                format!("unknown NodePool {np:?} (defined: {})", known.join(", ")),
            ));
        };
        pinned = Some(p);
        selector.insert(labels::NODEPOOL.into(), np.clone());
    }
    let mut terms = vec![];
    if !f.gpu_models.is_empty() {
        let models: Vec<String> = f.gpu_models.iter().map(|m| m.to_lowercase()).collect();
        // A model the catalog does not have is a typo that would leave the pods pending all
        // run when it is the only one, and quietly narrow the choice when it is not.
        let known: BTreeSet<&str> = pools
            .iter()
            .flat_map(|p| p.instance_types.iter())
            .filter_map(|it| it.labels.get(labels::GPU_NAME).map(String::as_str))
            .collect();
        if let Some(m) = models.iter().find(|m| !known.contains(m.as_str())) {
            return Err(err(
                "gpuModels",
                "gpuModels:",
                format!(
                    "unknown GPU model {m:?} (the catalog has: {})",
                    known.iter().copied().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let mut r = Requirements::new();
        r.add(labels::GPU_NAME, Operator::In, &models)
            .map_err(|e| err("gpuModels", "gpuModels:", e.to_string()))?;
        terms.push(r);
    }
    let node_selector = NodeSelector::new(&selector, terms);
    let mut tolerations = Vec::new();
    for t in &f.tolerations {
        tolerations.push(
            Toleration::parse(&t.key, &t.operator, &t.value, &t.effect)
                .map_err(|e| err("tolerations", "tolerations:", e.to_string()))?,
        );
    }
    // The ExtendedResourceToleration admission plugin adds a toleration for every extended
    // resource requested; GPU pools taint with `nvidia.com/gpu`, which MIG and time-sliced
    // requests need too.
    let mut gpu_names: Vec<String> = requests
        .extended
        .keys()
        .filter(|k| is_gpu_class(k))
        .cloned()
        .collect();
    if gpu_share.is_some() {
        gpu_names.push(names::NVIDIA_GPU.into());
    }
    if gpu_names.iter().any(|k| k.starts_with("nvidia.com/")) {
        gpu_names.push(names::NVIDIA_GPU.into());
    }
    gpu_names.sort();
    gpu_names.dedup();
    for k in gpu_names {
        if !tolerations.iter().any(|t| t.key == k) {
            tolerations.push(Toleration::exists(&k));
        }
    }
    // Every extended resource must be offered by some instance type of some NodePool the pod
    // may use; otherwise it is a typo that would leave the pods pending all run.
    for (k, _) in requests.extended.iter() {
        let offered = pools
            .iter()
            .filter(|p| pinned.is_none_or(|q| q.name == p.name))
            .any(|p| {
                p.instance_types
                    .iter()
                    .filter_map(|it| type_in_pool(it, p))
                    .any(|it| it.capacity.get(k) > 0)
            });
        if !offered {
            return Err(err(
                &format!("resources[{k:?}]"),
                k.rsplit('/').next().unwrap_or(k),
                format!(
                    "unknown resource {k:?}: no instance type of {} offers it",
                    pinned.map_or("any NodePool".to_string(), |p| format!(
                        "NodePool {}",
                        p.name
                    ))
                ),
            ));
        }
    }
    let sel = Requirements::new().with("app", Operator::In, &[&app]);
    let mut spread = Vec::with_capacity(f.spread.len());
    for (i, s) in f.spread.iter().enumerate() {
        // As the API server: a skew of 0 could never be met once a domain had a pod.
        if s.max_skew == 0 {
            return Err(err(
                &format!("spread[{i}].maxSkew"),
                "maxSkew:",
                "must be at least 1".into(),
            ));
        }
        let hard = match s.when_unsatisfiable.as_deref() {
            None | Some("DoNotSchedule") => true,
            Some("ScheduleAnyway") => false,
            Some(other) => {
                return Err(err(
                    &format!("spread[{i}].whenUnsatisfiable"),
                    "whenUnsatisfiable:",
                    format!("must be DoNotSchedule or ScheduleAnyway, not {other:?}"),
                ));
            }
        };
        spread.push(TopologySpread {
            max_skew: s.max_skew,
            topology_key: s.topology_key.clone(),
            selector: sel.clone(),
            hard,
            min_domains: s.min_domains,
            honor_taints: false,
            ignore_node_affinity: false,
        });
    }
    let term = |k: &String| PodAffinityTerm {
        held: false,
        topology_key: k.clone(),
        selector: sel.clone(),
        namespaces: Default::default(),
    };
    let key = PodKey {
        namespace: f.namespace.clone().unwrap_or_else(|| "default".into()),
        name: wname.to_string(),
    };
    Ok(Pod::with_shape(
        key,
        PodShape {
            requests,
            gpu_share,
            labels: pod_labels,
            annotations,
            node_selector,
            preferred: vec![],
            strict_node_selector: None,
            tolerations,
            spread,
            anti_affinity: f.anti_affinity.iter().map(term).collect(),
            affinity: f.affinity.iter().map(term).collect(),
            preferred_affinity: f.preferred_affinity.iter().map(|k| (1, term(k))).collect(),
            preferred_anti_affinity: f
                .preferred_anti_affinity
                .iter()
                .map(|k| (1, term(k)))
                .collect(),
            priority: f.priority,
            group: None,
            owner_kind: Some(owner.to_string()),
            local_storage: f.local_storage,
            mirror: false,
            host_ports: vec![],
            started_at: None,
            claims: vec![],
        },
    ))
}

/// An `existingNodes` entry: the node as its pool (or, without one, its instance type) makes
/// it, initialized, in the given or cheapest allowed offering, with its pods bound.
pub(super) fn build_existing_node(
    cx: &Ctx,
    i: usize,
    f: &ExistingNodeFile,
    catalog: &[InstanceType],
    pools: &[Pool],
) -> Result<ExistingNode, SimError> {
    let base = format!("existingNodes[{i}]");
    let err = |field: &str, key: &str, why: String| {
        cx.err(
            &["existingNodes:", &format!("name: {}", f.name), key],
            format!("{base}.{field}"),
            why,
        )
    };
    let Some(it) = catalog.iter().find(|t| t.name == f.instance_type) else {
        return Err(err(
            "instanceType",
            "instanceType:",
            format!(
                "node {}: instance type {:?} is not in the scenario's catalog",
                f.name, f.instance_type
            ),
        ));
    };
    let (shaped, pool, taints) = match &f.node_pool {
        None => (it.clone(), None, Vec::new()),
        Some(np) => {
            let Some(pool) = pools.iter().find(|p| &p.name == np) else {
                let known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
                return Err(err(
                    "nodePool",
                    "nodePool:",
                    format!("unknown NodePool {np:?} (defined: {})", known.join(", ")),
                ));
            };
            let Some(shaped) = type_in_pool(it, pool) else {
                return Err(err(
                    "instanceType",
                    "instanceType:",
                    format!(
                        "NodePool {np}'s requirements do not allow instance type {}",
                        f.instance_type
                    ),
                ));
            };
            (shaped, Some(np.clone()), pool.taints.clone())
        }
    };
    let capacity_type = f.capacity_type.unwrap_or(CapacityType::OnDemand);
    let offering = shaped
        .offerings
        .iter()
        .filter(|o| o.capacity_type == capacity_type)
        .filter(|o| f.zone.as_ref().is_none_or(|z| &o.zone == z))
        .min_by(|a, b| {
            a.price
                .total_cmp(&b.price)
                .then_with(|| a.zone.cmp(&b.zone))
        });
    let Some(offering) = offering else {
        return Err(err(
            "zone",
            "name:",
            format!(
                "instance type {} has no {} offering{}",
                f.instance_type,
                capacity_type.as_str(),
                f.zone
                    .as_ref()
                    .map_or(String::new(), |z| format!(" in zone {z}"))
            ),
        ));
    };
    let mut node_labels = shaped.labels.clone();
    node_labels.insert(labels::HOSTNAME.into(), f.name.clone());
    node_labels.insert(labels::ZONE.into(), offering.zone.clone());
    node_labels.insert(labels::CAPACITY_TYPE.into(), capacity_type.as_str().into());
    for (k, v) in &f.labels {
        node_labels.insert(k.clone(), v.clone());
    }
    let mut node_taints = taints;
    for (j, t) in f.taints.iter().enumerate() {
        node_taints.push(parse_taint(t).map_err(|e| err(&format!("taints[{j}]"), "taints:", e))?);
    }
    let mut pods = Vec::new();
    for (j, pf) in f.pods.iter().enumerate() {
        let field = format!("{base}.pods[{j}]");
        let mut pod = build_pod(
            cx,
            &pf.name,
            &format!("{field}.pod"),
            &pf.pod,
            "ReplicaSet",
            pools,
        )?;
        // Running since the start: a do-not-disrupt duration counts from there.
        if pod.annotations.contains_key(DO_NOT_DISRUPT) {
            pod.started_at = Some(0);
        }
        let delete_at = pf.delete_at.map(|d| d.0);
        match pf.count {
            None => pods.push((pod, delete_at)),
            Some(n) => {
                for k in 0..n {
                    let mut p = pod.clone();
                    p.key.name = format!("{}-{k}", pf.name);
                    pods.push((p, delete_at));
                }
            }
        }
    }
    Ok(ExistingNode {
        name: f.name.clone(),
        pool,
        instance_type: f.instance_type.clone(),
        zone: offering.zone.clone(),
        capacity_type,
        price: offering.price,
        gpus: shaped.gpu_count(),
        labels: node_labels,
        taints: node_taints,
        allocatable: shaped.allocatable(),
        unschedulable: f.unschedulable,
        node_pods: Vec::new(),
        pods,
    })
}
