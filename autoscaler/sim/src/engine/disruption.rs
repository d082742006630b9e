//! Disruption in the engine: the policy's decisions carried out by the controller's own
//! executor ([`autoscaler_core::disruption::execute`]): validated after the delay, the
//! replacement launched and waited for, validated again, tainted, drained and terminated, or
//! abandoned and untainted. The engine only gathers the executor's facts from the simulated
//! cluster and performs its actions there; the Eviction API is simulated as always granting,
//! with every eviction that breaks a safety rule (protection, safe-to-evict, PDB) counted as a
//! violation.

use std::collections::BTreeSet;

use autoscaler_core::disruption::execute::{self, Action, Facts, Job, Order, Stage};
use autoscaler_core::disruption::{Command, Method, SAFE_TO_EVICT, pod_protection};
use autoscaler_core::keys::DISRUPTION_TAINT;
use autoscaler_core::model::{DisruptionReason, PodKey};
use autoscaler_core::taints::Taint;

use super::{Engine, Ev, Noop, Pending};
use crate::cluster::{NodeId, NodePhase, PodPhase};
use crate::policy::{Ctx, Decision};

/// The command a model of another autoscaler decided, for the executor: the same nodes and
/// replacement, validated by the policy itself.
fn command_of(decision: &Decision, names: Vec<String>, now: i64) -> Command {
    Command {
        reason: DisruptionReason::Underutilized,
        method: if decision.replacement.is_some() {
            Method::Replace
        } else {
            Method::Delete
        },
        nodes: names,
        pods: vec![],
        replacement: None,
        savings: 0.0,
        decided_at: now,
    }
}

