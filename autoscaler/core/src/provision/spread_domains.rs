//! Hard topology spread over keys other than zone and hostname (capacity type, an instance
//! type's label such as `kubernetes.io/arch`, a label the NodePool gives its nodes): before
//! planning, each pending pod with such a constraint is pinned to one domain, the one with the
//! fewest matching pods, as Karpenter does. Without it every pod of a deployment spread over
//! `karpenter.sh/capacity-type` went to the cheapest domain (spot), which the kube-scheduler
//! then accepts because it only knows domains that have nodes; the split the user asked for
//! (spot and on-demand in turn, or the 80/20 split of a label two NodePools give disjoint
//! values) never happened.
//!
//! Domains are the values nodes for the pod could carry: its usable instance types' labels or
//! allowed offerings' capacity types, the values a NodePool's requirement allows for a label it
//! defines, and the values on existing nodes the pod's node selection matches (Kubernetes'
//! default `nodeAffinityPolicy: Honor`; under `Ignore` every node and NodePool gives its
//! values, the ones the pod cannot select out of reach). A NodePool or node whose taints the pod does not
//! tolerate still gives its domains, unreachable, unless the spread says
//! `nodeTaintsPolicy: Honor` (the default is `Ignore`).
//! A pod counts where its node carries the value; pods of this plan count where they were
//! pinned. A key whose values cannot be listed (a NodePool allowing any value but some) pins
//! nothing: the node must then only carry the label ([`super::classes`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::labels;
use crate::model::PodAffinityTerm;
use crate::requirements::{Constraint, NodeSelector, ValueSet};

use super::domain_sources::{honors_taints, ignores_node_affinity};
use super::{Planner, SlotKind};

/// Keys the planner balances itself: claims are pinned to a zone, and every new node is a
/// hostname domain of its own.
pub(super) fn balanced_elsewhere(key: &str) -> bool {
    key == labels::ZONE || key == labels::HOSTNAME
}

/// Per domain value, the cheapest price a node there could have (infinite for a value only
/// existing nodes carry).
pub(super) type Domains = BTreeMap<String, f64>;

/// A running pod's anti-affinity term: (the pod's namespace, the term, its node's value of the
/// term's key).
pub(super) type RunningAnti<'s> = (&'s str, &'s PodAffinityTerm, &'s str);

/// The values of `key` where running pods' anti-affinity keeps pod `p` out.
fn running_forbidden(
    running: &[RunningAnti<'_>],
    p: &crate::model::Pod,
    key: &str,
) -> BTreeSet<String> {
    running
        .iter()
        .filter(|(ns, t, _)| t.topology_key == key && t.selects(ns, &p.key.namespace, &p.labels))
        .map(|(.., v)| v.to_string())
        .collect()
}

/// The one value of `key` pod `p`'s node selection allows, when every term pins it to one.
fn fixed_value<'p>(p: &'p crate::model::Pod, key: &str) -> Option<&'p str> {
    let mut out = None;
    for t in &p.node_selector.terms {
        let v = t.get(key)?.single_value()?;
        if out.is_some_and(|o| o != v) {
            return None;
        }
        out = Some(v);
    }
    out
}

/// A requirement a pod's topology rules put on its node, on a key the planner does not
/// balance itself: one domain (`In [v]`), a set of them, or every domain but some.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Pin {
    pub(super) key: String,
    pub(super) constraint: Constraint,
}

impl Pin {
    fn one(key: &str, value: &str) -> Self {
        Self::within(key, [value.to_string()].into())
    }

    fn within(key: &str, values: BTreeSet<String>) -> Self {
        Pin {
            key: key.to_string(),
            constraint: Constraint {
                allow_absent: false,
                values: ValueSet::In(values),
                gt: None,
                lt: None,
            },
        }
    }

    /// Every value but `values`, or no label at all (the scheduler's anti-affinity has
    /// nothing to hold against a node without the key).
    fn outside(key: &str, values: BTreeSet<String>) -> Self {
        Pin {
            key: key.to_string(),
            constraint: Constraint {
                allow_absent: true,
                values: ValueSet::NotIn(values),
                gt: None,
                lt: None,
            },
        }
    }

