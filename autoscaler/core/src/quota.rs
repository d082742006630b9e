//! Cluster-wide limits ([`ClusterLimit`]): what a node, an in-flight claim or a planned claim
//! counts against them, and the words for a limit reached. The planner checks the maximums
//! before it opens a claim; disruption checks the minimums before it removes a node.
//!
//! A node counts one node, its allocatable (the best measure of its capacity the snapshot
//! has, as for NodePool limits) and its physical GPUs by model. The model of a node comes from
//! its NodePool's catalog, else from any pool's catalog entry of its instance type, else from
//! the node's GPU name label; the count from the catalog, else the GPU count labels. GPU models
//! compare without regard to case, since the label spells `h100` what the catalog spells
//! `H100`.

use std::collections::BTreeMap;

use crate::labels;
use crate::model::{ClusterLimit, Limits, Node, Pool};
use crate::requirements::Labels;
use crate::resources::{Resources, format_amount};

/// What some nodes add up to: their count, their resources and their physical GPUs by model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// Nodes.
    pub nodes: i64,
    /// Resources, in [`Resources`] units.
    pub resources: Resources,
    /// Physical GPUs by model, as spelt where they were found.
    pub models: BTreeMap<String, i64>,
}

impl Usage {
    /// Adds `other`.
    pub fn add(&mut self, other: &Usage) {
        self.nodes += other.nodes;
        self.resources.add(&other.resources);
        for (m, n) in &other.models {
            *self.models.entry(m.clone()).or_default() += n;
        }
    }

    /// Subtracts `other`.
    pub fn sub(&mut self, other: &Usage) {
        self.nodes -= other.nodes;
        self.resources.sub(&other.resources);
        for (m, n) in &other.models {
            *self.models.entry(m.clone()).or_default() -= n;
        }
    }

    /// `k` times this usage.
    pub fn times(&self, k: i64) -> Usage {
        let mut out = Usage::default();
        for _ in 0..k.max(0) {
            out.add(self);
        }
        out
    }

    /// The largest of both in every entry.
    pub fn max(&self, other: &Usage) -> Usage {
        let mut models = self.models.clone();
        for (m, n) in &other.models {
            let e = models.entry(m.clone()).or_default();
            *e = (*e).max(*n);
        }
        Usage {
            nodes: self.nodes.max(other.nodes),
            resources: self.resources.max(&other.resources),
            models,
        }
    }

    /// Physical GPUs of `model` (any case).
    pub fn gpus_of(&self, model: &str) -> i64 {
        self.models
            .iter()
            .filter(|(m, _)| m.eq_ignore_ascii_case(model))
            .map(|(_, n)| *n)
            .sum()
    }
}

/// The GPU model and physical GPU count of `node`, when it has GPUs.
pub fn node_gpus(pools: &[Pool], node: &Node) -> Option<(String, i64)> {
    let catalog = node.instance_type.as_deref().and_then(|name| {
        let own = pools.iter().filter(|p| Some(&p.name) == node.pool.as_ref());
        let others = pools.iter().filter(|p| Some(&p.name) != node.pool.as_ref());
        own.chain(others)
            .find_map(|p| p.instance_types.iter().find(|t| t.name == name))
    });
    if let Some(t) = catalog {
        return t
            .gpu
            .as_ref()
            .map(|g| (g.model.clone(), i64::from(g.count)));
    }
    let model = node.labels.get(labels::GPU_NAME)?;
    // GPU Feature Discovery's count is of MIG instances under the single strategy, not of
    // physical GPUs: it is read only where no MIG layout is applied.
    let mig_single = node
        .labels
        .get(labels::NVIDIA_MIG_STRATEGY)
        .map(String::as_str)
        == Some("single")
        && node
            .labels
            .get(labels::NVIDIA_MIG_CONFIG)
            .is_some_and(|c| c != crate::gpu::mig::DISABLED);
    let keys: &[&str] = if mig_single {
        &[labels::GPU_COUNT]
    } else {
        &[labels::GPU_COUNT, labels::NVIDIA_COUNT]
    };
    let count = keys
        .iter()
        .find_map(|k| node.labels.get(*k).and_then(|v| v.parse::<i64>().ok()))
        .unwrap_or(0);
    (count > 0).then(|| (model.clone(), count))
}

/// What `node` counts against a limit: one node, its allocatable, its GPUs.
pub fn node_usage(pools: &[Pool], node: &Node) -> Usage {
    Usage {
        nodes: 1,
        resources: node.allocatable.clone(),
        models: node_gpus(pools, node).into_iter().collect(),
    }
}

/// Whether `limit` counts a node with these labels.
pub fn selects(limit: &ClusterLimit, node_labels: &Labels) -> bool {
    limit.selector.is_empty() || limit.selector.matches(node_labels)
}

