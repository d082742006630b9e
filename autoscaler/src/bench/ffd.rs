//! A first-fit-decreasing packing of a snapshot's pending pods: the yardstick a plan's cost is
//! compared with in the `karpenter-exact` and `ca-fastpath` suites. Written apart from the
//! planner (it shares only the model types) so that it cannot inherit the planner's mistakes.
//!
//! Pods are sorted by size, largest first (cpu and memory as fractions of the largest instance
//! type's allocatable, added), ties by name. Each goes to the first open node where it fits and
//! its constraints hold, else to a new node in the first zone where they hold on an empty node.
//! Open nodes are as large as the largest type; once every pod is placed each node becomes the
//! cheapest type, offered in its zone, whose allocatable holds what it got.
//!
//! Constraints are checked as kube-scheduler checks them, when the pod is placed, against the
//! pods already placed: resources (cpu, memory, pod slots); hard topology spreads over zones
//! (the zones the types are offered in) and hostnames (a new node is always a domain with no
//! pods, so the minimum is 0); required pod affinity and anti-affinity over zones and
//! hostnames, anti-affinity both ways. A pod whose affinity has no match yet waits for the next
//! pass; passes repeat while they place pods. Node selectors, taints, extended resources,
//! NodePool requirements and other topology keys are not read: the yardstick is only meaningful
//! for workloads without them, as the suites that print it are.

use std::collections::BTreeSet;

use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use autoscaler_core::model::{Pod, Snapshot, TermNamespaces};
use autoscaler_core::requirements::Requirements;
use autoscaler_core::resources::names;

/// What the packing came to.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Packing {
    /// Nodes opened.
    pub(crate) nodes: usize,
    /// Their hourly cost, each the cheapest type and offering that holds its pods.
    pub(crate) cost_per_hour: f64,
    /// Pods no node could take (too large for every type, or affinity never satisfied).
    pub(crate) unplaced: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Domain {
    Host,
    Zone,
}

fn domain(key: &str) -> Option<Domain> {
    match key {
        labels::HOSTNAME => Some(Domain::Host),
        labels::ZONE => Some(Domain::Zone),
        _ => None,
    }
}

/// A pod's constraints with selectors as indices into the packing's selector list.
#[derive(Default)]
struct Terms {
    spread: Vec<(usize, Domain, u32)>,
    affinity: Vec<(usize, Domain)>,
    anti: Vec<(usize, Domain)>,
}

/// Matching pods per selector in one domain (a node or a zone), and pods there holding an
/// anti-affinity term with that selector over that domain's key.
#[derive(Clone)]
struct Counts {
    matching: Vec<u32>,
    anti_held: Vec<u32>,
}

impl Counts {
    fn new(selectors: usize) -> Self {
        Counts {
            matching: vec![0; selectors],
            anti_held: vec![0; selectors],
        }
    }
}

struct Node {
    zone: usize,
    cpu: i64,
    mem: i64,
    pods: i64,
    counts: Counts,
}

struct Packer<'a> {
    pods: &'a [Pod],
    /// `matches[s][p]`: pod `p` is selected by selector `s` (same namespace).
    matches: Vec<Vec<bool>>,
    /// Per pod, the selectors that select it.
    selected_by: Vec<Vec<usize>>,
    terms: Vec<Terms>,
    zones: Vec<String>,
    cap: (i64, i64, i64),
    nodes: Vec<Node>,
    zone_counts: Vec<Counts>,
    totals: Vec<u32>,
    empty: Counts,
}

