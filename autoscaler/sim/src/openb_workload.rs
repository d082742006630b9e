//! The openb trace (Alibaba GPU cluster trace v2023, from the FGD paper) as a workload.
//!
//! Two modes:
//! - **replay**: every pod arrives at `creation_time / compression` and leaves after
//!   `(deletion_time - creation_time) / compression` once bound (pods without a deletion
//!   time run to the end);
//! - **FGD** (the paper's methodology): pods are shuffled with the seed and submitted one
//!   every `fgd_interval_s`, never leaving, until their GPU requests reach `fgd_share` of the
//!   reference cluster's GPUs (a node list such as `openb_node_list_gpu_node.csv`).
//!
//! Pod shapes follow the trace: `gpu_milli` below 1000 on one GPU is a fractional share of
//! one device; otherwise `num_gpu` whole `nvidia.com/gpu`. `gpu_spec` models are mapped onto
//! the catalog's GPU names where it has them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use autoscaler_core::labels;
use autoscaler_core::model::{GpuShare, Pod, PodKey, Pool};
use autoscaler_core::requirements::{NodeSelector, Operator, Requirements};
use autoscaler_core::resources::names;
use autoscaler_core::taints::Toleration;

use crate::error::SimError;
use crate::rng::Rng;
use crate::traces::openb::{self, PodRecord};
use crate::workload::{PodSpec, Workload};

/// The bundled NodePools for openb replays.
pub const OPENB_SCENARIO_YAML: &str = include_str!("../scenarios/openb.yaml");

/// How to turn the trace into a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenbOptions {
    /// Times are divided by this (replay mode).
    pub compression: f64,
    /// FGD mode: stop when GPU requests reach this share of the reference cluster.
    pub fgd_share: Option<f64>,
    /// FGD mode: seconds between submissions.
    pub fgd_interval_s: f64,
    /// FGD mode: the reference cluster's node list.
    pub reference_nodes: Option<PathBuf>,
    /// Shuffle seed (FGD mode).
    pub seed: u64,
}

/// The catalog GPU name for a trace model, when the catalog has that GPU.
pub fn catalog_gpu(model: &str) -> Option<&'static str> {
    match model {
        "T4" => Some("t4"),
        "V100M16" | "V100M32" => Some("v100"),
        "A10" => Some("a10g"),
        "A100" => Some("a100"),
        _ => None,
    }
}

type Shape = (u64, u64, u32, u32, Vec<String>);

/// A trace pod asking for `cpu_milli` and `memory_mib`, labelled `app=<app>`, built without the
/// test builders: a value the pod cannot hold is an error naming the row's file, line and
/// column (the loaders bound them already; this keeps the guarantee where the pod is made).
fn trace_pod(
    app: &str,
    (cpu_field, cpu_milli): (&str, u64),
    (memory_field, memory_mib): (&str, u64),
    path: &Path,
    line: usize,
) -> Result<Pod, SimError> {
    let too_large = |field: &str, value: u64| SimError::OutOfRange {
        path: path.to_path_buf(),
        line,
        field: field.to_string(),
        value: value.to_string(),
        why: "is too large for a pod".into(),
    };
    let cpu = i64::try_from(cpu_milli).map_err(|_| too_large(cpu_field, cpu_milli))?;
    let memory = memory_mib
        .checked_mul(1 << 20)
        .and_then(|b| i64::try_from(b).ok())
        .ok_or_else(|| too_large(memory_field, memory_mib))?;
    let mut pod = Pod::new(PodKey {
        namespace: "default".into(),
        name: app.into(),
    });
    pod.requests.set(names::CPU, cpu);
    pod.requests.set(names::MEMORY, memory);
    pod.labels.insert("app".into(), app.into());
    pod.owner_kind = Some("ReplicaSet".into());
    Ok(pod)
}

/// The index of the template for `key`, made by `make` the first time that shape is seen.
fn intern<K: std::hash::Hash + Eq>(
    shapes: &mut HashMap<K, u32>,
    w: &mut Workload,
    key: K,
    make: impl FnOnce() -> Result<Pod, SimError>,
) -> Result<u32, SimError> {
    if let Some(t) = shapes.get(&key) {
        return Ok(*t);
    }
    w.templates.push(make()?);
    let t = (w.templates.len() - 1) as u32;
    shapes.insert(key, t);
    Ok(t)
}

