//! A batch planned in independent parts on several threads gets the plan one thread makes:
//! generated batches over CPU, GPU, fractional and tainted team pools, with existing nodes,
//! pool limits, a `PreferNoSchedule` pool, pods no type holds and pods that bridge pools.

use autoscaler_core::builders::*;
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{GpuSharing, Pod, Snapshot};
use autoscaler_core::plan::Plan;
use autoscaler_core::provision::{PlanOptions, part_sizes, plan_with};
use autoscaler_core::taints::{Effect, Taint, Toleration};

const ZONES: [&str; 2] = ["z1", "z2"];

/// A small seeded generator (64-bit LCG, high bits), so the batches need no crate.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

fn cpu_types() -> Vec<InstanceType> {
    vec![
        itype("c.small")
            .cpu("2")
            .mem("4Gi")
            .max_pods(16)
            .on_demand(&ZONES, 0.1)
            .build(),
        itype("c.big")
            .cpu("16")
            .mem("64Gi")
            .on_demand(&ZONES, 0.75)
            .build(),
        itype("c.huge")
            .cpu("64")
            .mem("256Gi")
            .on_demand(&["z1"], 2.9)
            .build(),
    ]
}

fn gpu_types() -> Vec<InstanceType> {
    vec![
        itype("g.one")
            .cpu("8")
            .mem("32Gi")
            .gpus(1, "L4", 24)
            .on_demand(&ZONES, 0.9)
            .build(),
        itype("g.four")
            .cpu("48")
            .mem("192Gi")
            .gpus(4, "L4", 24)
            .on_demand(&["z1"], 3.4)
            .build(),
        itype("h.eight")
            .cpu("96")
            .mem("1024Gi")
            .gpus(8, "H100", 80)
            .on_demand(&["z2"], 90.0)
            .build(),
    ]
}

/// Pools: plain CPU; a cheaper CPU pool with a `PreferNoSchedule` taint; GPUs with a GPU
/// limit; fractional shares; a team's tainted pool with a node limit.
fn snapshot(pods: usize, seed: u64, bridges: bool) -> Snapshot {
    let mut spot_cpu = pool("spot-cpu", cpu_types()).weight(5).build();
    spot_cpu
        .taints
        .push(Taint::new("spot", "true", Effect::PreferNoSchedule));
    let pools = vec![
        pool("cpu", cpu_types()).build(),
        spot_cpu,
        pool("gpu", gpu_types())
            .taint("nvidia.com/gpu", "present")
            .limit("nvidia.com/gpu", "600")
            .build(),
        pool("frac", gpu_types())
            .taint("nvidia.com/gpu", "present")
            .taint("frac", "true")
            .sharing(GpuSharing {
                fractional: true,
                ..GpuSharing::default()
            })
            .build(),
        pool("team", cpu_types())
            .taint("team", "a")
            .label("team", "a")
            .limit_nodes(40)
            .build(),
    ];
    let c = cpu_types();
    let g = gpu_types();
    let busy = |name: &str| pod(name).cpu("1").mem("2Gi").build();
    let nodes = vec![
        node("n-cpu-1", &c[1], "z1")
            .pool("cpu")
            .with_pod(busy("old-1"))
            .build(),
        node("n-cpu-2", &c[1], "z2")
            .pool("cpu")
            .with_pod(busy("old-2"))
            .build(),
        node("n-gpu-1", &g[1], "z1")
            .pool("gpu")
            .taint(Taint::new("nvidia.com/gpu", "present", Effect::NoSchedule))
            .with_pod(pod("old-3").cpu("4").mem("8Gi").gpus(1).build())
            .build(),
        // No pool's: GPU pods and shares can both use it, which makes them one part.
        node("n-shared-gpu", &g[1], "z2")
            .taint(Taint::new("nvidia.com/gpu", "present", Effect::NoSchedule))
            .build(),
        node("n-team-1", &c[0], "z2")
            .pool("team")
            .taint(Taint::new("team", "a", Effect::NoSchedule))
            .build(),
    ];
    let mut rng = Lcg(seed);
    let mut pending: Vec<Pod> = Vec::with_capacity(pods);
    for i in 0..pods {
        let b = pod(&format!("p-{i:05}"));
        let b = match rng.below(100) {
            0..=39 => {
                let b = b
                    .cpu(rng.pick(&["250m", "500m", "1", "2", "6"]))
                    .mem(rng.pick(&["512Mi", "1Gi", "4Gi", "12Gi"]));
                if rng.below(5) == 0 {
                    b.select(labels::ZONE, rng.pick(&ZONES))
                } else {
                    b
                }
            }
            40..=59 => {
                let n = [1, 1, 2, 4][rng.below(4) as usize];
                let b = b
                    .cpu(&(2 * n).to_string())
                    .mem(&format!("{}Gi", 8 * n))
                    .gpus(n);
                if rng.below(4) == 0 {
                    b.model("H100")
                } else {
                    b
                }
            }
            60..=74 => b
                .cpu("1")
                .mem("2Gi")
                .gpu_share([100, 250, 500, 700][rng.below(4) as usize])
                .tolerate(Toleration::exists("frac")),
            75..=89 => b
                .cpu(rng.pick(&["500m", "1", "3"]))
                .mem(rng.pick(&["1Gi", "6Gi"]))
                .select("team", "a")
                .tolerate(Toleration::equal("team", "a")),
            90..=93 => b.cpu("500").mem("1Gi"),
            94..=96 if bridges => b
                .cpu("1")
                .mem("1Gi")
                .tolerate(Toleration::equal("team", "a")),
            _ => b.cpu("100m").mem("128Mi"),
        };
        pending.push(b.build());
    }
    Snapshot {
        pending,
        nodes,
        pools,
        ..Snapshot::default()
    }
}

