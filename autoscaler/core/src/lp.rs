//! An LP lower bound on the hourly cost of provisioning the pending pods on new nodes.
//!
//! The covering problem: choose nodes of each [`Shape`] (an instance type as a pool's node
//! would offer it) so that every pending pod has room on one of them. Its LP relaxation lets a
//! pod be split across shapes and nodes be bought in fractions:
//!
//! ```text
//! minimise   Σ_s c_s x_s
//! subject to Σ_g d_{g,r} y_{g,s} ≤ A_{s,r} x_s    for every shape s and resource r
//!            Σ_s y_{g,s}         = n_g            for every group g
//!            x, y ≥ 0,  y_{g,s} = 0 unless g is compatible with s
//! ```
//!
//! where a *group* is a set of pods with the same per-pod demand `d_g` and the same set of
//! compatible shapes (`n_g` pods), `c_s` is the shape's cheapest available offering and `A_s`
//! its allocatable. A pod is compatible with a shape when it tolerates the pool's taints, some
//! term of its node selector can hold there ([`term_fits_shape`]) and it fits an empty node of
//! it alone, the same tests the planner applies. A fractional GPU share counts as `milli/1000`
//! of its device resource, which the per-device packing of a real node can only exceed.
//! Existing nodes, in-flight claims, topology rules, NodePool limits and weights are left out:
//! dropping constraints keeps the bound valid.
//!
//! Grouping only merges pods whose demand vectors are *equal*: splitting two identical pods the
//! same way loses nothing (average any solution over them), whereas merging different demand
//! vectors under one split would forbid, say, the cpu-heavy pod on the cpu-rich shape and the
//! memory-heavy one on the memory-rich shape, and could push the "bound" above a real plan.
//!
//! A shape is pruned when another one is compatible with every group it is and offers at least
//! as much of every resource those groups use *per dollar*: since the relaxation buys nodes in
//! fractions, `x_s` nodes of the pruned shape can be replaced by `x_s c_s / c_t` of the other at
//! the same cost and no less capacity, so the optimum does not change. (This is why the LP
//! carries no cut that counts nodes, such as one per member of an anti-affinity group: such a
//! cut would make small shapes matter again.) Linear price lists, like the karpenter
//! benchmark's, collapse to a handful of shapes.
//!
//! **Certified, not trusted.** The solver answers within a tolerance, and a primal objective
//! slightly above the true optimum would not be a bound. So the *dual* is solved instead:
//!
//! ```text
//! maximise   Σ_g n_g u_g
//! subject to u_g ≤ Σ_r (d_{g,r} / A_{s,r}) w_{s,r}   for every compatible (g, s)
//!            Σ_r w_{s,r} ≤ c_s                        for every shape s
//!            u, w ≥ 0
//! ```
//!
//! Any `w ≥ 0` meeting the second set of rows, with each `u_g` set to the smallest right-hand
//! side of the first set, is dual feasible and so, by weak duality, a lower bound. The
//! solver's `w` is repaired into exactly that form (negative values clamped, each shape's row
//! scaled under its price, `u` recomputed over every compatible shape), so numerical error can
//! only weaken the bound, never invalidate it. `w_{s,r}` reads as the hourly price of resource
//! `r` on shape `s`; `u_g` as what one pod of group `g` must cost at least.

pub mod devices;

use std::collections::HashMap;

use microlp::{ComparisonOp, OptimizationDirection, Problem, Variable};

use crate::model::{GpuShare, Pod, Snapshot};
use crate::provision::{Devices, Shape, build_shapes, demand, term_fits_shape};
use crate::requirements::{NodeSelector, Requirements};
use crate::resources::Resources;
use crate::taints::{Toleration, untolerated};

/// Dual coefficients below this are left out of the LP handed to the solver. Dropping a
/// positive term only tightens a dual row, so the bound stays valid; it keeps every row's
/// coefficients within the range the solver is accurate in.
const MIN_COEFF: f64 = 1e-7;

/// Relative margin taken off the certified bound to absorb floating-point rounding in its
/// final sums, so that a bound that is tight in exact arithmetic never exceeds the plan's cost.
const ROUNDING_MARGIN: f64 = 1e-9;

/// The result of [`lower_bound`].
#[derive(Clone, Debug, PartialEq)]
pub struct LowerBound {
    /// USD per hour: no set of new nodes that hosts every counted pod costs less.
    pub cost: f64,
    /// Pending pods the bound covers.
    pub pods_counted: usize,
    /// Pending pods no shape can host (they add nothing to the bound).
    pub pods_excluded: usize,
    /// Variables of the primal LP after pruning: one `x_s` per shape plus one `y_{g,s}` per
    /// compatible (group, shape) pair. The solver sees the dual, with one variable per primal
    /// row.
    pub variables: usize,
    /// Rows of the primal LP after pruning: one per (shape, resource used there) plus one per
    /// group. The dual has one row per primal variable.
    pub constraints: usize,
}

