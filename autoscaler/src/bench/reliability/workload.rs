//! The benchmark's cluster: NodePools, Deployments with PDBs, the controller processes it
//! starts, and what it observes of the API and cloud state while the phases run.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Instant;

use autoscaler::controller::Result;
use autoscaler::controller::{crashpoint, keys};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nodepools::{NodeClaim, NodePool};
use providers::kwok::KwokInstance;
use serde_json::{Value, json};

use super::{Bench, CPU_POOL, GPU_POOL, NS, Running, SPOT_POOL};
use crate::bench::e2e::{Killed, cfg, kerr};

/// Nodes of one NodePool disrupted at once until the replay changes it (1 to 3). Launches in
/// the kill phase come only as fast as empty nodes go: with 4, the empty nodes of a swing
/// back to none outlived several controllers and took the next swing's pods, launching nothing.
pub(super) const INITIAL_BUDGET: usize = 10;

pub(super) fn pool(name: &str, instance_type: &str, capacity: &str, extra: Value) -> Value {
    // Two sizes, so that a refused offering leaves others (every zone of the region too).
    let instance_types = match instance_type {
        "g4dn.xlarge" => json!(["g4dn.xlarge", "g4dn.2xlarge"]),
        _ => json!([instance_type, "m5.2xlarge"]),
    };
    let mut p = json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"lane": name}},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": instance_types},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]}
                ]
            },
            "disruption": {"consolidateAfter": "0s", "unneededTime": "1s", "budgets": [{"nodes": INITIAL_BUDGET.to_string()}]}
        }
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        p["spec"][k] = v.clone();
    }
    p
}

pub(super) fn pod_template(app: &str, lane: &str, gpu: bool, annotations: Value) -> Value {
    let resources = if gpu {
        json!({"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"nvidia.com/gpu": "1"}})
    } else {
        json!({"requests": {"cpu": "1500m", "memory": "2Gi"}})
    };
    json!({
        "metadata": {"labels": {"app": app}, "annotations": annotations},
        "spec": {
            "nodeSelector": {"lane": lane},
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "app", "resources": resources}]
        }
    })
}

