//! The exact optimum of small provisioning problems, and a seeded generator of them: the
//! yardstick the planner's optimality property test and `bench planner --suite small-exact`
//! hold plans to.
//!
//! The optimum is found by dynamic programming over subsets of the pending pods (each subset
//! priced at the cheapest shape that holds it), so it is only for a handful of pods
//! ([`MAX_PODS`]). It follows the planner's own placement rules, so a gap is a packing gap and
//! not a difference of policy: taints, node selectors, and "a pod that needs no GPU gets no
//! GPU instance type when a GPU-less one would hold it alone", which it may still share with a
//! pod that does (the planner lets such a pod ride in a GPU node's spare room). The optimum may
//! size that node for the riders too, which the planner never does, so it stays a bound.

use crate::builders::{itype, pod, pool};
use crate::instance::CapacityType;
use crate::model::Snapshot;
use crate::provision::{Devices, Shape, build_shapes, demand, term_fits_shape};
use crate::resources::Resources;
use crate::taints::untolerated;

/// Most pending pods [`optimum`] accepts (it visits 3^n subset pairs).
pub const MAX_PODS: usize = 12;

/// The lowest total hourly price of new nodes holding every pending pod of `snap` (which must
/// have no existing nodes or claims, limits or all-or-nothing groups to matter: they are not
/// read), each node the cheapest offering of one shape. `None` when some pod fits no shape or
/// there are more than [`MAX_PODS`] pods.
pub fn optimum(snap: &Snapshot) -> Option<f64> {
    let pods = &snap.pending;
    let n = pods.len();
    if n > MAX_PODS {
        return None;
    }
    let shapes = build_shapes(snap);
    let needs: Vec<Resources> = pods
        .iter()
        .map(|p| demand(p, &Devices::default()).into_owned())
        .collect();
    // Which shapes each pod may use, and whether it keeps off GPU shapes unless a pod that
    // does not shares the node.
    let (usable, avoid_gpu): (Vec<Vec<bool>>, Vec<bool>) = pods
        .iter()
        .zip(&needs)
        .map(|(p, need)| {
            let compatible = |s: &Shape| {
                let pool = &snap.pools[s.pool];
                untolerated(&p.tolerations, &pool.taints).is_none()
                    && (p.node_selector.terms.is_empty()
                        || p.node_selector.terms.iter().any(|t| term_fits_shape(t, s)))
            };
            let avoid_gpu = !need.has_gpu_class()
                && shapes
                    .iter()
                    .any(|s| !s.has_gpu && compatible(s) && need.fits(&s.allocatable));
            (shapes.iter().map(compatible).collect(), avoid_gpu)
        })
        .unzip();
    let full = (1usize << n) - 1;
    // cost[mask]: the cheapest single node holding exactly the pods in `mask`.
    let mut cost = vec![f64::INFINITY; full + 1];
    for (mask, c) in cost.iter_mut().enumerate().skip(1) {
        let mut total = Resources::new();
        for (i, need) in needs.iter().enumerate() {
            if mask & (1 << i) != 0 {
                total.add(need);
            }
        }
        let rider_only = (0..n).all(|i| mask & (1 << i) == 0 || avoid_gpu[i]);
        for (si, s) in shapes.iter().enumerate() {
            let ok =
                (0..n).all(|i| mask & (1 << i) == 0 || usable[i][si]) && !(s.has_gpu && rider_only);
            if ok && total.fits(&s.allocatable) {
                *c = c.min(s.offerings[0].price);
            }
        }
    }
    // best[mask]: the cheapest set of nodes for `mask`; the node holding its lowest pod is
    // chosen among the subsets containing that pod.
    let mut best = vec![f64::INFINITY; full + 1];
    best[0] = 0.0;
    for mask in 1..=full {
        let low = mask & mask.wrapping_neg();
        let rest = mask ^ low;
        let mut sub = rest;
        loop {
            let block = sub | low;
            let total = cost[block] + best[mask ^ block];
            if total < best[mask] {
                best[mask] = total;
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & rest;
        }
    }
    best[full].is_finite().then_some(best[full])
}

/// `plan cost / optimum` of the planner on the draws `0..draws` of [`small_instance`] that have
/// an optimum, with their seeds, in seed order. A plan that leaves a pod the optimum places is
/// infinitely worse.
pub fn plan_ratios(draws: u64) -> Vec<(f64, u64)> {
    let mut ratios = Vec::new();
    for seed in 0..draws {
        let snap = small_instance(seed);
        let Some(opt) = optimum(&snap) else {
            continue;
        };
        let plan = crate::provision::plan_provisioning(&snap);
        let r = if plan.unschedulable.is_empty() {
            plan.new_cost() / opt
        } else {
            f64::INFINITY
        };
        ratios.push((r, seed));
    }
    ratios
}

/// A xorshift64* stream: enough to vary small instances, fixed forever for a given seed.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// Uniform in `[lo, hi)`.
    fn real(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// A small provisioning problem drawn from `seed`: 1 to 8 pending pods from one to three
/// templates (so identical pods are common), 2 to 5 instance types with and without GPUs at
/// prices that vary per type, and two NodePools of equal weight, each with some of the types.
/// Some draws have a pod no type holds; [`optimum`] returns `None` for them.
pub fn small_instance(seed: u64) -> Snapshot {
    let mut d = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let ntypes = 2 + d.below(4) as usize;
    let mut types = Vec::new();
    for t in 0..ntypes {
        let gpus = d.pick(&[0u32, 0, 0, 1, 2, 4, 8]);
        let cpu: u32 = if gpus > 0 {
            4 * gpus.max(1) * d.pick(&[1, 2, 3])
        } else {
            d.pick(&[2, 4, 8, 16, 32])
        };
        let mem_gib = cpu * d.pick(&[2, 4, 8]);
        let base = f64::from(cpu) * 0.04 + f64::from(mem_gib) * 0.005;
        let price = (base + f64::from(gpus) * d.real(0.7, 1.4)) * d.real(0.85, 1.15);
        let price = (price * 1000.0).round() / 1000.0;
        let mut b = itype(&format!("t{t}.x{cpu}"))
            .cpu(&cpu.to_string())
            .mem(&format!("{mem_gib}Gi"))
            .offer("z1", CapacityType::OnDemand, price);
        if gpus > 0 {
            b = b.gpus(gpus, "A10G", 24);
        }
        types.push(b.build());
    }
    // Each type goes to pool a, pool b or both; each pool gets at least one.
    let mut a = Vec::new();
    let mut b = Vec::new();
    for (i, t) in types.iter().enumerate() {
        match (i, d.below(3)) {
            (0, _) => a.push(t.clone()),
            (1, _) => b.push(t.clone()),
            (_, 0) => a.push(t.clone()),
            (_, 1) => b.push(t.clone()),
            _ => {
                a.push(t.clone());
                b.push(t.clone());
            }
        }
    }
    let npods = 1 + d.below(8) as usize;
    let ntemplates = 1 + d.below(3) as usize;
    let templates: Vec<(i64, &str, &str)> = (0..ntemplates)
        .map(|_| {
            (
                d.pick(&[0, 0, 0, 1, 1, 2, 4]),
                d.pick(&["250m", "500m", "1", "2", "3", "4", "6"]),
                d.pick(&["512Mi", "1Gi", "2Gi", "4Gi", "8Gi", "16Gi"]),
            )
        })
        .collect();
    let pending = (0..npods)
        .map(|i| {
            let (gpus, cpu, mem) = d.pick(&templates);
            let mut p = pod(&format!("p{i}")).cpu(cpu).mem(mem);
            if gpus > 0 {
                p = p.gpus(gpus);
            }
            p.build()
        })
        .collect();
    Snapshot {
        pending,
        pools: vec![pool("a", a).build(), pool("b", b).build()],
        ..Snapshot::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::itype;

    #[test]
    fn optimum_of_a_hand_solved_instance() {
        // Three 1.5-cpu pods: one 4-cpu node (2 pods, 0.20) + one 2-cpu node (0.11) = 0.31
        // beats two 4-cpu nodes (0.40), three 2-cpu nodes (0.33) and no 8-cpu type exists.
        let small = itype("s")
            .cpu("2")
            .mem("8Gi")
            .offer("z1", CapacityType::OnDemand, 0.11);
        let big = itype("b")
            .cpu("4")
            .mem("16Gi")
            .offer("z1", CapacityType::OnDemand, 0.20);
        let snap = Snapshot {
            pending: (0..3)
                .map(|i| pod(&format!("p{i}")).cpu("1500m").build())
                .collect(),
            pools: vec![pool("a", vec![small.build(), big.build()]).build()],
            ..Snapshot::default()
        };
        let opt = optimum(&snap).expect("solvable");
        assert!((opt - 0.31).abs() < 1e-9, "{opt}");
    }

    #[test]
    fn a_pod_that_fits_nowhere_has_no_optimum() {
        let small = itype("s")
            .cpu("2")
            .mem("8Gi")
            .offer("z1", CapacityType::OnDemand, 0.11);
        let snap = Snapshot {
            pending: vec![pod("huge").cpu("3").build()],
            pools: vec![pool("a", vec![small.build()]).build()],
            ..Snapshot::default()
        };
        assert_eq!(optimum(&snap), None);
    }

    #[test]
    fn draws_are_fixed_by_their_seed() {
        assert_eq!(small_instance(7), small_instance(7));
        assert_ne!(small_instance(7), small_instance(8));
    }
}