/// The pods of one group: equal demand, equal compatible shapes.
struct Group {
    /// Pods in the group.
    count: usize,
    /// Per-pod demand, indexed like [`Lp::resources`].
    demand: Vec<f64>,
    /// Compatible shapes, as indices into the shape list.
    shapes: Vec<usize>,
}

/// The pruned covering LP, before it is handed to the solver.
struct Lp {
    /// Resource names, indexing every demand and allocatable vector.
    resources: Vec<String>,
    groups: Vec<Group>,
    /// Per shape: cheapest price and allocatable (indexed like `resources`); `None` when
    /// pruned or compatible with no group.
    shapes: Vec<Option<(f64, Vec<f64>)>>,
    pods_counted: usize,
    pods_excluded: usize,
}

/// A lower bound on the hourly cost of new nodes for the pending pods of `snapshot`, from the
/// LP relaxation of the covering problem (see the module documentation): every shape a pod's
/// selector, tolerations and size allow may hold it, so it bounds any plan.
///
/// Pure and infallible: should the solver fail, a weaker bound that needs no solver (the best
/// single-resource price bound) is returned instead.
pub fn lower_bound(snapshot: &Snapshot) -> LowerBound {
    let shapes = build_shapes(snapshot);
    let lp = build(snapshot, &shapes);
    let (variables, constraints) = lp.primal_size();
    let cost = solve_dual(&lp)
        .unwrap_or(0.0)
        .max(single_resource_bound(&lp));
    LowerBound {
        cost: (cost * (1.0 - ROUNDING_MARGIN)).max(0.0),
        pods_counted: lp.pods_counted,
        pods_excluded: lp.pods_excluded,
        variables,
        constraints,
    }
}

/// Identity of a pod's demand: its requests and its share of one device.
type DemandKey<'a> = (&'a Resources, Option<&'a GpuShare>);

/// Identity of a pod's placement rules as far as shapes are concerned.
type ClassKey<'a> = (&'a NodeSelector, &'a [Toleration], bool);

fn build(snapshot: &Snapshot, shapes: &[Shape]) -> Lp {
    let mut class_ok: HashMap<ClassKey<'_>, Vec<bool>> = HashMap::new();
    let mut groups_by_key: HashMap<(Vec<usize>, DemandKey<'_>), usize> = HashMap::new();
    let mut compat_cache: HashMap<(ClassKey<'_>, DemandKey<'_>), Vec<usize>> = HashMap::new();
    let mut group_pods: Vec<(DemandKey<'_>, &Pod, Vec<usize>, usize)> = Vec::new();
    let mut excluded = 0;
    for pod in &snapshot.pending {
        let class: ClassKey<'_> = (
            &pod.node_selector,
            &pod.tolerations,
            pod.gpu_share.is_some(),
        );
        let dkey: DemandKey<'_> = (&pod.requests, pod.gpu_share.as_ref());
        let compat = compat_cache
            .entry((class, dkey))
            .or_insert_with(|| {
                let ok = class_ok
                    .entry(class)
                    .or_insert_with(|| class_shapes(snapshot, shapes, pod));
                let alone = demand(pod, &Devices::default());
                (0..shapes.len())
                    .filter(|s| ok[*s] && alone.fits(&shapes[*s].allocatable))
                    .collect::<Vec<usize>>()
            })
            .clone();
        if compat.is_empty() {
            excluded += 1;
            continue;
        }
        match groups_by_key.get(&(compat.clone(), dkey)) {
            Some(g) => group_pods[*g].3 += 1,
            None => {
                groups_by_key.insert((compat.clone(), dkey), group_pods.len());
                group_pods.push((dkey, pod, compat, 1));
            }
        }
    }

    let mut resources: Vec<String> = Vec::new();
    let mut raw: Vec<Vec<(usize, f64)>> = Vec::new();
    for (dkey, _, _, _) in &group_pods {
        let mut d: Vec<(usize, f64)> = dkey
            .0
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(name, v)| (index(name, &mut resources), v as f64))
            .collect();
        if let Some(share) = dkey.1 {
            let r = index(&share.resource, &mut resources);
            let frac = f64::from(share.milli.min(1000)) / 1000.0;
            match d.iter_mut().find(|(i, _)| *i == r) {
                Some(e) => e.1 += frac,
                None => d.push((r, frac)),
            }
        }
        raw.push(d);
    }
    let nres = resources.len();
    let groups: Vec<Group> = group_pods
        .into_iter()
        .zip(raw)
        .map(|((_, _, compat, count), d)| {
            let mut demand = vec![0.0; nres];
            for (r, v) in d {
                demand[r] += v;
            }
            Group {
                count,
                demand,
                shapes: compat,
            }
        })
        .collect();

    let mut shape_groups: Vec<Vec<usize>> = vec![Vec::new(); shapes.len()];
    for (g, group) in groups.iter().enumerate() {
        for s in &group.shapes {
            shape_groups[*s].push(g);
        }
    }
    let mut lp_shapes: Vec<Option<(f64, Vec<f64>)>> = shapes
        .iter()
        .zip(&shape_groups)
        .map(|(sh, gs)| {
            if gs.is_empty() {
                return None;
            }
            let price = sh.offerings.first()?.price;
            let alloc = resources
                .iter()
                .map(|r| sh.allocatable.get(r) as f64)
                .collect();
            Some((price, alloc))
        })
        .collect();
    prune(&mut lp_shapes, &shape_groups, &groups, nres);
    let mut groups = groups;
    for g in &mut groups {
        g.shapes.retain(|s| lp_shapes[*s].is_some());
    }
    Lp {
        resources,
        pods_counted: groups.iter().map(|g| g.count).sum(),
        groups,
        shapes: lp_shapes,
        pods_excluded: excluded,
    }
}

