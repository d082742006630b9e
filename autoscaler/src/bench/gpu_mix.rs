//! The `gpu-mix` suite: 10,000 pods of every GPU kind over the embedded AWS and GCP catalogs.
//!
//! Per provider, five NodePools over that provider's catalog:
//!
//! | pool        | instance types                  | sharing                       | taint (besides `nvidia.com/gpu`) |
//! |-------------|---------------------------------|-------------------------------|----------------------------------|
//! | `cpu-<p>`   | types without accelerators      | none                          | none (no GPU taint either)       |
//! | `gpu-<p>`   | NVIDIA types                    | none: whole GPUs              | none                             |
//! | `mig-<p>`   | NVIDIA types (MIG-capable kept) | MIG `all-balanced`, mixed     | `gpu-autoscaler.dev/mig`         |
//! | `ts-<p>`    | T4, L4, A10G types              | time-slicing, 4 replicas      | `gpu-autoscaler.dev/time-slicing`|
//! | `frac-<p>`  | T4, L4, A10G, A100 types        | fractional shares             | `gpu-autoscaler.dev/fractional`  |
//!
//! Types whose GPU cannot take a pool's sharing (MIG on a T4) are dropped from that pool by the
//! planner itself. Pods: 30% whole GPUs (1, 2, 4 or 8 in proportions 50/25/15/10; 70% of them
//! pinned to one GPU model through `gpu-autoscaler.dev/instance-gpu-name`, among the models a
//! catalog type has that many of), 10% MIG instances (`1g.10gb`, `2g.20gb`, `3g.40gb` in
//! proportions 60/25/15), 10% time-sliced replicas, 15% fractional shares of one GPU (100 to
//! 700 thousandths), 35% CPU-only. Everything is drawn from a fixed seed.

use std::collections::BTreeMap;

use autoscaler_core::builders::{PodBuilder, pod, pool};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{
    GpuSharing, MigSharing, MigStrategy, Pod, Pool, Snapshot, TimeSlicing,
};
use autoscaler_core::requirements::Operator;
use autoscaler_core::resources::names;
use autoscaler_core::taints::Toleration;

use super::rng::SplitMix64;

/// Pods of the suite's one case.
pub(crate) const PODS: usize = 10_000;
/// The suite's seed.
pub(crate) const SEED: u64 = 0x6770_752d_6d69_7800;

const MIG_TAINT: &str = "gpu-autoscaler.dev/mig";
const TS_TAINT: &str = "gpu-autoscaler.dev/time-slicing";
const FRAC_TAINT: &str = "gpu-autoscaler.dev/fractional";
const TS_MODELS: [&str; 3] = ["t4", "l4", "a10g"];
const FRAC_MODELS: [&str; 4] = ["t4", "l4", "a10g", "a100"];
const MIG_PROFILES: [(&str, usize); 3] = [("1g.10gb", 60), ("2g.20gb", 25), ("3g.40gb", 15)];

fn is_nvidia(it: &InstanceType) -> bool {
    it.gpu
        .as_ref()
        .is_some_and(|g| g.vendor.eq_ignore_ascii_case("nvidia") && g.count > 0)
}

/// The suite's NodePools for one provider's catalog.
fn pools(provider: &str, types: &[InstanceType]) -> Vec<Pool> {
    let cpu: Vec<InstanceType> = types.iter().filter(|t| t.gpu.is_none()).cloned().collect();
    let nvidia: Vec<InstanceType> = types.iter().filter(|t| is_nvidia(t)).cloned().collect();
    let gpu_taint =
        |b: autoscaler_core::builders::PoolBuilder| b.taint(names::NVIDIA_GPU, "present");
    vec![
        pool(&format!("cpu-{provider}"), cpu).build(),
        gpu_taint(pool(&format!("gpu-{provider}"), nvidia.clone())).build(),
        gpu_taint(pool(&format!("mig-{provider}"), nvidia.clone()))
            .taint(MIG_TAINT, "true")
            .sharing(GpuSharing {
                mig: Some(MigSharing {
                    config: "all-balanced".into(),
                    strategy: MigStrategy::Mixed,
                }),
                ..GpuSharing::default()
            })
            .build(),
        gpu_taint(pool(&format!("ts-{provider}"), nvidia.clone()))
            .taint(TS_TAINT, "true")
            .require(labels::GPU_NAME, Operator::In, &TS_MODELS)
            .sharing(GpuSharing {
                time_slicing: Some(TimeSlicing {
                    replicas: 4,
                    rename: false,
                    ..TimeSlicing::default()
                }),
                ..GpuSharing::default()
            })
            .build(),
        gpu_taint(pool(&format!("frac-{provider}"), nvidia))
            .taint(FRAC_TAINT, "true")
            .require(labels::GPU_NAME, Operator::In, &FRAC_MODELS)
            .sharing(GpuSharing {
                fractional: true,
                ..GpuSharing::default()
            })
            .build(),
    ]
}