impl Bench<'_> {
    /// Creates the bare pod `name` (a [`pod_template`] of `lane` with `annotations`) and
    /// tracks it among the bare pods whose loss the accounting counts; `what` names it in an
    /// error.
    ///
    /// # Errors
    /// The API server's, as `creating <what>`.
    pub(super) async fn create_bare_pod(
        &mut self,
        name: String,
        lane: &str,
        gpu: bool,
        annotations: Value,
        what: &str,
    ) -> Result<()> {
        let mut pod = pod_template(&name, lane, gpu, annotations);
        pod["metadata"]["name"] = json!(name);
        pod["metadata"]["namespace"] = json!(NS);
        let p: Pod = serde_json::from_value(pod).map_err(|e| cfg(e.to_string()))?;
        Api::<Pod>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &p)
            .await
            .map_err(kerr(&format!("creating {what}")))?;
        self.bare.insert(name, None);
        Ok(())
    }

    pub(super) fn deployments(&self) -> Vec<(String, &'static str, bool)> {
        let mut out = Vec::new();
        for i in 0..self.args.deployments {
            out.push((format!("gpu-{i}"), GPU_POOL, true));
            let lane = if i % 2 == 0 { SPOT_POOL } else { CPU_POOL };
            out.push((format!("cpu-{i}"), lane, false));
        }
        out
    }

    pub(super) async fn setup(&mut self) -> Result<()> {
        let pools: Api<NodePool> = Api::all(self.client.clone());
        for p in [
            pool(GPU_POOL, "g4dn.xlarge", "on-demand", json!({})),
            pool(SPOT_POOL, "m5.xlarge", "spot", json!({"minNodes": 1})),
            pool(CPU_POOL, "m5.xlarge", "on-demand", json!({})),
        ] {
            let mut p = p;
            if p["metadata"]["name"] == GPU_POOL {
                p["spec"]["template"]["taints"] =
                    json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]);
            }
            let name = p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let obj: NodePool = serde_json::from_value(p).map_err(|e| cfg(e.to_string()))?;
            pools
                .create(&PostParams::default(), &obj)
                .await
                .map_err(kerr("creating a NodePool"))?;
            self.budgets.insert(name, (INITIAL_BUDGET, INITIAL_BUDGET));
        }
        let deps: Api<Deployment> = Api::namespaced(self.client.clone(), NS);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), NS);
        for (i, (name, lane, gpu)) in self.deployments().into_iter().enumerate() {
            let d: Deployment = serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                         "template": pod_template(&name, lane, gpu, json!({}))}
            }))
            .map_err(|e| cfg(e.to_string()))?;
            deps.create(&PostParams::default(), &d)
                .await
                .map_err(kerr("creating a Deployment"))?;
            self.replicas.insert(name.clone(), 0);
            let max_unavailable = if i % 2 == 0 { json!(1) } else { json!("34%") };
            let pdb: PodDisruptionBudget = serde_json::from_value(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": name}}}
            }))
            .map_err(|e| cfg(e.to_string()))?;
            pdbs.create(&PostParams::default(), &pdb)
                .await
                .map_err(kerr("creating a PodDisruptionBudget"))?;
        }
        Ok(())
    }

    pub(super) fn controller(&mut self, point: Option<(&'static str, u64)>) -> Result<Running> {
        self.started_controllers += 1;
        let n = self.started_controllers;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| cfg(e.to_string()))?;
        let mut cmd = Command::new(std::env::current_exe().map_err(|e| cfg(e.to_string()))?);
        cmd.args([
            "run",
            "--provider=kwok",
            "--leader-elect=false",
            // Pods come back pending several times a second: a batch held open for 2 s
            // outlives most controllers of the kill phase (2 to 3 s, one of them syncing).
            "--batch-idle=100ms",
            "--batch-max=500ms",
            "--kwok-register-delay=500ms",
            "--kwok-ready-delay=500ms",
            "--kwok-gpu-delay=500ms",
            "--disruption-interval=1s",
            "--validation-delay=500ms",
            "--scale-down-delay-after-add=0s",
            "--scale-down-delay-after-failure=2s",
            "--gc-interval=2s",
            "--gc-grace=4s",
            "--loop-interval=100ms",
            "--launch-backoff=2s",
            "--provreq-retry=1s",
            "--namespace=kube-system",
            "--metrics-addr=127.0.0.1:0",
        ])
        .arg(format!("--identity=reliability-{n}"))
        .arg(format!("--kwok-faults=all={}", self.args.cloud_fault_rate))
        .arg(format!(
            "--kwok-fault-seed={}",
            self.args.seed.wrapping_mul(1000) + n as u64
        ))
        .env("KUBECONFIG", &self.kubeconfig)
        .env("RUST_LOG", "warn,autoscaler=info,providers=info")
        .env_remove("POD_NAMESPACE")
        .env_remove("POD_NAME")
        .env_remove(crashpoint::ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
        if let Some((p, at)) = point {
            cmd.env(crashpoint::ENV, format!("{p}:{at}"));
        }
        let child = cmd
            .spawn()
            .map_err(|e| cfg(format!("starting the controller: {e}")))?;
        Ok(Running {
            process: Killed(child),
            started: Instant::now(),
            point: point.map(|(p, _)| p),
        })
    }

    pub(super) async fn set_replicas(&mut self, name: &str, n: i32) -> Result<usize> {
        let old = self.replicas.get(name).copied().unwrap_or(0);
        Api::<Deployment>::namespaced(self.client.clone(), NS)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": n}})),
            )
            .await
            .map_err(kerr("scaling a Deployment"))?;
        self.replicas.insert(name.to_string(), n);
        Ok(old.abs_diff(n) as usize)
    }

    pub(super) async fn scale_random(&mut self) -> Result<usize> {
        let deps = self.deployments();
        let (name, _, _) = &deps[self.rng.below(deps.len())];
        let n = self.rng.below(self.args.max_replicas as usize + 1) as i32;
        self.set_replicas(name, n).await
    }

    /// Swings a random Deployment between none and `--max-replicas`: the whole swing's pods
    /// ask for new nodes at once and leave them all empty together, which is what makes
    /// launches (a random step mostly moves pods between nodes that already exist).
    pub(super) async fn scale_swing(&mut self) -> Result<usize> {
        let deps = self.deployments();
        let (name, _, _) = &deps[self.rng.below(deps.len())];
        let n = if self.replicas.get(name).copied().unwrap_or(0) > 0 {
            0
        } else {
            self.args.max_replicas
        };
        self.set_replicas(name, n).await
    }

    pub(super) async fn nodes(&self) -> Result<Vec<Node>> {
        Ok(Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing Nodes"))?
            .items)
    }

    pub(super) async fn pods(&self) -> Result<Vec<Pod>> {
        Ok(Api::<Pod>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing pods"))?
            .items)
    }

    pub(super) async fn instances(&self) -> Result<Vec<KwokInstance>> {
        Ok(Api::<KwokInstance>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing kwok instances"))?
            .items
            .into_iter()
            .filter(|i| !providers::kwok::is_outage(i))
            .collect())
    }

    pub(super) async fn claims(&self) -> Result<Vec<NodeClaim>> {
        Ok(Api::<NodeClaim>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing NodeClaims"))?
            .items)
    }

    /// Notes new instances (launches) and checks every NodePool's budget against the Nodes
    /// carrying the disruption taint now.
    pub(super) async fn observe(&mut self) -> Result<()> {
        for i in self.instances().await? {
            self.launched.insert(i.name_any());
        }
        let nodes = self.nodes().await?;
        let mut tainted: BTreeMap<String, usize> = BTreeMap::new();
        // Nodes being disrupted or deleted, for the bookings' check.
        let mut disrupting_nodes = BTreeSet::new();
        for n in &nodes {
            let disrupting = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == keys::DISRUPTION_TAINT));
            let failed = self.failed_by_us(n);
            if (disrupting || n.metadata.deletion_timestamp.is_some()) && !failed {
                disrupting_nodes.insert(n.name_any());
            }
            if disrupting && !failed {
                let pool = n
                    .labels()
                    .get(keys::POOL_LABEL)
                    .cloned()
                    .unwrap_or_default();
                *tainted.entry(pool).or_default() += 1;
            }
        }
        for (pool, (now, before)) in &self.budgets {
            let over = tainted.get(pool).copied().unwrap_or(0) > (*now).max(*before);
            if over && self.over_budget.insert(pool.clone()) {
                eprintln!("budget of NodePool {pool} exceeded: {tainted:?}");
                self.budget_violations += 1;
            } else if !over {
                self.over_budget.remove(pool);
            }
        }
        self.check_bookings(&disrupting_nodes).await?;
        // Where the bare pods are (for the count of pods lost with a failed Node).
        let pods = self.pods().await?;
        for p in pods {
            if let Some(slot) = self.bare.get_mut(&p.name_any()) {
                *slot = p.spec.as_ref().and_then(|s| s.node_name.clone());
            }
        }
        Ok(())
    }
}
