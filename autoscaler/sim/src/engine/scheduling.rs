//! The simulated kube-scheduler's passes in the engine: pending pods in priority, then age
//! order, each bound to the node [`crate::scheduler`] scores best; a gang all or nothing (the
//! coscheduling plugin); a ProvisioningRequest's pods one by one. Bookings are the
//! autoscaler's, not the scheduler's: kube-scheduler knows nothing of them, so any pod may take
//! booked room. Pods no node takes open the batch window, as the controller's watch would.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};

use super::{Engine, Ev};
use crate::cluster::{Cluster, NodeId, PodId, PodPhase};
use crate::scheduler::{Topology, View, has_topology, needs_topology, untolerated};

impl Engine<'_> {
    pub(super) fn schedule_pass(&mut self) {
        let all = std::mem::take(&mut self.pass_all);
        let new = std::mem::take(&mut self.pass_new);
        let mut pods: Vec<PodId> = if all {
            self.cluster.pending.iter().copied().collect()
        } else {
            new.into_iter()
                .filter(|p| self.cluster.pending.contains(p))
                .collect()
        };
        if pods.is_empty() {
            return;
        }
        let key = |c: &Cluster, p: &PodId| {
            let since = match c.pods[*p].phase {
                PodPhase::Pending { since } => since,
                _ => 0,
            };
            (Reverse(c.pod(*p).priority), since, *p)
        };
        pods.sort_by_key(|p| key(&self.cluster, p));
        pods.dedup();
        let nodes: Vec<NodeId> = self
            .cluster
            .live_nodes
            .iter()
            .copied()
            .filter(|n| {
                let node = &self.cluster.nodes[*n];
                node.registered() && !node.cordoned && !node.deleting
            })
            .collect();
        // NVIDIA's device plugin fails a container asking for more than one replica under MPS
        // (and under time-slicing with failRequestsGreaterThanOne) at admission: the kubelet
        // would fail the pod, so a pod asking for several GPUs is never bound to such a node
        // and waits.
        // Most scenarios have no such pool: the node list is then borrowed, not filtered.
        let refusing = (0..self.pools.len()).any(|pi| self.pool_one_replica_each(pi));
        let several_ok: std::borrow::Cow<'_, [NodeId]> = if refusing {
            nodes
                .iter()
                .copied()
                .filter(|n| !self.one_replica_each(*n))
                .collect()
        } else {
            std::borrow::Cow::Borrowed(&nodes)
        };
        // Room only shrinks while a pass binds, so a pod that found none fails for every later
        // pod of its template.
        let mut failed_templates: HashSet<u32> = HashSet::new();
        // Per template of pods whose placement depends on other pods: its topology facts,
        // kept up to date as the pass binds, and the binds counted when a pod of it last
        // found no node (nothing changed since: the next one finds none either).
        let mut topos: HashMap<u32, (PodId, Topology)> = HashMap::new();
        let mut failed_at: HashMap<u32, usize> = HashMap::new();
        let mut binds = 0usize;
        let mut tried_groups: HashSet<u32> = HashSet::new();
        let mut unschedulable = Vec::new();
        for p in pods {
            if !self.cluster.pending.contains(&p) {
                continue;
            }
            let group = self.workload.pods[p].group;
            if let Some(g) = group.filter(|g| self.workload.groups[*g as usize].coscheduled()) {
                if !tried_groups.insert(g) {
                    continue;
                }
                let several = self.workload.groups[g as usize]
                    .members
                    .iter()
                    .any(|m| asks_several_gpus(self.cluster.pod(*m as usize)));
                if !self.place_group(g, if several { &several_ok } else { &nodes[..] }) {
                    for m in &self.workload.groups[g as usize].members {
                        if self.cluster.pending.contains(&(*m as usize)) {
                            unschedulable.push(*m as usize);
                        }
                    }
                }
                // It may have bound and rolled back: every kept fact is recounted.
                topos.clear();
                failed_at.clear();
                binds += 1;
                continue;
            }
            let tpl = self.workload.pods[p].template;
            let pod = self.cluster.pod(p);
            let alike = !has_topology(pod) && self.cluster.anti_bound == 0;
            if alike && failed_templates.contains(&tpl) {
                unschedulable.push(p);
                continue;
            }
            let view = View::of(&self.cluster);
            let topo = if needs_topology(view, pod) {
                if failed_at.get(&tpl) == Some(&binds) {
                    unschedulable.push(p);
                    continue;
                }
                let (_, t) = topos
                    .entry(tpl)
                    .or_insert_with(|| (p, Topology::of(view, pod)));
                Some(&*t)
            } else {
                None
            };
            let allowed: &[NodeId] = if asks_several_gpus(pod) {
                &several_ok
            } else {
                &nodes
            };
            let best = self.selectors.best_node_in(
                view,
                tpl,
                pod,
                allowed.iter().copied(),
                self.cfg.score,
                topo,
            );
            match best {
                Some((n, devices)) => {
                    self.bind(p, n, devices);
                    binds += 1;
                    if matches!(self.cluster.pods[p].phase, PodPhase::Bound { .. }) {
                        let (node, bound) = (&self.cluster.nodes[n], self.cluster.pod(p));
                        for (rep, t) in topos.values_mut() {
                            t.add_bound(self.cluster.pod(*rep), node, bound);
                        }
                    }
                }
                None => {
                    if alike {
                        failed_templates.insert(tpl);
                    }
                    if topo.is_some() {
                        failed_at.insert(tpl, binds);
                    }
                    unschedulable.push(p);
                }
            }
        }
        let mut fresh = false;
        for p in unschedulable {
            if self.seen_unschedulable.insert(p) {
                fresh = true;
            }
        }
        if fresh {
            self.trigger_batch();
        }
    }

    /// Whether node `n`'s device plugin fails a request for more than one GPU replica (its
    /// pool shares GPUs with MPS, or time-slices them with failRequestsGreaterThanOne).
    fn one_replica_each(&self, n: NodeId) -> bool {
        self.cluster.nodes[n]
            .pool
            .is_some_and(|pi| self.pool_one_replica_each(pi))
    }

    /// Whether pool `pi`'s device plugin fails a request for more than one GPU replica.
    fn pool_one_replica_each(&self, pi: usize) -> bool {
        self.pools[pi]
            .sharing
            .time_slicing
            .as_ref()
            .is_some_and(autoscaler_core::model::TimeSlicing::one_replica_each)
    }

    /// All-or-nothing placement of a group's pending members (the coscheduling plugin).
    pub(super) fn place_group(&mut self, g: u32, nodes: &[NodeId]) -> bool {
        let members: Vec<PodId> = self.workload.groups[g as usize]
            .members
            .iter()
            .map(|m| *m as usize)
            .collect();
        if members.iter().any(|m| !self.cluster.pending.contains(m)) {
            // Not all created yet (or some still bound): wait for the group to be whole.
            return false;
        }
        // With each trial bind: when the pod had been pending since, and whether this is its
        // first bind (a rolled-back trial must not count as the pod's first bind).
        let mut done: Vec<(PodId, i64, bool)> = Vec::new();
        for &m in &members {
            let since = match self.cluster.pods[m].phase {
                PodPhase::Pending { since } => since,
                _ => self.now,
            };
            let pod = self.cluster.pod(m);
            let tpl = self.workload.pods[m].template;
            let view = View::of(&self.cluster);
            match self
                .selectors
                .best_node(view, tpl, pod, nodes.iter().copied(), self.cfg.score)
            {
                Some((n, devices)) => {
                    let first = !self.cluster.first_bound.contains_key(&m);
                    if let Err(e) = self.cluster.bind(m, n, devices, self.now) {
                        self.violation(e.0);
                    }
                    done.push((m, since, first));
                }
                None => {
                    for (d, since, first) in done {
                        if first {
                            self.cluster.first_bound.remove(&d);
                        }
                        self.cluster.unbind(d, self.now);
                        self.cluster.pods[d].phase = PodPhase::Pending { since };
                        self.cluster.pending.insert(d);
                    }
                    return false;
                }
            }
        }
        // Bound together: record pending times and start the shared clock.
        for (m, since, _) in done {
            self.pending_samples.push(self.now - since);
            self.after_bind(m);
        }
        true
    }

    pub(super) fn bind(&mut self, p: PodId, n: NodeId, devices: Vec<usize>) {
        let since = match self.cluster.pods[p].phase {
            PodPhase::Pending { since } => since,
            _ => self.now,
        };
        if let Err(e) = self.cluster.bind(p, n, devices, self.now) {
            self.violation(e.0);
        }
        self.pending_samples.push(self.now - since);
        self.after_bind(p);
    }

    pub(super) fn after_bind(&mut self, p: PodId) {
        self.nominated.remove(&p);
        self.seen_unschedulable.remove(&p);
        self.changed();
        let n = match self.cluster.pods[p].phase {
            PodPhase::Bound { node, .. } => node,
            _ => return,
        };
        let node = &self.cluster.nodes[n];
        if let Some(t) = untolerated(&self.cluster.pod(p).tolerations, &node.taints) {
            let msg = format!("pod bound to {} despite taint {t}", node.name);
            self.violation(msg);
        }
        if let Some(rt) = self.workload.pods[p].runtime {
            let generation = self.cluster.pods[p].generation;
            self.push(self.now + rt, Ev::Complete(p, generation));
        }
        self.request_pod_bound(p);
    }
}

/// Whether `pod` asks for more than one of a GPU-class resource.
fn asks_several_gpus(pod: &autoscaler_core::model::Pod) -> bool {
    pod.requests
        .extended
        .iter()
        .any(|(k, v)| *v > 1 && autoscaler_core::resources::is_gpu_class(k))
}
