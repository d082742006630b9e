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
//! default `nodeAffinityPolicy: Honor`; taints are ignored, its `nodeTaintsPolicy` default).
//! A pod counts where its node carries the value; pods of this plan count where they were
//! pinned. A key whose values cannot be listed (a NodePool allowing any value but some) pins
//! nothing: the node must then only carry the label ([`super::classes`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::labels;
use crate::requirements::{Constraint, Requirements, ValueSet};
use crate::resources::Resources;
use crate::taints::untolerated;

use super::classes::class_bar;
use super::shapes::{offering_allowed, term_fits_shape};
use super::{Planner, SlotKind};
use crate::model::Snapshot;

/// Keys the planner balances itself: claims are pinned to a zone, and every new node is a
/// hostname domain of its own.
fn balanced_elsewhere(key: &str) -> bool {
    key == labels::ZONE || key == labels::HOSTNAME
}

/// Per domain value, the cheapest price a node there could have (infinite for a value only
/// existing nodes carry).
type Domains = BTreeMap<String, f64>;

/// A running pod's anti-affinity term: (namespace, selector, key, its node's value of the key).
type RunningAnti<'s> = (&'s str, &'s Requirements, &'s str, &'s str);

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

    /// As the reasons say it: `karpenter.sh/capacity-type=spot`, `kubernetes.io/arch in
    /// [arm64]`, `… not in [a]`, `… in no domain`.
    pub(super) fn describe(&self) -> String {
        let list = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(", ");
        match &self.constraint.values {
            ValueSet::In(v) if v.len() == 1 => format!("{}={}", self.key, list(v)),
            ValueSet::In(v) if v.is_empty() => format!(
                "{} in no domain: no pod its affinity selects runs anywhere, or its \
                 anti-affinity leaves no domain",
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
    /// Matching pods on existing nodes and claims in flight, per (selector, key) and value.
    counted: HashMap<(usize, &'s str), BTreeMap<String, u32>>,
    /// Pending pods whose domain is known (pinned to one, or their node selection allows
    /// one), per (selector they match, key, value).
    planned: HashMap<(usize, &'s str, String), u32>,
    /// Room on existing nodes per (key, value) for pods like the last one, used up as pods
    /// are pinned there.
    room: HashMap<(&'s str, String), u32>,
    /// The last pod whose domains were listed, for which key, and them: the pods of a
    /// workload come one after another, and the next one with the same node selection and
    /// requests has the same domains (and the room left).
    last: Option<(usize, &'s str, Option<Domains>)>,
}

impl<'s> Walk<'s> {
    fn has_room(&self, key: &str, v: &str) -> bool {
        self.room.get(&(key, v.to_string())).is_some_and(|n| *n > 0)
    }
}

impl<'a> Planner<'a> {
    /// Per pending pod, the requirements its hard topology spread and its required pod
    /// (anti-)affinity over keys other than zone and hostname put on its node; empty for
    /// most pods.
    ///
    /// **Spread.** Of the domains the skew allows (`count + 1 <= min + maxSkew`), the pod is
    /// pinned to one it can reach (a new node can be launched there, or an existing node
    /// there has room for it), the one with the fewest matching pods, then the cheapest
    /// (existing room costs nothing), then by name; Karpenter likewise takes the emptiest
    /// domain a node it can launch or use allows. When none is reachable, the pod is pinned
    /// to the emptiest domain and waits there, as the scheduler would keep it; it is not
    /// counted, so it does not push the next pods past the skew.
    ///
    /// **Affinity.** The pod goes where a pod its term selects runs or is pinned; the first
    /// of a group that selects itself picks the cheapest domain it can reach, and the rest
    /// follow; with no such pod anywhere it waits ("in no domain").
    ///
    /// **Anti-affinity.** The pod keeps out of the domains of the pods its term selects, and
    /// of the domains whose running pods' anti-affinity selects it; a pod that selects itself
    /// takes one domain of its own, so the next one keeps out of it.
    pub(super) fn domain_pins(&self) -> Vec<Vec<Pin>> {
        let pending = &self.snap.pending;
        let mut pins: Vec<Vec<Pin>> = vec![Vec::new(); pending.len()];
        let ours = |k: &str| !balanced_elsewhere(k);
        let mut keys: BTreeSet<&str> = BTreeSet::new();
        for p in pending {
            keys.extend(
                p.spread
                    .iter()
                    .filter(|t| t.hard)
                    .map(|t| t.topology_key.as_str())
                    .chain(p.affinity.iter().map(|t| t.topology_key.as_str()))
                    .chain(p.anti_affinity.iter().map(|t| t.topology_key.as_str()))
                    .filter(|k| ours(k)),
            );
        }
        let running_anti = self.running_anti_affinity();
        if keys.is_empty() && running_anti.is_empty() {
            return pins;
        }
        let mut walk = Walk::default();
        // Pending pods whose node selection allows one domain are counted there from the
        // start, wherever they come in the walk.
        for (j, p) in pending.iter().enumerate() {
            for k in &keys {
                if let Some(v) = fixed_value(p, k) {
                    for s in &self.matches[j] {
                        *walk.planned.entry((*s, *k, v.to_string())).or_default() += 1;
                    }
                }
            }
        }
        for (i, p) in pending.iter().enumerate() {
            // Each pin, with whether the pod is sure to be in its one domain (counted there).
            let mut got: Vec<(Pin, bool)> = Vec::new();
            for (t, sel) in p.spread.iter().zip(&self.sel_of_spread[i]) {
                let key = t.topology_key.as_str();
                if t.hard && ours(key) && !got.iter().any(|(pin, _)| pin.key == key) {
                    got.extend(self.spread_pin(&mut walk, i, key, *sel, t));
                }
            }
            for (t, sel) in p.affinity.iter().zip(&self.sel_of_affinity[i]) {
                let key = t.topology_key.as_str();
                if ours(key) {
                    got.push(self.affinity_pin(&mut walk, i, key, *sel));
                }
            }
            // Its own anti-affinity, and running pods' anti-affinity against it.
            let mut anti: Vec<(&str, Option<usize>)> = p
                .anti_affinity
                .iter()
                .zip(&self.sel_of_anti[i])
                .filter(|(t, _)| ours(&t.topology_key))
                .map(|(t, sel)| (t.topology_key.as_str(), Some(*sel)))
                .collect();
            for (ns, sel, key, _) in &running_anti {
                if *ns == p.key.namespace
                    && sel.matches(&p.labels)
                    && !anti.iter().any(|(k, _)| k == key)
                {
                    anti.push((key, None));
                }
            }
            for (key, sel) in anti {
                got.extend(self.anti_affinity_pin(&mut walk, i, key, sel, &running_anti));
            }
            // A pod sure to be in one domain is counted there by every selector it matches
            // (a pod whose node selection allows one domain was counted from the start).
            for (pin, sure) in &got {
                let ValueSet::In(values) = &pin.constraint.values else {
                    continue;
                };
                if let (true, 1, None, Some(key)) = (
                    *sure,
                    values.len(),
                    fixed_value(p, &pin.key),
                    keys.get(pin.key.as_str()),
                ) {
                    let v = values.iter().next().cloned().unwrap_or_default();
                    for s in &self.matches[i] {
                        *walk.planned.entry((*s, *key, v.clone())).or_default() += 1;
                    }
                }
            }
            pins[i] = got.into_iter().map(|(pin, _)| pin).collect();
        }
        pins
    }
    /// Matching pods per value of `key` for selector `sel`: running and known pending ones.
    fn domain_count(&self, walk: &mut Walk<'a>, sel: usize, key: &'a str, v: &str) -> u32 {
        let existing = walk
            .counted
            .entry((sel, key))
            .or_insert_with(|| self.existing_counts(sel, key));
        existing.get(v).copied().unwrap_or(0)
            + walk
                .planned
                .get(&(sel, key, v.to_string()))
                .copied()
                .unwrap_or(0)
    }

    /// The domains of `key` pod `i` could be in, listed once per workload (see [`Walk::last`]).
    fn domains_for(&self, walk: &mut Walk<'a>, i: usize, key: &'a str) -> Option<Domains> {
        let reuse =
            matches!(&walk.last, Some((j, k, _)) if *k == key && self.same_node_selection(*j, i));
        if !reuse {
            walk.last = Some((i, key, self.spread_domains(i, key)));
            walk.room.retain(|(k, _), _| *k != key);
            for (v, n) in self.existing_room(i, key) {
                walk.room.insert((key, v), n);
            }
        }
        walk.last.as_ref().and_then(|(.., d)| d.clone())
    }

    /// Takes one place in domain `v` of `key` from the existing room, when there is some.
    fn take_room(walk: &mut Walk<'a>, key: &'a str, v: &str) {
        if let Some(n) = walk.room.get_mut(&(key, v.to_string()))
            && *n > 0
        {
            *n -= 1;
        }
    }

    /// The spread pin for pod `i` (see [`Self::domain_pins`]), and whether the pod can reach
    /// it.
    fn spread_pin(
        &self,
        walk: &mut Walk<'a>,
        i: usize,
        key: &'a str,
        sel: usize,
        t: &crate::model::TopologySpread,
    ) -> Option<(Pin, bool)> {
        let max_skew = t.max_skew;
        let domains = self.domains_for(walk, i, key)?;
        let counts: BTreeMap<&String, u32> = domains
            .keys()
            .map(|v| (v, self.domain_count(walk, sel, key, v)))
            .collect();
        let mut min = counts.values().copied().min()?;
        // Fewer eligible domains than minDomains: the scheduler takes the minimum as 0.
        if domains.len() < t.min_domains as usize {
            min = 0;
        }
        let itself = u32::from(self.matches[i].binary_search(&sel).is_ok());
        // Existing room first at equal counts: it is paid for already.
        let cost = |v: &str, price: f64| if walk.has_room(key, v) { 0.0 } else { price };
        let reachable = domains
            .iter()
            .filter(|(v, price)| {
                counts[v] + itself <= min + max_skew && (price.is_finite() || walk.has_room(key, v))
            })
            .min_by(|(va, pa), (vb, pb)| {
                counts[va]
                    .cmp(&counts[vb])
                    .then(cost(va, **pa).total_cmp(&cost(vb, **pb)))
                    .then(va.cmp(vb))
            });
        let Some((value, _)) = reachable else {
            let (value, _) = counts
                .iter()
                .min_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)))?;
            return Some((Pin::one(key, value), false));
        };
        let value = value.clone();
        Self::take_room(walk, key, &value);
        Some((Pin::one(key, &value), true))
    }

    /// The affinity pin for pod `i`'s term over `key` selecting `sel`.
    fn affinity_pin(&self, walk: &mut Walk<'a>, i: usize, key: &'a str, sel: usize) -> (Pin, bool) {
        let mut targets: BTreeSet<String> = self
            .existing_counts(sel, key)
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(v, _)| v)
            .collect();
        targets.extend(
            walk.planned
                .iter()
                .filter(|((s, k, _), n)| *s == sel && *k == key && **n > 0)
                .map(|((.., v), _)| v.clone()),
        );
        if !targets.is_empty() {
            let sure = targets.len() == 1;
            return (Pin::within(key, targets), sure);
        }
        // Nobody to join: the first of a group that selects itself opens the domain.
        if self.matches[i].binary_search(&sel).is_ok()
            && let Some(v) = self.cheapest_reachable(walk, i, key, &BTreeSet::new())
        {
            Self::take_room(walk, key, &v);
            return (Pin::one(key, &v), true);
        }
        (Pin::within(key, BTreeSet::new()), false)
    }

    /// The anti-affinity pin for pod `i` over `key`: its own term selecting `sel`, or (when
    /// `None`) only running pods' terms against it.
    fn anti_affinity_pin(
        &self,
        walk: &mut Walk<'a>,
        i: usize,
        key: &'a str,
        sel: Option<usize>,
        running: &[RunningAnti<'a>],
    ) -> Option<(Pin, bool)> {
        let p = &self.snap.pending[i];
        let mut forbidden: BTreeSet<String> = running
            .iter()
            .filter(|(ns, s, k, _)| *k == key && *ns == p.key.namespace && s.matches(&p.labels))
            .map(|(.., v)| v.to_string())
            .collect();
        if let Some(sel) = sel {
            forbidden.extend(
                self.existing_counts(sel, key)
                    .into_iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(v, _)| v),
            );
            forbidden.extend(
                walk.planned
                    .iter()
                    .filter(|((s, k, _), n)| *s == sel && *k == key && **n > 0)
                    .map(|((.., v), _)| v.clone()),
            );
            // A pod its own term selects takes a domain of its own, so the next keeps out.
            if self.matches[i].binary_search(&sel).is_ok() {
                return Some(match self.cheapest_reachable(walk, i, key, &forbidden) {
                    Some(v) => {
                        Self::take_room(walk, key, &v);
                        (Pin::one(key, &v), true)
                    }
                    None => (Pin::within(key, BTreeSet::new()), false),
                });
            }
        }
        (!forbidden.is_empty()).then(|| (Pin::outside(key, forbidden), false))
    }

    /// The cheapest domain of `key` outside `forbidden` pod `i` can reach (existing room
    /// first, then the cheapest launch), by name at equal cost.
    fn cheapest_reachable(
        &self,
        walk: &mut Walk<'a>,
        i: usize,
        key: &'a str,
        forbidden: &BTreeSet<String>,
    ) -> Option<String> {
        let domains = self.domains_for(walk, i, key)?;
        domains
            .into_iter()
            .filter(|(v, _)| !forbidden.contains(v))
            .map(|(v, price)| {
                let cost = if walk.has_room(key, &v) { 0.0 } else { price };
                (v, cost)
            })
            .filter(|(_, cost)| cost.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map(|(v, _)| v)
    }

    /// Required anti-affinity terms of pods running on existing nodes over keys other than
    /// zone and hostname: (namespace, selector, key, the node's value of the key).
    fn running_anti_affinity(&self) -> Vec<RunningAnti<'a>> {
        let mut out = Vec::new();
        for slot in &self.state.slots {
            let SlotKind::Existing(ni) = slot.kind else {
                continue;
            };
            let snap: &'a Snapshot = self.snap;
            let node = &snap.nodes[ni];
            for pod in &node.pods {
                for t in &pod.anti_affinity {
                    if balanced_elsewhere(&t.topology_key) {
                        continue;
                    }
                    if let Some(v) = node.labels.get(&t.topology_key) {
                        out.push((
                            pod.key.namespace.as_str(),
                            &t.selector,
                            t.topology_key.as_str(),
                            v.as_str(),
                        ));
                    }
                }
            }
        }
        out
    }

    /// How many pods like pending pod `i` fit on the existing nodes of each value of `key`
    /// (schedulable nodes whose taints it tolerates and whose labels its node selection
    /// matches), each node counted on its own.
    fn existing_room(&self, i: usize, key: &str) -> BTreeMap<String, u32> {
        let p = &self.snap.pending[i];
        let mut out = BTreeMap::new();
        for slot in &self.state.slots {
            if !matches!(slot.kind, SlotKind::Existing(_)) || !slot.open {
                continue;
            }
            let node_labels = slot.labels(self.snap);
            let Some(v) = node_labels.get(key) else {
                continue;
            };
            let selected = p.node_selector.terms.is_empty()
                || p.node_selector.terms.iter().any(|t| t.matches(node_labels));
            if !selected || untolerated(&p.tolerations, slot.taints(self.snap)).is_some() {
                continue;
            }
            let free = slot.allocatable(self.snap).minus(&slot.used);
            let fit = copies_that_fit(&p.requests, &free);
            if fit > 0 {
                *out.entry(v.clone()).or_default() += fit;
            }
        }
        out
    }

    /// Whether pending pods `a` and `b` may go on the same nodes and take as much room there
    /// (so have the same domains and the same room in them).
    fn same_node_selection(&self, a: usize, b: usize) -> bool {
        let (a, b) = (&self.snap.pending[a], &self.snap.pending[b]);
        a.node_selector == b.node_selector
            && a.requests == b.requests
            && a.tolerations == b.tolerations
            && a.gpu_share.is_some() == b.gpu_share.is_some()
            && a.host_ports == b.host_ports
    }

    /// The values of `key` a node for pending pod `i` could carry; `None` when they cannot be
    /// listed (a NodePool defining the label with `NotIn` or `Exists`).
    fn spread_domains(&self, i: usize, key: &str) -> Option<Domains> {
        let p = &self.snap.pending[i];
        let any = [Requirements::new()];
        let terms: &[Requirements] = if p.node_selector.terms.is_empty() {
            &any
        } else {
            &p.node_selector.terms
        };
        let mut out = Domains::new();
        let mut add = |v: &str, price: f64| {
            let e = out.entry(v.to_string()).or_insert(f64::INFINITY);
            *e = e.min(price);
        };
        let share = p.gpu_share.is_some();
        for s in self.shapes.iter() {
            let pool = &self.snap.pools[s.pool];
            if class_bar(pool, s, &p.tolerations, share, &p.host_ports).is_some() {
                continue;
            }
            for t in terms.iter().filter(|t| term_fits_shape(t, s)) {
                if key == labels::CAPACITY_TYPE {
                    let (zc, cc) = (t.get(labels::ZONE), t.get(labels::CAPACITY_TYPE));
                    for o in s.offerings.iter().filter(|o| offering_allowed(o, zc, cc)) {
                        add(o.capacity_type.as_str(), o.price);
                    }
                } else if let Some(pc) = s.pool_defined.get(key) {
                    let c = t.get(key).map_or_else(|| pc.clone(), |tc| pc.intersect(tc));
                    let ValueSet::In(values) = &c.values else {
                        return None;
                    };
                    let price = s.price_under(t).unwrap_or(f64::INFINITY);
                    for v in values.iter().filter(|v| c.matches(Some(v))) {
                        add(v, price);
                    }
                } else if let Some(v) = s.labels.get(key) {
                    add(v, s.price_under(t).unwrap_or(f64::INFINITY));
                }
            }
        }
        for slot in &self.state.slots {
            if slot.kind == SlotKind::New {
                continue;
            }
            let node_labels = slot.labels(self.snap);
            if let Some(v) = node_labels.get(key)
                && terms.iter().any(|t| t.matches(node_labels))
            {
                add(v, f64::INFINITY);
            }
        }
        Some(out)
    }

    /// Pods matching selector `sel` on existing nodes and claims in flight, per value of `key`
    /// on their node.
    fn existing_counts(&self, sel: usize, key: &str) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        for slot in &self.state.slots {
            if slot.kind == SlotKind::New || slot.counts[sel] == 0 {
                continue;
            }
            if let Some(v) = slot.labels(self.snap).get(key) {
                *out.entry(v.clone()).or_default() += slot.counts[sel];
            }
        }
        out
    }
}

/// How many copies of `req` fit in `free` (capped: a pod asking for nothing fits any number).
fn copies_that_fit(req: &Resources, free: &Resources) -> u32 {
    const MANY: i64 = 1 << 20;
    let mut n = MANY;
    for (_, amount, have) in req.iter_with(free) {
        if amount > 0 {
            n = n.min(have.max(0) / amount);
        }
    }
    u32::try_from(n).unwrap_or(0)
}