impl Packer<'_> {
    /// Whether pod `p` may go to a node with `node` counts in zone `zone`.
    fn allowed(&self, p: usize, node: &Counts, zone: usize) -> bool {
        let zc = &self.zone_counts[zone];
        let t = &self.terms[p];
        for &(s, d, skew) in &t.spread {
            let own = u32::from(self.matches[s][p]);
            let ok = match d {
                Domain::Host => node.matching[s] + own <= skew,
                Domain::Zone => {
                    let min = self
                        .zone_counts
                        .iter()
                        .map(|c| c.matching[s])
                        .min()
                        .unwrap_or(0);
                    zc.matching[s] + own <= min + skew
                }
            };
            if !ok {
                return false;
            }
        }
        for &(s, d) in &t.affinity {
            if self.totals[s] == 0 {
                // Nothing to be near yet: only a pod its own term selects may go first.
                if !self.matches[s][p] {
                    return false;
                }
                continue;
            }
            let here = match d {
                Domain::Host => node.matching[s],
                Domain::Zone => zc.matching[s],
            };
            if here == 0 {
                return false;
            }
        }
        for &(s, d) in &t.anti {
            let here = match d {
                Domain::Host => node.matching[s],
                Domain::Zone => zc.matching[s],
            };
            if here > 0 {
                return false;
            }
        }
        // Pods already placed whose anti-affinity selects this one.
        self.selected_by[p]
            .iter()
            .all(|s| node.anti_held[*s] == 0 && zc.anti_held[*s] == 0)
    }

    fn place(&mut self, p: usize, n: usize, req: (i64, i64)) {
        let zone = self.nodes[n].zone;
        let node = &mut self.nodes[n];
        node.cpu += req.0;
        node.mem += req.1;
        node.pods += 1;
        for &s in &self.selected_by[p] {
            node.counts.matching[s] += 1;
            self.zone_counts[zone].matching[s] += 1;
            self.totals[s] += 1;
        }
        for &(s, d) in &self.terms[p].anti {
            match d {
                Domain::Host => node.counts.anti_held[s] += 1,
                Domain::Zone => self.zone_counts[zone].anti_held[s] += 1,
            }
        }
    }

    fn fits(&self, n: &Node, req: (i64, i64)) -> bool {
        n.cpu + req.0 <= self.cap.0 && n.mem + req.1 <= self.cap.1 && n.pods < self.cap.2
    }

    /// Places `p` on the first node that takes it, or a new one; false when neither can.
    fn try_place(&mut self, p: usize) -> bool {
        let r = &self.pods[p].requests;
        let req = (r.get(names::CPU), r.get(names::MEMORY));
        let found = self
            .nodes
            .iter()
            .position(|n| self.fits(n, req) && self.allowed(p, &n.counts, n.zone));
        if let Some(n) = found {
            self.place(p, n, req);
            return true;
        }
        if req.0 > self.cap.0 || req.1 > self.cap.1 {
            return false;
        }
        let Some(zone) = (0..self.zones.len()).find(|z| self.allowed(p, &self.empty, *z)) else {
            return false;
        };
        self.nodes.push(Node {
            zone,
            cpu: 0,
            mem: 0,
            pods: 0,
            counts: self.empty.clone(),
        });
        self.place(p, self.nodes.len() - 1, req);
        true
    }
}

/// The cheapest (price, type) offered in `zone` whose allocatable holds the amounts.
fn cheapest(types: &[&InstanceType], zone: &str, cpu: i64, mem: i64, pods: i64) -> Option<f64> {
    types
        .iter()
        .filter(|t| {
            let a = t.allocatable();
            a.get(names::CPU) >= cpu && a.get(names::MEMORY) >= mem && a.get(names::PODS) >= pods
        })
        .flat_map(|t| t.offerings.iter())
        .filter(|o| o.available && o.zone == zone)
        .map(|o| o.price)
        .min_by(f64::total_cmp)
}

/// The index of `(ns, sel)` in `selectors`, added when new.
fn index<'a>(
    selectors: &mut Vec<(TermNamespaces, &'a Requirements)>,
    ns: TermNamespaces,
    sel: &'a Requirements,
) -> usize {
    match selectors.iter().position(|(n, s)| *n == ns && *s == sel) {
        Some(i) => i,
        None => {
            selectors.push((ns, sel));
            selectors.len() - 1
        }
    }
}