/// The index of resource `name`, appending it when new.
fn index(name: &str, resources: &mut Vec<String>) -> usize {
    match resources.iter().position(|r| r == name) {
        Some(i) => i,
        None => {
            resources.push(name.to_string());
            resources.len() - 1
        }
    }
}

/// Per shape: whether `pod`'s tolerations and node selector allow it (resources aside).
fn class_shapes(snapshot: &Snapshot, shapes: &[Shape], pod: &Pod) -> Vec<bool> {
    let any = [Requirements::new()];
    let terms: &[Requirements] = if pod.node_selector.terms.is_empty() {
        &any
    } else {
        &pod.node_selector.terms
    };
    shapes
        .iter()
        .map(|s| {
            let pool = &snapshot.pools[s.pool];
            // As the planner: a share of one device needs a pool that offers shares.
            (pod.gpu_share.is_none() || pool.sharing.fractional)
                && untolerated(&pod.tolerations, &pool.taints).is_none()
                && terms.iter().any(|t| term_fits_shape(t, s))
        })
        .collect()
}

/// Removes shapes another shape dominates (see the module documentation).
///
/// `t` dominates `s` when it is compatible with every group `s` is and offers at least as much
/// of every resource those groups use *per dollar*. Domination is a preorder; ties between
/// mutually dominating shapes go to the lower index, which makes "beats" a strict partial order,
/// so every pruned shape has an unpruned one that beats it.
fn prune(
    shapes: &mut [Option<(f64, Vec<f64>)>],
    shape_groups: &[Vec<usize>],
    groups: &[Group],
    nres: usize,
) {
    let words = groups.len().div_ceil(64);
    let bits: Vec<Vec<u64>> = shape_groups
        .iter()
        .map(|gs| {
            let mut b = vec![0u64; words];
            for g in gs {
                b[g / 64] |= 1 << (g % 64);
            }
            b
        })
        .collect();
    // Resources the groups of each shape actually use: only those must be matched.
    let used: Vec<Vec<usize>> = shape_groups
        .iter()
        .map(|gs| {
            (0..nres)
                .filter(|r| gs.iter().any(|g| groups[*g].demand[*r] > 0.0))
                .collect()
        })
        .collect();
    let dominates = |t: usize, s: usize| -> bool {
        let (Some((pt, at)), Some((ps, as_))) = (shapes[t].as_ref(), shapes[s].as_ref()) else {
            return false;
        };
        // Cross-multiplied so a free shape (price 0) needs no division.
        bits[s].iter().zip(&bits[t]).all(|(a, b)| a & !b == 0)
            && used[s].iter().all(|r| at[*r] * ps >= as_[*r] * pt)
    };
    let live: Vec<usize> = (0..shapes.len()).filter(|s| shapes[*s].is_some()).collect();
    let pruned: Vec<usize> = live
        .iter()
        .copied()
        .filter(|s| {
            live.iter()
                .any(|t| *t != *s && dominates(*t, *s) && (*t < *s || !dominates(*s, *t)))
        })
        .collect();
    for s in pruned {
        shapes[s] = None;
    }
}

