//! Where a pod's topology domains come from, for [`super::spread_domains`]: the values
//! NodePools and existing nodes offer for a key (with the taint and node-affinity inclusion
//! policies of the pod's spread), the matching pods already counted there, the room existing
//! nodes have, and running pods' anti-affinity terms.

use std::collections::BTreeMap;

use crate::labels;
use crate::model::Snapshot;
use crate::requirements::{NodeSelector, Requirements, ValueSet};
use crate::resources::Resources;
use crate::taints::untolerated;

use super::classes::{Bar, class_bar};
use super::shapes::{offering_allowed, term_fits_shape};
use super::spread_domains::{Domains, RunningAnti, Scope, balanced_elsewhere};
use super::{Planner, SlotKind};

/// Whether a hard spread constraint of pod `p` on `key` counts only nodes whose taints the pod
/// tolerates (`nodeTaintsPolicy: Honor`).
pub(super) fn honors_taints(p: &crate::model::Pod, key: &str) -> bool {
    p.spread
        .iter()
        .any(|t| t.hard && t.topology_key == key && t.honor_taints)
}

/// Whether a hard spread constraint of pod `p` on `key` counts every node, whatever the pod's
/// node selection (`nodeAffinityPolicy: Ignore`).
pub(super) fn ignores_node_affinity(p: &crate::model::Pod, key: &str) -> bool {
    p.spread
        .iter()
        .any(|t| t.hard && t.topology_key == key && t.ignore_node_affinity)
}
impl<'a> Planner<'a> {
    /// Required anti-affinity terms of pods running on existing nodes over keys other than
    /// zone and hostname, once each ([`RunningAnti`]).
    pub(super) fn running_anti_affinity(&self) -> Vec<RunningAnti<'a>> {
        let snap: &'a Snapshot = self.snap;
        let mut out: Vec<RunningAnti<'a>> = Vec::new();
        let mut seen: std::collections::HashSet<RunningAnti<'a>> = Default::default();
        for slot in &self.state.slots {
            let SlotKind::Existing(ni) = slot.kind else {
                continue;
            };
            let node = &snap.nodes[ni];
            for pod in &node.pods {
                for t in &pod.anti_affinity {
                    if balanced_elsewhere(&t.topology_key) {
                        continue;
                    }
                    if let Some(v) = node.labels.get(&t.topology_key) {
                        let term = (pod.key.namespace.as_str(), t, v.as_str());
                        if seen.insert(term) {
                            out.push(term);
                        }
                    }
                }
            }
        }
        out
    }

    /// How many pods like pending pod `i` fit on the existing nodes of each value of the
    /// scope's key (schedulable nodes whose taints it tolerates and whose labels its node
    /// selection and the scope's other pins match), each node counted on its own.
    pub(super) fn existing_room(&self, i: usize, scope: &Scope<'_>) -> BTreeMap<String, u32> {
        let p = &self.snap.pending[i];
        let mut out = BTreeMap::new();
        for slot in &self.state.slots {
            if !matches!(slot.kind, SlotKind::Existing(_)) || !slot.open {
                continue;
            }
            let node_labels = slot.labels(self.snap);
            let Some(v) = node_labels.get(scope.key) else {
                continue;
            };
            let selected = (p.node_selector.terms.is_empty()
                || p.node_selector.terms.iter().any(|t| t.matches(node_labels)))
                && scope.admits(node_labels);
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
    pub(super) fn same_node_selection(&self, a: usize, b: usize) -> bool {
        let (a, b) = (&self.snap.pending[a], &self.snap.pending[b]);
        a.node_selector == b.node_selector
            && a.strict_node_selector == b.strict_node_selector
            && a.requests == b.requests
            && a.tolerations == b.tolerations
            && a.gpu_share.is_some() == b.gpu_share.is_some()
            && a.host_ports == b.host_ports
    }

    /// The values of the scope's key a node for pending pod `i` that meets the scope's other
    /// pins could carry; `None` when they cannot be listed (a NodePool defining the label
    /// with `NotIn` or `Exists`).
    pub(super) fn spread_domains(&self, i: usize, scope: &Scope<'_>) -> Option<Domains> {
        let p = &self.snap.pending[i];
        let key = scope.key;
        let any = [Requirements::new()];
        let own: &[Requirements] = if p.node_selector.terms.is_empty() {
            &any
        } else {
            &p.node_selector.terms
        };
        let conditioned: Vec<Requirements>;
        let terms: &[Requirements] = if scope.given.is_empty() {
            own
        } else {
            conditioned = own
                .iter()
                .map(|t| {
                    let mut t = t.clone();
                    for pin in &scope.given {
                        t.add_constraint(&pin.key, pin.constraint.clone());
                    }
                    t
                })
                .filter(Requirements::satisfiable)
                .collect();
            &conditioned
        };
        let mut out = Domains::new();
        let mut add = |v: &str, price: f64| {
            let e = out.entry(v.to_string()).or_insert(f64::INFINITY);
            *e = e.min(price);
        };
        let share = p.gpu_share.is_some();
        let honor = honors_taints(p, key);
        // `nodeAffinityPolicy: Ignore`: every node counts, whatever the pod's node selection;
        // the domains it does not select are listed too, and cannot be reached. A preferred
        // term held as required (`preferences`) lists the domains of the pod's own selection
        // the same way: they count for the skew, and the pod may not go there.
        let everywhere = ignores_node_affinity(p, key) && scope.given.is_empty();
        let strict: Option<&[Requirements]> = match &p.strict_node_selector {
            Some(ns) if scope.given.is_empty() && !everywhere => {
                Some(if ns.terms.is_empty() { &any } else { &ns.terms })
            }
            _ => None,
        };
        let unselected = [(false, terms), (true, strict.unwrap_or(&any[..]))];
        let passes = if everywhere || strict.is_some() {
            &unselected[..]
        } else {
            &unselected[..1]
        };
        for (s, &(beyond, terms)) in self
            .shapes
            .iter()
            .flat_map(|s| passes.iter().map(move |pass| (s, pass)))
        {
            let pool = &self.snap.pools[s.pool];
            let several =
                super::classes::one_replica_each(pool) && super::classes::asks_several_gpus(p);
            // A NodePool whose taints the pod does not tolerate still offers its domains
            // (`nodeTaintsPolicy: Ignore`, the default): they count, and cannot be reached.
            let reachable = match class_bar(pool, s, &p.tolerations, share, &p.host_ports, several)
            {
                None => !beyond,
                Some(Bar::Taint) if !honor => false,
                Some(_) => continue,
            };
            let mut add =
                |v: &str, price: f64| add(v, if reachable { price } else { f64::INFINITY });
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
            if slot.kind == SlotKind::New
                || (honor && untolerated(&p.tolerations, slot.taints(self.snap)).is_some())
            {
                continue;
            }
            let node_labels = slot.labels(self.snap);
            if let Some(v) = node_labels.get(key)
                && (everywhere
                    || terms
                        .iter()
                        .chain(strict.into_iter().flatten())
                        .any(|t| t.matches(node_labels)))
            {
                add(v, f64::INFINITY);
            }
        }
        Some(out)
    }

    /// Pods matching selector `sel` on existing nodes and claims in flight, per value of `key`
    /// on their node; only on nodes node selection `ns` matches, when given.
    pub(super) fn existing_counts(
        &self,
        sel: usize,
        key: &str,
        ns: Option<&NodeSelector>,
    ) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        for slot in &self.state.slots {
            if slot.kind == SlotKind::New || slot.counts[sel] == 0 {
                continue;
            }
            let node_labels = slot.labels(self.snap);
            if let Some(ns) = ns
                && !ns.terms.is_empty()
                && !ns.terms.iter().any(|t| t.matches(node_labels))
            {
                continue;
            }
            if let Some(v) = node_labels.get(key) {
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
