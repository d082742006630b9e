//! Opening a claim for a pod: what a new node of each NodePool offers it, and the choice among
//! the pools. A pool's answer to a pod that neither its topology, nor DRA, nor any limit ties
//! to the plan so far is worked out once per demand group and kept.

use std::sync::Arc;

use crate::requirements::Requirements;
use crate::taints::untolerated;

use super::Planner;
use super::shapes::{Devices, demand, priced_candidates, term_fits_shape};

/// Why a pool or one of its terms refused a pod, in words; `limited` when a limit did.
#[derive(Debug)]
pub(super) struct Refusal {
    why: String,
    limited: bool,
}

/// A term's requirements and fitting shapes once the pod's preferred node affinity has
/// narrowed them, with the preferences met (heaviest as the highest bit) and, when some were,
/// the term as it stood before.
struct Narrowed {
    reqs: Requirements,
    fitting: Vec<usize>,
    met: u64,
    unpreferred: Option<(Requirements, Vec<usize>)>,
}

/// What pricing a narrowed term leaves.
#[derive(Debug)]
pub(super) enum Priced {
    /// No candidate has an offering the requirements allow: refused without a word, as the
    /// zone or capacity type already explains it elsewhere.
    Nothing,
    /// The candidates fall short of the pool's minValues.
    Short(String),
    /// The candidates, cheapest first, and the cheapest price.
    Offers { price: f64, cands: Vec<usize> },
}

/// A pool's answer to the pods of one demand group, kept when nothing in it depends on the
/// plan so far (see [`Planner::keeps_answer`]).
#[derive(Debug)]
pub(super) enum PoolAnswer {
    /// The pool refuses every node-selector term (its taints).
    Refused(String),
    /// Per node-selector term: refused before the topology check, or the preferences met,
    /// the requirements and what pricing left.
    Terms(Vec<Result<(u64, Requirements, Priced), Refusal>>),
}

/// A reason a pool gave, resolved to words only when no pool takes the pod.
enum Reason {
    Text(String),
    Kept(Arc<PoolAnswer>, usize),
}

/// What [`Planner::claim_target`] says of a claim: price per pod, price and candidate of the
/// node it would be sized to.
pub(super) type Target = (f64, f64, Option<usize>);

/// The pool chosen so far: preferences met, weight, the node the claim would be sized to
/// (worked out when another pool ties), cheapest price, pool, requirements and candidates.
type Best = (
    u64,
    i32,
    Option<Target>,
    f64,
    usize,
    Requirements,
    Vec<usize>,
);

/// A new claim for a pod: its pool, requirements, candidates and cheapest price, the price of
/// the cheapest node any pool could launch for the pod alone, and the node the claim would be
/// sized to when choosing among pools worked it out (opening the claim needs it again).
pub(super) type Opening = (usize, Requirements, Vec<usize>, f64, f64, Option<Target>);