fn template(path: &Path, r: &PodRecord) -> Result<Pod, SimError> {
    let mut pod = trace_pod(
        "openb",
        ("cpu_milli", r.cpu_milli),
        ("memory_mib", r.memory_mib),
        path,
        r.line,
    )?;
    if let Some(m) = r.gpu_share() {
        pod.gpu_share = Some(GpuShare {
            resource: names::NVIDIA_GPU.into(),
            milli: m,
        });
    } else if r.num_gpu > 0 {
        pod.requests.set(names::NVIDIA_GPU, i64::from(r.num_gpu));
    }
    if r.num_gpu > 0 {
        pod.tolerations.push(Toleration::exists(names::NVIDIA_GPU));
    }
    let models: Vec<String> = r
        .gpu_spec
        .iter()
        .filter_map(|m| catalog_gpu(m))
        .map(str::to_string)
        .collect();
    // Only constrain when every acceptable model is known; an unknown one would otherwise
    // turn "any of these" into "none of these".
    if !models.is_empty() && models.len() == r.gpu_spec.len() {
        let mut req = Requirements::new();
        req.add(labels::GPU_NAME, Operator::In, &models)
            .expect("non-empty In");
        pod.node_selector = NodeSelector::single(req);
    }
    Ok(pod)
}

/// `seconds / compression`, or an error naming the row's field when that is later than ten
/// years (a tiny `--compression` stretches a trace that far); casting it to `i64` is exact
/// after rounding.
fn compressed(
    path: &Path,
    line: usize,
    field: &str,
    seconds: u64,
    compression: f64,
) -> Result<f64, SimError> {
    let t = seconds as f64 / compression;
    if t.is_nan() || t > openb::MAX_TIME_S as f64 {
        return Err(SimError::OutOfRange {
            path: path.to_path_buf(),
            line,
            field: field.to_string(),
            value: seconds.to_string(),
            why: format!("divided by --compression {compression:?} is later than ten years"),
        });
    }
    Ok(t)
}

fn bad_option(path: &Path, option: &str, value: f64, why: &str) -> SimError {
    SimError::Scenario {
        path: path.to_path_buf(),
        line: 0,
        field: option.into(),
        why: format!("{value} {why}"),
    }
}

/// The embedded openb scenario replaying the pod list at `pods`, compressed `compression`
/// times, with the scenario's own seed and no FGD shares: the setup the examples and benches
/// share. The scenario lasts until the trace's horizon.
///
/// # Errors
/// As [`load`].
pub fn replay(
    pods: &Path,
    compression: f64,
) -> Result<(crate::scenario::Scenario, Workload), SimError> {
    let mut s = crate::scenario::Scenario::parse(Path::new("openb.yaml"), OPENB_SCENARIO_YAML)?;
    let o = OpenbOptions {
        compression,
        fgd_share: None,
        fgd_interval_s: 1.0,
        reference_nodes: None,
        seed: s.seed,
    };
    let (w, horizon) = load(pods, &o, &s.pools)?;
    s.duration_s = horizon;
    s.name = format!("openb (compression {compression})");
    Ok((s, w))
}