impl Engine<'_> {
    pub(super) fn disrupt_tick(&mut self) {
        if !self.decisions.is_empty() {
            return;
        }
        if !self.every_pass && self.version == self.disrupt_version && self.now < self.disrupt_wake
        {
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
            let mut job = match &d.command {
                Some(cmd) => Job::new(cmd.clone()),
                None => {
                    let names = d
                        .nodes
                        .iter()
                        .map(|n| self.cluster.nodes[*n].name.clone())
                        .collect();
                    Job::new(command_of(&d, names, self.now))
                }
            };
            // The replacement is the decision's launch spec, whoever decided it, and the
            // policy says whether it comes before or after the taint.
            job.order = if d.replacement.is_some() {
                self.policy.replacement_order()
            } else {
                Order::NoReplacement
            };
            let i = self.next_decision;
            self.next_decision += 1;
            self.decisions.insert(
                i,
                Pending {
                    decision: d,
                    replacement: None,
                    tainted: false,
                    job,
                },
            );
            self.step_job(i);
        }
    }

    /// What the executor needs to know about decision `i`'s nodes now.
    fn job_facts(&self, p: &Pending) -> Facts {
        let present: Vec<NodeId> = p
            .decision
            .nodes
            .iter()
            .copied()
            .filter(|n| self.cluster.nodes[*n].alive())
            .collect();
        let bound: Vec<_> = present
            .iter()
            .flat_map(|n| self.cluster.nodes[*n].pods.iter())
            .filter(|p| matches!(self.cluster.pods[**p].phase, PodPhase::Bound { .. }))
            .map(|p| self.cluster.pod(*p))
            .collect();
        let pods_left = bound.iter().map(|p| p.key.clone()).collect();
        // As the controller: a pod tolerating the disruption taint goes with its node.
        let staying = bound
            .iter()
            .filter(|p| p.tolerates_disruption_taint())
            .map(|p| p.key.clone())
            .collect();
        let replacement_initialized = match p.job.stage {
            Stage::Replacing { .. } => p
                .replacement
                .filter(|r| self.cluster.nodes[*r].alive())
                .map(|r| self.cluster.nodes[r].phase == NodePhase::Ready),
            _ => None,
        };
        let names: Vec<String> = present
            .iter()
            .map(|n| self.cluster.nodes[*n].name.clone())
            .collect();
        Facts {
            now: self.now,
            validation_delay_s: self.cfg.disruption.validation_delay_s,
            nodes_present: names.clone(),
            // A terminated simulated node is gone at once: one still there is not deleting.
            nodes_not_deleting: names,
            pods_left,
            staying,
            replacement_initialized,
            timeouts: self.cfg.disruption_timeouts,
        }
    }

    /// Advances decision `i` as far as it goes now, then asks to be called again when time
    /// alone can move it on.
    pub(super) fn step_job(&mut self, i: u64) {
        loop {
            let Some(p) = self.decisions.get(&i) else {
                return;
            };
            if p.job.stage == Stage::Decided
                && self.now >= p.job.command.decided_at + self.cfg.disruption.validation_delay_s
            {
                self.narrow_job(i);
            }
            let Some(p) = self.decisions.get(&i) else {
                return;
            };
            let facts = self.job_facts(p);
            let job = p.job.clone();
            let mut decision = p.decision.clone();
            // The core's policy validates the command as the executor holds it (its pods as
            // the last validation saw them), as the controller validates its job's command.
            if decision.command.is_some() {
                decision.command = Some(job.command.clone());
            }
            let mut taken = std::mem::replace(&mut self.policy, Box::new(Noop));
            let step = execute::step(&job, &facts, &mut |check| {
                let pools = self.pools_now();
                let ctx = Ctx {
                    pools: &pools,
                    ..self.ctx()
                };
                if taken.validate(&ctx, &decision, self.now, check) {
                    Ok(())
                } else {
                    Err("the decision no longer holds".into())
                }
            });
            self.policy = taken;
            if step.failure {
                // A failed deletion: scale-down pauses in the nodes' pools, as in the controller.
                for pool in self.pools_of(&decision.nodes) {
                    self.policy.on_failure(&pool, self.now, step.stuck);
                }
            }
            let before = job.stage.clone();
            let mut step = step;
            match std::mem::replace(&mut step.action, Action::Wait) {
                Action::Wait => {}
                Action::CreateReplacement => {
                    let launched = decision.replacement.as_ref().and_then(|s| self.launch(s));
                    // A launch the cloud refused is a replacement claim that failed: gone, and
                    // given up on after the grace the controller allows its cache.
                    let claim = launched
                        .map(|n| self.cluster.nodes[n].claim.clone())
                        .unwrap_or_default();
                    step.next = Stage::Replacing {
                        claim,
                        since: self.now,
                    };
                    if let Some(p) = self.decisions.get_mut(&i) {
                        p.replacement = launched;
                    }
                }
                Action::Taint(_) => {
                    for &n in &decision.nodes {
                        let node = &mut self.cluster.nodes[n];
                        if node.alive() {
                            node.deleting = true;
                            node.taints.push(Taint::disruption());
                        }
                    }
                    if let Some(p) = self.decisions.get_mut(&i) {
                        p.tainted = true;
                    }
                    self.changed();
                }
                Action::Evict(pods) => {
                    self.evict_for_disruption(&pods);
                    if let Some(p) = self.decisions.get_mut(&i) {
                        p.job.evictions_accepted(self.now);
                    }
                }
                Action::DeleteNodes(_) => {
                    for &n in &decision.nodes {
                        self.terminate(n);
                    }
                    for pool in self.pools_of(&decision.nodes) {
                        self.policy.on_delete(&pool, self.now);
                    }
                }
                Action::Untaint(_) => {
                    let tainted = self.decisions.get(&i).is_some_and(|p| p.tainted);
                    for &n in &decision.nodes {
                        let node = &mut self.cluster.nodes[n];
                        if tainted && node.alive() {
                            node.deleting = false;
                            node.taints.retain(|t| t.key != DISRUPTION_TAINT);
                        }
                    }
                    // Nothing changed in the cluster when the nodes were never tainted.
                    if tainted {
                        self.request_pass(true);
                        self.changed();
                    }
                }
            }
            let Some(p) = self.decisions.get_mut(&i) else {
                return;
            };
            p.job.advance(step);
            if p.job.stage == Stage::Done {
                self.decisions.remove(&i);
                return;
            }
            if p.job.stage == before {
                // Waiting: on an event (a replacement initializing or lost) or on the clock.
                let (job, facts) = (p.job.clone(), self.job_facts(&self.decisions[&i]));
                if let Some(t) = execute::wake(&job, &facts) {
                    self.push(t, Ev::Step(i));
                }
                return;
            }
        }
    }

    /// Narrows decision `i` to the nodes its policy goes on with ([`Policy::narrow`]), as the
    /// controller narrows its job before validating it.
    fn narrow_job(&mut self, i: u64) {
        let Some(p) = self.decisions.get(&i) else {
            return;
        };
        let mut decision = p.decision.clone();
        if decision.command.is_some() {
            decision.command = Some(p.job.command.clone());
        }
        let mut taken = std::mem::replace(&mut self.policy, Box::new(Noop));
        let kept = taken.narrow(&self.ctx(), &decision);
        self.policy = taken;
        let (Some(kept), Some(p)) = (kept, self.decisions.get_mut(&i)) else {
            return;
        };
        let nodes = &self.cluster.nodes;
        p.decision
            .nodes
            .retain(|n| kept.iter().any(|k| *k == nodes[*n].name));
        if let Some(cmd) = p.decision.command.as_mut() {
            cmd.nodes.clone_from(&kept);
        }
        p.job.command.nodes = kept;
    }

    /// Decisions waiting on node `n` (as their replacement or among their nodes), stepped
    /// again at this instant once the event that changed `n` is done.
    pub(super) fn nudge_jobs(&mut self, n: NodeId) {
        let waiting: Vec<u64> = self
            .decisions
            .iter()
            .filter(|(_, p)| p.replacement == Some(n) || p.decision.nodes.contains(&n))
            .map(|(i, _)| *i)
            .collect();
        for i in waiting {
            self.push(self.now, Ev::Step(i));
        }
    }

    /// The NodePools of `nodes`, each once.
    fn pools_of(&self, nodes: &[NodeId]) -> BTreeSet<String> {
        nodes
            .iter()
            .filter_map(|n| {
                let node = &self.cluster.nodes[*n];
                node.pool.map(|_| node.pool_name.clone())
            })
            .collect()
    }

    /// Evicts the pods the executor asked for, counting any eviction that breaks a safety
    /// rule: the simulated Eviction API always grants, so that a policy's unsafe choice shows.
    fn evict_for_disruption(&mut self, pods: &[PodKey]) {
        let mut pdbs = self.cluster.pdbs(self.workload);
        for key in pods {
            let Some(&p) = self.pod_ids.get(key) else {
                continue;
            };
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
    }
}