/// Packs `snap`'s pending pods first fit decreasing over the instance types of all its pools.
pub(crate) fn pack(snap: &Snapshot) -> Packing {
    let types: Vec<&InstanceType> = snap
        .pools
        .iter()
        .flat_map(|p| p.instance_types.iter())
        .collect();
    let zones: Vec<String> = types
        .iter()
        .flat_map(|t| t.offerings.iter().filter(|o| o.available))
        .map(|o| o.zone.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let largest = types.iter().max_by_key(|t| {
        let a = t.allocatable();
        (a.get(names::CPU), a.get(names::MEMORY))
    });
    let (Some(largest), false) = (largest, zones.is_empty()) else {
        return Packing {
            nodes: 0,
            cost_per_hour: 0.0,
            unplaced: snap.pending.len(),
        };
    };
    let a = largest.allocatable();
    let cap = (a.get(names::CPU), a.get(names::MEMORY), a.get(names::PODS));
    let pods = &snap.pending;

    let mut selectors: Vec<(TermNamespaces, &Requirements)> = Vec::new();
    let terms: Vec<Terms> = pods
        .iter()
        .map(|p| {
            let ns = p.key.namespace.as_str();
            let own = TermNamespaces::Own.resolved(ns);
            let mut t = Terms::default();
            for s in p.spread.iter().filter(|s| s.hard) {
                if let Some(d) = domain(&s.topology_key) {
                    let i = index(&mut selectors, own.clone(), &s.selector);
                    t.spread.push((i, d, s.max_skew));
                }
            }
            for a in &p.affinity {
                if let Some(d) = domain(&a.topology_key) {
                    let i = index(&mut selectors, a.namespaces.resolved(ns), &a.selector);
                    t.affinity.push((i, d));
                }
            }
            for a in &p.anti_affinity {
                if let Some(d) = domain(&a.topology_key) {
                    let i = index(&mut selectors, a.namespaces.resolved(ns), &a.selector);
                    t.anti.push((i, d));
                }
            }
            t
        })
        .collect();
    let matches: Vec<Vec<bool>> = selectors
        .iter()
        .map(|(ns, sel)| {
            pods.iter()
                .map(|p| ns.contains("", &p.key.namespace) && sel.matches(&p.labels))
                .collect()
        })
        .collect();
    let n_sel = selectors.len();
    let selected_by: Vec<Vec<usize>> = (0..pods.len())
        .map(|p| (0..n_sel).filter(|s| matches[*s][p]).collect())
        .collect();
    let mut packer = Packer {
        pods,
        matches,
        selected_by,
        terms,
        cap,
        nodes: Vec::new(),
        zone_counts: vec![Counts::new(n_sel); zones.len()],
        zones,
        totals: vec![0; n_sel],
        empty: Counts::new(n_sel),
    };

    let size = |p: &Pod| {
        p.requests.get(names::CPU) as f64 / cap.0.max(1) as f64
            + p.requests.get(names::MEMORY) as f64 / cap.1.max(1) as f64
    };
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|a, b| {
        size(&pods[*b])
            .total_cmp(&size(&pods[*a]))
            .then_with(|| pods[*a].key.cmp(&pods[*b].key))
    });
    loop {
        let before = order.len();
        order.retain(|p| !packer.try_place(*p));
        if order.is_empty() || order.len() == before {
            break;
        }
    }
    let mut cost = 0.0;
    let mut unplaced = order.len();
    for n in &packer.nodes {
        match cheapest(&types, &packer.zones[n.zone], n.cpu, n.mem, n.pods) {
            Some(p) => cost += p,
            // Cannot happen (the largest type holds every node), but say so if it does.
            None => unplaced += n.pods as usize,
        }
    }
    Packing {
        nodes: packer.nodes.len(),
        cost_per_hour: cost,
        unplaced,
    }
}