    /// Whether a pod with this pin waits: no domain is left, or its one domain cannot be
    /// reached (`sure` false). A pin to several domains, or all but some, leaves the pod a
    /// place.
    fn waits(&self, sure: bool) -> bool {
        match &self.constraint.values {
            ValueSet::In(v) => v.is_empty() || (v.len() == 1 && !sure),
            ValueSet::NotIn(_) => false,
        }
    }

    /// As the reasons say it: `karpenter.sh/capacity-type=spot`, `kubernetes.io/arch in
    /// [arm64]`, `… not in [a]`, `… in no domain`.
    pub(super) fn describe(&self) -> String {
        let list = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(", ");
        match &self.constraint.values {
            ValueSet::In(v) if v.len() == 1 => format!("{}={}", self.key, list(v)),
            ValueSet::In(v) if v.is_empty() => format!(
                "{} in no domain: its pod affinity selects no pod anywhere, its \
                 anti-affinity leaves none, or the ones left are past its topology spread's \
                 skew",
                self.key
            ),
            ValueSet::In(v) => format!("{} in [{}]", self.key, list(v)),
            ValueSet::NotIn(v) => format!("{} not in [{}]", self.key, list(v)),
        }
    }
}

/// What [`Planner::domain_pins`] keeps while it walks the pending pods.
#[derive(Default)]
struct Walk<'s> {
    /// Matching pods on existing nodes and claims in flight, per (selector, key, node
    /// selection whose nodes alone count, or `None` for all) and value.
    counted: HashMap<(usize, &'s str, Option<&'s NodeSelector>), BTreeMap<String, u32>>,
    /// Pods of this plan sure to be in one domain (pinned there, and able to get a node
    /// there), per (selector they match, key, value): what a spread counts.
    planned: HashMap<(usize, &'s str, String), u32>,
    /// Pending pods known to be in one domain (pinned there, or put there by their own node
    /// selection), per (selector they match, key, value): what pod (anti-)affinity looks for.
    present: HashMap<(usize, &'s str, String), u32>,
    /// Room on existing nodes per scope and value for pods like the last one listed for the
    /// scope, used up as pods are pinned there.
    room: HashMap<Scope<'s>, BTreeMap<String, u32>>,
    /// Anti-affinity terms of pods of this plan pinned to one domain, as running pods' are
    /// kept ([`RunningAnti`]): a later pod they select keeps out of that domain.
    pending_anti: Vec<(&'s str, &'s PodAffinityTerm, String)>,
    /// Per (key, node selection): the values of the key on nodes that selection matches.
    known: HashMap<(&'s str, &'s NodeSelector), BTreeSet<String>>,
    /// Per scope, the pod its domains were last listed for, and them: the pods of a workload
    /// come one after another, and the next one with the same node selection and requests
    /// has the same domains (and the room left).
    domains: HashMap<Scope<'s>, (usize, Option<Domains>)>,
}

impl<'s> Walk<'s> {
    fn has_room(&self, scope: &Scope<'s>, v: &str) -> bool {
        self.room
            .get(scope)
            .and_then(|r| r.get(v))
            .is_some_and(|n| *n > 0)
    }
}

/// A key whose domain is being chosen for a pod, with the pins the pod already has on other
/// keys: a domain counts only where a node also meets those. Chosen one key at a time without
/// them, a pod spread over a label only an on-demand NodePool gives one value, and also over
/// the capacity type, could be pinned to that value and to spot: no NodePool has such nodes,
/// and the pins came out differently each round, launching nodes the pod never took.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Scope<'s> {
    pub(super) key: &'s str,
    pub(super) given: Vec<Pin>,
}

impl<'s> Scope<'s> {
    pub(super) fn new(key: &'s str, pins: &[Pin]) -> Self {
        let given = pins.iter().filter(|p| p.key != key).cloned().collect();
        Scope { key, given }
    }

