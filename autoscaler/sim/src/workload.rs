//! Workloads as the engine replays them: every pod with its arrival, runtime and deletion,
//! generated once from a scenario's generators (or a trace) with a seeded generator, so that
//! every policy of a run sees exactly the same pods at the same times.

use autoscaler_core::model::{Pod, PodKey};
use autoscaler_core::requirements::{Operator, Requirements};

use crate::error::SimError;
use crate::rng::Rng;
use crate::scenario::{
    Arrivals, ExistingNode, Generator, PdbRule, ProvReqSpec, ReplayPod, Runtime, Scenario,
};

/// One pod of the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct PodSpec {
    /// Index of its template in [`Workload::templates`].
    pub template: u32,
    /// Pod name (unique in the run).
    pub name: String,
    /// When it is created.
    pub arrival: i64,
    /// How long it runs once bound (its group's runtime for gang members); `None` runs until
    /// deleted.
    pub runtime: Option<i64>,
    /// When its controller deletes it (deployment scale-down), if ever.
    pub delete_at: Option<i64>,
    /// Index into [`Workload::groups`] for gang and ProvisioningRequest members (only a
    /// gang's members carry the group's name in [`Pod::group`]).
    pub group: Option<u32>,
    /// Index into [`Workload::existing_nodes`] of the node it is bound to at the start
    /// (its arrival is then 0).
    pub start_on: Option<u32>,
}

/// A gang (bound all or nothing) or a ProvisioningRequest's pods.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupSpec {
    /// Group name (a gang's pods carry it in [`Pod::group`]).
    pub name: String,
    /// Member pod indices.
    pub members: Vec<u32>,
    /// For a ProvisioningRequest: its class and timings. Its members' `arrival` is then the
    /// request's creation; the engine creates the pods only once the request is admitted
    /// (Provisioned, then the admission delay), or at creation under a policy without
    /// ProvisioningRequest support.
    pub provisioning_request: Option<ProvReqSpec>,
}

impl GroupSpec {
    /// Whether its members bind all or nothing (a gang). A ProvisioningRequest's pods do not:
    /// Kueue admits the workload once its request is Provisioned and the job's pods then
    /// reach kube-scheduler as ordinary pods, each bound where it fits as soon as it fits
    /// (and evicted alone); only the capacity was booked together.
    pub fn coscheduled(&self) -> bool {
        self.provisioning_request.is_none()
    }
}

/// A PodDisruptionBudget of a deployment: at most `max_unavailable` of its pods may be down.
#[derive(Clone, Debug, PartialEq)]
pub struct PdbSpec {
    /// Namespace.
    pub namespace: String,
    /// Name (the deployment's).
    pub name: String,
    /// Pods covered.
    pub selector: Requirements,
    /// Most pods that may be unavailable.
    pub max_unavailable: u32,
    /// Template indices of the pods it covers (their desired count is tracked per template).
    pub templates: Vec<u32>,
}

/// Everything the engine replays.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    /// Pod templates (name = workload name; pods get their own).
    pub templates: Vec<Pod>,
    /// Pods by arrival (ties by generation order).
    pub pods: Vec<PodSpec>,
    /// Groups.
    pub groups: Vec<GroupSpec>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<PdbSpec>,
    /// Nodes that exist at the start (the scenario's); their pods are in `pods` with
    /// [`PodSpec::start_on`].
    pub existing_nodes: Vec<ExistingNode>,
}

impl Workload {
    /// The pod `i` as the planner and scheduler see it.
    pub fn materialize(&self, i: usize) -> Pod {
        let spec = &self.pods[i];
        let mut p = self.templates[spec.template as usize].clone();
        p.key = PodKey {
            namespace: p.key.namespace.clone(),
            name: spec.name.clone(),
        };
        let group = spec
            .group
            .map(|g| &self.groups[g as usize])
            .filter(|g| g.coscheduled())
            .map(|g| g.name.clone());
        // Writing the same value would still copy the template's shared shape.
        if p.group != group {
            p.group = group;
        }
        p
    }

