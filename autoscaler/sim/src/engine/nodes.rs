//! Node lifecycle in the engine: launch through the fake cloud (capacity errors, launch
//! latency), registration with its DaemonSet pods, the device plugin's delay to Ready, spot
//! interruptions with their two-minute notice, and termination.

use autoscaler_core::resources::names;
use autoscaler_core::taints::Taint;
use autoscaler_core::{CapacityType, labels};
use providers::fake::block_on;
use providers::{CloudProvider, LaunchRequest, NodeClassRef, ProviderError};

use super::{Engine, Ev};
use crate::cluster::{NodeId, NodePhase, NodeState, PodPhase};
use crate::dra::{NodeDevices, NodeDra};
use crate::policy::LaunchSpec;
use crate::scheduler::untolerated;

impl Engine<'_> {
    /// Registers the workload's existing nodes as initialized at time 0 and binds their pods
    /// (a scenario's `existingNodes`, a snapshot's first sample). Their DaemonSet and mirror
    /// pods come with them, as the engine's own nodes get theirs at registration.
    pub(super) fn seed_existing(&mut self) {
        let workload = self.workload;
        let mut ids = Vec::with_capacity(workload.existing_nodes.len());
        for ex in &workload.existing_nodes {
            let id = self.cluster.nodes.len();
            let pool = ex
                .pool
                .as_ref()
                .and_then(|p| self.pools.iter().position(|q| &q.name == p));
            let mut used = autoscaler_core::resources::Resources::new();
            for p in &ex.node_pods {
                let mut r = p.requests.clone();
                r.set(names::NVIDIA_GPU, 0);
                used.add(&r);
            }
            let units = ex.allocatable.get(names::NVIDIA_GPU).max(0) as usize;
            self.cluster.nodes.push(NodeState {
                name: ex.name.clone(),
                claim: ex.name.clone(),
                provider_id: format!("existing://{}", ex.name),
                pool,
                pool_name: pool
                    .map(|_| ex.pool.clone().unwrap_or_default())
                    .unwrap_or_default(),
                instance_type: ex.instance_type.clone(),
                zone: ex.zone.clone(),
                capacity_type: ex.capacity_type,
                price: ex.price,
                labels: std::sync::Arc::new(ex.labels.clone()),
                taints: ex.taints.clone(),
                startup_taints: Vec::new(),
                allocatable: ex.allocatable.clone(),
                used,
                devices: vec![0; units],
                pods: vec![],
                ds_pods: std::sync::Arc::new(ex.node_pods.clone()),
                phase: NodePhase::Ready,
                cordoned: ex.unschedulable,
                deleting: false,
                launched_at: 0,
                gone_at: None,
                ready_at: Some(0),
                gpu_pods: 0,
                gpu_busy_since: 0,
                gpu_busy_s: 0,
                gpus: ex.gpus,
                last_pod_change: 0,
                held: Vec::new(),
                hold_version: 0,
                dra: self.node_dra(pool, &ex.instance_type, &ex.name),
            });
            self.cluster.live_nodes.insert(id);
            self.claims.insert(ex.name.clone(), id);
            ids.push(id);
        }
        for (i, spec) in workload.pods.iter().enumerate() {
            let Some(on) = spec.start_on else {
                continue;
            };
            let n = ids[on as usize];
            let pod = workload.materialize(i);
            let started_at = pod.started_at;
            self.cluster.arrive(i, pod, 0);
            self.pods_created += 1;
            let devices =
                crate::scheduler::fit_resources(self.cluster.pod(i), &self.cluster.nodes[n])
                    .unwrap_or_default();
            if let Err(e) = self.cluster.bind(i, n, devices, 0) {
                self.violation(format!("at the start: {}", e.0));
            }
            // The pod started before the run: keep its own start (a do-not-disrupt duration
            // counts from it), where binding would restart the clock.
            if let Some(p) = self.cluster.pods[i].pod.as_mut() {
                p.started_at = started_at;
            }
            if let Some(d) = spec.delete_at {
                self.push(d.max(0), Ev::Delete(i));
            }
        }
    }

    /// The DRA devices a node of `instance_type` in pool `pool` publishes once Ready: the
    /// NVIDIA driver's slice (MIG partitions in a MIG pool), when the scenario uses DRA.
    fn node_dra(&self, pool: Option<usize>, instance_type: &str, node: &str) -> NodeDra {
        let classes = &self.cluster.device_classes;
        let devices = pool
            .filter(|_| !classes.is_empty())
            .map(|p| &self.pools[p])
            .and_then(|p| {
                let it = p.instance_types.iter().find(|t| t.name == instance_type)?;
                NodeDevices::for_node(
                    it,
                    node,
                    p.sharing.mig.is_some(),
                    &p.dra_attributes,
                    classes.clone(),
                )
            });
        NodeDra::new(devices)
    }

    pub(super) fn launch(&mut self, spec: &LaunchSpec) -> Option<NodeId> {
        if spec.candidates.is_empty() {
            return None;
        }
        let pool = &self.pools[spec.pool];
        let claim = format!(
            "{}-{}",
            pool.name,
            self.nodes_launched + self.launch_failures
        );
        // Random capacity errors: refuse some candidates for this one call.
        let mut refused = Vec::new();
        if self.cfg.ice_probability > 0.0 {
            for k in &spec.candidates {
                if self.rng_ice.chance(self.cfg.ice_probability) {
                    self.provider.fail_offering(k.clone());
                    refused.push(k.clone());
                }
            }
        }
        let req = LaunchRequest {
            claim: claim.clone(),
            pool: pool.name.clone(),
            class: NodeClassRef::default(),
            candidates: spec.candidates.clone(),
            labels: {
                let mut l = pool.labels.clone();
                l.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
                l
            },
            taints: pool.taints.clone(),
            startup_taints: pool.startup_taints.clone(),
            // The simulated cloud has no network topology to place into.
            placement_group: None,
            gpu_sharing: Default::default(),
        };
        let result = block_on(self.provider.launch(&req));
        for k in &refused {
            if !self.cfg.ice_offerings.contains(k) {
                self.provider.restore_offering(k);
            }
        }
        self.provider.clear_calls();
        let launched = match result {
            Ok(l) => l,
            Err(ProviderError::InsufficientCapacity { offerings, .. }) => {
                self.unavailable.mark_all(offerings, self.now);
                self.launch_failures += 1;
                return None;
            }
            Err(_) => {
                self.launch_failures += 1;
                return None;
            }
        };
        self.unavailable.mark_all(launched.unavailable, self.now);
        let inst = launched.instance;
        let shape = self
            .shapes
            .iter()
            .find(|s| s.pool == spec.pool && s.name == inst.instance_type)?;
        let id = self.cluster.nodes.len();
        let name = format!("node-{id}");
        let mut node_labels = shape.labels.clone();
        node_labels.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        node_labels.insert(labels::HOSTNAME.into(), name.clone());
        node_labels.insert(labels::ZONE.into(), inst.zone.clone());
        node_labels.insert(
            labels::CAPACITY_TYPE.into(),
            inst.capacity_type.as_str().into(),
        );
        let units = shape.allocatable.get(names::NVIDIA_GPU).max(0) as usize;
        let mut taints = pool.taints.clone();
        taints.extend(pool.startup_taints.iter().cloned());
        let dra = self.node_dra(Some(spec.pool), &inst.instance_type, &name);
        self.cluster.nodes.push(NodeState {
            name,
            claim: claim.clone(),
            provider_id: inst.provider_id.clone(),
            pool: Some(spec.pool),
            pool_name: pool.name.clone(),
            instance_type: inst.instance_type.clone(),
            zone: inst.zone.clone(),
            capacity_type: inst.capacity_type,
            price: inst.price.unwrap_or(0.0),
            labels: std::sync::Arc::new(node_labels),
            taints,
            startup_taints: pool.startup_taints.clone(),
            allocatable: shape.allocatable.clone(),
            used: Default::default(),
            devices: vec![0; units],
            pods: vec![],
            ds_pods: Default::default(),
            phase: NodePhase::Launching,
            cordoned: false,
            deleting: false,
            launched_at: self.now,
            gone_at: None,
            ready_at: None,
            gpu_pods: 0,
            gpu_busy_since: 0,
            gpu_busy_s: 0,
            gpus: shape.gpus,
            last_pod_change: self.now,
            held: Vec::new(),
            hold_version: 0,
            dra,
        });
        self.cluster.live_nodes.insert(id);
        self.claims.insert(claim, id);
        self.nodes_launched += 1;
        let family = shape
            .labels
            .get(labels::INSTANCE_FAMILY)
            .cloned()
            .unwrap_or_default();
        let base = self
            .cfg
            .launch_family_s
            .get(&family)
            .copied()
            .unwrap_or(if shape.gpus > 0 {
                self.cfg.launch_gpu_s
            } else {
                self.cfg.launch_cpu_s
            });
        let j = self.cfg.launch_jitter;
        let latency = (base as f64 * self.rng_launch.uniform(1.0 - j, 1.0 + j)).round() as i64;
        self.push(
            self.now + latency.max(1) + self.cfg.registration_s,
            Ev::Registered(id),
        );
        if inst.capacity_type == CapacityType::Spot && self.cfg.spot_interruptions_per_hour > 0.0 {
            let after = self
                .rng_spot
                .exponential(3600.0 / self.cfg.spot_interruptions_per_hour);
            if after < (self.horizon - self.now) as f64 {
                self.push(self.now + after.ceil() as i64, Ev::Interrupt(id));
            }
        }
        self.policy.on_scale_up(&pool.name, self.now);
        self.changed();
        Some(id)
    }

    pub(super) fn register(&mut self, n: NodeId) {
        if self.cluster.nodes[n].phase != NodePhase::Launching {
            return;
        }
        let node = &mut self.cluster.nodes[n];
        node.phase = NodePhase::Registered;
        for ds in self.daemonsets {
            if ds.node_selector.matches(&node.labels)
                && untolerated(&ds.tolerations, &node.taints).is_none()
            {
                let mut pod = autoscaler_core::builders::pod(&format!(
                    "{}-{}",
                    ds.name.replace('/', "-"),
                    node.name
                ))
                .owner(Some("DaemonSet"))
                .build();
                pod.requests = ds.requests.clone();
                node.used.add(&ds.requests);
                std::sync::Arc::make_mut(&mut node.ds_pods).push(pod);
            }
        }
        let delay = if node.gpus > 0 {
            self.cfg.device_plugin_s
        } else {
            0
        };
        self.push(self.now + delay, Ev::Initialized(n));
        self.request_pass(true);
        self.changed();
    }

    pub(super) fn initialize(&mut self, n: NodeId) {
        if self.cluster.nodes[n].phase != NodePhase::Registered {
            return;
        }
        let node = &mut self.cluster.nodes[n];
        node.phase = NodePhase::Ready;
        node.ready_at = Some(self.now);
        let startup = std::mem::take(&mut node.startup_taints);
        node.taints.retain(|t| !startup.contains(t));
        self.nominated.retain(|_, v| *v != n);
        self.request_pass(true);
        self.changed();
        // Disruptions waiting for this node as their replacement go ahead.
        self.nudge_jobs(n);
    }

    pub(super) fn interrupt(&mut self, n: NodeId) {
        if !self.cluster.nodes[n].alive() {
            return;
        }
        // Two-minute notice: cordon and drain now, the instance goes at the end of the notice.
        let node = &mut self.cluster.nodes[n];
        node.deleting = true;
        node.taints.push(Taint::disruption());
        let pods = node.pods.clone();
        for p in pods {
            if matches!(self.cluster.pods[p].phase, PodPhase::Bound { .. }) {
                let k = self.evict(p);
                self.pods_disrupted += k;
                self.pods_interrupted += k;
            }
        }
        self.nominated.retain(|_, v| *v != n);
        self.push(self.now + 120, Ev::Terminate(n));
        self.changed();
    }

    pub(super) fn terminate(&mut self, n: NodeId) {
        if !self.cluster.nodes[n].alive() {
            return;
        }
        let pods = self.cluster.nodes[n].pods.clone();
        for p in pods {
            let k = self.evict(p);
            self.pods_disrupted += k;
        }
        let node = &mut self.cluster.nodes[n];
        node.phase = NodePhase::Gone;
        node.gone_at = Some(self.now);
        let pid = node.provider_id.clone();
        self.cluster.live_nodes.remove(&n);
        self.nominated.retain(|_, v| *v != n);
        let _ = block_on(self.provider.delete(&pid));
        self.provider.clear_calls();
        self.nodes_terminated += 1;
        self.request_pass(true);
        self.changed();
        self.request_node_gone(n);
        self.nudge_jobs(n);
    }
}
