//! The Alibaba GPU cluster trace v2023 ("openb", from the FGD paper, USENIX ATC '23).
//!
//! Two kinds of CSV: node lists (`openb_node_list_*.csv`, columns
//! `sn,cpu_milli,memory_mib,gpu,model`) and pod lists (`openb_pod_list_*.csv`, columns
//! `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
//! deletion_time,scheduled_time`). Columns are found by name, so their order does not matter
//! and extra columns are ignored.
//!
//! A pod's `gpu_milli` is thousandths of *each* of its `num_gpu` devices: `num_gpu = 1` with
//! `gpu_milli < 1000` is a share of one device, `num_gpu > 1` comes with `gpu_milli = 1000`
//! in the published lists. `gpu_spec` is empty (any GPU) or a `|`-separated list of
//! acceptable GPU models (`V100M16|V100M32`).

use std::path::Path;

use crate::error::SimError;
use crate::traces::table::{Field, Row, Table};

/// One machine of a node list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRecord {
    /// Serial name (`openb-node-0000`).
    pub name: String,
    /// CPU in millicores.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Number of GPUs.
    pub gpus: u32,
    /// GPU model as the trace names it (`T4`, `V100M16`, `G2`...); `None` for CPU-only nodes.
    pub model: Option<String>,
}

/// One pod of a pod list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRecord {
    /// The 1-based line of the file it was read from (0 when made up in code).
    pub line: usize,
    /// Pod name (`openb-pod-0000`).
    pub name: String,
    /// CPU request in millicores.
    pub cpu_milli: u64,
    /// Memory request in MiB.
    pub memory_mib: u64,
    /// Number of GPUs.
    pub num_gpu: u32,
    /// Thousandths of each GPU, 0..=1000.
    pub gpu_milli: u32,
    /// Acceptable GPU models, deduplicated in file order; empty for any.
    pub gpu_spec: Vec<String>,
    /// QoS class (`LS`, `BE`, `Burstable`, `Guaranteed`).
    pub qos: String,
    /// Phase at trace end (`Running`, `Pending`, `Failed`, `Succeeded`).
    pub pod_phase: String,
    /// Creation, seconds from the trace start.
    pub creation_time: u64,
    /// Deletion, seconds from the trace start, when it happened.
    pub deletion_time: Option<u64>,
    /// Scheduling, seconds from the trace start, when it happened.
    pub scheduled_time: Option<u64>,
}

impl PodRecord {
    /// The share of one device in thousandths, for a pod asking for part of a single GPU.
    pub fn gpu_share(&self) -> Option<u32> {
        (self.num_gpu == 1 && self.gpu_milli > 0 && self.gpu_milli < 1000).then_some(self.gpu_milli)
    }

    /// Whole GPUs asked for (0 for a share or a CPU-only pod).
    pub fn whole_gpus(&self) -> u32 {
        if self.gpu_share().is_some() {
            0
        } else {
            self.num_gpu
        }
    }

    /// GPUs requested in thousandths of a device: `num_gpu × gpu_milli`.
    pub fn gpu_milli_total(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }
}

/// Largest GPU count per node or pod we accept; far above any real machine, low enough that
/// sums over a whole trace cannot overflow.
const MAX_GPUS: u64 = 1 << 16;
/// Largest cpu we accept, in millicores (a billion cores); pods and nodes keep cpu in `i64`
/// millicores, and sums saturate.
pub const MAX_CPU_MILLI: u64 = 1 << 40;
/// Largest memory we accept, in MiB (an exbibyte): 2^60 bytes still fits the `i64` bytes of a
/// pod's or node's memory.
pub const MAX_MEMORY_MIB: u64 = 1 << 40;
/// Latest time we accept, in seconds from the trace start: ten years, the longest simulation.
pub const MAX_TIME_S: u64 = autoscaler_core::duration::MAX_DURATION.as_secs();

/// Loads a node list.
///
/// # Errors
/// [`SimError`] naming the file, line and column of the first problem: the file cannot be
/// read, a column is missing, a row is malformed, a number is not one or is negative.
pub fn load_nodes(path: impl AsRef<Path>) -> Result<Vec<NodeRecord>, SimError> {
    nodes_from(&Table::read(path.as_ref())?)
}

/// Parses a node list from text; `path` is only used in errors.
///
/// # Errors
/// As [`load_nodes`], reading aside.
pub fn parse_nodes(path: impl AsRef<Path>, text: &str) -> Result<Vec<NodeRecord>, SimError> {
    nodes_from(&Table::parse(path.as_ref(), text)?)
}

