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

use std::collections::{BTreeMap, HashMap};

use crate::labels;
use crate::requirements::{Requirements, ValueSet};

use super::classes::class_bar;
use super::shapes::{offering_allowed, term_fits_shape};
use super::{Planner, SlotKind};

/// Keys the planner balances itself: claims are pinned to a zone, and every new node is a
/// hostname domain of its own.
fn balanced_elsewhere(key: &str) -> bool {
    key == labels::ZONE || key == labels::HOSTNAME
}

/// Per domain value, the cheapest price a node there could have (infinite for a value only
/// existing nodes carry).
type Domains = BTreeMap<String, f64>;

impl Planner<'_> {
    /// Per pending pod, the `(key, value)` pairs its hard spread constraints pin it to, in the
    /// order of its constraints; empty for most pods.
    pub(super) fn spread_pins(&self) -> Vec<Vec<(String, String)>> {
        let mut pins = vec![Vec::new(); self.snap.pending.len()];
        if !self.snap.pending.iter().any(|p| {
            p.spread
                .iter()
                .any(|t| t.hard && !balanced_elsewhere(&t.topology_key))
        }) {
            return pins;
        }
        // Matching pods on existing nodes and claims in flight, per (selector, key) and value.
        let mut counted: HashMap<(usize, &str), BTreeMap<String, u32>> = HashMap::new();
        // Pods of this plan pinned so far, per (selector, key, value).
        let mut planned: HashMap<(usize, &str, String), u32> = HashMap::new();
        // The pods of a workload come one after another: the previous pod's domains serve
        // the next one when its node selection is the same.
        let mut last: Option<(usize, &str, Option<Domains>)> = None;
        for (i, p) in self.snap.pending.iter().enumerate() {
            for (t, sel) in p.spread.iter().zip(&self.sel_of_spread[i]) {
                let key = t.topology_key.as_str();
                if !t.hard || balanced_elsewhere(key) || pins[i].iter().any(|(k, _)| k == key) {
                    continue;
                }
                let reuse = matches!(&last, Some((j, k, _)) if *k == key && self.same_node_selection(*j, i));
                if !reuse {
                    last = Some((i, key, self.spread_domains(i, key)));
                }
                let Some((_, _, Some(domains))) = &last else {
                    continue;
                };
                let existing = counted
                    .entry((*sel, key))
                    .or_insert_with(|| self.existing_counts(*sel, key));
                let count = |v: &str| {
                    existing.get(v).copied().unwrap_or(0)
                        + planned
                            .get(&(*sel, key, v.to_string()))
                            .copied()
                            .unwrap_or(0)
                };
                // Fewest matching pods first (the only domain that never breaks the skew),
                // then the cheapest, then by name so that the plan is the same every time.
                let Some((value, _)) = domains.iter().min_by(|(va, pa), (vb, pb)| {
                    count(va)
                        .cmp(&count(vb))
                        .then(pa.total_cmp(pb))
                        .then(va.cmp(vb))
                }) else {
                    continue;
                };
                if self.matches[i].binary_search(sel).is_ok() {
                    *planned.entry((*sel, key, value.clone())).or_default() += 1;
                }
                pins[i].push((key.to_string(), value.clone()));
            }
        }
        pins
    }

    /// Whether pending pods `a` and `b` may go on the same nodes (so have the same domains).
    fn same_node_selection(&self, a: usize, b: usize) -> bool {
        let (a, b) = (&self.snap.pending[a], &self.snap.pending[b]);
        a.node_selector == b.node_selector
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