    /// Whether a node with `labels` meets the pins on other keys.
    pub(super) fn admits(&self, labels: &crate::requirements::Labels) -> bool {
        self.given
            .iter()
            .all(|p| p.constraint.matches(labels.get(&p.key).map(String::as_str)))
    }
}

/// One hard spread constraint seen from one pod: matching pods per domain, their minimum
/// (0 while fewer domains than `minDomains`), whether the pod counts itself, and `maxSkew`.
struct SpreadView {
    counts: BTreeMap<String, u32>,
    min: u32,
    itself: u32,
    skew: u32,
}

impl SpreadView {
    /// Whether the pod may go to domain `v`: `count + itself <= min + maxSkew`.
    fn allows(&self, v: &str) -> bool {
        let n = self.counts.get(v).copied().unwrap_or(0);
        u64::from(n) + u64::from(self.itself) <= u64::from(self.min) + u64::from(self.skew)
    }
}

/// What one pod's rules say about one key, gathered before a domain is chosen.
#[derive(Default)]
struct KeyRules<'t> {
    /// Hard spread constraints, with their selector ids.
    spreads: Vec<(usize, &'t crate::model::TopologySpread)>,
    /// Domains pod affinity allows (`None`: no affinity term on the key).
    allowed: Option<BTreeSet<String>>,
    /// Domains pod anti-affinity forbids (its own terms, and running pods' against it).
    forbidden: BTreeSet<String>,
    /// The pod needs one domain of its own choosing: an affinity term selecting the pod
    /// itself with no target to follow, an anti-affinity term (its domain must be known for
    /// the term to hold against the pods after it), or another pod's term selecting it.
    choose: bool,
    /// An affinity term that selects no pod anywhere, the pod itself included.
    lonely: bool,
}

