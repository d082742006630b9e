//! Scenario files: the YAML a user writes to describe a cluster and its workload, and its
//! translation into the simulator's typed [`Scenario`].
//!
//! A scenario names a catalog (`embedded`, `aws`, `gcp`, or `{file: F}` in the `gpu-autoscaler
//! catalog --json` format) and NodeOverlay objects applied to it (`overlays:`), nodes that exist at the start with their pods (`existingNodes`,
//! the same [`ExistingNode`]s `simulate --from-snapshot` starts from), NodePools (full `NodePool` objects
//! under `nodePools`, files of them under `nodePoolFiles`, or the compact form under `pools`),
//! DaemonSets, cluster timings (launch latency per family, device-plugin delay, capacity
//! errors, spot interruptions) and workload generators (deployments with replica schedules,
//! batch jobs, gangs, ProvisioningRequests with their class, booking and admission delay,
//! Poisson or periodic arrivals), DRA DeviceClasses (`deviceClasses`) and pods' resource
//! claims (`claims`, checked in `scenario/dra.rs`).
//!
//! Every problem is reported as [`SimError::Scenario`] with the file, the line and the field:
//! serde_norway supplies line and path for shape errors (a missing field, a negative duration is
//! rejected while deserializing so it gets the same treatment); semantic checks done after
//! parsing (an unknown NodePool or resource) find their line by searching the text.
//!
//! This file holds the file's shape and the parse; the typed result is in `scenario/model.rs`
//! and the translation of each part in `scenario/build.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use autoscaler_core::model::Pool;
use autoscaler_core::{CapacityType, InstanceType};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

use crate::error::SimError;

use build::{build_cluster, build_daemonset, build_existing_node, build_pool, build_workload};
pub use model::{
    Arrivals, ClusterConfig, DEFAULT_ADMISSION_DELAY_S, DEFAULT_BOOKING_S, ExistingNode, Generator,
    POLICY_NAMES, PdbRule, ProvReqClass, ProvReqSpec, ReplayPod, Runtime, Scenario, WorkloadSpec,
};
pub use scalars::{Dur, Qty, parse_duration};

/// The bundled default scenario (what `gpu-autoscaler simulate` runs with no arguments).
pub const DEFAULT_SCENARIO_YAML: &str = include_str!("../scenarios/default.yaml");
/// The name the bundled default is reported under.
pub const DEFAULT_SCENARIO_NAME: &str = "default";

// ---------------------------------------------------------------------------------------------
// The file's shape.

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
    duration: Dur,
    #[serde(default)]
    catalog: CatalogEntry,
    #[serde(default)]
    existing_nodes: Vec<ExistingNodeFile>,
    #[serde(default)]
    policies: Option<Vec<String>>,
    #[serde(default)]
    cluster: ClusterFile,
    #[serde(default)]
    daemon_sets: Vec<DaemonSetFile>,
    #[serde(default, deserialize_with = "nodepools::strict::nodepools")]
    node_pools: Vec<nodepools::NodePool>,
    #[serde(default)]
    node_pool_files: Vec<String>,
    #[serde(default, deserialize_with = "nodepools::strict::nodeoverlays")]
    overlays: Vec<nodepools::NodeOverlay>,
    #[serde(default)]
    pools: Vec<PoolFile>,
    #[serde(default)]
    workloads: Vec<WorkloadEntry>,
    #[serde(default)]
    device_classes: Vec<dra::DeviceClassFile>,
}

/// The `catalog` key: a named catalog, or `{file: F}`.
enum CatalogEntry {
    /// `embedded`, `aws` or `gcp`.
    Named(CatalogChoice),
    /// A file in the `gpu-autoscaler catalog --json` format (or a catalog YAML file).
    File(CatalogFileRef),
}

impl Default for CatalogEntry {
    fn default() -> Self {
        CatalogEntry::Named(CatalogChoice::Embedded)
    }
}

