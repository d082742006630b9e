//! The two phases that stress the controller: launches under kills, then the disruption
//! replay.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use autoscaler::controller::Result;
use autoscaler::controller::crashpoint;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nodepools::NodePool;
use providers::kwok::KwokInstance;
use serde_json::json;

use super::accounting::terminal;
use super::{Bench, CPU_POOL, NS, Running, SPOT_POOL};
use crate::bench::e2e::kerr;

/// What the benchmark does to a Node it fails.
#[derive(Clone, Copy, Debug)]
pub(super) enum Failure {
    /// The Node object is deleted (`kubectl delete node`); its instance runs on, and kwok
    /// boots its Node again.
    NodeDeleted,
    /// A spot Node's instance is reclaimed: instance and Node gone.
    SpotInterruption,
    /// Any Node's instance fails for good (a hardware retirement): instance and Node gone.
    InstanceLost,
}

impl Bench<'_> {
    /// Adds the time since `since` to what `what` took (printed at the end: where the time
    /// went).
    pub(super) fn spend(&mut self, what: &'static str, since: Instant) {
        *self.spent.entry(what).or_default() += since.elapsed();
    }

    /// Sets NodePool `name`'s disruption budget to `n` nodes, and remembers the one before
    /// (a budget lowered binds only what starts after it, see `observe`).
    ///
    /// # Errors
    /// The API server's, as `changing a budget`.
    pub(super) async fn set_budget(&mut self, name: String, n: usize) -> Result<()> {
        let patch = json!({"spec": {"disruption": {"budgets": [{"nodes": n.to_string()}]}}});
        Api::<NodePool>::all(self.client.clone())
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(kerr("changing a budget"))?;
        let entry = self.budgets.entry(name).or_insert((n, n));
        *entry = (n, entry.0);
        Ok(())
    }

    /// Whether `n` is the very Node the benchmark failed (not a later one of the same name).
    pub(super) fn failed_by_us(&self, n: &Node) -> bool {
        self.failed
            .get(n.metadata.name.as_deref().unwrap_or_default())
            .is_some_and(|(_, uid)| n.metadata.uid.as_deref() == Some(uid.as_str()))
    }

    /// The kill phase; returns the kills done.
    pub(super) async fn kill_phase(&mut self, deadline: Instant) -> Result<usize> {
        let mut kills = 0usize;
        let mut by_point: BTreeMap<&str, usize> = BTreeMap::new();
        let mut next = 0usize;
        let mut running = None::<Running>;
        let mut lived = Duration::ZERO;
        let mut last_observe = Instant::now();
        let mut failures = 0usize;
        let (mut draws, mut spot) = (0usize, 0usize);
        let mut last_look = Instant::now();
        while self.launched.len() < self.args.launches || kills < self.args.kills {
            if Instant::now() > deadline {
                eprintln!(
                    "kill phase stopped at its deadline: {} launches, {kills} kills",
                    self.launched.len()
                );
                break;
            }
            match running.as_mut() {
                None => {
                    let point = crashpoint::POINTS[next % crashpoint::POINTS.len()];
                    next += 1;
                    let at = 1 + self.rng.below(2) as u64;
                    running = Some(self.controller(Some((point, at)))?);
                }
                Some(r) => {
                    let exited = matches!(r.process.0.try_wait(), Ok(Some(_)));
                    if exited || r.started.elapsed() > self.args.max_lifetime {
                        let key = if exited {
                            r.point.unwrap_or("exited")
                        } else {
                            "timed"
                        };
                        *by_point.entry(key).or_default() += 1;
                        lived += r.started.elapsed();
                        kills += 1;
                        running = None; // dropping it SIGKILLs a live one
                    }
                }
            }
            // A look about every 100 ms, but the calls of a look take time too: each event
            // happens with its rate times the time since the last look, so that the rates
            // are per second of the run.
            let dt = last_look.elapsed().as_secs_f64();
            last_look = Instant::now();
            if self.rng.happens(self.args.swings_per_second * dt) {
                let t = Instant::now();
                self.scale_swing().await?;
                self.spend("kill phase: scaling", t);
            }
            // Nodes fail and spot instances are reclaimed meanwhile: their pods come back
            // pending (owners recreate them) and ask for new nodes, whatever the swings do.
            if self.rng.happens(self.args.failures_per_second * dt) {
                let t = Instant::now();
                draws += 1;
                let mut failed = 0;
                if self.rng.chance(50) {
                    failed = self.fail_node(Failure::SpotInterruption, true).await?;
                    spot += failed;
                }
                // No spot Node to reclaim (or the draw said otherwise): an instance in any
                // pool fails, so that the rate holds whatever the spot pool holds.
                if failed == 0 {
                    failed = self.fail_node(Failure::InstanceLost, true).await?;
                }
                failures += failed;
                self.spend("kill phase: failing nodes", t);
            }
            if last_observe.elapsed() > Duration::from_millis(400) {
                let t = Instant::now();
                self.observe().await?;
                self.spend("kill phase: observing", t);
                last_observe = Instant::now();
            }
            let t = Instant::now();
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.spend("kill phase: sleeping", t);
        }
        drop(running);
        eprintln!(
            "kill phase: {} launches, {kills} kills by point {by_point:?}, {failures} Nodes \
             failed of {draws} drawn ({spot} spot interruptions), controllers lived {:.2}s on \
             average",
            self.launched.len(),
            lived.as_secs_f64() / kills.max(1) as f64
        );
        Ok(kills)
    }

    /// One random disruption-relevant event; returns how many events it was.
    pub(super) async fn event(&mut self) -> Result<usize> {
        let roll = self.rng.below(100);
        if roll < 55 {
            return self.scale_random().await;
        }
        if roll < 70 {
            let pods = self.pods().await?;
            let owned: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.owner_references().iter().any(|o| o.kind == "ReplicaSet"))
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            if owned.is_empty() {
                return Ok(0);
            }
            let name = owned[self.rng.below(owned.len())].name_any();
            let _ = Api::<Pod>::namespaced(self.client.clone(), NS)
                .delete(&name, &DeleteParams::default())
                .await;
            return Ok(1);
        }
        if roll < 80 {
            let failure = if roll >= 75 {
                Failure::SpotInterruption
            } else {
                Failure::NodeDeleted
            };
            return self.fail_node(failure, false).await;
        }
        if roll < 84 {
            let deps = self.deployments();
            let (name, _, _) = &deps[self.rng.below(deps.len())];
            let value = if self.rng.chance(50) {
                json!(1)
            } else {
                json!("50%")
            };
            Api::<PodDisruptionBudget>::namespaced(self.client.clone(), NS)
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"maxUnavailable": value}})),
                )
                .await
                .map_err(kerr("changing a PDB"))?;
            return Ok(1);
        }
        if roll < 89 {
            let pools: Vec<String> = self.budgets.keys().cloned().collect();
            let name = pools[self.rng.below(pools.len())].clone();
            let n = 1 + self.rng.below(3);
            self.set_budget(name, n).await?;
            return Ok(1);
        }
        if roll < 95 && self.provreqs_served {
            return self.provreq_event().await;
        }
        // Protected bare pods: created, or the oldest deleted.
        if self.bare.len() < 6 || self.rng.chance(50) {
            let i = self.started_controllers * 100_000
                + self.bare_lost_with_node * 1000
                + self.rng.below(1000);
            let name = format!("protected-{i}");
            if self.bare.contains_key(&name) {
                return Ok(0);
            }
            let annotations = if self.rng.chance(50) {
                json!({"karpenter.sh/do-not-disrupt": "true"})
            } else {
                json!({"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
            };
            let lane = if self.rng.chance(50) {
                SPOT_POOL
            } else {
                CPU_POOL
            };
            self.create_bare_pod(name, lane, false, annotations, "a protected pod")
                .await?;
            return Ok(1);
        }
        let name = self.bare.keys().next().cloned().expect("not empty");
        self.bare.remove(&name);
        let _ = Api::<Pod>::namespaced(self.client.clone(), NS)
            .delete(&name, &DeleteParams::default())
            .await;
        Ok(1)
    }

    /// One `failure` of a random Node; returns the events (0 when no Node qualifies). With
    /// `busy`, of a Node running pods when there is one: each failure then sends pods back
    /// pending and asks the controller for a node (the kill phase's launches), where an empty
    /// Node's failure asks for nothing.
    pub(super) async fn fail_node(&mut self, failure: Failure, busy: bool) -> Result<usize> {
        let spot_only = matches!(failure, Failure::SpotInterruption);
        let nodes = self.nodes().await?;
        let mut candidates: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .filter(|n| !spot_only || n.labels().get("lane").map(String::as_str) == Some(SPOT_POOL))
            .collect();
        if busy {
            let pods = self.pods().await?;
            let running: HashSet<&str> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none() && !terminal(p))
                .filter_map(|p| p.spec.as_ref()?.node_name.as_deref())
                .collect();
            if candidates
                .iter()
                .any(|n| running.contains(n.name_any().as_str()))
            {
                candidates.retain(|n| running.contains(n.name_any().as_str()));
            }
        }
        if candidates.is_empty() {
            return Ok(0);
        }
        let name = candidates[self.rng.below(candidates.len())].name_any();
        // Where the bare pods are right now: one bound since the last look goes with the
        // Node too (pod GC), which is the benchmark's doing, not the controller's. Cordoned
        // first, so that the harness scheduler binds nothing more to it after the look.
        let cordon = json!({"spec": {"unschedulable": true}});
        let cordoned = Api::<Node>::all(self.client.clone())
            .patch(&name, &PatchParams::default(), &Patch::Merge(cordon))
            .await;
        let cordoned = match cordoned {
            Ok(n) => n,
            // Gone since the list (the controller removed it): no failure to make.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(0),
            Err(e) => return Err(kerr("cordoning a Node to fail")(e)),
        };
        // The cordon's resourceVersion: every call the controller made on this Node before
        // the failure has a smaller one in the server's audit.
        let rv = cordoned
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        // The first failure of this very Node counts (a Node failed twice keeps its first
        // resourceVersion); a new Node of the same name starts afresh.
        let uid = cordoned.metadata.uid.clone().unwrap_or_default();
        if self.failed.get(&name).is_none_or(|(_, u)| *u != uid) {
            self.failed.insert(name.clone(), (rv, uid));
        }
        for p in self.pods().await? {
            if let Some(slot) = self.bare.get_mut(&p.name_any()) {
                *slot = p.spec.as_ref().and_then(|s| s.node_name.clone());
            }
        }
        let lost: Vec<String> = self
            .bare
            .iter()
            .filter(|(_, n)| n.as_deref() == Some(name.as_str()))
            .map(|(p, _)| p.clone())
            .collect();
        for p in lost {
            self.bare.remove(&p);
            self.bare_lost_with_node += 1;
        }
        if !matches!(failure, Failure::NodeDeleted) {
            let _ = Api::<KwokInstance>::all(self.client.clone())
                .delete(&name, &DeleteParams::default())
                .await;
            // Its kubelet went with it: the node lifecycle controller marks the Node so
            // before the cloud's node controller deletes it (a Ready Node is drained, as its
            // kubelet would still run).
            let now = jiff::Timestamp::now().to_string();
            let silent = json!({"status": {"conditions": [{
                "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now, "lastTransitionTime": now
            }]}});
            let _ = Api::<Node>::all(self.client.clone())
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(silent))
                .await;
        }
        let _ = Api::<Node>::all(self.client.clone())
            .delete(&name, &DeleteParams::default())
            .await;
        Ok(1)
    }

    pub(super) async fn replay(&mut self, deadline: Instant) -> Result<usize> {
        let mut events = 0usize;
        let mut last_observe = Instant::now();
        while events < self.args.disruption_events {
            if Instant::now() > deadline {
                eprintln!("replay stopped at its deadline after {events} events");
                break;
            }
            let t = Instant::now();
            events += self.event().await?;
            self.spend("replay: events", t);
            if last_observe.elapsed() > Duration::from_millis(400) {
                let t = Instant::now();
                self.observe().await?;
                self.spend("replay: observing", t);
                last_observe = Instant::now();
            }
            // A pause between events, so that the controller acts between them too (10 ms:
            // at most 100 events a second, several per controller round).
            let t = Instant::now();
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.spend("replay: sleeping", t);
        }
        Ok(events)
    }
}
