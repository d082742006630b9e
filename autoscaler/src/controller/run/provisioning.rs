//! Provisioning: the pending pods of a closed batch window planned onto new NodeClaims, and
//! the NodeClaim objects written for a plan.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::{PodKey, Snapshot};
use autoscaler_core::plan::NewClaim;
use autoscaler_core::provision::{PlanOptions, plan_cached};
use autoscaler_core::resources::is_gpu_class;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodepools::{NodeClaim, NodePool};
use providers::CloudProvider;

use crate::controller::actuator::reference;
use crate::controller::batcher::{ScaleUpDelays, Young};
use crate::controller::cache::CachedPod;
use crate::controller::error::Result;
use crate::controller::pod_problems;
use crate::controller::snapshot::Inputs;

use super::{Controller, Nomination, epoch};

mod objects;
mod warm;

use objects::limits_text;
pub use objects::{claim_object, quantities, requirement_exprs};

impl<P: CloudProvider + 'static> Controller<P> {
    /// The stage: pending pods planned when the batcher closes a window, then the
    /// ProvisioningRequests (once their API is served). Nothing while scaling is halted
    /// (`run/health.rs`).
    pub(super) async fn provisioning_stage(&mut self) {
        if self.halted() {
            return;
        }
        let t = Instant::now();
        self.provision().await;
        self.observe("provision", t);
        if self.stores.provreqs.get().is_some() {
            let t = Instant::now();
            self.provisioning_requests().await;
            self.observe("provisioning_requests", t);
        }
    }

    /// [`CachedPod::preempting`] against the node cache.
    fn preempting(&self, p: &CachedPod) -> bool {
        p.preempting(|n| {
            self.stores
                .nodes
                .get(&kube::runtime::reflector::ObjectRef::new(n))
                .is_some_and(|node| node.metadata.deletion_timestamp.is_none())
        })
    }

    /// Unschedulable pods, except those preempting pods on a node that is up
    /// ([`CachedPod::preempting`]) and those consuming a live ProvisioningRequest's capacity: that capacity is booked for
    /// them, so they never trigger a scale-up of their own. In the order of `pods`.
    fn pending_now<'p>(&self, pods: &'p [Arc<CachedPod>]) -> Vec<&'p Arc<CachedPod>> {
        let live = self.live_provreqs();
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let delays = ScaleUpDelays {
            new_pod_ms: ms(self.args.new_pod_scale_up_delay),
            gpu_pod_ms: ms(self.args.gpu_pod_scale_up_delay),
        };
        let unschedulable: Vec<&Arc<CachedPod>> = pods
            .iter()
            .filter(|p| p.unschedulable && !self.preempting(p))
            .collect();
        let young: Vec<Young<'_>> = unschedulable
            .iter()
            .map(|p| Young {
                key: &p.key,
                created_ms: p.created_ms,
                gpu: p.requests().extended.keys().any(|k| is_gpu_class(k))
                    || p.core.as_ref().is_ok_and(|c| c.gpu_share.is_some()),
            })
            .collect();
        let acted_on = delays.acted_on(&young, jiff::Timestamp::now().as_millisecond());
        unschedulable
            .into_iter()
            .zip(acted_on)
            .filter(|(_, acted)| *acted)
            .map(|(p, _)| p)
            .filter(|p| {
                live.is_empty()
                    || !p
                        .core
                        .as_ref()
                        .ok()
                        .and_then(crate::controller::provreq::consumed_request)
                        .is_some_and(|r| live.contains(&r))
            })
            .collect()
    }

    async fn provision(&mut self) {
        let pods = self.stores.pods.state();
        let pending_pods = self.pending_now(&pods);
        let pending: BTreeSet<PodKey> = pending_pods.iter().map(|p| p.key.clone()).collect();
        self.shared.metrics.pending_pods.set(pending.len() as i64);
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let oldest = pending_pods
            .iter()
            .filter_map(|p| p.unschedulable_since_ms)
            .map(|since| now_ms.saturating_sub(since))
            .max()
            .unwrap_or(0);
        self.shared
            .metrics
            .oldest_pending_pod_seconds
            .set(oldest as f64 / 1000.0);
        self.guard_observe(&pending);
        // A nomination lasts while its pod is pending; the planner ignores the ones whose
        // claim is no longer in flight.
        self.nominations.retain(|k, _| pending.contains(k));
        if !self.batcher.stepped() {
            // A new leader's first provisioning round (not always its first round: scaling
            // may be halted then): a backlog older than a batch window is planned at once.
            // `None` when some pod has no condition time: its age is unknown.
            let ages: Option<Vec<i64>> = pending_pods
                .iter()
                .map(|p| p.unschedulable_since_ms.map(|s| now_ms.saturating_sub(s)))
                .collect();
            let youngest = ages.and_then(|a| a.into_iter().min());
            self.batcher
                .start_with(youngest.map(|a| u64::try_from(a).unwrap_or(0)));
        }
        let batch = self.batcher.step(self.millis(), &pending);
        let pools = self.stores.pools.state();
        // A round brings the pools up to their minNodes with the pods it plans, or alone.
        // The warm back-off reads the claims the plan counts, so that a warm claim gone
        // between the two cannot be replaced before its failure is counted.
        let claims = self.stores.claims.state();
        let warm = self.warm_round(&pools, &claims);
        let batch = match batch {
            Some(b) if !b.is_empty() => b,
            _ if warm => BTreeSet::new(),
            _ => return,
        };
        let types = self.instance_types(&pools).await;
        let nodes = self.stores.nodes.state();
        let daemonsets = self.stores.daemonsets.state();
        let pdbs = self.stores.pdbs.state();
        let gangs = self.stores.gang_objects();
        let dra = self.stores.dra_index();
        let volumes = self.stores.volume_index();
        for (obj, problem) in &dra.problems {
            tracing::warn!(object = %obj, %problem, "DRA object left out");
        }
        let building = Instant::now();
        self.builder.namespaces = self.stores.namespace_labels();
        let mut built = self.builder.build_for_provisioning(&Inputs {
            pods: &pods,
            nodes: &nodes,
            pools: &pools,
            claims: &claims,
            daemonsets: &daemonsets,
            pdbs: &pdbs,
            instance_types: &types,
            pending: &batch,
            gangs: &gangs,
            dra: &dra,
            volumes: &volumes,
        });
        self.hold_bookings(&mut built.snapshot, &pods);
        built.snapshot.nominated = self
            .nominations
            .iter()
            .map(|(k, n)| (k.clone(), n.claim.clone()))
            .collect();
        built.snapshot.cluster_limits = self.cluster_limits();
        let pod_by_key: HashMap<&PodKey, &Arc<CachedPod>> =
            pods.iter().map(|p| (&p.key, p)).collect();
        // Pending pods left out for their own fields are told below, once; not logged per round.
        let refused: Vec<(&CachedPod, String)> = pod_problems::refusals(
            batch
                .iter()
                .filter_map(|k| pod_by_key.get(k).map(|p| p.as_ref())),
        )
        .chain(built.refused.iter().filter_map(|(k, why)| {
            pod_by_key
                .get(k)
                .map(|p| (p.as_ref(), pod_problems::not_triggered(why)))
        }))
        .collect();
        let refused_objects: HashSet<String> = refused
            .iter()
            .map(|(p, _)| format!("pod {}", p.key))
            .collect();
        for (obj, problem) in &built.problems {
            if !refused_objects.contains(obj) {
                tracing::warn!(object = %obj, %problem, "left out of the snapshot");
            }
        }
        let planning = Instant::now();
        let options = PlanOptions {
            max_new_claims: usize::try_from(self.args.max_claims_per_round).unwrap_or(usize::MAX),
            // A round of independent parts plans a part per core. Only a round of 2,048 pods
            // or more with no more pods than the limit has claims splits, so with the default
            // limit (1,000) none does: it takes a raised `--max-claims-per-round`.
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            min_nodes: warm.then(epoch),
            ..PlanOptions::default()
        };
        let mut plan = plan_cached(&built.snapshot, &options, &mut self.shapes);
        // Only rounds that plan: `provision` counts every round, planned or not.
        self.observe("plan", building);
        tracing::info!(
            snapshot_ms = (planning - building).as_millis() as u64,
            plan_ms = planning.elapsed().as_millis() as u64,
            pending = batch.len(),
            existing = plan.existing.len(),
            in_flight = plan.in_flight.len(),
            new_claims = plan.new_claims.len(),
            unschedulable = plan.unschedulable.len(),
            deferred = plan.deferred.len(),
            "planned"
        );
        let mut events = Vec::new();
        self.guard_plan(&mut plan, &built.snapshot, &pod_by_key, &mut events);
        self.hold_warm_claims(&mut plan, &pools, &mut events);
        for p in &plan.in_flight {
            self.nominate(&p.pod, &p.target);
        }
        // A pod planned onto an existing node keeps that node while the scheduler binds it.
        let claim_of: HashMap<&str, &str> = built
            .snapshot
            .nodes
            .iter()
            .filter_map(|n| Some((n.name.as_str(), n.claim.as_deref()?)))
            .collect();
        for p in &plan.existing {
            if let Some(claim) = claim_of.get(p.target.as_str()) {
                self.nominate(&p.pod, claim);
            }
        }
        if !plan.deferred.is_empty() && !plan.new_claims.is_empty() {
            // The plan stopped opening claims at its limit: the pods it left are planned again
            // in the next round, without a new batch window. Not when the launch guard held
            // back every claim of the slice: planning again at once would write nothing again
            // (the pods wait for the usual re-plan).
            tracing::info!(
                written = plan.new_claims.len(),
                deferred = plan.deferred.len(),
                "pods past --max-claims-per-round are planned next round"
            );
            self.batcher.resume();
        }
        // Claims are written concurrently (a burst may need hundreds), results kept in order.
        // An atomic pool's claims of this plan share one scale-up annotation.
        let atomic_size = |pool: &str| {
            plan.new_claims
                .iter()
                .filter(|c| c.atomic && c.pool == pool)
                .count()
        };
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let objects: Vec<(&NewClaim, NodeClaim)> = plan
            .new_claims
            .iter()
            .filter_map(|nc| {
                let np = pools.iter().find(|p| p.name_any() == nc.pool)?;
                let mut obj = claim_object(nc, np, &self.args.cluster_name);
                if nc.atomic {
                    obj.metadata.annotations.get_or_insert_default().insert(
                        crate::controller::atomic::ATOMIC_ANNOTATION.into(),
                        crate::controller::atomic::annotation(
                            &nc.pool,
                            now_ms,
                            atomic_size(&nc.pool),
                        ),
                    );
                }
                Some((nc, obj))
            })
            .collect();
        let actuator = self.shared.actuator.clone();
        let created: Vec<(&NewClaim, Result<NodeClaim>)> = futures::stream::iter(objects)
            .map(|(nc, obj)| {
                let actuator = actuator.clone();
                async move { (nc, actuator.create_claim(&obj).await) }
            })
            .buffered(16)
            .collect()
            .await;
        for (nc, result) in created {
            match result {
                Ok(created) => {
                    let cname = created.name_any();
                    let types: Vec<&str> = nc
                        .instance_types
                        .iter()
                        .take(5)
                        .map(|o| &*o.instance_type)
                        .collect();
                    // The first pods it was opened for, so a launch can be traced to its pods.
                    let for_pods: Vec<&str> =
                        nc.pods.iter().take(8).map(|k| k.name.as_str()).collect();
                    tracing::info!(
                        claim = %cname,
                        pool = %nc.pool,
                        pods = nc.pods.len(),
                        for_pods = %for_pods.join(","),
                        types = %types.join(","),
                        "created NodeClaim"
                    );
                    self.guard.launches.created(&cname, &nc.pods);
                    for pk in &nc.pods {
                        self.nominate(pk, &cname);
                    }
                    self.disruption_state.scaled_up(&nc.pool, epoch());
                    let why = if nc.warm {
                        let np = pools.iter().find(|p| p.name_any() == nc.pool);
                        let generation = np.and_then(|p| p.metadata.generation).unwrap_or(0);
                        self.warm_created(&cname, &nc.pool, generation);
                        if let Some(np) = np {
                            events.push(warm::scaled_up_event(np, &cname, &types));
                        }
                        "to reach the NodePool's minNodes".to_string()
                    } else {
                        format!("for {} pods", nc.pods.len())
                    };
                    self.visibility.decided(
                        epoch(),
                        "ScaleUp",
                        &nc.pool,
                        vec![cname.clone()],
                        format!("{why}; instance types [{}]", types.join(", ")),
                    );
                    for pk in &nc.pods {
                        if let Some(p) = pod_by_key.get(pk) {
                            if let Some(since) = p.unschedulable_since_ms {
                                self.shared.metrics.pending_to_claim_seconds.observe(
                                    (jiff::Timestamp::now().as_millisecond() - since) as f64
                                        / 1000.0,
                                );
                            }
                            events.push((
                                p.reference(),
                                false,
                                "TriggeredScaleUp",
                                format!(
                                    "pod triggered scale-up: NodeClaim {cname} (NodePool {}) with instance types [{}]",
                                    nc.pool,
                                    types.join(", ")
                                ),
                            ));
                            self.notices.forget(&pod_problems::pod_id(p));
                        }
                    }
                }
                Err(e) => tracing::warn!(pool = %nc.pool, error = %e, "creating NodeClaim"),
            }
        }
        let now_ms = jiff::Timestamp::now().as_millisecond();
        // A pod a NodePool's limit holds back is told `LimitReached`, others why nothing fits.
        let unplanned = plan.unschedulable.iter().filter_map(|u| {
            let p = pod_by_key.get(&u.pod)?;
            let reason = if u.limited_by.is_empty() {
                pod_problems::NOT_TRIGGERED
            } else {
                pod_problems::LIMIT_REACHED
            };
            Some((p.as_ref(), reason, pod_problems::not_triggered(&u.reason)))
        });
        let refused = refused
            .into_iter()
            .map(|(p, note)| (p, pod_problems::NOT_TRIGGERED, note));
        for (p, reason, note) in refused.chain(unplanned) {
            if self.notices.admit(&pod_problems::pod_id(p), &note, now_ms) {
                tracing::info!(pod = %p.key, %note, reason);
                events.push((p.reference(), true, reason, note));
            }
        }
        self.limit_events(&plan, &pools, &mut events);
        self.min_nodes_events(&plan, &pools, &mut events);
        if !self.notices.is_empty() {
            let pending_ids: HashSet<String> = pending_pods
                .iter()
                .map(|p| pod_problems::pod_id(p))
                .collect();
            self.notices.retain(|id| pending_ids.contains(id));
        }
        if !events.is_empty() {
            let actuator = self.shared.actuator.clone();
            tokio::spawn(async move {
                for (r, warning, reason, note) in events {
                    actuator.event(&r, warning, reason, "ScaleUp", note).await;
                }
            });
        }
        // Freeing the snapshot and plan of a large backlog takes a while (100,000 pods: about
        // 0.2 s); off the loop, so that this round's launches do not wait for it.
        tokio::task::spawn_blocking(move || drop((built, plan)));
    }

    /// A `LimitReached` Warning on each NodePool whose limits hold pending pods back, with the
    /// limits and the first pods; once per pool per [`crate::controller::consolidatable::EVENT_EVERY_S`] while it
    /// lasts (the pods themselves are told each, once).
    fn limit_events(
        &mut self,
        plan: &autoscaler_core::plan::Plan,
        pools: &[Arc<NodePool>],
        events: &mut Vec<(ObjectReference, bool, &'static str, String)>,
    ) {
        let mut held: BTreeMap<&str, Vec<&PodKey>> = BTreeMap::new();
        for u in &plan.unschedulable {
            for pool in &u.limited_by {
                held.entry(pool.as_str()).or_default().push(&u.pod);
            }
        }
        let now = epoch();
        self.visibility.limits.prune(now);
        for (name, pods) in held {
            let Some(np) = pools.iter().find(|p| p.name_any() == name) else {
                continue;
            };
            if !self
                .visibility
                .limits
                .allow(name, pod_problems::LIMIT_REACHED, now)
            {
                continue;
            }
            const SHOWN: usize = 5;
            let mut shown: Vec<String> = pods.iter().take(SHOWN).map(|p| p.to_string()).collect();
            if pods.len() > SHOWN {
                shown.push(format!("and {} more", pods.len() - SHOWN));
            }
            let note = format!(
                "limits reached ({}): {} pending pod(s) get no new node from this NodePool: {}",
                limits_text(np),
                pods.len(),
                shown.join(", ")
            );
            tracing::info!(pool = %name, %note, "LimitReached");
            events.push((
                reference(np.as_ref()),
                true,
                pod_problems::LIMIT_REACHED,
                note,
            ));
        }
    }

    /// The cluster with every pending pod. For disruption (`for_disruption`) the plain pods of
    /// nodes no NodePool manages are folded (`SnapshotBuilder::build_for_disruption`): those
    /// nodes are never candidates, only places pods may move to.
    pub(super) fn full_snapshot(
        &mut self,
        types: &BTreeMap<String, Arc<Vec<InstanceType>>>,
        for_disruption: bool,
    ) -> Snapshot {
        let pods = self.stores.pods.state();
        let mut pending: BTreeSet<PodKey> = self
            .pending_now(&pods)
            .iter()
            .map(|p| p.key.clone())
            .collect();
        // Disruption holds the node a pod preempts pods on for it, as a nomination to that
        // node's claim: the pod is bound there once its victims are gone.
        let preempting: Vec<(PodKey, Arc<str>)> = if for_disruption {
            pods.iter()
                .filter(|p| p.unschedulable && self.preempting(p))
                .filter_map(|p| Some((p.key.clone(), p.nominated_node.clone()?)))
                .collect()
        } else {
            Vec::new()
        };
        pending.extend(preempting.iter().map(|(k, _)| k.clone()));
        let nodes = self.stores.nodes.state();
        let pools = self.stores.pools.state();
        let claims = self.stores.claims.state();
        let daemonsets = self.stores.daemonsets.state();
        let pdbs = self.stores.pdbs.state();
        let gangs = self.stores.gang_objects();
        let dra = self.stores.dra_index();
        let volumes = self.stores.volume_index();
        let inputs = Inputs {
            pods: &pods,
            nodes: &nodes,
            pools: &pools,
            claims: &claims,
            daemonsets: &daemonsets,
            pdbs: &pdbs,
            instance_types: types,
            pending: &pending,
            gangs: &gangs,
            dra: &dra,
            volumes: &volumes,
        };
        self.builder.namespaces = self.stores.namespace_labels();
        let mut snap = if for_disruption {
            self.builder.build_for_disruption(&inputs)
        } else {
            self.builder.build(&inputs)
        }
        .snapshot;
        let live: HashSet<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
        let events = self.stores.pods.pod_events(|n| live.contains(n));
        crate::controller::snapshot::take_pod_events(&mut snap, &events);
        self.hold_bookings(&mut snap, &pods);
        snap.cluster_limits = self.cluster_limits();
        if for_disruption {
            snap.nominated = self.live_nominations(&pending);
            hold_preempting(&mut snap, &preempting);
        }
        snap
    }

    /// Records that the plan just made puts pending pod `pod` on claim `claim`.
    fn nominate(&mut self, pod: &PodKey, claim: &str) {
        let at_ms = self.millis();
        self.nominations.insert(
            pod.clone(),
            Nomination {
                claim: claim.to_string(),
                at_ms,
            },
        );
    }

    /// The nominations that keep their nodes from disruption: the pod still pending, and a
    /// plan made them within the nomination window
    /// ([`autoscaler_core::cadence::Cadence::nomination_window_s`]). A pod the scheduler
    /// never binds where it was planned stops holding the node once re-plans stop renewing it.
    fn live_nominations(&self, pending: &BTreeSet<PodKey>) -> BTreeMap<PodKey, String> {
        let window_ms = u64::try_from(self.args.cadence().nomination_window_s())
            .unwrap_or(0)
            .saturating_mul(1000);
        let now = self.millis();
        self.nominations
            .iter()
            .filter(|(k, n)| pending.contains(*k) && now.saturating_sub(n.at_ms) < window_ms)
            .map(|(k, n)| (k.clone(), n.claim.clone()))
            .collect()
    }
}