/// Usage per limit of the nodes in `nodes`, counting each node its limit selects.
pub fn usage_of_nodes<'a>(
    limits: &[ClusterLimit],
    pools: &[Pool],
    nodes: impl IntoIterator<Item = &'a Node>,
) -> Vec<Usage> {
    let mut out = vec![Usage::default(); limits.len()];
    if limits.is_empty() {
        // The planner asks this of every node on every call, limits or not.
        return out;
    }
    for n in nodes {
        let mut u = None;
        for (li, l) in limits.iter().enumerate() {
            if selects(l, &n.labels) {
                out[li].add(u.get_or_insert_with(|| node_usage(pools, n)));
            }
        }
    }
    out
}

/// The first maximum of `limit` that `adding` on top of `used` would exceed, in words:
/// `cluster limit GPU H100 max 16 reached: 16 in use or launching, the scale-up adds 8`.
pub fn exceeded(limit: &ClusterLimit, used: &Usage, adding: &Usage) -> Option<String> {
    let max = &limit.max;
    let name = &limit.name;
    if let Some(n) = max.nodes
        && adding.nodes > 0
        && used.nodes + adding.nodes > n
    {
        return Some(format!(
            "{name} nodes max {n} reached: {} in use or launching{}",
            used.nodes,
            adds(adding.nodes, 1, |v| v.to_string())
        ));
    }
    for (res, n) in &max.resources {
        let add = adding.resources.get(res);
        if add > 0 && used.resources.get(res) + add > *n {
            return Some(format!(
                "{name} {res} max {} reached: {} in use or launching{}",
                format_amount(res, *n),
                format_amount(res, used.resources.get(res)),
                adds(add, 0, |v| format_amount(res, v))
            ));
        }
    }
    for (model, n) in &max.gpus_by_model {
        let add = adding.gpus_of(model);
        if add > 0 && used.gpus_of(model) + add > *n {
            return Some(format!(
                "{name} GPU {model} max {n} reached: {} in use or launching{}",
                used.gpus_of(model),
                adds(add, 0, |v| v.to_string())
            ));
        }
    }
    None
}

/// `, the scale-up adds N` unless it adds exactly `plain` (one node needs no saying).
fn adds(n: i64, plain: i64, fmt: impl Fn(i64) -> String) -> String {
    if n == plain {
        String::new()
    } else {
        format!(", the scale-up adds {}", fmt(n))
    }
}

/// The first minimum of `limit` that removing `removing` from `total` would go below, in
/// words: `cluster limit cpu min 64 kept: 70 in the cluster, removing 16`.
pub fn below_min(limit: &ClusterLimit, total: &Usage, removing: &Usage) -> Option<String> {
    let min: &Limits = &limit.min;
    let name = &limit.name;
    if let Some(n) = min.nodes
        && removing.nodes > 0
        && total.nodes - removing.nodes < n
    {
        return Some(format!(
            "{name} nodes min {n} kept: {} in the cluster, removing {}",
            total.nodes, removing.nodes
        ));
    }
    for (res, n) in &min.resources {
        let rm = removing.resources.get(res);
        if rm > 0 && total.resources.get(res) - rm < *n {
            return Some(format!(
                "{name} {res} min {} kept: {} in the cluster, removing {}",
                format_amount(res, *n),
                format_amount(res, total.resources.get(res)),
                format_amount(res, rm)
            ));
        }
    }
    for (model, n) in &min.gpus_by_model {
        let rm = removing.gpus_of(model);
        if rm > 0 && total.gpus_of(model) - rm < *n {
            return Some(format!(
                "{name} GPU {model} min {n} kept: {} in the cluster, removing {rm}",
                total.gpus_of(model)
            ));
        }
    }
    None
}

/// The Cluster Autoscaler's cluster-wide totals, as its flags (and the simulator's scenario
/// keys of the same names) give them: `--max-nodes-total` (0: none), `--cores-total` and
/// `--memory-total` (`MIN:MAX`, cores and GiB), `--gpu-total` (`MODEL:MIN:MAX`, repeated).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Most nodes; 0 is no limit.
    pub max_nodes: u32,
    /// Cores, `(min, max)`.
    pub cores: Option<(u64, u64)>,
    /// GiB of memory, `(min, max)`.
    pub memory_gib: Option<(u64, u64)>,
    /// Physical GPUs per model, `(model, min, max)`.
    pub gpus: Vec<(String, u64, u64)>,
}

/// Parses `MIN:MAX` (whole numbers, MIN <= MAX, at most 2^30 so that cores in millicores and
/// GiB in bytes stay exact).
///
/// # Errors
/// A message naming the bad value.
pub fn parse_min_max(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("invalid range {s:?} (expected MIN:MAX, whole numbers, MIN <= MAX)");
    let (a, b) = s.trim().split_once(':').ok_or_else(bad)?;
    let (min, max) = (
        a.trim().parse::<u64>().map_err(|_| bad())?,
        b.trim().parse::<u64>().map_err(|_| bad())?,
    );
    if min > max || max > 1 << 30 {
        return Err(bad());
    }
    Ok((min, max))
}