impl Planner<'_> {
    /// The pool, requirements, candidates and price of a new claim for pod `i`, and the price
    /// of the cheapest node any pool could launch for it alone, or the reason there is none.
    pub(super) fn open_claim_candidates(&mut self, i: usize) -> Result<Opening, String> {
        let snap = self.snap;
        let pod = &snap.pending[i];
        let ci = self.class_of[i];
        let avoid_gpu = self.avoid_gpu(i);
        // Which of the pod's preferred terms a pool's claim meets, heaviest first as the
        // highest bit: pools compete on it before their weight, as Karpenter tries the
        // heaviest preference against every NodePool before it relaxes it.
        let mut prefs = pod.preferred.clone();
        prefs.sort_by_key(|p| std::cmp::Reverse(p.0));
        prefs.truncate(64);
        let every_pref: u64 = if prefs.is_empty() {
            0
        } else {
            u64::MAX << (64 - prefs.len())
        };
        let prefs: Vec<Requirements> = prefs.into_iter().map(|(_, t)| t).collect();
        // A pod without zone rules, preferences or DRA claims gets the same answer from a pool
        // without limits as every other pod of its demand group, whenever it asks.
        let keeps = prefs.is_empty() && !self.has_dra(i) && !self.needs_zone(i);
        let empty = super::Slot::empty(vec![0; self.nsel()]);
        let mut best: Option<Best> = None;
        // Per pool that could take the pod: the preferences met, its weight and price. The
        // cheapest node for the pod alone is taken among the pools that tie with the chosen
        // one on both: a lighter pool, or one meeting fewer preferences, could never be chosen.
        let mut priced_pools: Vec<(u64, i32, f64)> = Vec::new();
        let mut reasons: Vec<Reason> = Vec::new();
        let mut limited: Vec<String> = Vec::new();
        for pi in self.pool_order.clone() {
            let pool = &snap.pools[pi];
            if let Some((met, w, ..)) = &best
                && *w > pool.weight
                && *met == every_pref
            {
                break;
            }
            let kept = keeps && self.keeps_answer(pi);
            let answer = if kept {
                let key = (self.demand_group[i], pi, self.relaxed);
                match self.pool_answers.get(&key) {
                    Some(a) => a.clone(),
                    None => {
                        let a = Arc::new(self.pool_answer(i, pi, &prefs, &empty, true));
                        self.pool_answers.insert(key, a.clone());
                        a
                    }
                }
            } else {
                Arc::new(self.pool_answer(i, pi, &prefs, &empty, false))
            };
            let terms = match &*answer {
                PoolAnswer::Refused(_) => {
                    reasons.push(Reason::Kept(answer.clone(), usize::MAX));
                    continue;
                }
                PoolAnswer::Terms(terms) => terms,
            };
            for (ti, term) in terms.iter().enumerate() {
                let (met, reqs, priced) = match term {
                    Err(r) => {
                        if r.limited {
                            limited.push(pool.name.clone());
                        }
                        reasons.push(Reason::Kept(answer.clone(), ti));
                        continue;
                    }
                    Ok(t) => t,
                };
                // A kept answer left the topology check to each pod, where it stood.
                if kept && !self.topology_ok(i, &empty, None) {
                    reasons.push(Reason::Text(
                        "topology constraints cannot be met on a new node".into(),
                    ));
                    continue;
                }
                let (price, cands) = match priced {
                    Priced::Nothing => continue,
                    Priced::Short(_) => {
                        reasons.push(Reason::Kept(answer.clone(), ti));
                        continue;
                    }
                    Priced::Offers { price, cands } => (*price, cands),
                };
                if let Some(why) = self.attaches_too_many(i, cands) {
                    reasons.push(Reason::Text(why));
                    continue;
                }
                let met = *met;
                priced_pools.push((met, pool.weight, price));
                // Pools compete on the price per pod of the node the claim would be sized to,
                // not on the cheapest node for this pod alone: a pool whose only small node is
                // cheap can still cost more per pod than another pool's big node once the
                // similar pods that follow share it. Prices per pod are worked out only when
                // there is a choice.
                let (better, unit) = match &mut best {
                    None => (true, None),
                    // More of the pod's preferences met wins; fewer, or as many in a lighter
                    // pool, loses.
                    Some(b) if met != b.0 => (met > b.0, None),
                    Some(b) if pool.weight < b.1 => (false, None),
                    Some(b) => {
                        let theirs =
                            b.2.get_or_insert_with(|| self.claim_target(i, &b.5, &b.6, avoid_gpu))
                                .0
                                * self.nodes_per_open(b.4) as f64;
                        let target = self.claim_target(i, reqs, cands, avoid_gpu);
                        // An atomic pool opens all its missing nodes for this pod.
                        let unit = target.0 * self.nodes_per_open(pi) as f64;
                        let better = unit < theirs * (1.0 - 1e-9)
                            || (unit <= theirs * (1.0 + 1e-9) && price < b.3);
                        (better, Some(target))
                    }
                };
                if better {
                    best = Some((
                        met,
                        pool.weight,
                        unit,
                        price,
                        pi,
                        reqs.clone(),
                        cands.clone(),
                    ));
                }
            }
        }
        limited.sort();
        limited.dedup();
        self.limited[i] = if best.is_some() { Vec::new() } else { limited };
        match best {
            Some((met, weight, target, price, pi, reqs, cands)) => {
                let cheapest = priced_pools
                    .iter()
                    .filter(|(m, w, _)| *m == met && *w == weight)
                    .map(|(.., p)| *p)
                    .fold(f64::INFINITY, f64::min);
                Ok((pi, reqs, cands, price, cheapest, target))
            }
            None => {
                let reasons: Vec<String> = reasons.into_iter().map(Reason::words).collect();
                if !self.hints.contains_key(&ci) {
                    let vocabulary = (self.vocabulary)
                        .get_or_init(|| crate::vocabulary::Vocabulary::of_pools(&self.snap.pools));
                    // The pod's own terms, not the class's: a value the topology pins added
                    // was chosen by the plan, and "did you mean" would blame the user for it.
                    let hint = vocabulary.hint(&snap.pending[i].node_selector.terms);
                    self.hints.insert(ci, hint);
                }
                Err(self.summarize(reasons) + &self.hints[&ci])
            }
        }
    }

    /// Why no node of `candidates` could ever run pod `i`: every one of them is known, from
    /// the CSINodes of existing nodes of its type, to attach fewer volumes of a driver than
    /// the pod alone uses. Launching one would leave the pod pending beside it, and launch
    /// again at the next plan.
    fn attaches_too_many(&self, i: usize, candidates: &[usize]) -> Option<String> {
        let pod = &self.snap.pending[i];
        if pod.volumes.is_empty() || self.shape_volume_limits.is_empty() {
            return None;
        }
        // The refusal with the largest count: what even the roomiest type falls short of.
        let mut roomiest: Option<(String, u32, usize)> = None;
        for c in candidates {
            let Some(limits) = &self.shape_volume_limits[*c] else {
                return None;
            };
            let over = super::volume_limits::VolumeRoom::new(limits).and_then(|room| {
                room.over_limit(&pod.volumes)
                    .map(|(d, n, _, k)| (d.to_string(), n, k))
            })?;
            if roomiest.as_ref().is_none_or(|r| over.1 > r.1) {
                roomiest = Some(over);
            }
        }
        roomiest.map(|(driver, limit, needs)| {
            format!(
                "its {needs} volume(s) of {driver} are more than the node types that fit it attach (at most {limit}, their nodes' CSINodes say)"
            )
        })
    }

    /// Whether pool `pi`'s answer to a pod can be kept for its demand group: nothing in it
    /// counts what the plan has opened so far (no pool or cluster limit, not atomic).
    fn keeps_answer(&self, pi: usize) -> bool {
        let pool = &self.snap.pools[pi];
        pool.atomic_nodes.is_none()
            && pool.limits.nodes.is_none()
            && pool.limits.resources.is_empty()
            && pool.limits.gpus_by_model.is_empty()
            && self.snap.cluster_limits.is_empty()
    }

    /// Pool `pi`'s answer to pod `i`: narrowed, then the zone its topology rules pick or the
    /// topology check on a new node, then priced. `kept`: the answer is kept for the pod's
    /// demand group (a pod without zone rules), so the topology check, which depends on the
    /// plan so far, is left to each pod that reads it.
    fn pool_answer(
        &mut self,
        i: usize,
        pi: usize,
        prefs: &[Requirements],
        empty: &super::Slot,
        kept: bool,
    ) -> PoolAnswer {
        if let Some(why) = self.pool_refuses(i, pi) {
            return PoolAnswer::Refused(why);
        }
        let ci = self.class_of[i];
        let terms = self.classes[ci].terms.clone();
        let mut out = Vec::with_capacity(terms.len());
        for (ti, term) in terms.iter().enumerate() {
            let n = match self.narrowed(i, pi, ti, term, prefs) {
                Ok(n) => n,
                Err(r) => {
                    out.push(Err(r));
                    continue;
                }
            };
            let Narrowed {
                mut reqs,
                mut fitting,
                mut met,
                unpreferred,
            } = n;
            let name = &self.snap.pools[pi].name;
            if self.needs_zone(i) {
                let mut zone = self.pick_zone(i, &reqs, &fitting, empty);
                if zone.is_none()
                    && let Some(u) = unpreferred
                    && reqs != u.0
                {
                    // A preference is soft: the scheduler would place the pod outside it
                    // rather than leave it pending, so spread is not held to it.
                    (reqs, fitting) = u;
                    met = 0;
                    zone = self.pick_zone(i, &reqs, &fitting, empty);
                }
                let Some(z) = zone else {
                    out.push(Err(Refusal {
                        why: format!(
                            "NodePool {name}: no zone satisfies the pod's topology constraints"
                        ),
                        limited: false,
                    }));
                    continue;
                };
                super::topology::pin_zone(&mut reqs, z);
                // The shapes without an offering in that zone are dropped by the pricing
                // below.
            } else if !kept && !self.topology_ok(i, empty, None) {
                out.push(Err(Refusal {
                    why: "topology constraints cannot be met on a new node".into(),
                    limited: false,
                }));
                continue;
            }
            let priced = self.priced(pi, &reqs, &fitting);
            out.push(Ok((met, reqs, priced)));
        }
        PoolAnswer::Terms(out)
    }

    /// Why pool `pi` refuses pod `i` whatever its terms: a taint it does not tolerate, or one
    /// it would rather avoid.
    fn pool_refuses(&self, i: usize, pi: usize) -> Option<String> {
        let ci = self.class_of[i];
        let pool = &self.snap.pools[pi];
        if let Some(t) = untolerated(&self.classes[ci].tolerations, &pool.taints) {
            return Some(format!("taint {t} of NodePool {} not tolerated", pool.name));
        }
        if self.avoids(ci, &pool.taints) {
            return Some(format!(
                "NodePool {} has a PreferNoSchedule taint the pod does not tolerate",
                pool.name
            ));
        }
        None
    }

    /// Node-selector term `ti` of pod `i`'s class in pool `pi`: the shapes that fit the pod
    /// within the pool's limits, kept off GPU types when the pod needs none and others fit,
    /// narrowed by each preferred term that still leaves something.
    fn narrowed(
        &mut self,
        i: usize,
        pi: usize,
        ti: usize,
        term: &Requirements,
        prefs: &[Requirements],
    ) -> Result<Narrowed, Refusal> {
        let ci = self.class_of[i];
        let snap = self.snap;
        let pool = &snap.pools[pi];
        let need = demand(&snap.pending[i], &Devices::default());
        let node_reqs = super::shapes::node_requirements(pool);
        if let Some(k) = node_reqs.conflict_with(term) {
            // Where the pod's topology rules pinned it is no affinity of its own.
            let pin = self.classes[ci].pins.iter().find(|p| {
                p.strip_prefix(k.as_str())
                    .is_some_and(|v| v.starts_with(['=', ' ']))
            });
            let why = match pin {
                Some(pin) => format!(
                    "NodePool {} cannot launch where the pod's topology spread or pod \
                     (anti-)affinity lets it go ({pin}), and no existing node there has room",
                    pool.name
                ),
                None => format!(
                    "NodePool {} requirement on {k} conflicts with the pod's node affinity",
                    pool.name
                ),
            };
            return Err(Refusal {
                why,
                limited: false,
            });
        }
        let reqs = node_reqs.intersect(term);
        if !self.classes[ci].pool_shapes.contains_key(&(pi, ti)) {
            let allowed = (0..self.shapes.len())
                .filter(|s| {
                    let sh = &self.shapes[*s];
                    sh.pool == pi && self.classes[ci].shape_ok[*s] && term_fits_shape(term, sh)
                })
                .collect();
            self.classes[ci].pool_shapes.insert((pi, ti), allowed);
        }
        let mut limit_reason = None;
        let mut fitting: Vec<usize> = self.classes[ci].pool_shapes[&(pi, ti)]
            .iter()
            .copied()
            .filter(|s| need.fits(&self.shapes[*s].allocatable))
            .filter(|s| match self.fits_limits(pi, &self.shapes[*s], &reqs) {
                Ok(()) => true,
                Err(e) => {
                    limit_reason.get_or_insert(e);
                    false
                }
            })
            .collect();
        if fitting.is_empty() {
            return Err(match limit_reason {
                Some(why) => Refusal { why, limited: true },
                None => Refusal {
                    why: self
                        .dra_reason(i, pi)
                        .unwrap_or_else(|| self.no_fit_reason(pi, ci, term, &need)),
                    limited: false,
                },
            });
        }
        if !need.has_gpu_class() && fitting.iter().any(|s| !self.shapes[*s].has_gpu) {
            // GPU types are a last resort for a pod that needs none, unless dropping them
            // leaves fewer values than the pool's minValues.
            let cpu_only: Vec<usize> = fitting
                .iter()
                .copied()
                .filter(|s| !self.shapes[*s].has_gpu)
                .collect();
            if self.min_values_short(pool, &cpu_only, &reqs).is_none() {
                fitting = cpu_only;
            }
        }
        // Preferred node affinity breaks ties: keep it when something still fits. Without it,
        // for when it leaves no zone the pod's topology allows.
        let mut out = Narrowed {
            reqs,
            fitting,
            met: 0,
            unpreferred: None,
        };
        for (k, pterm) in prefs.iter().enumerate() {
            let r2 = out.reqs.intersect(pterm);
            let kept: Vec<usize> = out
                .fitting
                .iter()
                .copied()
                .filter(|s| term_fits_shape(&r2, &self.shapes[*s]))
                .collect();
            // Under BestEffort the preference wins and minValues are lowered to what it
            // leaves: Karpenter tries a preferred term as required first, and only a claim
            // that cannot be opened at all gets it relaxed.
            if r2.satisfiable()
                && !kept.is_empty()
                && (self.best_effort() || self.min_values_short(pool, &kept, &r2).is_none())
            {
                if out.unpreferred.is_none() {
                    out.unpreferred = Some((out.reqs.clone(), out.fitting.clone()));
                }
                out.reqs = r2;
                out.fitting = kept;
                out.met |= 1 << (63 - k);
            }
        }
        Ok(out)
    }

    /// The candidates of `fitting` that have an offering `reqs` allows, cheapest first, unless
    /// they fall short of pool `pi`'s minValues under `Strict` (under `BestEffort` the claim
    /// opened with them lowers its minValues instead, see [`Planner::open_claim`]).
    fn priced(&self, pi: usize, reqs: &Requirements, fitting: &[usize]) -> Priced {
        let priced = priced_candidates(&self.shapes, fitting, reqs);
        let Some(&(price, _)) = priced.first() else {
            return Priced::Nothing;
        };
        let cands: Vec<usize> = priced.into_iter().map(|(_, c)| c).collect();
        if !self.best_effort()
            && let Some(why) = self.min_values_short(&self.snap.pools[pi], &cands, reqs)
        {
            return Priced::Short(why);
        }
        Priced::Offers { price, cands }
    }
}

impl Reason {
    fn words(self) -> String {
        match self {
            Reason::Text(s) => s,
            Reason::Kept(answer, ti) => match (&*answer, ti) {
                (PoolAnswer::Refused(why), _) => why.clone(),
                (PoolAnswer::Terms(terms), ti) => match &terms[ti] {
                    Err(r) => r.why.clone(),
                    Ok((_, _, Priced::Short(why))) => why.clone(),
                    Ok(_) => String::new(),
                },
            },
        }
    }
}