impl<'a> Planner<'a> {
    /// Per pending pod, the requirements its hard topology spread and its required pod
    /// (anti-)affinity over keys other than zone and hostname put on its node; empty for
    /// most pods. Every rule of a pod on one key is weighed together, into one requirement.
    ///
    /// **Spread.** Of the domains every spread constraint on the key allows
    /// (`count + 1 <= min + maxSkew`; the minimum 0 while fewer domains than `minDomains`
    /// are eligible), the pod is pinned to one it can reach (a new node can be launched
    /// there, or an existing node there has room for it), the one with the fewest matching
    /// pods, then the cheapest (existing room costs nothing), then by name; Karpenter likewise
    /// takes the emptiest domain a node it can launch or use allows. Counts, as the
    /// scheduler's default `nodeAffinityPolicy: Honor` has them, take only nodes the pod's
    /// node selection matches. When no domain is reachable the pod is pinned to the emptiest
    /// allowed one and waits there, as the scheduler would keep it; it is not counted, so it
    /// does not push the next pods past the skew.
    ///
    /// **Affinity.** The pod goes where a pod its term selects runs or is known to be (pinned,
    /// or put there by its node selection); the first of a group that selects itself picks
    /// the cheapest domain it can reach, and the rest follow; with no such pod anywhere it
    /// waits ("in no domain").
    ///
    /// **Anti-affinity.** The pod keeps out of the domains of the pods its term selects, and
    /// of the domains whose running pods' anti-affinity selects it; a pod that selects itself
    /// takes one domain of its own, so the next one keeps out of it. A pending pod that such a
    /// term selects, with no rule of its own on the key, is pinned to the cheapest domain it
    /// can reach first, so that the pods avoiding (or following) it know where it will be.
    pub(super) fn domain_pins(&self) -> Vec<Vec<Pin>> {
        let pending = &self.snap.pending;
        let mut pins: Vec<Vec<Pin>> = vec![Vec::new(); pending.len()];
        let ours = |k: &str| !balanced_elsewhere(k);
        let mut keys: BTreeSet<&'a str> = BTreeSet::new();
        // Selectors of (anti-)affinity terms per key: whose targets must be placed first.
        let mut targeted: BTreeMap<&'a str, BTreeSet<usize>> = BTreeMap::new();
        for (i, p) in pending.iter().enumerate() {
            keys.extend(
                p.spread
                    .iter()
                    .filter(|t| t.hard && ours(&t.topology_key))
                    .map(|t| t.topology_key.as_str()),
            );
            let terms = p
                .affinity
                .iter()
                .zip(&self.sel_of_affinity[i])
                .chain(p.anti_affinity.iter().zip(&self.sel_of_anti[i]));
            for (t, sel) in terms.filter(|(t, _)| ours(&t.topology_key)) {
                keys.insert(t.topology_key.as_str());
                targeted
                    .entry(t.topology_key.as_str())
                    .or_default()
                    .insert(*sel);
            }
        }
        let running_anti = self.running_anti_affinity();
        if keys.is_empty() && running_anti.is_empty() {
            return pins;
        }
        let mut walk = Walk::default();
        for (j, p) in pending.iter().enumerate() {
            for k in &keys {
                if let Some(v) = fixed_value(p, k) {
                    for s in &self.matches[j] {
                        *walk.present.entry((*s, *k, v.to_string())).or_default() += 1;
                    }
                }
            }
        }
        let has_rules = |p: &crate::model::Pod, k: &str| {
            p.spread.iter().any(|t| t.hard && t.topology_key == k)
                || p.affinity.iter().any(|t| t.topology_key == k)
                || p.anti_affinity.iter().any(|t| t.topology_key == k)
        };
        // Targets without rules of their own on the key go first.
        for (j, p) in pending.iter().enumerate() {
            for (key, sels) in &targeted {
                let selected = self.matches[j].iter().any(|s| sels.contains(s));
                if !selected || has_rules(p, key) || fixed_value(p, key).is_some() {
                    continue;
                }
                let forbidden = running_forbidden(&running_anti, p, key);
                let scope = Scope::new(key, &pins[j]);
                let (pin, sure) = match self.cheapest_reachable(&mut walk, j, &scope, &forbidden) {
                    Some(v) => {
                        Self::take_room(&mut walk, &scope, &v);
                        (Pin::one(key, &v), true)
                    }
                    None => (Pin::within(key, BTreeSet::new()), false),
                };
                self.count_pin(&mut walk, j, key, &pin, sure);
                pins[j].push(pin);
            }
        }
        for (i, p) in pending.iter().enumerate() {
            let mut rules: BTreeMap<&'a str, KeyRules<'a>> = BTreeMap::new();
            for (t, sel) in p.spread.iter().zip(&self.sel_of_spread[i]) {
                if t.hard && ours(&t.topology_key) {
                    let r = rules.entry(t.topology_key.as_str()).or_default();
                    r.spreads.push((*sel, t));
                }
            }
            for (t, sel) in p.affinity.iter().zip(&self.sel_of_affinity[i]) {
                let key = t.topology_key.as_str();
                if !ours(key) {
                    continue;
                }
                let targets = self.present_values(&mut walk, *sel, key);
                let r = rules.entry(key).or_default();
                if !targets.is_empty() {
                    r.allowed = Some(match r.allowed.take() {
                        Some(a) => a.intersection(&targets).cloned().collect(),
                        None => targets,
                    });
                } else if self.matches[i].binary_search(sel).is_ok() {
                    r.choose = true;
                } else {
                    r.lonely = true;
                }
            }
            for (t, sel) in p.anti_affinity.iter().zip(&self.sel_of_anti[i]) {
                let key = t.topology_key.as_str();
                if !ours(key) {
                    continue;
                }
                let there = self.present_values(&mut walk, *sel, key);
                let r = rules.entry(key).or_default();
                r.forbidden.extend(there);
                // One known domain, so that its term holds against the pods after it.
                r.choose = true;
            }
            let against =
                |ns: &str, t: &PodAffinityTerm| t.selects(ns, &p.key.namespace, &p.labels);
            for (_, t, v) in running_anti.iter().filter(|(ns, t, _)| against(ns, t)) {
                rules
                    .entry(t.topology_key.as_str())
                    .or_default()
                    .forbidden
                    .insert(v.to_string());
            }
            for (_, t, v) in walk.pending_anti.iter().filter(|(ns, t, _)| against(ns, t)) {
                rules
                    .entry(t.topology_key.as_str())
                    .or_default()
                    .forbidden
                    .insert(v.clone());
            }
            let mut rules: Vec<(&'a str, KeyRules<'a>)> = rules
                .into_iter()
                .filter(|(key, _)| !pins[i].iter().any(|pin| pin.key == *key))
                .collect();
            for (key, r) in &mut rules {
                // A pod another pod's (anti-)affinity selects must be in one known domain.
                if targeted
                    .get(key)
                    .is_some_and(|sels| self.matches[i].iter().any(|s| sels.contains(s)))
                {
                    r.choose = true;
                }
            }
            // The pod is counted only once every key has its domain: one that waits on a
            // later key is in no domain of an earlier one either (counted there, it let the
            // pods after it past a skew the scheduler then held them to, and they waited on
            // room the plan said existing nodes had).
            let mut chosen: Vec<(&'a str, bool)> = Vec::new();
            for (q, (key, r)) in rules.iter().enumerate() {
                let scope = Scope::new(key, &pins[i]);
                if let Some((pin, sure)) = self.key_pin(&mut walk, i, &scope, r, &rules[q + 1..]) {
                    chosen.push((key, sure));
                    pins[i].push(pin);
                }
            }
            let pin_of = |key: &str| pins[i].iter().find(|pin| pin.key == key).cloned();
            let waiting = chosen
                .iter()
                .any(|(key, sure)| pin_of(key).is_some_and(|pin| pin.waits(*sure)));
            for (key, sure) in chosen {
                if let Some(pin) = pin_of(key) {
                    self.count_pin(&mut walk, i, key, &pin, sure && !waiting);
                }
            }
            // Its anti-affinity, where it is pinned to one domain, holds against later pods.
            // A held preference binds its own pod only (see `preferences`).
            for t in p
                .anti_affinity
                .iter()
                .filter(|t| !t.held && ours(&t.topology_key))
            {
                let key = t.topology_key.as_str();
                let one = pins[i].iter().find(|pin| pin.key == key).and_then(|pin| {
                    match &pin.constraint.values {
                        ValueSet::In(v) if v.len() == 1 => v.iter().next().cloned(),
                        _ => None,
                    }
                });
                if let Some(v) = one {
                    walk.pending_anti.push((p.key.namespace.as_str(), t, v));
                }
            }
        }
        pins
    }

    /// The one requirement pod `i`'s rules on `key` come to, and whether the pod is sure to
    /// be in its one domain (`None`: no requirement).
    fn key_pin(
        &self,
        walk: &mut Walk<'a>,
        i: usize,
        scope: &Scope<'a>,
        r: &KeyRules<'a>,
        later: &[(&'a str, KeyRules<'a>)],
    ) -> Option<(Pin, bool)> {
        let key = scope.key;
        if r.lonely {
            return Some((Pin::within(key, BTreeSet::new()), false));
        }
        let permitted =
            |v: &str| !r.forbidden.contains(v) && r.allowed.as_ref().is_none_or(|a| a.contains(v));
        if r.spreads.is_empty() && !r.choose {
            return match &r.allowed {
                Some(a) => {
                    let left: BTreeSet<String> =
                        a.iter().filter(|v| permitted(v)).cloned().collect();
                    let sure = left.len() == 1;
                    Some((Pin::within(key, left), sure))
                }
                None if r.forbidden.is_empty() => None,
                None => Some((Pin::outside(key, r.forbidden.clone()), false)),
            };
        }
        // Every domain counts for the skew; the pod may go only where its pins on other keys
        // can be met too.
        let all = self.domains_for(walk, i, &Scope::new(key, &[]));
        let reach = if scope.given.is_empty() {
            all.clone()
        } else {
            self.domains_for(walk, i, scope)
        };
        let (Some(domains), Some(reach)) = (all, reach) else {
            // Values that cannot be listed: what affinity allows, or all but the forbidden.
            return match &r.allowed {
                Some(a) => {
                    let left: BTreeSet<String> =
                        a.iter().filter(|v| permitted(v)).cloned().collect();
                    let sure = left.len() == 1;
                    Some((Pin::within(key, left), sure))
                }
                None if r.forbidden.is_empty() => None,
                None => {
                    let mut pin = Pin::outside(key, r.forbidden.clone());
                    // A spread still needs the label on the node.
                    pin.constraint.allow_absent = r.spreads.is_empty();
                    Some((pin, false))
                }
            };
        };
        if domains.is_empty() && r.allowed.is_none() && r.forbidden.is_empty() {
            // No node can carry the key: the spread's own requirement says so.
            return None;
        }
        let p = &self.snap.pending[i];
        let spreads = self.spread_views(walk, i, key, &domains, r);
        let skew_ok = |v: &String| spreads.iter().all(|s| s.allows(v));
        let load = |v: &String| spreads.first().map_or(0, |s| s.counts[v]);
        let mut open = self.open_domains(walk, scope, r, &reach, &spreads);
        // The first of them that leaves every later key of the pod a domain too; when none
        // does, the first (the pod then waits on a later key, and the reason names it).
        let mut chosen = None;
        for v in &open {
            if self.leaves_room_for(walk, i, scope, v, later) {
                chosen = Some(v.clone());
                break;
            }
        }
        if chosen.is_none() && !open.is_empty() {
            chosen = Some(open.swap_remove(0));
        }
        if let Some(v) = chosen {
            Self::take_room(walk, scope, &v);
            return Some((Pin::one(key, &v), true));
        }
        // Nowhere to go now: wait in the emptiest domain the rules allow, uncounted.
        let waiting = domains
            .keys()
            .filter(|v| permitted(v) && skew_ok(v))
            .min_by(|a, b| load(a).cmp(&load(b)).then(a.cmp(b)))
            .or_else(|| {
                domains
                    .keys()
                    .filter(|v| permitted(v))
                    .min_by(|a, b| load(a).cmp(&load(b)).then(a.cmp(b)))
            });
        let Some(v) = waiting.cloned() else {
            return Some((Pin::within(key, BTreeSet::new()), false));
        };
        if !(reach.get(&v).is_some_and(|p| p.is_finite()) || walk.has_room(scope, &v)) {
            // Nothing can be planned there: the pod waits, and the reason names the domain.
            return Some((Pin::one(key, &v), false));
        }
        // A node could be had there, past the skew the NodePools' domains set. The scheduler
        // counts only domains that have nodes: when with those the pod may still go there, it
        // goes (and counts); when not, a node launched for it would never get it.
        let known = self.node_domains(walk, key, p.own_node_selector());
        let binds = spreads.iter().zip(&r.spreads).all(|(s, (_, t))| {
            let seen: Vec<u32> = known
                .iter()
                .chain(std::iter::once(&v))
                .filter_map(|d| s.counts.get(d).copied())
                .collect();
            let min = if seen.len() < t.min_domains as usize {
                0
            } else {
                seen.iter().copied().min().unwrap_or(0)
            };
            u64::from(s.counts[&v]) + u64::from(s.itself) <= u64::from(min) + u64::from(s.skew)
        });
        if binds {
            Self::take_room(walk, scope, &v);
            return Some((Pin::one(key, &v), true));
        }
        Some((Pin::within(key, BTreeSet::new()), false))
    }

    /// Per hard spread constraint of pod `i` on `key`: the counts in each of `domains`, the
    /// minimum, and whether the pod counts itself.
    fn spread_views(
        &self,
        walk: &mut Walk<'a>,
        i: usize,
        key: &'a str,
        domains: &Domains,
        r: &KeyRules<'a>,
    ) -> Vec<SpreadView> {
        let p = &self.snap.pending[i];
        let mut out = Vec::with_capacity(r.spreads.len());
        for (sel, t) in &r.spreads {
            let counts: BTreeMap<String, u32> = domains
                .keys()
                .map(|v| {
                    let ns = (!t.ignore_node_affinity).then_some(p.own_node_selector());
                    let n = self.spread_count(walk, *sel, key, ns, v);
                    (v.clone(), n)
                })
                .collect();
            let mut min = counts.values().copied().min().unwrap_or(0);
            if domains.len() < t.min_domains as usize {
                min = 0;
            }
            let itself = u32::from(self.matches[i].binary_search(sel).is_ok());
            out.push(SpreadView {
                counts,
                min,
                itself,
                skew: t.max_skew,
            });
        }
        out
    }

    /// The domains of `reach` (the scope's) a pod may be pinned to now, best first:
    /// permitted by its (anti-)affinity, within every spread's skew, and reachable (a node
    /// can be launched there, or an existing one has room); the fewest matching pods first,
    /// then the cheapest (existing room costs nothing), then by name.
    fn open_domains(
        &self,
        walk: &Walk<'a>,
        scope: &Scope<'a>,
        r: &KeyRules<'a>,
        reach: &Domains,
        spreads: &[SpreadView],
    ) -> Vec<String> {
        let permitted =
            |v: &str| !r.forbidden.contains(v) && r.allowed.as_ref().is_none_or(|a| a.contains(v));
        let load = |v: &String| spreads.first().map_or(0, |s| s.counts[v]);
        let cost = |v: &str, price: f64| if walk.has_room(scope, v) { 0.0 } else { price };
        let mut open: Vec<(&String, f64)> = reach
            .iter()
            .filter(|(v, price)| {
                permitted(v)
                    && spreads.iter().all(|s| s.allows(v))
                    && (price.is_finite() || walk.has_room(scope, v))
            })
            .map(|(v, price)| (v, cost(v, *price)))
            .collect();
        open.sort_by(|(va, ca), (vb, cb)| {
            load(va)
                .cmp(&load(vb))
                .then(ca.total_cmp(cb))
                .then(va.cmp(vb))
        });
        open.into_iter().map(|(v, _)| v.clone()).collect()
    }

    /// Whether, with pod `i` pinned to `v` on the scope's key, each of its `later` keys still
    /// has a domain open (one step ahead: a key whose domains cannot be listed, or whose
    /// rules need no domain chosen, always does).
    fn leaves_room_for(
        &self,
        walk: &mut Walk<'a>,
        i: usize,
        scope: &Scope<'a>,
        v: &str,
        later: &[(&'a str, KeyRules<'a>)],
    ) -> bool {
        later.iter().all(|(key, r)| {
            if r.lonely || (r.spreads.is_empty() && !r.choose) {
                return true;
            }
            let mut given = scope.given.clone();
            given.push(Pin::one(scope.key, v));
            let next = Scope::new(key, &given);
            let all = self.domains_for(walk, i, &Scope::new(key, &[]));
            let (Some(domains), Some(reach)) = (all, self.domains_for(walk, i, &next)) else {
                return true;
            };
            let spreads = self.spread_views(walk, i, key, &domains, r);
            !self
                .open_domains(walk, &next, r, &reach, &spreads)
                .is_empty()
        })
    }

    /// The values of `key` on existing nodes and claims in flight that node selection `ns`
    /// matches: the domains the scheduler knows for a pod with that selection.
    fn node_domains(
        &self,
        walk: &mut Walk<'a>,
        key: &'a str,
        ns: &'a NodeSelector,
    ) -> BTreeSet<String> {
        walk.known
            .entry((key, ns))
            .or_insert_with(|| {
                self.state
                    .slots
                    .iter()
                    .filter(|s| s.kind != SlotKind::New)
                    .map(|s| s.labels(self.snap))
                    .filter(|l| ns.terms.is_empty() || ns.terms.iter().any(|t| t.matches(l)))
                    .filter_map(|l| l.get(key).cloned())
                    .collect()
            })
            .clone()
    }

    /// Records where pod `i` is now known to be on `key`: a pin to one domain is where its
    /// (anti-)affinity targets look, and where a spread counts it when the pod is `sure` to
    /// get there. A pod its node selection already put there was counted from the start.
    fn count_pin(&self, walk: &mut Walk<'a>, i: usize, key: &'a str, pin: &Pin, sure: bool) {
        let ValueSet::In(values) = &pin.constraint.values else {
            return;
        };
        let (Some(v), 1) = (values.iter().next(), values.len()) else {
            return;
        };
        let fixed = fixed_value(&self.snap.pending[i], key).is_some();
        for s in &self.matches[i] {
            if !fixed {
                *walk.present.entry((*s, key, v.clone())).or_default() += 1;
            }
            if sure {
                *walk.planned.entry((*s, key, v.clone())).or_default() += 1;
            }
        }
    }

    /// Pods matching selector `sel` in domain `v` of `key`, as a spread counts them for a pod
    /// with node selection `ns`: running ones on nodes `ns` matches (all, for `None`:
    /// `nodeAffinityPolicy: Ignore`), and this plan's sure ones.
    fn spread_count(
        &self,
        walk: &mut Walk<'a>,
        sel: usize,
        key: &'a str,
        ns: Option<&'a NodeSelector>,
        v: &str,
    ) -> u32 {
        let existing = walk
            .counted
            .entry((sel, key, ns))
            .or_insert_with(|| self.existing_counts(sel, key, ns));
        existing.get(v).copied().unwrap_or(0)
            + walk
                .planned
                .get(&(sel, key, v.to_string()))
                .copied()
                .unwrap_or(0)
    }

    /// The domains of `key` where a pod matching selector `sel` runs or is known to be.
    fn present_values(&self, walk: &mut Walk<'a>, sel: usize, key: &'a str) -> BTreeSet<String> {
        let existing = walk
            .counted
            .entry((sel, key, None))
            .or_insert_with(|| self.existing_counts(sel, key, None));
        let mut out: BTreeSet<String> = existing
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(v, _)| v.clone())
            .collect();
        out.extend(
            walk.present
                .iter()
                .filter(|((s, k, _), n)| *s == sel && *k == key && **n > 0)
                .map(|((.., v), _)| v.clone()),
        );
        out
    }