/// Parses `MODEL:MIN:MAX` (`H100:0:16`).
///
/// # Errors
/// A message naming the bad value.
pub fn parse_gpu_total(s: &str) -> Result<(String, u64, u64), String> {
    let (model, range) = s
        .trim()
        .split_once(':')
        .filter(|(m, _)| !m.trim().is_empty())
        .ok_or_else(|| {
            format!("invalid GPU total {s:?} (expected MODEL:MIN:MAX, e.g. H100:0:16)")
        })?;
    let (min, max) = parse_min_max(range)?;
    Ok((model.trim().to_string(), min, max))
}

impl Totals {
    /// The totals as one limit on every node, named `cluster limit`, or `None` when none is
    /// set. A minimum of 0 is no minimum.
    pub fn to_limit(&self) -> Option<ClusterLimit> {
        use crate::resources::names;
        let mut l = ClusterLimit {
            name: "cluster limit".into(),
            ..Default::default()
        };
        if self.max_nodes > 0 {
            l.max.nodes = Some(i64::from(self.max_nodes));
        }
        let whole = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for (name, range, unit) in [
            (names::CPU, self.cores, 1000),
            (names::MEMORY, self.memory_gib, 1 << 30),
        ] {
            if let Some((min, max)) = range {
                l.max
                    .resources
                    .insert(name.into(), whole(max).saturating_mul(unit));
                if min > 0 {
                    l.min
                        .resources
                        .insert(name.into(), whole(min).saturating_mul(unit));
                }
            }
        }
        for (model, min, max) in &self.gpus {
            l.max.gpus_by_model.insert(model.clone(), whole(*max));
            if *min > 0 {
                l.min.gpus_by_model.insert(model.clone(), whole(*min));
            }
        }
        (!l.is_empty()).then_some(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::{itype, node};
    use crate::requirements::{Operator, Requirements};

    #[test]
    fn words_name_the_limit_and_the_numbers() {
        let mut limit = ClusterLimit {
            name: "cluster limit".into(),
            ..Default::default()
        };
        limit.max.gpus_by_model.insert("H100".into(), 16);
        limit.max.nodes = Some(3);
        let used = Usage {
            nodes: 2,
            models: BTreeMap::from([("h100".into(), 16)]),
            ..Default::default()
        };
        let one = Usage {
            nodes: 1,
            models: BTreeMap::from([("H100".into(), 8)]),
            ..Default::default()
        };
        assert_eq!(
            exceeded(&limit, &used, &one).as_deref(),
            Some(
                "cluster limit GPU H100 max 16 reached: 16 in use or launching, the scale-up adds 8"
            )
        );
        assert_eq!(
            exceeded(&limit, &used, &one.times(2)).as_deref(),
            Some("cluster limit nodes max 3 reached: 2 in use or launching, the scale-up adds 2")
        );
        limit.max.gpus_by_model.insert("H100".into(), 24);
        assert_eq!(exceeded(&limit, &used, &one), None);
    }

    #[test]
    fn a_foreign_node_counts_by_its_labels() {
        let t = itype("p5").cpu("8").mem("32Gi").gpus(8, "H100", 80).build();
        let n = node("n", &t, "a").build();
        assert_eq!(node_gpus(&[], &n), Some(("h100".into(), 8)));
        let limit = ClusterLimit {
            name: "CapacityQuota gpu".into(),
            selector: Requirements::new().with(labels::GPU_NAME, Operator::In, &["h100"]),
            ..Default::default()
        };
        assert!(selects(&limit, &n.labels));
        let u = usage_of_nodes(std::slice::from_ref(&limit), &[], [&n]);
        assert_eq!(u[0].nodes, 1);
        assert_eq!(u[0].gpus_of("H100"), 8);
    }

    #[test]
    fn a_foreign_mig_node_counts_physical_gpus_not_instances() {
        // Under MIG single, nvidia.com/gpu.count counts instances (56 on eight 80 GB GPUs
        // cut seven ways); only a physical count may stand for the GPUs.
        let t = itype("p4de")
            .cpu("8")
            .mem("32Gi")
            .gpus(8, "A100", 80)
            .build();
        let mut n = node("n", &t, "a").build();
        n.labels.remove(labels::GPU_COUNT);
        n.labels.insert(labels::NVIDIA_COUNT.into(), "56".into());
        n.labels
            .insert(labels::NVIDIA_MIG_STRATEGY.into(), "single".into());
        n.labels
            .insert(labels::NVIDIA_MIG_CONFIG.into(), "all-1g.10gb".into());
        assert_eq!(node_gpus(&[], &n), None);
        n.labels.insert(labels::GPU_COUNT.into(), "8".into());
        assert_eq!(node_gpus(&[], &n), Some(("a100".into(), 8)));
        // Without MIG the device plugin's count is the physical one.
        n.labels.remove(labels::GPU_COUNT);
        n.labels
            .insert(labels::NVIDIA_MIG_CONFIG.into(), "all-disabled".into());
        n.labels.insert(labels::NVIDIA_COUNT.into(), "8".into());
        assert_eq!(node_gpus(&[], &n), Some(("a100".into(), 8)));
    }
}