/// Fails at the first line where the two plans' renderings differ (a whole plan is too long
/// to read in a failure), then on any difference the rendering leaves out.
fn same(split: &Plan, one: &Plan, what: &str) {
    let (a, b) = (split.render(), one.render());
    if let Some((n, (x, y))) = a
        .lines()
        .zip(b.lines())
        .enumerate()
        .find(|(_, (x, y))| x != y)
    {
        panic!("{what}: line {n} differs:\n  split: {x}\n  one:   {y}");
    }
    assert_eq!(
        a.lines().count(),
        b.lines().count(),
        "{what}: lengths differ"
    );
    assert!(
        split == one,
        "{what}: the plans differ beyond their renderings"
    );
}

fn options(threads: usize) -> PlanOptions {
    PlanOptions {
        threads,
        ..PlanOptions::default()
    }
}

#[test]
fn independent_parts_plan_as_one_thread_does() {
    for seed in [1, 2, 3] {
        let snap = snapshot(3000, seed, false);
        let sizes = part_sizes(&snap, &options(2));
        // CPU with its spot pool (and the pods nothing holds: the same selection and
        // tolerations make them one class with the CPU pods), GPUs with shares (a node both
        // can use), the team.
        assert_eq!(sizes.len(), 3, "seed {seed}: parts {sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 3000);
        let one = plan_with(&snap, &options(1));
        assert!(!one.new_claims.is_empty() && !one.unschedulable.is_empty());
        assert!(one.unschedulable.iter().any(|u| !u.limited_by.is_empty()));
        for threads in [2, 3, 8] {
            let split = plan_with(&snap, &options(threads));
            same(&split, &one, &format!("seed {seed}, {threads} threads"));
        }
    }
}

#[test]
fn pods_that_can_use_two_pools_join_their_parts() {
    let snap = snapshot(3000, 4, true);
    let apart = part_sizes(&snapshot(3000, 4, false), &options(2));
    let joined = part_sizes(&snap, &options(2));
    // Pods tolerating the team's taint without selecting it can run on the plain CPU pools
    // and on the team's: those pools are one part now.
    assert_eq!(joined.len() + 1, apart.len(), "{apart:?} then {joined:?}");
    same(
        &plan_with(&snap, &options(2)),
        &plan_with(&snap, &options(1)),
        "bridged",
    );
}

#[test]
fn batches_that_interact_otherwise_are_planned_whole() {
    let base = snapshot(3000, 5, false);
    assert!(!part_sizes(&base, &options(2)).is_empty());
    assert!(part_sizes(&base, &options(1)).is_empty(), "one thread");
    assert!(
        part_sizes(&snapshot(1000, 5, false), &options(2)).is_empty(),
        "below the size worth splitting"
    );
    let limited = PlanOptions {
        max_new_claims: 1000,
        ..options(2)
    };
    assert!(part_sizes(&base, &limited).is_empty(), "a claim limit");
    let mut spread = base.clone();
    spread.pending[7] = pod("spread")
        .cpu("1")
        .label("app", "x")
        .spread(labels::ZONE, 1, "x")
        .build();
    assert!(part_sizes(&spread, &options(2)).is_empty(), "a spread");
    let mut gang = base.clone();
    gang.pending[9] = pod("member").cpu("1").group("g").build();
    assert!(part_sizes(&gang, &options(2)).is_empty(), "a gang");
}