/// Loads a pod list.
///
/// # Errors
/// [`SimError`] naming the file, line and column of the first problem: the file cannot be
/// read, a column is missing, a row is malformed, a number is not one, is negative or out of
/// range (`gpu_milli` above 1000, or non-zero without GPUs).
pub fn load_pods(path: impl AsRef<Path>) -> Result<Vec<PodRecord>, SimError> {
    pods_from(&Table::read(path.as_ref())?)
}

/// Parses a pod list from text; `path` is only used in errors.
///
/// # Errors
/// As [`load_pods`], reading aside.
pub fn parse_pods(path: impl AsRef<Path>, text: &str) -> Result<Vec<PodRecord>, SimError> {
    pods_from(&Table::parse(path.as_ref(), text)?)
}

/// Column indices, resolved once from the header, so a missing column is reported before any
/// row is read.
struct Columns<'t> {
    table: &'t Table,
    names: &'static [&'static str],
    index: Vec<usize>,
}

impl<'t> Columns<'t> {
    fn resolve(table: &'t Table, names: &'static [&'static str]) -> Result<Self, SimError> {
        let index = names
            .iter()
            .map(|n| table.column(n))
            .collect::<Result<_, _>>()?;
        Ok(Columns {
            table,
            names,
            index,
        })
    }

    /// Field `k` (an index into the names given to [`Columns::resolve`]) of `row`.
    fn field<'a>(&'a self, row: &'a Row, k: usize) -> Field<'a> {
        Field {
            path: &self.table.path,
            line: row.line,
            name: self.names[k],
            // Rows have as many fields as the header (checked when parsing).
            text: row.fields.get(self.index[k]).map_or("", String::as_str),
        }
    }
}

fn nodes_from(table: &Table) -> Result<Vec<NodeRecord>, SimError> {
    const NAMES: &[&str] = &["sn", "cpu_milli", "memory_mib", "gpu", "model"];
    let cols = Columns::resolve(table, NAMES)?;
    let mut out = Vec::with_capacity(table.rows.len());
    for row in &table.rows {
        let f = |k| cols.field(row, k);
        let model = f(4).text.trim();
        out.push(NodeRecord {
            name: f(0).text()?.to_string(),
            cpu_milli: f(1).uint(MAX_CPU_MILLI)?,
            memory_mib: f(2).uint(MAX_MEMORY_MIB)?,
            gpus: narrow(f(3).uint(MAX_GPUS)?),
            model: (!model.is_empty()).then(|| model.to_string()),
        });
    }
    Ok(out)
}

fn pods_from(table: &Table) -> Result<Vec<PodRecord>, SimError> {
    const NAMES: &[&str] = &[
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
        "qos",
        "pod_phase",
        "creation_time",
        "deletion_time",
        "scheduled_time",
    ];
    let cols = Columns::resolve(table, NAMES)?;
    let mut out = Vec::with_capacity(table.rows.len());
    for row in &table.rows {
        let f = |k| cols.field(row, k);
        let num_gpu = narrow(f(3).uint(MAX_GPUS)?);
        let milli_field = f(4);
        let gpu_milli = narrow(milli_field.uint(1000)?);
        if num_gpu == 0 && gpu_milli > 0 {
            return Err(
                milli_field.out_of_range(gpu_milli, "is a share of a GPU, but num_gpu is 0")
            );
        }
        let creation_time = f(8).uint(MAX_TIME_S)?;
        let deletion_field = f(9);
        let deletion_time = deletion_field.opt_uint(MAX_TIME_S)?;
        // The published lists never have one; replayed, such a pod would run to the end.
        if let Some(d) = deletion_time.filter(|d| *d < creation_time) {
            return Err(
                deletion_field.out_of_range(d, format!("is before creation_time {creation_time}"))
            );
        }
        let mut gpu_spec: Vec<String> = Vec::new();
        for m in f(5).text.split('|').map(str::trim) {
            if !m.is_empty() && !gpu_spec.iter().any(|s| s == m) {
                gpu_spec.push(m.to_string());
            }
        }
        out.push(PodRecord {
            line: row.line,
            name: f(0).text()?.to_string(),
            cpu_milli: f(1).uint(MAX_CPU_MILLI)?,
            memory_mib: f(2).uint(MAX_MEMORY_MIB)?,
            num_gpu,
            gpu_milli,
            gpu_spec,
            qos: f(6).text.trim().to_string(),
            pod_phase: f(7).text.trim().to_string(),
            creation_time,
            deletion_time,
            scheduled_time: f(10).opt_uint(MAX_TIME_S)?,
        });
    }
    Ok(out)
}

/// Narrows a value already checked against a `u32`-sized maximum.
fn narrow(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