    /// The domains of the scope's key pod `i` could be in, listed once per workload (see
    /// [`Walk::domains`]).
    fn domains_for(&self, walk: &mut Walk<'a>, i: usize, scope: &Scope<'a>) -> Option<Domains> {
        let pending = &self.snap.pending;
        let reuse = walk.domains.get(scope).is_some_and(|(j, _)| {
            self.same_node_selection(*j, i)
                && honors_taints(&pending[*j], scope.key) == honors_taints(&pending[i], scope.key)
                && ignores_node_affinity(&pending[*j], scope.key)
                    == ignores_node_affinity(&pending[i], scope.key)
        });
        if !reuse {
            let domains = self.spread_domains(i, scope);
            walk.domains.insert(scope.clone(), (i, domains));
            walk.room
                .insert(scope.clone(), self.existing_room(i, scope));
        }
        walk.domains.get(scope).and_then(|(_, d)| d.clone())
    }

    /// Takes one place in domain `v` of the scope from the existing room, when there is some.
    fn take_room(walk: &mut Walk<'a>, scope: &Scope<'a>, v: &str) {
        if let Some(n) = walk.room.get_mut(scope).and_then(|r| r.get_mut(v))
            && *n > 0
        {
            *n -= 1;
        }
    }

    /// The cheapest domain of `key` outside `forbidden` pod `i` can reach (existing room
    /// first, then the cheapest launch), by name at equal cost.
    fn cheapest_reachable(
        &self,
        walk: &mut Walk<'a>,
        i: usize,
        scope: &Scope<'a>,
        forbidden: &BTreeSet<String>,
    ) -> Option<String> {
        let domains = self.domains_for(walk, i, scope)?;
        domains
            .into_iter()
            .filter(|(v, _)| !forbidden.contains(v))
            .map(|(v, price)| {
                let cost = if walk.has_room(scope, &v) { 0.0 } else { price };
                (v, cost)
            })
            .filter(|(_, cost)| cost.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map(|(v, _)| v)
    }
}