// By hand rather than `untagged`, whose one message ("did not match any variant") names
// neither the key nor the value.
impl<'de> Deserialize<'de> for CatalogEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CatalogEntry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("embedded, aws, gcp or {file: F}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<CatalogEntry, E> {
                CatalogChoice::deserialize(de::value::StrDeserializer::<E>::new(v))
                    .map(CatalogEntry::Named)
                    .map_err(|_| {
                        E::custom(format!(
                            "unknown catalog {v:?} (expected embedded, aws, gcp or {{file: F}})"
                        ))
                    })
            }
            fn visit_map<A: de::MapAccess<'de>>(self, m: A) -> Result<CatalogEntry, A::Error> {
                CatalogFileRef::deserialize(de::value::MapAccessDeserializer::new(m))
                    .map(CatalogEntry::File)
            }
        }
        d.deserialize_any(V)
    }
}

/// `catalog: {file: F}`: F relative to the scenario file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFileRef {
    file: String,
}

/// One `existingNodes` entry: a node that exists at the start, and its pods.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExistingNodeFile {
    name: String,
    #[serde(default)]
    node_pool: Option<String>,
    instance_type: String,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    capacity_type: Option<CapacityType>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<TaintFile>,
    #[serde(default)]
    unschedulable: bool,
    #[serde(default)]
    pods: Vec<ExistingPodFile>,
}

/// A pod (or `count` alike pods) bound to an existing node at the start.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExistingPodFile {
    name: String,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    delete_at: Option<Dur>,
    pod: PodFile,
}

