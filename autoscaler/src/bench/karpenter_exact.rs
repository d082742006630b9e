//! The `karpenter-exact` suite: Karpenter's own scheduling benchmark workload, rebuilt from its
//! description (kubernetes-sigs/karpenter,
//! `pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go` with the fake cloud's
//! `InstanceTypes(400)` in `pkg/cloudprovider/fake/instancetype.go`).
//!
//! Instance types: 400, `fake-it-<i>` for `i` in `0..400` with `i+1` vCPU, `2(i+1)` GiB and
//! `10(i+1)` pod slots, kube-reserved 100m cpu and 10Mi memory, offered spot in
//! `test-zone-1`/`-2` and on-demand in `test-zone-1`/`-2`/`-3`, every offering at the fake
//! cloud's price `0.1 × vCPU + 0.1 × memory bytes / 1e9` per hour. One NodePool, no
//! requirements.
//!
//! Pods (`makeDiversePods`): `n/6` of each of six kinds, in this order, then the remainder as
//! more plain pods:
//!
//! 1. plain: labels `my-label=<v>`;
//! 2. zone topology spread (maxSkew 1, DoNotSchedule): labels `my-label=<v>`, selector
//!    `my-label=<w>`;
//! 3. hostname topology spread, the same;
//! 4. hostname pod affinity: labels `my-affininity=<v>` (sic, the upstream key), required
//!    affinity to pods with `my-affininity=<w>`;
//! 5. zone pod affinity, the same;
//! 6. hostname anti-affinity: labels `app=nginx`, required anti-affinity to `app=nginx`
//!    (so no two of them share a node).
//!
//! `<v>` and `<w>` are drawn independently from `a`..`g`, in that order, then the pod's cpu
//! (100m, 250m, 500m, 1, 1.5) and memory (100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi), each uniformly;
//! the anti-affinity pods draw only their sizes. Everything comes from one generator seeded 42,
//! as upstream. One difference is unavoidable: upstream draws from Go's `math/rand`, whose
//! stream starts from a 607-value table in Go's source; this suite draws from [`SplitMix64`]
//! seeded 42, so the pods follow the same distributions, in the same order, with different
//! individual draws.

use autoscaler_core::builders::{PodBuilder, itype, pod, pool};
use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{Pod, PodAffinityTerm, Snapshot, TopologySpread};
use autoscaler_core::requirements::{Operator, Requirements};

use super::rng::SplitMix64;

/// Number of instance types.
pub(crate) const TYPES: usize = 400;
/// Pod counts of the suite's cases.
pub(crate) const CASES: [usize; 4] = [1_000, 5_000, 10_000, 20_000];
/// The upstream seed.
pub(crate) const SEED: u64 = 42;
/// The six pod kinds, in the order upstream generates them (names of the pods here).
pub(crate) const KINDS: [&str; 6] = [
    "plain",
    "zone-spread",
    "host-spread",
    "host-affinity",
    "zone-affinity",
    "host-anti-affinity",
];

const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];
const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];
const CPUS: [&str; 5] = ["100m", "250m", "500m", "1", "1500m"];
const MEMS: [&str; 6] = ["100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"];
const SPREAD_KEY: &str = "my-label";
const AFFINITY_KEY: &str = "my-affininity";

/// The fake cloud's hourly price of `vcpu` vCPU and `gib` GiB.
fn price(vcpu: usize, gib: usize) -> f64 {
    0.1 * vcpu as f64 + 0.1 * (gib as f64 * 1024.0 * 1024.0 * 1024.0) / 1e9
}

/// The 400 instance types.
pub(crate) fn instance_types() -> Vec<InstanceType> {
    (0..TYPES)
        .map(|i| {
            let n = i + 1;
            let p = price(n, 2 * n);
            itype(&format!("fake-it-{i}"))
                .cpu(&n.to_string())
                .mem(&format!("{}Gi", 2 * n))
                .max_pods(10 * n as i64)
                .overhead("100m", "10Mi")
                .offer(ZONES[0], CapacityType::Spot, p)
                .offer(ZONES[1], CapacityType::Spot, p)
                .offer(ZONES[0], CapacityType::OnDemand, p)
                .offer(ZONES[1], CapacityType::OnDemand, p)
                .offer(ZONES[2], CapacityType::OnDemand, p)
                .build()
        })
        .collect()
}

fn selector(key: &str, value: &str) -> Requirements {
    Requirements::new().with(key, Operator::In, &[value])
}

/// One pod of `kind` (an index into [`KINDS`]), drawing what upstream draws, in its order.
fn make(rng: &mut SplitMix64, kind: usize, name: String) -> Pod {
    let b = pod(&name);
    let b = match kind {
        1 | 2 => {
            let own = rng.pick(&LABEL_VALUES);
            let other = rng.pick(&LABEL_VALUES);
            let mut b = b.label(SPREAD_KEY, own);
            b.0.spread.push(TopologySpread {
                max_skew: 1,
                topology_key: if kind == 1 {
                    labels::ZONE
                } else {
                    labels::HOSTNAME
                }
                .into(),
                selector: selector(SPREAD_KEY, other),
                hard: true,
                min_domains: 0,
                honor_taints: false,
                ignore_node_affinity: false,
            });
            b
        }
        3 | 4 => {
            let own = rng.pick(&LABEL_VALUES);
            let other = rng.pick(&LABEL_VALUES);
            let mut b = b.label(AFFINITY_KEY, own);
            b.0.affinity.push(PodAffinityTerm {
                held: false,
                topology_key: if kind == 3 {
                    labels::HOSTNAME
                } else {
                    labels::ZONE
                }
                .into(),
                selector: selector(AFFINITY_KEY, other),
                namespaces: Default::default(),
            });
            b
        }
        5 => {
            let mut b = b.label("app", "nginx");
            b.0.anti_affinity.push(PodAffinityTerm {
                held: false,
                topology_key: labels::HOSTNAME.into(),
                selector: selector("app", "nginx"),
                namespaces: Default::default(),
            });
            b
        }
        _ => b.label(SPREAD_KEY, rng.pick(&LABEL_VALUES)),
    };
    sized(rng, b).build()
}

fn sized(rng: &mut SplitMix64, b: PodBuilder) -> PodBuilder {
    let cpu = rng.pick(&CPUS);
    let mem = rng.pick(&MEMS);
    b.cpu(cpu).mem(mem)
}

/// A snapshot with `pods` pending pods and the suite's NodePool, from `seed`.
pub(crate) fn snapshot(pods: usize, seed: u64) -> Snapshot {
    let mut rng = SplitMix64::new(seed);
    let per_kind = pods / KINDS.len();
    let mut pending: Vec<Pod> = Vec::with_capacity(pods);
    for (k, name) in KINDS.iter().enumerate() {
        for i in 0..per_kind {
            pending.push(make(&mut rng, k, format!("{name}-{i:05}")));
        }
    }
    for i in 0..pods - per_kind * KINDS.len() {
        pending.push(make(&mut rng, 0, format!("plain-rest-{i}")));
    }
    Snapshot {
        pending,
        pools: vec![pool("default", instance_types()).build()],
        ..Snapshot::default()
    }
}
