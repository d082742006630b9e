//! ProvisioningRequests in the engine, as Kueue and the controller handle them: a request
//! arrives without pods; the policy finds (check-capacity) or launches (best-effort-atomic,
//! all or nothing) capacity for all of them; once every booked node has launched the request
//! is Provisioned and its capacity stays booked (phantom pods in every snapshot the policy
//! plans on, so it neither gives the room to other pods nor disrupts it; kube-scheduler knows
//! nothing of bookings) until its pods, created by Kueue `admissionDelay` later, bind, or until
//! `bookingDuration` runs out.

use autoscaler_core::model::{Pod, PodKey};

use super::result::percentile;
use super::{Engine, Ev, ProvReqStats, ReqEnd, ReqPhase, Request, RequestRecord};
use crate::cluster::{NodeId, PodId, PodPhase};
use crate::policy::{Ctx, RequestAnswer, RequestAsk};

impl Engine<'_> {
    fn members(&self, g: u32) -> Vec<PodId> {
        self.workload.groups[g as usize]
            .members
            .iter()
            .map(|m| *m as usize)
            .collect()
    }

    /// A request is created: track it and plan for it at once.
    pub(super) fn request_create(&mut self, g: u32) {
        let Some(spec) = self.workload.groups[g as usize].provisioning_request else {
            return;
        };
        self.requests.insert(
            g,
            Request {
                spec,
                created: self.now,
                phase: ReqPhase::Waiting,
                booking: Vec::new(),
                holding: Vec::new(),
                launched: Vec::new(),
                provisioned_at: None,
                admitted_at: None,
                bound_at: None,
                end: None,
                attempts: 0,
                served: true,
            },
        );
        self.request_attempt(g);
    }

    /// Asks the policy for a Waiting request's capacity and books (or launches) it.
    pub(super) fn request_attempt(&mut self, g: u32) {
        let Some(r) = self.requests.get(&g) else {
            return;
        };
        if r.phase != ReqPhase::Waiting {
            return;
        }
        let class = r.spec.class;
        let members = self.members(g);
        let pods: Vec<(PodId, Pod)> = members
            .iter()
            .map(|m| (*m, self.workload.materialize(*m)))
            .collect();
        self.unavailable.prune(self.now);
        let pools = self.pools_now();
        let mut taken = std::mem::replace(&mut self.policy, Box::new(super::Noop));
        let answer = {
            let ctx = Ctx {
                pools: &pools,
                ..self.ctx()
            };
            let ask = RequestAsk {
                group: g,
                class,
                pods: &pods,
            };
            taken.provision_request(&ctx, &ask, self.now)
        };
        self.policy = taken;
        match answer {
            RequestAnswer::Unsupported => {
                if let Some(r) = self.requests.get_mut(&g) {
                    r.served = false;
                    r.phase = ReqPhase::Done;
                }
                // Kueue without the admission check: the workload's pods are created now.
                for m in members {
                    self.handle(Ev::Arrive(m));
                }
            }
            RequestAnswer::NoCapacity(_) => self.request_retry(g),
            RequestAnswer::Capacity { on, launch } => {
                let mut booking = on;
                let mut launched = Vec::new();
                let mut failed = false;
                for spec in &launch {
                    match self.launch(spec) {
                        Some(n) => {
                            launched.push(n);
                            booking.push((n, spec.pods.clone()));
                        }
                        None => {
                            failed = true;
                            break;
                        }
                    }
                }
                if failed {
                    // All or nothing: what was launched goes again.
                    for n in launched {
                        self.terminate(n);
                    }
                    self.request_retry(g);
                    return;
                }
                if let Some(r) = self.requests.get_mut(&g) {
                    r.booking = booking;
                    r.launched = launched;
                    r.phase = ReqPhase::Launching;
                }
                self.hold(g);
                self.request_check(g);
            }
        }
    }

    /// Plans for the request again after the controller's backoff (10 s doubling to 5 min).
    fn request_retry(&mut self, g: u32) {
        let Some(r) = self.requests.get_mut(&g) else {
            return;
        };
        let delay = self.cfg.cadence.provreq_retry_delay_s(r.attempts);
        r.attempts += 1;
        self.push(self.now + delay, Ev::ReqAttempt(g));
    }

    /// Puts the request's phantoms on its booked nodes.
    fn hold(&mut self, g: u32) {
        let Some(r) = self.requests.get(&g) else {
            return;
        };
        let booking = r.booking.clone();
        for (n, pods) in &booking {
            for m in pods {
                let p = self.phantom(*m);
                self.cluster.nodes[*n].held.push((g, p));
            }
            self.cluster.nodes[*n].hold_version += 1;
        }
        if let Some(r) = self.requests.get_mut(&g) {
            r.holding = booking.iter().map(|(_, pods)| count(pods)).collect();
        }
        self.changed();
    }

    /// The phantom holding member `m`'s booked place: its pod, renamed and in no group.
    fn phantom(&self, m: PodId) -> Pod {
        let mut p = self.workload.materialize(m);
        p.key = PodKey {
            namespace: p.key.namespace.clone(),
            name: format!("{}.booked", p.key.name),
        };
        p.group = None;
        p
    }

    /// Releases whatever the request still holds.
    fn release(&mut self, g: u32) {
        let Some(r) = self.requests.get(&g) else {
            return;
        };
        let nodes: Vec<NodeId> = r.booking.iter().map(|(n, _)| *n).collect();
        for n in nodes {
            let node = &mut self.cluster.nodes[n];
            let before = node.held.len();
            node.held.retain(|(x, _)| *x != g);
            if node.held.len() != before {
                node.hold_version += 1;
            }
        }
        self.cluster.live_bookings.remove(&g);
        self.request_pass(true);
        self.changed();
    }

    /// A Launching request whose booked nodes have all launched is Provisioned, as the
    /// controller marks it once every claim launched and the Cluster Autoscaler once its
    /// scale-up was requested (`CapacityIsProvisioned`), not when the nodes are up: the
    /// request's pods are created then and wait for the nodes (the booking holds them).
    fn request_check(&mut self, g: u32) {
        let Some(r) = self.requests.get(&g) else {
            return;
        };
        if r.phase != ReqPhase::Launching {
            return;
        }
        if r.booking
            .iter()
            .any(|(n, _)| !self.cluster.nodes[*n].alive())
        {
            self.rollback(g);
            return;
        }
        let spec = r.spec;
        if let Some(r) = self.requests.get_mut(&g) {
            r.phase = ReqPhase::Booked;
            r.provisioned_at = Some(self.now);
        }
        self.cluster.live_bookings.insert(g);
        self.push(self.now + spec.admission_delay_s, Ev::ReqAdmit(g));
        self.push(self.now + spec.booking_s, Ev::ReqExpire(g));
        self.changed();
    }

    /// A booked node of a Launching request was lost: every node launched for it goes, and
    /// the request waits again (all or nothing).
    fn rollback(&mut self, g: u32) {
        self.release(g);
        let Some(r) = self.requests.get_mut(&g) else {
            return;
        };
        r.phase = ReqPhase::Waiting;
        r.booking.clear();
        r.holding.clear();
        let launched = std::mem::take(&mut r.launched);
        for n in launched {
            self.terminate(n);
        }
        self.request_retry(g);
    }

    /// Kueue admits the workload: the request's pods are created.
    pub(super) fn request_admit(&mut self, g: u32) {
        if let Some(r) = self.requests.get_mut(&g) {
            r.admitted_at = Some(self.now);
        }
        for m in self.members(g) {
            if self.cluster.pods[m].phase == PodPhase::Waiting {
                self.handle(Ev::Arrive(m));
            }
        }
    }

    /// The booking time is up: if not consumed, the capacity is released.
    pub(super) fn request_expire(&mut self, g: u32) {
        let Some(r) = self.requests.get_mut(&g) else {
            return;
        };
        if r.phase != ReqPhase::Booked {
            return;
        }
        r.phase = ReqPhase::Done;
        r.end = Some(ReqEnd::Expired);
        self.release(g);
    }

    /// A pod bound: if it consumes a live booking, the places its bound pods took are freed
    /// by the rule the controller follows ([`autoscaler_core::provreq::unconsumed`]), and the
    /// booking ends once every pod of the request is bound.
    pub(super) fn request_pod_bound(&mut self, p: PodId) {
        let Some(g) = self.workload.pods[p].group else {
            return;
        };
        let members = self.members(g);
        let bound_on: Vec<Option<NodeId>> = members
            .iter()
            .filter_map(|m| match self.cluster.pods[*m].phase {
                PodPhase::Bound { node, .. } => Some(Some(node)),
                _ => None,
            })
            .collect();
        let all = bound_on.len() == members.len();
        let Some(r) = self.requests.get_mut(&g) else {
            return;
        };
        if all && r.bound_at.is_none() {
            r.bound_at = Some(self.now);
        }
        if r.phase != ReqPhase::Booked {
            return;
        }
        let places: Vec<(NodeId, u32)> = r
            .booking
            .iter()
            .map(|(n, pods)| (*n, count(pods)))
            .collect();
        let left = autoscaler_core::provreq::unconsumed(&places, bound_on);
        // Only the nodes whose places changed are rebuilt: one bind of a request of thousands
        // of pods touches one or two nodes, not the whole booking.
        let mut rebuild: Vec<NodeId> = Vec::new();
        for (i, (n, keep)) in left.iter().enumerate() {
            if r.holding.get(i) != Some(keep) && !rebuild.contains(n) {
                rebuild.push(*n);
            }
        }
        r.holding = left.iter().map(|(_, keep)| *keep).collect();
        let kept: Vec<(NodeId, Vec<PodId>)> = rebuild
            .into_iter()
            .map(|n| {
                let on_n = r.booking.iter().zip(&left).filter(|((x, _), _)| *x == n);
                let pods =
                    on_n.flat_map(|((_, pods), (_, keep))| pods[..*keep as usize].iter().copied());
                (n, pods.collect())
            })
            .collect();
        for (n, kept) in kept {
            let phantoms: Vec<Pod> = kept.iter().map(|m| self.phantom(*m)).collect();
            let node = &mut self.cluster.nodes[n];
            node.held.retain(|(x, _)| *x != g);
            node.held.extend(phantoms.into_iter().map(|ph| (g, ph)));
            node.hold_version += 1;
            self.changed();
        }
        if all {
            if let Some(r) = self.requests.get_mut(&g) {
                r.phase = ReqPhase::Done;
                r.end = Some(ReqEnd::Consumed);
            }
            self.release(g);
        }
    }

    /// A node is gone: Launching requests on it roll back, Booked ones are revoked.
    pub(super) fn request_node_gone(&mut self, n: NodeId) {
        let gs: Vec<(u32, ReqPhase)> = self
            .requests
            .iter()
            .filter(|(_, r)| {
                matches!(r.phase, ReqPhase::Launching | ReqPhase::Booked)
                    && r.booking.iter().any(|(x, _)| *x == n)
            })
            .map(|(g, r)| (*g, r.phase))
            .collect();
        for (g, phase) in gs {
            if phase == ReqPhase::Launching {
                self.rollback(g);
            } else if let Some(r) = self.requests.get_mut(&g) {
                r.phase = ReqPhase::Done;
                r.end = Some(ReqEnd::Revoked);
                self.release(g);
            }
        }
    }

    /// The outcomes, or `None` when the workload has no requests.
    pub(super) fn request_stats(&self) -> Option<ProvReqStats> {
        let any = self
            .workload
            .groups
            .iter()
            .any(|g| g.provisioning_request.is_some());
        if !any {
            return None;
        }
        let mut st = ProvReqStats {
            supported: self.requests.values().all(|r| r.served),
            ..Default::default()
        };
        let mut waits = Vec::new();
        for (g, r) in self.requests.iter().filter(|(_, r)| r.served) {
            st.records.push(RequestRecord {
                name: self.workload.groups[*g as usize].name.clone(),
                class: r.spec.class.as_str(),
                created: r.created,
                provisioned_at: r.provisioned_at,
                admitted_at: r.admitted_at,
                bound_at: r.bound_at,
                end: r.end.map(|e| match e {
                    ReqEnd::Consumed => "consumed",
                    ReqEnd::Expired => "expired",
                    ReqEnd::Revoked => "revoked",
                }),
                nodes: r
                    .launched
                    .iter()
                    .map(|n| {
                        let node = &self.cluster.nodes[*n];
                        (node.launched_at, node.gone_at)
                    })
                    .collect(),
            });
            st.requests += 1;
            match r.provisioned_at {
                Some(t) => {
                    st.provisioned += 1;
                    waits.push(t - r.created);
                }
                None => st.never_provisioned += 1,
            }
            match r.end {
                Some(ReqEnd::Consumed) => st.consumed += 1,
                Some(ReqEnd::Expired) => st.expired += 1,
                Some(ReqEnd::Revoked) => st.revoked += 1,
                None => {}
            }
        }
        waits.sort_unstable();
        st.to_provisioned_p50_s = percentile(&waits, 0.50);
        st.to_provisioned_p95_s = percentile(&waits, 0.95);
        Some(st)
    }
}

/// A booking entry's number of places.
fn count(pods: &[PodId]) -> u32 {
    u32::try_from(pods.len()).unwrap_or(u32::MAX)
}