    /// Sum of requested GPUs over all pods (whole devices plus shares), for reports.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether there are no pods.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Sorts pods by arrival (stable) and renumbers group members accordingly.
    pub fn finish(&mut self) {
        let mut order: Vec<usize> = (0..self.pods.len()).collect();
        order.sort_by_key(|i| (self.pods[*i].arrival, *i));
        let mut new_index = vec![0u32; self.pods.len()];
        for (new, old) in order.iter().enumerate() {
            new_index[*old] = new as u32;
        }
        let pods = order.iter().map(|i| self.pods[*i].clone()).collect();
        self.pods = pods;
        for g in &mut self.groups {
            for m in &mut g.members {
                *m = new_index[*m as usize];
            }
        }
    }
}

/// Adds the pods of `nodes` (bound from the start) and the `replay` pods arriving before
/// `horizon` to `w`, each with a template of its own, and the budgets `pdbs` over the templates
/// they select. The one way existing nodes enter a workload, whether a scenario's
/// `existingNodes` or a cluster snapshot's first sample.
pub fn add_existing(
    w: &mut Workload,
    nodes: &[ExistingNode],
    replay: &[ReplayPod],
    pdbs: &[PdbRule],
    horizon: i64,
) {
    let first = w.templates.len();
    let base = w.existing_nodes.len();
    let push = |w: &mut Workload, pod: &Pod, arrival, delete_at, start_on| {
        let template = w.templates.len() as u32;
        w.templates.push(pod.clone());
        w.pods.push(PodSpec {
            template,
            name: pod.key.name.clone(),
            arrival,
            runtime: None,
            delete_at,
            group: None,
            start_on,
        });
    };
    for (i, n) in nodes.iter().enumerate() {
        for (pod, delete_at) in &n.pods {
            push(w, pod, 0, *delete_at, Some((base + i) as u32));
        }
    }
    for r in replay.iter().filter(|r| r.arrival < horizon) {
        push(w, &r.pod, r.arrival, r.delete_at, None);
    }
    for b in pdbs {
        let templates = (first..w.templates.len())
            .filter(|t| {
                let p = &w.templates[*t];
                p.key.namespace == b.namespace && b.selector.matches(&p.labels)
            })
            .map(|t| t as u32)
            .collect();
        w.pdbs.push(PdbSpec {
            namespace: b.namespace.clone(),
            name: b.name.clone(),
            selector: b.selector.clone(),
            max_unavailable: b.max_unavailable,
            templates,
        });
    }
    w.existing_nodes.extend(nodes.iter().cloned());
}

/// The most pods a generated or loaded workload may have unless told otherwise (`--max-pods`):
/// far above any scenario we run, low enough that the engine's memory stays in a few GiB.
pub const DEFAULT_MAX_PODS: usize = 5_000_000;

fn arrival_times(a: &Arrivals, horizon: i64, rng: &mut Rng, cap: usize) -> Vec<i64> {
    let mut out = Vec::new();
    match a {
        Arrivals::Poisson {
            per_hour,
            start,
            end,
        } => {
            let mean = 3600.0 / per_hour;
            let end = (*end).min(horizon);
            let mut t = *start as f64;
            loop {
                t += rng.exponential(mean);
                if t >= end as f64 || out.len() >= cap {
                    break;
                }
                out.push(t.floor() as i64);
            }
        }
        Arrivals::Every { every, start, end } => {
            let end = (*end).min(horizon);
            let mut t = *start;
            while t < end && out.len() < cap {
                out.push(t);
                // Scenario durations are at most ten years, but stop rather than wrap.
                let Some(next) = t.checked_add(*every) else {
                    break;
                };
                t = next;
            }
        }
        Arrivals::At(ts) => {
            out.extend(ts.iter().copied().filter(|t| *t < horizon).take(cap));
        }
    }
    out
}

fn draw_runtime(r: &Runtime, rng: &mut Rng) -> i64 {
    match r {
        Runtime::Fixed(v) => *v,
        Runtime::Uniform(lo, hi) => rng.uniform(*lo as f64, *hi as f64).round() as i64,
        Runtime::Exponential(m) => rng.exponential(*m as f64).round() as i64,
    }
    .max(1)
}

