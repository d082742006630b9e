//! The `karpenter` suite: the shape of Karpenter's published scheduling benchmark.
//!
//! 400 instance types, type `i` (0-based) with `i+1` vCPU, `2(i+1)` GiB and `10(i+1)` pod
//! slots, offered spot and on-demand in three zones, priced linearly in size (on-demand
//! 0.05 $/vCPU-hour, spot 30% less); one NodePool. Pods come in deployments of 10 to 50
//! replicas (one cpu/memory size per deployment), one fifth of the pods in each of: no
//! constraint, zone topology spread (maxSkew 1), hostname topology spread (maxSkew 1), zone
//! self-affinity, hostname self-anti-affinity. cpu is one of 100m/250m/500m/1/1.5, memory one
//! of 100Mi/256Mi/512Mi/1Gi/2Gi/4Gi. Everything is drawn from a fixed seed.

use autoscaler_core::builders::{PodBuilder, itype, pod, pool};
use autoscaler_core::instance::{CapacityType, InstanceType};
use autoscaler_core::labels;
use autoscaler_core::model::{Pod, Snapshot};

use super::rng::SplitMix64;

/// Number of instance types.
pub(crate) const TYPES: usize = 400;
/// Pod counts of the suite's cases.
pub(crate) const CASES: [usize; 4] = [1_000, 5_000, 10_000, 20_000];
/// The suite's seed.
pub(crate) const SEED: u64 = 0x6b61_7270_656e_7465;

const ZONES: [&str; 3] = ["test-zone-a", "test-zone-b", "test-zone-c"];
const ON_DEMAND_PER_VCPU: f64 = 0.05;
const SPOT_DISCOUNT: f64 = 0.30;
const CPUS: [&str; 5] = ["100m", "250m", "500m", "1", "1500m"];
const MEMS: [&str; 6] = ["100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"];

/// The five kinds of deployment, one fifth of the pods each.
const KINDS: [&str; 5] = [
    "unconstrained",
    "zone-spread",
    "host-spread",
    "zone-affinity",
    "host-anti-affinity",
];

/// The 400 instance types.
pub(crate) fn instance_types() -> Vec<InstanceType> {
    (0..TYPES)
        .map(|i| {
            let n = i + 1;
            let od = ON_DEMAND_PER_VCPU * n as f64;
            let spot = od * (1.0 - SPOT_DISCOUNT);
            let mut b = itype(&format!("fake-it-{n:03}"))
                .cpu(&n.to_string())
                .mem(&format!("{}Gi", 2 * n))
                .max_pods(10 * n as i64);
            for z in ZONES {
                b = b
                    .offer(z, CapacityType::OnDemand, od)
                    .offer(z, CapacityType::Spot, spot);
            }
            b.build()
        })
        .collect()
}

/// A snapshot with `pods` pending pods and the suite's NodePool, from `seed`.
pub(crate) fn snapshot(pods: usize, seed: u64) -> Snapshot {
    let mut rng = SplitMix64::new(seed);
    let mut pending: Vec<Pod> = Vec::with_capacity(pods);
    for (k, kind) in KINDS.iter().enumerate() {
        // Spread the remainder over the first kinds so the total is exact.
        let count = pods / KINDS.len() + usize::from(k < pods % KINDS.len());
        let mut left = count;
        let mut d = 0;
        while left > 0 {
            let size = rng.range(10, 50).min(left);
            let cpu = rng.pick(&CPUS);
            let mem = rng.pick(&MEMS);
            let app = format!("{kind}-{d:04}");
            for r in 0..size {
                let b = pod(&format!("{app}-{r:02}"))
                    .cpu(cpu)
                    .mem(mem)
                    .label("app", &app);
                pending.push(constrain(b, kind, &app).build());
            }
            left -= size;
            d += 1;
        }
    }
    Snapshot {
        pending,
        pools: vec![pool("default", instance_types()).build()],
        ..Snapshot::default()
    }
}

fn constrain(b: PodBuilder, kind: &str, app: &str) -> PodBuilder {
    match kind {
        "zone-spread" => b.spread(labels::ZONE, 1, app),
        "host-spread" => b.spread(labels::HOSTNAME, 1, app),
        "zone-affinity" => b.affinity(labels::ZONE, app),
        "host-anti-affinity" => b.anti_affinity(labels::HOSTNAME, app),
        _ => b,
    }
}
