//! Disruption in the engine: the policy's decisions, re-validated after the validation delay,
//! then tainted, replaced (waiting for the replacement to initialize) and drained, with every
//! eviction that breaks a safety rule (protection, safe-to-evict, PDB) counted as a violation.

use autoscaler_core::disruption::{SAFE_TO_EVICT, pod_protection};
use autoscaler_core::taints::{Effect, Taint};

use super::{DISRUPTED_TAINT, Engine, Ev, Noop, Pending, REPLACEMENT_TIMEOUT_S};
use crate::cluster::PodPhase;
use crate::policy::Ctx;

impl Engine<'_> {
    pub(super) fn disrupt_tick(&mut self) {
        if !self.decisions.is_empty() {
            return;
        }
        if self.version == self.disrupt_version && self.now < self.disrupt_wake {
            return;
        }
        let pools = self.pools_now();
        let mut taken = std::mem::replace(&mut self.policy, Box::new(Noop));
        let (decisions, wake) = {
            let ctx = Ctx {
                pools: &pools,
                ..self.ctx()
            };
            taken.disrupt(&ctx, self.now)
        };
        self.policy = taken;
        self.disrupt_version = self.version;
        self.disrupt_wake = wake;
        for d in decisions {
            if d.nodes.is_empty() {
                continue;
            }
            let i = self.next_decision;
            self.next_decision += 1;
            self.decisions.insert(
                i,
                Pending {
                    decision: d,
                    replacement: None,
                    executing: false,
                },
            );
            self.push(self.now + self.cfg.validation_delay_s, Ev::Validate(i));
        }
    }

    pub(super) fn validate(&mut self, i: u64) {
        let Some(p) = self.decisions.get(&i) else {
            return;
        };
        let decision = p.decision.clone();
        let pools = self.pools_now();
        let mut taken = std::mem::replace(&mut self.policy, Box::new(Noop));
        let ok = {
            let ctx = Ctx {
                pools: &pools,
                ..self.ctx()
            };
            taken.validate(&ctx, &decision, self.now)
        };
        self.policy = taken;
        if !ok {
            self.finish_decision(i);
            return;
        }
        for &n in &decision.nodes {
            let node = &mut self.cluster.nodes[n];
            node.deleting = true;
            node.taints
                .push(Taint::new(DISRUPTED_TAINT, "", Effect::NoSchedule));
        }
        self.changed();
        match &decision.replacement {
            None => self.drain(i),
            Some(spec) => match self.launch(spec) {
                Some(r) => {
                    if let Some(p) = self.decisions.get_mut(&i) {
                        p.replacement = Some(r);
                    }
                    self.push(self.now + REPLACEMENT_TIMEOUT_S, Ev::ReplacementTimeout(i));
                }
                None => self.abandon(i),
            },
        }
    }

    pub(super) fn abandon(&mut self, i: u64) {
        let Some(nodes) = self.decisions.get(&i).map(|p| p.decision.nodes.clone()) else {
            return;
        };
        for n in nodes {
            let node = &mut self.cluster.nodes[n];
            if node.alive() {
                node.deleting = false;
                node.taints.retain(|t| t.key != DISRUPTED_TAINT);
            }
        }
        self.finish_decision(i);
        self.request_pass(true);
        self.changed();
    }

    pub(super) fn finish_decision(&mut self, i: u64) {
        self.decisions.remove(&i);
    }

    /// Evicts the pods of a validated decision's nodes and terminates them, counting any
    /// eviction that breaks a safety rule.
    pub(super) fn drain(&mut self, i: u64) {
        let Some(nodes) = self.decisions.get(&i).map(|p| p.decision.nodes.clone()) else {
            return;
        };
        let mut pdbs = self.cluster.pdbs(self.workload);
        let mut pools = std::collections::BTreeSet::new();
        for &n in &nodes {
            if !self.cluster.nodes[n].alive() {
                continue;
            }
            let pods = self.cluster.nodes[n].pods.clone();
            for p in pods {
                if !matches!(self.cluster.pods[p].phase, PodPhase::Bound { .. }) {
                    continue;
                }
                let pod = self.cluster.pod(p);
                let ann = |k: &str| pod.annotations.get(k).map(String::as_str);
                let mut problems = Vec::new();
                if let Some(why) = pod_protection(pod, self.now) {
                    problems.push(format!("evicted a pod while it is protected: {why}"));
                }
                if ann(SAFE_TO_EVICT) == Some("false") {
                    problems.push(format!(
                        "evicted {} which has {SAFE_TO_EVICT}=false",
                        pod.key
                    ));
                }
                for b in pdbs.iter_mut() {
                    if b.namespace == pod.key.namespace && b.selector.matches(&pod.labels) {
                        if b.disruptions_allowed <= 0 {
                            problems.push(format!(
                                "evicted {} beyond PDB {}/{}",
                                pod.key, b.namespace, b.name
                            ));
                        }
                        b.disruptions_allowed -= 1;
                    }
                }
                for m in problems {
                    self.violation(m);
                }
                self.pods_disrupted += self.evict(p);
            }
            pools.insert(self.cluster.nodes[n].pool_name.clone());
            self.terminate(n);
        }
        for pool in pools {
            self.policy.on_delete(&pool, self.now);
        }
        self.finish_decision(i);
    }
}