/// Generates the workload of `scenario` with `seed`, up to `horizon` seconds, with at most
/// `max_pods` pods in all.
///
/// # Errors
/// [`SimError::TooManyPods`] naming the first workload that would take the total past
/// `max_pods`; it is found before that workload's pods are built, so a generator asking for
/// billions costs nothing.
pub fn generate(
    scenario: &Scenario,
    seed: u64,
    horizon: i64,
    max_pods: usize,
) -> Result<Workload, SimError> {
    // Pods and groups are indexed by u32.
    let max_pods = max_pods.min(u32::MAX as usize);
    let mut w = Workload::default();
    add_existing(
        &mut w,
        &scenario.existing_nodes,
        &scenario.replay,
        &scenario.pdbs,
        horizon,
    );
    if w.pods.len() > max_pods {
        return Err(SimError::TooManyPods {
            path: scenario.path.clone(),
            workload: "existing nodes and replayed pods".into(),
            max: max_pods,
        });
    }
    for spec in &scenario.workloads {
        let too_many = || SimError::TooManyPods {
            path: scenario.path.clone(),
            workload: spec.name.clone(),
            max: max_pods,
        };
        let room = max_pods.saturating_sub(w.pods.len());
        let ti = w.templates.len() as u32;
        w.templates.push(spec.template.clone());
        // One stream per workload: adding a workload does not change the others' pods.
        let mut rng = Rng::derive(seed, &spec.name);
        match &spec.generator {
            Generator::Deployment {
                steps,
                max_unavailable,
            } => {
                let mut live: Vec<usize> = Vec::new();
                let mut n = 0usize;
                for (at, count) in steps {
                    if *at >= horizon {
                        break;
                    }
                    let count = usize::try_from(*count).unwrap_or(usize::MAX);
                    if count.saturating_sub(live.len()) > room.saturating_sub(n) {
                        return Err(too_many());
                    }
                    while live.len() < count {
                        live.push(w.pods.len());
                        w.pods.push(PodSpec {
                            template: ti,
                            name: format!("{}-{n}", spec.name),
                            arrival: *at,
                            runtime: None,
                            delete_at: None,
                            group: None,
                            start_on: None,
                        });
                        n += 1;
                    }
                    while live.len() > count {
                        let i = live.pop().expect("non-empty");
                        w.pods[i].delete_at = Some(*at);
                    }
                }
                if let Some(mu) = max_unavailable {
                    w.pdbs.push(PdbSpec {
                        namespace: spec.template.key.namespace.clone(),
                        name: spec.name.clone(),
                        selector: Requirements::new().with("app", Operator::In, &[&spec.name]),
                        max_unavailable: *mu,
                        templates: vec![ti],
                    });
                }
            }
            Generator::Jobs {
                arrivals,
                runtime,
                limit,
            } => {
                let cap = limit
                    .map_or(usize::MAX, |l| l as usize)
                    .min(room.saturating_add(1));
                let times = arrival_times(arrivals, horizon, &mut rng, cap);
                if times.len() > room {
                    return Err(too_many());
                }
                for (n, at) in times.into_iter().enumerate() {
                    let rt = draw_runtime(runtime, &mut rng);
                    w.pods.push(PodSpec {
                        template: ti,
                        name: format!("{}-{n}", spec.name),
                        arrival: at,
                        runtime: Some(rt),
                        delete_at: None,
                        group: None,
                        start_on: None,
                    });
                }
            }
            Generator::Groups {
                size,
                arrivals,
                runtime,
                limit,
                provisioning_request,
            } => {
                let size = usize::try_from(*size).unwrap_or(usize::MAX).max(1);
                let groups_room = room / size;
                let cap = limit
                    .map_or(usize::MAX, |l| l as usize)
                    .min(groups_room.saturating_add(1));
                let times = arrival_times(arrivals, horizon, &mut rng, cap);
                if times.len() > groups_room {
                    return Err(too_many());
                }
                for (n, at) in times.into_iter().enumerate() {
                    let rt = draw_runtime(runtime, &mut rng);
                    let gi = w.groups.len() as u32;
                    let gname = format!("{}-{n}", spec.name);
                    let mut members = Vec::with_capacity(size);
                    for m in 0..size {
                        members.push(w.pods.len() as u32);
                        w.pods.push(PodSpec {
                            template: ti,
                            name: format!("{gname}-{m}"),
                            arrival: at,
                            runtime: Some(rt),
                            delete_at: None,
                            group: Some(gi),
                            start_on: None,
                        });
                    }
                    w.groups.push(GroupSpec {
                        name: gname,
                        members,
                        provisioning_request: *provisioning_request,
                    });
                }
            }
        }
    }
    w.finish();
    Ok(w)
}