/// Nominates each of `preempting` (pods the scheduler preempted pods for, with the node it
/// nominated) to the claim of that node in `snap`, so that disruption neither removes the node
/// nor moves pods into the room the pod is about to take. A pod whose node has no claim (no
/// NodePool manages it, so it is never a candidate) is taken out of `snap`'s pending pods
/// again: it needs no node, and nothing of disruption's concerns it.
fn hold_preempting(snap: &mut Snapshot, preempting: &[(PodKey, Arc<str>)]) {
    let mut unheld: BTreeSet<&PodKey> = BTreeSet::new();
    for (key, node) in preempting {
        match snap
            .nodes
            .iter()
            .find(|n| n.name == **node)
            .and_then(|n| n.claim.clone())
        {
            Some(claim) => {
                snap.nominated.insert(key.clone(), claim);
            }
            None => {
                unheld.insert(key);
            }
        }
    }
    if !unheld.is_empty() {
        snap.pending.retain(|p| !unheld.contains(&p.key));
    }
}

#[cfg(test)]
mod tests {
    use autoscaler_core::builders::itype;
    use autoscaler_core::model::MinValuesPolicy;
    use autoscaler_core::requirements::Operator;

    use super::super::placement_group_of;

    use super::*;
    use autoscaler_core::labels;
    use autoscaler_core::requirements::Requirements;
    use autoscaler_core::resources::Resources;
    use nodepools::NodeClaimSpec;