impl Lp {
    fn live_shapes(&self) -> impl Iterator<Item = (usize, f64, &[f64])> + '_ {
        self.shapes
            .iter()
            .enumerate()
            .filter_map(|(s, v)| v.as_ref().map(|(p, a)| (s, *p, a.as_slice())))
    }

    /// Per live shape, the resources some compatible group demands.
    fn shape_resources(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.shapes.len()];
        for g in &self.groups {
            for s in &g.shapes {
                for (r, d) in g.demand.iter().enumerate() {
                    if *d > 0.0 && !out[*s].contains(&r) {
                        out[*s].push(r);
                    }
                }
            }
        }
        for rs in &mut out {
            rs.sort_unstable();
        }
        out
    }

    fn primal_size(&self) -> (usize, usize) {
        let shapes = self.live_shapes().count();
        let pairs: usize = self.groups.iter().map(|g| g.shapes.len()).sum();
        let rows: usize = self.shape_resources().iter().map(Vec::len).sum();
        (shapes + pairs, rows + self.groups.len())
    }

    /// The dual bound of a given resource pricing `w` (per shape, per resource), after
    /// repairing it into a dual-feasible point.
    fn certify(&self, mut w: Vec<Vec<f64>>) -> f64 {
        for (s, price, _) in self.live_shapes() {
            let row = &mut w[s];
            for v in row.iter_mut() {
                if !v.is_finite() || *v < 0.0 {
                    *v = 0.0;
                }
            }
            let sum: f64 = row.iter().sum();
            if sum > price {
                // The factor below 1 covers the rounding of the sum itself.
                let k = price / sum * (1.0 - 1e-12);
                for v in row.iter_mut() {
                    *v *= k;
                }
            }
        }
        let mut total = 0.0;
        for g in &self.groups {
            let u = g
                .shapes
                .iter()
                .map(|s| {
                    let alloc = &self.shapes[*s].as_ref().expect("live shape").1;
                    g.demand
                        .iter()
                        .zip(alloc)
                        .zip(&w[*s])
                        .filter(|((d, _), _)| **d > 0.0)
                        .map(|((d, a), wv)| d / a * wv)
                        .sum::<f64>()
                })
                .fold(f64::INFINITY, f64::min);
            if u.is_finite() && u > 0.0 {
                total += g.count as f64 * u;
            }
        }
        total
    }
}

/// Solves the dual LP and certifies its pricing; `None` when the solver gives up.
fn solve_dual(lp: &Lp) -> Option<f64> {
    if lp.groups.is_empty() {
        return Some(0.0);
    }
    let nres = lp.resources.len();
    let shape_res = lp.shape_resources();
    let mut problem = Problem::new(OptimizationDirection::Maximize);
    let mut wvars: Vec<Vec<Option<Variable>>> = vec![vec![None; nres]; lp.shapes.len()];
    for (s, price, _) in lp.live_shapes() {
        let mut row = Vec::with_capacity(shape_res[s].len());
        for r in &shape_res[s] {
            let v = problem.add_var(0.0, (0.0, f64::INFINITY));
            wvars[s][*r] = Some(v);
            row.push((v, 1.0));
        }
        problem.add_constraint(row.as_slice(), ComparisonOp::Le, price);
    }
    for g in &lp.groups {
        let u = problem.add_var(g.count as f64, (0.0, f64::INFINITY));
        for s in &g.shapes {
            let alloc = &lp.shapes[*s].as_ref().expect("live shape").1;
            let mut row = vec![(u, 1.0)];
            for r in &shape_res[*s] {
                let a = g.demand[*r] / alloc[*r];
                if a >= MIN_COEFF {
                    row.push((wvars[*s][*r].expect("priced resource"), -a));
                }
            }
            problem.add_constraint(row.as_slice(), ComparisonOp::Le, 0.0);
        }
    }
    let solution = problem.solve().ok()?.into_solution().ok()?;
    let w: Vec<Vec<f64>> = wvars
        .iter()
        .map(|row| {
            row.iter()
                .map(|v| v.map_or(0.0, |v| solution.var_value(v)))
                .collect()
        })
        .collect();
    Some(lp.certify(w))
}

/// The best bound that prices a single resource: every shape charges its whole price to `r`.
/// Dual feasible by construction, so valid without a solver.
fn single_resource_bound(lp: &Lp) -> f64 {
    (0..lp.resources.len())
        .map(|r| {
            let w: Vec<Vec<f64>> = lp
                .shapes
                .iter()
                .map(|sh| {
                    let mut row = vec![0.0; lp.resources.len()];
                    if let Some((price, alloc)) = sh
                        && alloc[r] > 0.0
                    {
                        row[r] = *price;
                    }
                    row
                })
                .collect();
            lp.certify(w)
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests;