/// Loads `path` as a workload. Returns it with the horizon (seconds) it needs.
///
/// # Errors
/// [`SimError`] from the trace loaders, naming file, line and column; or
/// [`SimError::Scenario`] for options that make no sense (non-positive compression).
pub fn load(path: &Path, o: &OpenbOptions, _pools: &[Pool]) -> Result<(Workload, i64), SimError> {
    if !(o.compression > 0.0 && o.compression.is_finite()) {
        return Err(SimError::Scenario {
            path: path.to_path_buf(),
            line: 0,
            field: "--compression".into(),
            why: format!("{} must be positive", o.compression),
        });
    }
    if let Some(share) = o.fgd_share
        && !(share > 0.0 && share.is_finite())
    {
        return Err(bad_option(
            path,
            "--fgd-share",
            share,
            "must be a positive number",
        ));
    }
    if !(o.fgd_interval_s >= 0.0 && o.fgd_interval_s <= openb::MAX_TIME_S as f64) {
        return Err(bad_option(
            path,
            "--fgd-interval",
            o.fgd_interval_s,
            "must be a number of seconds in [0, ten years]",
        ));
    }
    let mut records = openb::load_pods(path)?;
    let mut w = Workload::default();
    let mut shapes: HashMap<Shape, u32> = HashMap::new();
    let mut tpl = |w: &mut Workload, r: &PodRecord| -> Result<u32, SimError> {
        let key = (
            r.cpu_milli,
            r.memory_mib,
            r.num_gpu,
            r.gpu_milli,
            r.gpu_spec.clone(),
        );
        intern(&mut shapes, w, key, || template(path, r))
    };
    let horizon;
    match o.fgd_share {
        None => {
            let mut end = 0i64;
            for r in &records {
                let arrival = compressed(
                    path,
                    r.line,
                    "creation_time",
                    r.creation_time,
                    o.compression,
                )?
                .floor() as i64;
                let runtime = match r.deletion_time.filter(|d| *d > r.creation_time) {
                    Some(d) => Some(
                        (compressed(
                            path,
                            r.line,
                            "deletion_time",
                            d - r.creation_time,
                            o.compression,
                        )?
                        .round() as i64)
                            .max(1),
                    ),
                    None => None,
                };
                end = end.max(arrival + runtime.unwrap_or(0));
                let t = tpl(&mut w, r)?;
                w.pods.push(PodSpec {
                    template: t,
                    name: r.name.clone(),
                    arrival,
                    runtime,
                    delete_at: None,
                    group: None,
                    start_on: None,
                });
            }
            horizon = end + 1;
        }
        Some(share) => {
            let nodes_path = o
                .reference_nodes
                .clone()
                .ok_or_else(|| SimError::Scenario {
                    path: path.to_path_buf(),
                    line: 0,
                    field: "--openb-nodes".into(),
                    why: "FGD mode needs the reference cluster's node list".into(),
                })?;
            let nodes = openb::load_nodes(&nodes_path)?;
            let total: f64 = nodes.iter().map(|n| f64::from(n.gpus)).sum();
            let target = share * total;
            Rng::derive(o.seed, "openb-fgd").shuffle(&mut records);
            let mut requested = 0.0;
            let mut t = 0.0f64;
            for r in &records {
                if requested >= target {
                    break;
                }
                requested += r.gpu_milli_total() as f64 / 1000.0;
                let tp = tpl(&mut w, r)?;
                w.pods.push(PodSpec {
                    template: tp,
                    name: r.name.clone(),
                    arrival: t.floor() as i64,
                    runtime: None,
                    delete_at: None,
                    group: None,
                    start_on: None,
                });
                t += o.fgd_interval_s;
                if t > openb::MAX_TIME_S as f64 {
                    return Err(bad_option(
                        path,
                        "--fgd-interval",
                        o.fgd_interval_s,
                        "puts the last submission past ten years",
                    ));
                }
            }
            // Leave an hour after the last submission for the cluster to settle.
            horizon = t.ceil() as i64 + 3600;
        }
    }
    w.finish();
    Ok((w, horizon))
}

/// Loads the Alibaba v2025 DLRM trace as a workload: every instance arrives at
/// `creation_time / compression` (at 0 when it predates the trace) and leaves
/// `(deletion_time - creation_time) / compression` after it is bound (never, when it outlives
/// the trace). `HN` instances ask for their GPUs, `CN` instances for cpu and memory only.
/// Returns the workload and the horizon it needs.
///
/// # Errors
/// [`SimError`] from the loader, naming file, line and column; [`SimError::Scenario`] for a
/// non-positive compression.
pub fn load_dlrm(path: &Path, compression: f64) -> Result<(Workload, i64), SimError> {
    if !(compression > 0.0 && compression.is_finite()) {
        return Err(SimError::Scenario {
            path: path.to_path_buf(),
            line: 0,
            field: "--compression".into(),
            why: format!("{compression} must be positive"),
        });
    }
    let records = crate::traces::dlrm::load(path)?;
    let mut w = Workload::default();
    let mut shapes: HashMap<(u64, u64, u32), u32> = HashMap::new();
    let mut end = 0i64;
    for r in &records {
        let t = intern(
            &mut shapes,
            &mut w,
            (r.cpu_milli, r.memory_mib, r.gpus),
            || {
                let mut pod = trace_pod(
                    "dlrm",
                    ("cpu_request", r.cpu_milli),
                    ("memory_request", r.memory_mib),
                    path,
                    r.line,
                )?;
                if r.gpus > 0 {
                    pod.requests.set(names::NVIDIA_GPU, i64::from(r.gpus));
                    pod.tolerations.push(Toleration::exists(names::NVIDIA_GPU));
                }
                Ok(pod)
            },
        )?;
        let created = r.creation_s.unwrap_or(0);
        let arrival =
            compressed(path, r.line, "creation_time", created, compression)?.floor() as i64;
        let runtime = match r.deletion_s {
            Some(d) => Some(
                (compressed(
                    path,
                    r.line,
                    "deletion_time",
                    d.saturating_sub(created),
                    compression,
                )?
                .round() as i64)
                    .max(1),
            ),
            None => None,
        };
        end = end.max(arrival + runtime.unwrap_or(0));
        w.pods.push(PodSpec {
            template: t,
            name: r.name.clone(),
            arrival,
            runtime,
            delete_at: None,
            group: None,
            start_on: None,
        });
    }
    w.finish();
    Ok((w, end.max(3600) + 1))
}