    use crate::controller::keys;

    #[test]
    fn requirements_round_trip_through_api_expressions() {
        let r = Requirements::new()
            .with(labels::ZONE, Operator::In, &["a", "b"])
            .with("team", Operator::NotIn, &["x"])
            .with("gpu", Operator::Exists, &[])
            .with("old", Operator::DoesNotExist, &[])
            .with("count", Operator::Gt, &["2"]);
        let exprs = requirement_exprs(&r);
        let spec = NodeClaimSpec {
            node_pool: "p".into(),
            requirements: exprs,
            ..Default::default()
        };
        let back = spec.to_core().expect("valid").requirements;
        assert_eq!(back, r);
    }

    /// A one-GPU claim of pool `gpu` with nothing else set.
    fn one_gpu_claim() -> NewClaim {
        NewClaim {
            name: "gpu-1".into(),
            pool: "gpu".into(),
            instance_types: vec![],
            requirements: Requirements::new(),
            labels: Default::default(),
            taints: vec![],
            startup_taints: vec![],
            pods: vec![],
            requests: Resources::default(),
            price: 1.0,
            gpus: 1,
            group: None,
            atomic: false,
            dra: false,
            min_values_relaxed: Default::default(),
            warm: false,
        }
    }

    #[test]
    fn a_group_claim_carries_its_placement_group_and_others_none() {
        let np: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpu-autoscaler.dev/v1alpha1",
            "kind": "NodePool",
            "metadata": {"name": "gpu"},
            "spec": {"template": {}},
        }))
        .expect("a NodePool");
        let plain = one_gpu_claim();
        let grouped = NewClaim {
            group: Some("volcano:team-a/train".into()),
            ..plain.clone()
        };
        let obj = claim_object(&plain, &np, "prod");
        assert_eq!(placement_group_of(&obj), None);
        assert_eq!(annotation_keys(&obj), HASH_KEYS);
        let a = claim_object(&grouped, &np, "prod");
        let b = claim_object(&grouped, &np, "prod");
        let name = placement_group_of(&a).expect("a placement group");
        assert_eq!(placement_group_of(&b).as_deref(), Some(name.as_str()));
        assert_eq!(
            name,
            providers::placement_group_name("prod", "volcano:team-a/train")
        );
        assert_ne!(
            Some(name),
            placement_group_of(&claim_object(&grouped, &np, "staging"))
        );
        // A claim for pods with DRA claims (a launch or a replacement) waits for its slices.
        let dra = NewClaim {
            dra: true,
            ..plain.clone()
        };
        let obj = claim_object(&dra, &np, "prod");
        assert_eq!(
            obj.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::DRA_ANNOTATION))
                .map(String::as_str),
            Some("true")
        );
    }

    /// The NodePool's `terminationGracePeriod` is written on each NodeClaim as it stands at
    /// launch; a pool without one launches claims without one.
    #[test]
    fn a_claim_carries_its_pools_termination_grace_period() {
        let pool = |template: serde_json::Value| -> NodePool {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "gpu-autoscaler.dev/v1alpha1",
                "kind": "NodePool",
                "metadata": {"name": "gpu"},
                "spec": {"template": template},
            }))
            .expect("a NodePool")
        };
        let nc = one_gpu_claim();
        let graced = claim_object(
            &nc,
            &pool(serde_json::json!({"terminationGracePeriod": "1h30m"})),
            "prod",
        );
        assert_eq!(
            graced.spec.termination_grace_period.as_deref(),
            Some("1h30m")
        );
        // This claim lists no instance types; only its grace period is read back here.
        let mut spec = graced.spec.clone();
        spec.requirements.clear();
        assert_eq!(
            spec.to_core().expect("valid").termination_grace_period_s,
            Some(5400)
        );
        let plain = claim_object(&nc, &pool(serde_json::json!({})), "prod");
        assert_eq!(plain.spec.termination_grace_period, None);
    }

    #[test]
    fn a_pools_min_values_reach_the_plan_and_the_nodeclaim() {
        let np: NodePool = serde_norway::from_str(
            r#"
apiVersion: gpu-autoscaler.dev/v1alpha1
kind: NodePool
metadata: {name: flex}
spec:
  template:
    nodeClassRef: {group: gpu-autoscaler.dev, kind: KwokNodeClass, name: default}
    requirements:
      - {key: node.kubernetes.io/instance-type, operator: Exists, minValues: 2}
"#,
        )
        .expect("valid NodePool");
        let types = vec![
            itype("m.small")
                .cpu("2")
                .mem("8Gi")
                .on_demand(&["a"], 1.0)
                .build(),
            itype("m.big")
                .cpu("8")
                .mem("32Gi")
                .on_demand(&["a"], 4.0)
                .build(),
        ];
        let pool = np.to_core(Arc::new(types)).expect("converts");
        assert_eq!(pool.min_values.get(labels::INSTANCE_TYPE), Some(&2));
        let plan_for = |cpu: &str| {
            autoscaler_core::provision::plan_provisioning(&autoscaler_core::model::Snapshot {
                pending: vec![autoscaler_core::builders::pod("p").cpu(cpu).build()],
                pools: vec![pool.clone()],
                ..Default::default()
            })
        };
        // Only the big type holds 4 CPUs: one type is less than the two the pool demands.
        assert!(plan_for("4").new_claims.is_empty());
        let plan = plan_for("1");
        let obj = claim_object(&plan.new_claims[0], &np, "test");
        let it = obj
            .spec
            .requirements
            .iter()
            .find(|r| r.key == labels::INSTANCE_TYPE)
            .expect("instance types listed");
        assert_eq!(it.values, ["m.small", "m.big"]);
        assert_eq!(it.min_values, Some(2));
        obj.spec
            .to_core()
            .expect("the NodeClaim the controller writes is valid");
    }

    /// Karpenter's e2e case under `--min-values-policy=best-effort`: a pool allowing
    /// c5.large and two types no catalog has, wanting three, gets a NodeClaim of c5.large
    /// asking for one, annotated relaxed; a claim that meets its minValues gets no annotation.
    #[test]
    fn a_claim_planned_below_its_min_values_carries_them_lowered_and_annotated() {
        let np: NodePool = serde_norway::from_str(
            r#"
apiVersion: gpu-autoscaler.dev/v1alpha1
kind: NodePool
metadata: {name: flex}
spec:
  template:
    nodeClassRef: {group: gpu-autoscaler.dev, kind: KwokNodeClass, name: default}
    requirements:
      - key: node.kubernetes.io/instance-type
        operator: In
        values: [c5.large, invalid-instance-type-1, invalid-instance-type-2]
        minValues: 3
      - {key: topology.kubernetes.io/zone, operator: In, values: [a, b], minValues: 2}
"#,
        )
        .expect("valid NodePool");
        let types = vec![
            itype("c5.large")
                .cpu("2")
                .mem("4Gi")
                .on_demand(&["a", "b"], 0.085)
                .build(),
        ];
        let pool = np.to_core(Arc::new(types)).expect("converts");
        let plan_under = |policy: MinValuesPolicy| {
            autoscaler_core::provision::plan_provisioning(&Snapshot {
                pending: vec![autoscaler_core::builders::pod("p").cpu("1").build()],
                pools: vec![pool.clone()],
                min_values_policy: policy,
                ..Default::default()
            })
        };
        assert!(plan_under(MinValuesPolicy::Strict).new_claims.is_empty());
        let plan = plan_under(MinValuesPolicy::BestEffort);
        let obj = claim_object(&plan.new_claims[0], &np, "test");
        assert_eq!(
            obj.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::MIN_VALUES_RELAXED_ANNOTATION))
                .map(String::as_str),
            Some("true")
        );
        let req = |key: &str| {
            obj.spec
                .requirements
                .iter()
                .find(|r| r.key == key)
                .cloned()
                .expect("listed")
        };
        let it = req(labels::INSTANCE_TYPE);
        assert_eq!(
            (it.values, it.min_values),
            (vec!["c5.large".into()], Some(1))
        );
        // Both zones are there: that rule stands as the pool wrote it.
        let zone = req(labels::ZONE);
        assert_eq!(zone.min_values, Some(2));
        obj.spec
            .to_core()
            .expect("the NodeClaim the controller writes is valid");
        // Met, the rule is written as it stands and the claim is not annotated.
        let met = NewClaim {
            min_values_relaxed: Default::default(),
            ..plan.new_claims[0].clone()
        };
        let obj = claim_object(&met, &np, "test");
        assert_eq!(annotation_keys(&obj), HASH_KEYS);
    }

    /// The annotations every claim carries: its NodePool's template hash, for drift.
    const HASH_KEYS: [&str; 2] = [
        keys::NODEPOOL_HASH_ANNOTATION,
        keys::NODEPOOL_HASH_VERSION_ANNOTATION,
    ];

    /// The keys of a claim's annotations, in order.
    fn annotation_keys(obj: &NodeClaim) -> Vec<&str> {
        obj.metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect()
    }
}