/// Which instance types the fake cloud sells.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatalogChoice {
    /// The whole embedded catalog (AWS and GCP types).
    #[default]
    Embedded,
    /// The embedded catalog's AWS types.
    Aws,
    /// The embedded catalog's GCP types.
    Gcp,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClusterFile {
    #[serde(default)]
    launch: Option<LaunchFile>,
    #[serde(default)]
    registration: Option<Dur>,
    #[serde(default)]
    device_plugin_delay: Option<Dur>,
    #[serde(default)]
    insufficient_capacity: Option<IceFile>,
    #[serde(default)]
    spot_interruptions_per_hour: Option<f64>,
    #[serde(default)]
    scheduler_score: Option<ScoreStrategy>,
    #[serde(default)]
    batch_idle: Option<Dur>,
    #[serde(default)]
    batch_max: Option<Dur>,
    #[serde(default)]
    disruption_interval: Option<Dur>,
    #[serde(default)]
    validation_delay: Option<Dur>,
    #[serde(default)]
    scale_down_delay_after_add: Option<Dur>,
    #[serde(default)]
    scale_down_delay_after_delete: Option<Dur>,
    #[serde(default)]
    scale_down_delay_after_failure: Option<Dur>,
    #[serde(default)]
    ignore_daemonsets_utilization: Option<bool>,
    #[serde(default)]
    ignore_mirror_pods_utilization: Option<bool>,
    #[serde(default)]
    node_overlays: Option<bool>,
    /// The controller's `--enforce-node-group-min-size`.
    #[serde(default)]
    enforce_node_group_min_size: Option<bool>,
    /// Cluster-wide totals, as the `run` flags of the same names.
    #[serde(default)]
    max_nodes_total: u32,
    #[serde(default)]
    cores_total: Option<String>,
    #[serde(default)]
    memory_total: Option<String>,
    #[serde(default)]
    gpu_total: Vec<String>,
    /// CapacityQuota objects, selecting nodes by labels (`matchLabels` only).
    #[serde(default)]
    capacity_quotas: Vec<QuotaFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct QuotaFile {
    name: String,
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    limits: BTreeMap<String, Qty>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AtomicFile {
    nodes: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LaunchFile {
    #[serde(default)]
    cpu: Option<Dur>,
    #[serde(default)]
    gpu: Option<Dur>,
    #[serde(default)]
    families: BTreeMap<String, Dur>,
    #[serde(default)]
    jitter: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct IceFile {
    #[serde(default)]
    probability: f64,
    #[serde(default)]
    offerings: Vec<IceOfferingFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct IceOfferingFile {
    instance_type: String,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    capacity_type: Option<CapacityType>,
}

/// How the simulated kube-scheduler scores feasible nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum ScoreStrategy {
    /// Prefer the emptiest node (the default scheduler's `LeastAllocated`).
    #[default]
    LeastAllocated,
    /// Prefer the fullest node (bin-packing, `MostAllocated`).
    MostAllocated,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DaemonSetFile {
    name: String,
    #[serde(default)]
    cpu: Option<Qty>,
    #[serde(default)]
    memory: Option<Qty>,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    tolerate_all: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PoolFile {
    name: String,
    #[serde(default)]
    weight: i32,
    #[serde(default)]
    instance_types: Vec<String>,
    #[serde(default)]
    families: Vec<String>,
    #[serde(default)]
    gpus: Vec<String>,
    #[serde(default)]
    capacity_types: Vec<CapacityType>,
    #[serde(default)]
    zones: Vec<String>,
    #[serde(default)]
    arch: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<TaintFile>,
    #[serde(default)]
    startup_taints: Vec<TaintFile>,
    #[serde(default)]
    time_slicing: Option<u32>,
    #[serde(default)]
    mps: Option<u32>,
    #[serde(default)]
    mig: Option<String>,
    #[serde(default)]
    mig_strategy: Option<String>,
    #[serde(default)]
    fractional: bool,
    #[serde(default)]
    limits: BTreeMap<String, Qty>,
    #[serde(default)]
    gpu_limits: BTreeMap<String, i64>,
    #[serde(default)]
    min_nodes: u32,
    #[serde(default)]
    atomic_scale_up: Option<AtomicFile>,
    #[serde(default)]
    disruption: DisruptionFile,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DisruptionFile {
    #[serde(default)]
    consolidation_policy: Option<String>,
    #[serde(default)]
    consolidate_after: Option<Dur>,
    #[serde(default)]
    gpu_utilization_threshold: Option<f64>,
    #[serde(default)]
    utilization_threshold: Option<f64>,
    #[serde(default)]
    right_size_savings: Option<f64>,
    #[serde(default)]
    unneeded_time: Option<Dur>,
    #[serde(default)]
    budgets: Vec<String>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TaintFile {
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default = "no_schedule")]
    effect: String,
}

fn no_schedule() -> String {
    "NoSchedule".into()
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TolerationFile {
    #[serde(default)]
    key: String,
    #[serde(default)]
    operator: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    effect: String,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodFile {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    cpu: Option<Qty>,
    #[serde(default)]
    memory: Option<Qty>,
    #[serde(default)]
    gpus: Option<u32>,
    #[serde(default)]
    gpu_share: Option<u32>,
    #[serde(default)]
    resources: BTreeMap<String, Qty>,
    #[serde(default)]
    node_pool: Option<String>,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    gpu_models: Vec<String>,
    #[serde(default)]
    tolerations: Vec<TolerationFile>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    do_not_disrupt: bool,
    #[serde(default)]
    safe_to_evict: Option<bool>,
    #[serde(default)]
    spread: Vec<SpreadFile>,
    #[serde(default)]
    anti_affinity: Vec<String>,
    #[serde(default)]
    affinity: Vec<String>,
    /// Preferred anti-affinity to the workload's own pods over these keys (weight 1 each,
    /// given up in the order written).
    #[serde(default)]
    preferred_anti_affinity: Vec<String>,
    /// Preferred affinity to the workload's own pods over these keys.
    #[serde(default)]
    preferred_affinity: Vec<String>,
    #[serde(default)]
    local_storage: bool,
    #[serde(default)]
    claims: Vec<dra::ClaimFile>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SpreadFile {
    topology_key: String,
    #[serde(default = "one")]
    max_skew: u32,
    /// Kubernetes' `minDomains` (0: unset).
    #[serde(default)]
    min_domains: u32,
    /// `DoNotSchedule` (the default) or `ScheduleAnyway`.
    #[serde(default)]
    when_unsatisfiable: Option<String>,
}

fn one() -> u32 {
    1
}

/// One `workloads` entry: a map with exactly one of these keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WorkloadEntry {
    #[serde(default)]
    deployment: Option<DeploymentFile>,
    #[serde(default)]
    jobs: Option<JobsFile>,
    #[serde(default)]
    gangs: Option<GangsFile>,
    #[serde(default)]
    provisioning_requests: Option<ProvReqFile>,
}

enum WorkloadFile<'a> {
    Deployment(&'a DeploymentFile),
    Jobs(&'a JobsFile),
    Gangs(&'a GangsFile),
    ProvisioningRequests(&'a ProvReqFile),
}

impl WorkloadFile<'_> {
    /// The entry's key (`deployment`, ...), as field paths name it.
    fn kind(&self) -> &'static str {
        match self {
            WorkloadFile::Deployment(_) => "deployment",
            WorkloadFile::Jobs(_) => "jobs",
            WorkloadFile::Gangs(_) => "gangs",
            WorkloadFile::ProvisioningRequests(_) => "provisioningRequests",
        }
    }

    /// Its pod template.
    fn pod(&self) -> &PodFile {
        match self {
            WorkloadFile::Deployment(d) => &d.pod,
            WorkloadFile::Jobs(j) => &j.pod,
            WorkloadFile::Gangs(g) => &g.pod,
            WorkloadFile::ProvisioningRequests(r) => &r.pod,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeploymentFile {
    name: String,
    replicas: Vec<ReplicaStep>,
    pod: PodFile,
    #[serde(default)]
    max_unavailable: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReplicaStep {
    at: Dur,
    count: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JobsFile {
    name: String,
    arrivals: ArrivalsFile,
    duration: DurationFile,
    pod: PodFile,
    #[serde(default)]
    limit: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GangsFile {
    name: String,
    size: u32,
    arrivals: ArrivalsFile,
    duration: DurationFile,
    pod: PodFile,
    #[serde(default)]
    limit: Option<u32>,
}

/// A `provisioningRequests` entry: a gang's fields plus the request's class and timings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProvReqFile {
    name: String,
    size: u32,
    arrivals: ArrivalsFile,
    duration: DurationFile,
    pod: PodFile,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    booking_duration: Option<Dur>,
    #[serde(default)]
    admission_delay: Option<Dur>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ArrivalsFile {
    #[serde(default)]
    per_hour: Option<f64>,
    #[serde(default)]
    every: Option<Dur>,
    #[serde(default)]
    at: Vec<Dur>,
    #[serde(default)]
    start: Option<Dur>,
    #[serde(default)]
    end: Option<Dur>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DurationFile {
    #[serde(default)]
    fixed: Option<Dur>,
    #[serde(default)]
    min: Option<Dur>,
    #[serde(default)]
    max: Option<Dur>,
    #[serde(default)]
    mean: Option<Dur>,
}

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, anchors: &[&str], field: impl Into<String>, why: impl Into<String>) -> SimError {
        SimError::Scenario {
            path: self.path.to_path_buf(),
            line: locate(self.text, anchors),
            field: field.into(),
            why: why.into(),
        }
    }
}

/// The 1-based line of the last anchor, each searched from the line of the previous one; a
/// best effort for errors found after parsing (0 when an anchor is not found).
pub fn locate(text: &str, anchors: &[&str]) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0usize;
    let mut found = 0usize;
    for a in anchors {
        match lines[from..].iter().position(|l| l.contains(a)) {
            Some(i) => {
                from += i;
                found = from + 1;
            }
            None => return found,
        }
    }
    found
}

/// The largest scenario or NodePool file read: the YAML parser holds a document's events in
/// memory, about 90 bytes per byte of a flat list (a 50 MB file took 3 GB and 45 s to be
/// refused for its first field before this bound); real ones are a few KiB.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// A file's text, or an error of kind `FileTooLarge` above [`MAX_FILE_BYTES`].
fn read_bounded(path: &Path) -> std::io::Result<String> {
    std::fs::File::open(path)
        .and_then(|f| providers::bounded::read_bounded(f, MAX_FILE_BYTES, "a scenario may be"))
}

fn yaml_error(path: &Path, e: &serde_norway::Error) -> SimError {
    let line = e.location().map_or(0, |l| l.line());
    let msg = e.to_string();
    // serde_norway renders `path.to.field: message at line L column C`.
    let msg = match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    };
    let (field, why) = match msg.split_once(": ") {
        Some((f, w)) if !f.contains(' ') => (f.to_string(), w.to_string()),
        _ => ("(document)".to_string(), msg.clone()),
    };
    SimError::Scenario {
        path: path.to_path_buf(),
        line,
        field,
        why,
    }
}

impl Scenario {
    /// The bundled default scenario.
    ///
    /// # Errors
    /// Never in a released build (a test loads it); a [`SimError`] otherwise.
    pub fn default_scenario() -> Result<Scenario, SimError> {
        Scenario::parse(Path::new("<embedded default.yaml>"), DEFAULT_SCENARIO_YAML)
    }

    /// Reads and parses a scenario file.
    ///
    /// # Errors
    /// [`SimError::Io`] when it cannot be read, [`SimError::Scenario`] for its first problem.
    pub fn load(path: &Path) -> Result<Scenario, SimError> {
        let text = read_bounded(path).map_err(|source| SimError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Scenario::parse(path, &text)
    }

    /// Parses scenario text; `path` names it in errors and anchors `nodePoolFiles`.
    ///
    /// # Errors
    /// [`SimError::Scenario`] naming the file, line and field of the first problem.
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, SimError> {
        autoscaler_core::nesting::check_flow_nesting(text).map_err(|e| SimError::Scenario {
            path: path.to_path_buf(),
            line: e.line,
            field: "(document)".to_string(),
            why: format!(
                "column {}: brackets nested deeper than {} levels",
                e.column, e.limit
            ),
        })?;
        let file: File = serde_norway::from_str(text).map_err(|e| yaml_error(path, &e))?;
        let cx = Ctx { path, text };
        let catalog = Arc::new(match &file.catalog {
            CatalogEntry::Named(CatalogChoice::Embedded) => providers::catalog::default_catalog(),
            CatalogEntry::Named(CatalogChoice::Aws) => {
                providers::catalog::default_catalog_for(providers::catalog::AWS)
            }
            CatalogEntry::Named(CatalogChoice::Gcp) => {
                providers::catalog::default_catalog_for(providers::catalog::GCP)
            }
            CatalogEntry::File(f) => {
                let p = path.parent().unwrap_or(Path::new(".")).join(&f.file);
                providers::catalog::read_user_catalog(&p)
                    .map_err(|e| cx.err(&["catalog:", &f.file], "catalog.file", e.to_string()))?
            }
        });
        let mut overlays = Vec::new();
        for (i, o) in file.overlays.iter().enumerate() {
            let name = o.metadata.name.clone().unwrap_or_default();
            overlays.push(o.to_core().map_err(|e| {
                cx.err(
                    &["overlays:", &format!("name: {name}")],
                    format!("overlays[{i}]"),
                    e.lines().join("; "),
                )
            })?);
        }
        // The one place overlays apply: pools, existing nodes' prices and the simulated cloud
        // all read this catalog.
        let catalog = Arc::new(autoscaler_core::overlay::apply_overlays(
            &catalog, &overlays,
        ));
        let mut cluster = build_cluster(&cx, &file.cluster, &catalog)?;
        let mut selectors = autoscaler_core::dra::cel::Selectors::new();
        let classes = dra::build_classes(&cx, &file.device_classes, &mut selectors)?;
        let mut pools = Vec::new();
        for (i, np) in file.node_pools.iter().enumerate() {
            let name = np.metadata.name.clone().unwrap_or_default();
            let pool = np.to_core(catalog.clone()).map_err(|e| {
                cx.err(
                    &["nodePools:", &format!("name: {name}")],
                    format!("nodePools[{i}]"),
                    e.lines().join("; "),
                )
            })?;
            pools.push(pool);
        }
        for (i, f) in file.node_pool_files.iter().enumerate() {
            let p = path.parent().unwrap_or(Path::new(".")).join(f);
            let field = format!("nodePoolFiles[{i}]");
            let text = read_bounded(&p).map_err(|e| {
                cx.err(
                    &["nodePoolFiles:", f],
                    &field,
                    format!("{}: {e}", p.display()),
                )
            })?;
            let nps = nodepools::load_nodepools(&text).map_err(|e| {
                cx.err(
                    &["nodePoolFiles:", f],
                    &field,
                    format!("{}: {e}", p.display()),
                )
            })?;
            for np in nps {
                let pool = np
                    .to_core(catalog.clone())
                    .map_err(|e| cx.err(&["nodePoolFiles:", f], &field, e.lines().join("; ")))?;
                pools.push(pool);
            }
        }
        for (i, pf) in file.pools.iter().enumerate() {
            pools.push(build_pool(&cx, i, pf, &catalog)?);
        }
        let mut seen = BTreeSet::new();
        for p in &pools {
            // Fields the simulator does not model, refused by name rather than ignored. It
            // removes nodes by its policies' disruption only, so an expiry it ignored would
            // report a cluster the controller would not run; its drains are instant and never
            // wait on a protected pod, so the deadline that ends such a wait is not modelled.
            // Virtual time starts at 0 with no calendar date, so a budget's cron schedule
            // would open its window at an arbitrary point of the run.
            let unmodelled = [
                (
                    p.disruption.expire_after_s.is_some(),
                    "expireAfter",
                    "remove it, or set Never",
                ),
                (
                    p.disruption.termination_grace_period_s.is_some(),
                    "terminationGracePeriod",
                    "remove it",
                ),
                (
                    p.disruption.budgets.iter().any(|b| b.schedule.is_some()),
                    "schedule",
                    "remove the disruption budget's schedule and duration: virtual time has no date",
                ),
            ];
            if let Some((_, field, fix)) = unmodelled.iter().find(|(set, ..)| *set) {
                return Err(cx.err(
                    &[&format!("{field}:")],
                    "nodePools",
                    format!("NodePool {}: {field} is not simulated ({fix})", p.name),
                ));
            }
            if !seen.insert(p.name.clone()) {
                return Err(cx.err(
                    &[&format!("name: {}", p.name), &format!("name: {}", p.name)],
                    "pools",
                    format!("NodePool {} is defined twice", p.name),
                ));
            }
            let usable = p
                .instance_types
                .iter()
                .any(|it| type_in_pool(it, p).is_some());
            if !usable {
                return Err(cx.err(
                    &[&format!("name: {}", p.name)],
                    format!("pools[{}]", p.name),
                    "no instance type of the catalog satisfies this NodePool's requirements",
                ));
            }
        }
        if pools.is_empty() {
            return Err(cx.err(&[], "pools", "the scenario defines no NodePool"));
        }
        let mut existing_nodes = Vec::new();
        let mut node_names = BTreeSet::new();
        for (i, f) in file.existing_nodes.iter().enumerate() {
            let node = build_existing_node(&cx, i, f, &catalog, &pools)?;
            // A node that no longer meets its NodePool would be replaced by the controller's
            // drift; the simulator has no drift, so it refuses what it would ignore.
            if let Some(d) = node
                .pool
                .as_ref()
                .and_then(|name| pools.iter().find(|p| &p.name == name))
                .and_then(|p| autoscaler_core::disruption::requirements_drift(&node.labels, p))
            {
                return Err(cx.err(
                    &["existingNodes:", &format!("name: {}", node.name)],
                    format!("existingNodes[{i}]"),
                    format!(
                        "node {} has {}; drift is not simulated (make the node meet its NodePool)",
                        node.name,
                        d.words()
                    ),
                ));
            }
            if !node_names.insert(node.name.clone()) {
                return Err(cx.err(
                    &["existingNodes:", &format!("name: {}", node.name)],
                    format!("existingNodes[{i}].name"),
                    format!("node {} is listed twice", node.name),
                ));
            }
            existing_nodes.push(node);
        }
        let daemonsets = file
            .daemon_sets
            .iter()
            .map(build_daemonset)
            .collect::<Vec<_>>();
        let mut workloads = Vec::new();
        let mut names = BTreeSet::new();
        for (i, e) in file.workloads.iter().enumerate() {
            let kinds = [
                e.deployment.as_ref().map(WorkloadFile::Deployment),
                e.jobs.as_ref().map(WorkloadFile::Jobs),
                e.gangs.as_ref().map(WorkloadFile::Gangs),
                e.provisioning_requests
                    .as_ref()
                    .map(WorkloadFile::ProvisioningRequests),
            ];
            let mut kinds = kinds.into_iter().flatten();
            let (Some(w), None) = (kinds.next(), kinds.next()) else {
                return Err(cx.err(
                    &["workloads:"],
                    format!("workloads[{i}]"),
                    "needs exactly one of deployment, jobs, gangs or provisioningRequests",
                ));
            };
            let mut spec = build_workload(&cx, i, &w, &pools)?;
            spec.template.claims = dra::build_claims(
                &cx,
                &spec.name,
                &format!("workloads[{i}].{}.pod", w.kind()),
                &w.pod().claims,
                &classes,
                &mut selectors,
            )?;
            if !names.insert(spec.name.clone()) {
                return Err(cx.err(
                    &[
                        "workloads:",
                        &format!("name: {}", spec.name),
                        &format!("name: {}", spec.name),
                    ],
                    format!("workloads[{i}].name"),
                    format!("workload name {} is used twice", spec.name),
                ));
            }
            workloads.push(spec);
        }
        if !file.device_classes.is_empty()
            || workloads.iter().any(|w| !w.template.claims.is_empty())
        {
            cluster.device_classes = Arc::new(classes);
        }
        let policies = match &file.policies {
            None => POLICY_NAMES.iter().map(|s| s.to_string()).collect(),
            Some(list) => {
                for (i, p) in list.iter().enumerate() {
                    if !POLICY_NAMES.contains(&p.as_str()) {
                        return Err(cx.err(
                            &["policies:", p],
                            format!("policies[{i}]"),
                            format!("unknown policy {p:?} (known: {})", POLICY_NAMES.join(", ")),
                        ));
                    }
                    // Run twice, a policy would be compared with itself in every report.
                    if list[..i].contains(p) {
                        return Err(cx.err(
                            &["policies:", p],
                            format!("policies[{i}]"),
                            format!("policy {p:?} is listed twice"),
                        ));
                    }
                }
                list.clone()
            }
        };
        if file.duration.0 <= 0 {
            return Err(cx.err(&["duration:"], "duration", "must be positive"));
        }
        Ok(Scenario {
            name: file.name.unwrap_or_else(|| {
                path.file_stem()
                    .map_or("scenario".into(), |s| s.to_string_lossy().into_owned())
            }),
            path: path.to_path_buf(),
            seed: file.seed.unwrap_or(1),
            duration_s: file.duration.0,
            catalog,
            pools,
            daemonsets,
            cluster,
            workloads,
            policies,
            existing_nodes,
            replay: Vec::new(),
            pdbs: Vec::new(),
        })
    }
}

/// The instance type as nodes of `pool` see it (sharing applied), when the pool's label
/// requirements (zone and capacity type aside) allow it and some offering is allowed.
pub fn type_in_pool(it: &InstanceType, pool: &Pool) -> Option<InstanceType> {
    autoscaler_core::provision::pool_node_type(pool, it)
}

mod build;
mod dra;
mod model;
mod scalars;
#[cfg(test)]
mod tests;