/// Per GPU count 1, 2, 4, 8: the NVIDIA model names (label values) some type has at least that
/// many of, so a pinned pod always has a home.
fn models_by_count(catalogs: &[(&str, Vec<InstanceType>)]) -> BTreeMap<u32, Vec<String>> {
    let mut out: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (_, types) in catalogs {
        for t in types.iter().filter(|t| is_nvidia(t)) {
            let Some(name) = t.labels.get(labels::GPU_NAME) else {
                continue;
            };
            for n in [1, 2, 4, 8] {
                if t.gpu_count() >= n {
                    let e = out.entry(n).or_default();
                    if !e.contains(name) {
                        e.push(name.clone());
                    }
                }
            }
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

/// Draws from `(item, weight)` pairs whose weights add up to 100.
fn weighted<T: Copy>(rng: &mut SplitMix64, items: &[(T, usize)]) -> T {
    let mut x = rng.below(100);
    for (item, w) in items {
        if x < *w {
            return *item;
        }
        x -= w;
    }
    items[items.len() - 1].0
}

/// A snapshot with `pods` pending pods over `catalogs` (provider name, instance types).
pub(crate) fn snapshot(pods: usize, seed: u64, catalogs: &[(&str, Vec<InstanceType>)]) -> Snapshot {
    let mut rng = SplitMix64::new(seed);
    let models = models_by_count(catalogs);
    // (kind, percent of pods); the last kind takes the rounding remainder.
    let kinds = [
        ("whole", 30),
        ("mig", 10),
        ("ts", 10),
        ("frac", 15),
        ("cpu", 35),
    ];
    let mut pending: Vec<Pod> = Vec::with_capacity(pods);
    let mut assigned = 0;
    for (k, (kind, pct)) in kinds.iter().enumerate() {
        let count = if k + 1 == kinds.len() {
            pods - assigned
        } else {
            pods * pct / 100
        };
        assigned += count;
        for i in 0..count {
            let b = pod(&format!("{kind}-{i:05}")).label("app", kind);
            let b = match *kind {
                "whole" => whole(&mut rng, b, &models),
                "mig" => {
                    let profile = weighted(&mut rng, &MIG_PROFILES);
                    b.cpu("1")
                        .mem("4Gi")
                        .res(&format!("nvidia.com/mig-{profile}"), "1")
                        .tolerate(Toleration::exists(names::NVIDIA_GPU))
                        .tolerate(Toleration::exists(MIG_TAINT))
                }
                "ts" => b
                    .cpu(rng.pick(&["250m", "500m", "1"]))
                    .mem(rng.pick(&["1Gi", "2Gi", "4Gi"]))
                    .gpus(1)
                    .select(labels::NVIDIA_REPLICAS, "4")
                    .tolerate(Toleration::exists(TS_TAINT)),
                "frac" => b
                    .cpu(rng.pick(&["500m", "1"]))
                    .mem(rng.pick(&["2Gi", "4Gi"]))
                    .gpu_share(rng.pick(&[100, 250, 300, 500, 700]))
                    .tolerate(Toleration::exists(FRAC_TAINT)),
                _ => b
                    .cpu(rng.pick(&["250m", "500m", "1", "2", "4"]))
                    .mem(rng.pick(&["512Mi", "1Gi", "2Gi", "4Gi", "8Gi"])),
            };
            pending.push(b.build());
        }
    }
    Snapshot {
        pending,
        pools: catalogs
            .iter()
            .flat_map(|(p, types)| pools(p, types))
            .collect(),
        ..Snapshot::default()
    }
}

fn whole(rng: &mut SplitMix64, b: PodBuilder, models: &BTreeMap<u32, Vec<String>>) -> PodBuilder {
    let mut n = weighted(rng, &[(1u32, 50), (2, 25), (4, 15), (8, 10)]);
    // A catalog without 8-GPU types (a test's) still gets pods that fit.
    while n > 1 && !models.contains_key(&n) {
        n /= 2;
    }
    let cpu_per_gpu = rng.pick(&[1i64, 2, 3]);
    let mem_per_gpu = rng.pick(&[4i64, 8, 12]);
    let mut b = b
        .cpu(&(cpu_per_gpu * i64::from(n)).to_string())
        .mem(&format!("{}Gi", mem_per_gpu * i64::from(n)))
        .gpus(i64::from(n));
    if rng.chance(70)
        && let Some(ms) = models.get(&n).filter(|m| !m.is_empty())
    {
        b = b.select(labels::GPU_NAME, &ms[rng.below(ms.len())]);
    }
    b
}
