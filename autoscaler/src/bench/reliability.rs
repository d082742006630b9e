//! `gpu-autoscaler bench reliability`: the controller binary under crashes and faults, then a
//! disruption replay, judged from the final API and cloud state.
//!
//! 1. Starts the `fake-apiserver` binary with its workload controllers, graceful deletion,
//!    pod GC after a delay and API faults at `--api-fault-rate` on every call of the system
//!    under test (reads, writes, watch opens; watch streams cut); the benchmark itself talks
//!    to a second, fault-free listener. (`--kubeconfig`/`--clean-kubeconfig` use a server
//!    already running instead, as the `cargo test` configuration does.)
//! 2. Three NodePools (GPU on-demand, CPU spot with `minNodes`, CPU on-demand), Deployments of
//!    GPU and CPU pods with PodDisruptionBudgets (`maxUnavailable` 1 and percentages), and bare
//!    `do-not-disrupt` and `safe-to-evict=false` pods.
//! 3. **Launches and kills.** Deployments are scaled at random, so pods keep asking for nodes
//!    and empty nodes are consolidated, while the controller (kwok provider, cloud faults at
//!    `--cloud-fault-rate` per cloud call) runs with `GPU_AUTOSCALER_KILL_AT` naming the next
//!    kill point in turn (before/after the NodeClaim write and the launch, registration,
//!    initialization, the disruption taint, the drain, the Node deletion, before/after the
//!    termination; `controller::crashpoint`) at its 1st to 3rd occurrence; a controller that
//!    has not reached it after `--max-lifetime` is SIGKILLed where it is. Each kill is
//!    followed by a restart. Until `--launches` instances were launched and `--kills` kills done.
//! 4. **Disruption replay.** One controller, no kills: `--disruption-events` events: pod churn
//!    through Deployments (each pod created or removed by a scale change is one event), pods
//!    deleted (their owner recreates them), node failures (the Node deleted), spot
//!    interruptions (the instance and its Node gone), PDBs switched between `maxUnavailable` 1
//!    and a percentage, NodePool budgets changed, protected bare pods created and deleted.
//! 5. **Settle and count** (see [`ReliabilityResult`]): leaked instances, duplicate nodes and
//!    claims, lost pods, unplaced pods, and safety violations from the server's audit of the
//!    controller's evictions and Node deletions (`GET /debug/audit`) and from the NodePool
//!    budgets watched during the run.
//!
//! Every pod fits a NodePool, so every pending pod at the end is a satisfiable pod not placed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use autoscaler::controller::Result;
use autoscaler::controller::crashpoint;
use autoscaler::controller::keys;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nodepools::{NodeClaim, NodePool};
use providers::kwok::KwokInstance;
use serde::Serialize;
use serde_json::{Value, json};

use super::e2e::{Killed, cfg, kerr};
use super::rng::SplitMix64;

/// Options of `bench reliability`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ReliabilityArgs {
    /// Instances to launch (distinct kwok instances created) in the kill phase, at least.
    #[arg(long, default_value_t = 1000)]
    pub(crate) launches: usize,
    /// Controller kills (SIGKILL, then a restart) in the kill phase, at least.
    #[arg(long, default_value_t = 200)]
    pub(crate) kills: usize,
    /// Disruption-relevant events replayed after the kill phase.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) disruption_events: usize,
    /// Chance per cloud call of a fault (split evenly over insufficient capacity, throttling,
    /// 5xx and timeouts).
    #[arg(long, default_value_t = 0.3)]
    pub(crate) cloud_fault_rate: f64,
    /// Chance per API call of the controller of a fault (429 and 5xx on reads, writes and
    /// watch opens, 409 on updates, watch streams cut).
    #[arg(long, default_value_t = 0.05)]
    pub(crate) api_fault_rate: f64,
    /// Seed of the workload, the kill points and the faults.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// A controller that has not reached its kill point after this long is SIGKILLed anyway.
    #[arg(long, default_value = "3s", value_parser = autoscaler::controller::settings::parse_duration)]
    pub(crate) max_lifetime: Duration,
    /// GPU Deployments (each with a PDB) and CPU Deployments, each.
    #[arg(long, default_value_t = 4)]
    pub(crate) deployments: usize,
    /// Most replicas of one Deployment.
    #[arg(long, default_value_t = 12)]
    pub(crate) max_replicas: i32,
    /// Also write the result as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// The fake-apiserver binary (default: next to this executable).
    #[arg(long)]
    pub(crate) fake_apiserver: Option<PathBuf>,
    /// Use a running fake API server: the kubeconfig the controller gets (faults apply)...
    #[arg(long, requires = "clean_kubeconfig")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// ...and the benchmark's own, fault-free one.
    #[arg(long, requires = "kubeconfig")]
    pub(crate) clean_kubeconfig: Option<PathBuf>,
    /// Give up on settling after this long.
    #[arg(long, default_value = "180s", value_parser = autoscaler::controller::settings::parse_duration)]
    pub(crate) settle_timeout: Duration,
}

/// The result; every count is from the final API and cloud state unless it says otherwise.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ReliabilityResult {
    /// Distinct instances launched during the kill phase.
    pub(crate) launches: usize,
    /// Controller kills (at a named point or, past `--max-lifetime`, wherever it was).
    pub(crate) kill_points: usize,
    /// Instances without a NodeClaim.
    pub(crate) leaked_instances: usize,
    /// Nodes sharing an instance, managed Nodes without a claim, and empty Nodes a NodePool's
    /// `minNodes` does not keep (nodes beyond need).
    pub(crate) duplicate_nodes: usize,
    /// NodeClaims sharing an instance or a Node, and launched claims whose instance is gone.
    pub(crate) duplicate_claims: usize,
    /// Pods a Deployment wants that do not exist, and bare pods gone that nobody deleted
    /// (pods on a Node the benchmark failed excepted).
    pub(crate) lost_pods: usize,
    /// Pods still unbound at the end (every pod fits a NodePool).
    pub(crate) unplaced_satisfiable_pods: usize,
    /// Disruption-relevant events replayed.
    pub(crate) disruption_events: usize,
    /// Evictions of protected pods, Nodes deleted under running protected or PDB-covered
    /// pods, budgets exceeded.
    pub(crate) safety_violations: usize,
    /// API faults the server injected.
    pub(crate) api_faults_injected: u64,
    /// Cloud faults the kwok provider injected (from the controllers' logs).
    pub(crate) cloud_faults_injected: u64,
    /// The configured cloud fault rate.
    pub(crate) cloud_fault_rate: f64,
    /// The configured API fault rate.
    pub(crate) api_fault_rate: f64,
    /// Wall time of the whole run, seconds.
    pub(crate) wall_seconds: f64,
}

/// Runs the benchmark (blocking).
///
/// # Errors
/// When the fake server or the controller cannot be started, or the benchmark's own API
/// calls fail.
pub(crate) fn run(args: ReliabilityArgs) -> Result<ReliabilityResult> {
    if !(0.0..=1.0).contains(&args.cloud_fault_rate) || !(0.0..=1.0).contains(&args.api_fault_rate)
    {
        return Err(cfg(
            "--cloud-fault-rate and --api-fault-rate are rates in 0..=1",
        ));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| cfg(format!("starting the async runtime: {e}")))?;
    let result = rt.block_on(bench(&args))?;
    print_table(&result);
    let text = serde_json::to_string_pretty(&result).expect("serializable");
    println!("{text}");
    if let Some(path) = &args.json {
        std::fs::write(path, &text).map_err(|e| cfg(format!("writing {}: {e}", path.display())))?;
    }
    Ok(result)
}

fn print_table(r: &ReliabilityResult) {
    let rows: [(&str, String); 14] = [
        ("launches", r.launches.to_string()),
        ("kill points", r.kill_points.to_string()),
        ("disruption events", r.disruption_events.to_string()),
        ("cloud fault rate", format!("{:.2}", r.cloud_fault_rate)),
        ("cloud faults injected", r.cloud_faults_injected.to_string()),
        ("API fault rate", format!("{:.2}", r.api_fault_rate)),
        ("API faults injected", r.api_faults_injected.to_string()),
        ("leaked instances", r.leaked_instances.to_string()),
        ("duplicate nodes", r.duplicate_nodes.to_string()),
        ("duplicate claims", r.duplicate_claims.to_string()),
        ("lost pods", r.lost_pods.to_string()),
        (
            "unplaced satisfiable pods",
            r.unplaced_satisfiable_pods.to_string(),
        ),
        ("safety violations", r.safety_violations.to_string()),
        ("wall seconds", format!("{:.0}", r.wall_seconds)),
    ];
    for (k, v) in rows {
        println!("{k:<28}{v:>10}");
    }
}

async fn client_from(path: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| cfg(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| cfg(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| cfg(e.to_string()))
}

/// The fake API server: spawned (and killed when dropped) or given.
struct Server {
    _child: Option<Killed>,
    kubeconfig: PathBuf,
    url: String,
}

fn start_server(args: &ReliabilityArgs, dir: &Path) -> Result<(Server, PathBuf)> {
    if let (Some(k), Some(c)) = (&args.kubeconfig, &args.clean_kubeconfig) {
        let text = std::fs::read_to_string(c).map_err(|e| cfg(format!("{}: {e}", c.display())))?;
        let url = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server:"))
            .map(|s| s.trim().trim_matches('"').to_string())
            .ok_or_else(|| cfg(format!("{}: no server URL", c.display())))?;
        let server = Server {
            _child: None,
            kubeconfig: k.clone(),
            url,
        };
        return Ok((server, c.clone()));
    }
    let exe = std::env::current_exe().map_err(|e| cfg(e.to_string()))?;
    let bin = args
        .fake_apiserver
        .clone()
        .unwrap_or_else(|| exe.with_file_name("fake-apiserver"));
    if !bin.exists() {
        return Err(cfg(format!(
            "{} not found: build it with `cargo build --release -p fake-apiserver` (or pass --fake-apiserver)",
            bin.display()
        )));
    }
    let crds = dir.join("crds.yaml");
    let mut text = nodepools::crds::to_yaml().map_err(|e| cfg(e.to_string()))?;
    text.push_str("\n---\n");
    text.push_str(providers::kwok::CRD_YAML);
    std::fs::write(&crds, text).map_err(|e| cfg(e.to_string()))?;
    let kubeconfig = dir.join("kubeconfig");
    let clean = dir.join("clean-kubeconfig");
    let rate = args.api_fault_rate;
    // The API fault rate is split over the kinds each class can get.
    let rw = format!("429={:.4},5xx={:.4}", rate / 2.0, rate / 2.0);
    let writes = format!(
        "409={:.4},429={:.4},5xx={:.4}",
        rate / 3.0,
        rate / 3.0,
        rate / 3.0
    );
    let mut child = Killed(
        Command::new(&bin)
            .args(["--port", "0", "--history", "200000", "--binder"])
            .args(["--binder-interval-ms", "100", "--graceful-deletion", "0.02"])
            .args(["--pod-gc-delay-ms", "2000"])
            .args(["--fault-seed", &args.seed.to_string()])
            .args([
                "--read-faults",
                &rw,
                "--write-faults",
                &writes,
                "--watch-faults",
                &rw,
            ])
            .args(["--watch-drop-rate", &format!("{:.4}", rate / 10.0)])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--clean-kubeconfig")
            .arg(&clean)
            .arg("--crd")
            .arg(&crds)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| cfg(format!("starting {}: {e}", bin.display())))?,
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().expect("piped"))
        .read_line(&mut line)
        .map_err(|e| cfg(e.to_string()))?;
    let text = std::fs::read_to_string(&clean).map_err(|e| cfg(e.to_string()))?;
    let url = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .map(|s| s.trim().trim_matches('"').to_string())
        .unwrap_or_default();
    Ok((
        Server {
            _child: Some(child),
            kubeconfig,
            url,
        },
        clean,
    ))
}

/// The server's audit and fault count (`GET /debug/audit` on the fault-free listener).
fn audit(url: &str) -> Result<Value> {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let mut conn = std::net::TcpStream::connect(addr).map_err(|e| cfg(e.to_string()))?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| cfg(e.to_string()))?;
    write!(conn, "GET /debug/audit HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .map_err(|e| cfg(e.to_string()))?;
    let mut text = String::new();
    conn.read_to_string(&mut text)
        .map_err(|e| cfg(e.to_string()))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body).map_err(|e| cfg(format!("the server's audit: {e}")))
}

/// One controller process and what it was armed with.
struct Running {
    process: Killed,
    started: Instant,
    point: Option<&'static str>,
}

struct Bench<'a> {
    args: &'a ReliabilityArgs,
    client: kube::Client,
    kubeconfig: PathBuf,
    log: PathBuf,
    rng: SplitMix64,
    started_controllers: usize,
    /// Nodes the benchmark failed or interrupted (what happens to their pods is not the
    /// controller's doing).
    failed: HashSet<String>,
    /// Bare pods the benchmark created and has not deleted, with the pod's Node when last seen.
    bare: BTreeMap<String, Option<String>>,
    /// Bare pods lost with a Node the benchmark failed.
    bare_lost_with_node: usize,
    /// Budgets (nodes) per NodePool: the current one and the previous one (a lowered budget
    /// binds disruptions started after the change only).
    budgets: BTreeMap<String, (usize, usize)>,
    budget_violations: usize,
    /// Pools over budget at the last look (a violation counts once per excursion).
    over_budget: BTreeSet<String>,
    launched: HashSet<String>,
    replicas: BTreeMap<String, i32>,
}

const GPU_POOL: &str = "gpu";
const SPOT_POOL: &str = "spot";
const CPU_POOL: &str = "cpu";
const NS: &str = "default";

fn pool(name: &str, instance_type: &str, capacity: &str, extra: Value) -> Value {
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
            "disruption": {"consolidateAfter": "0s", "unneededTime": "1s", "budgets": [{"nodes": "2"}]}
        }
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        p["spec"][k] = v.clone();
    }
    p
}

fn pod_template(app: &str, lane: &str, gpu: bool, annotations: Value) -> Value {
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
    fn deployments(&self) -> Vec<(String, &'static str, bool)> {
        let mut out = Vec::new();
        for i in 0..self.args.deployments {
            out.push((format!("gpu-{i}"), GPU_POOL, true));
            let lane = if i % 2 == 0 { SPOT_POOL } else { CPU_POOL };
            out.push((format!("cpu-{i}"), lane, false));
        }
        out
    }

    async fn setup(&mut self) -> Result<()> {
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
            self.budgets.insert(name, (2, 2));
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

    fn controller(&mut self, point: Option<(&'static str, u64)>) -> Result<Running> {
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
            "--batch-idle=200ms",
            "--batch-max=2s",
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

    async fn set_replicas(&mut self, name: &str, n: i32) -> Result<usize> {
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

    async fn scale_random(&mut self) -> Result<usize> {
        let deps = self.deployments();
        let (name, _, _) = &deps[self.rng.below(deps.len())];
        let n = self.rng.below(self.args.max_replicas as usize + 1) as i32;
        self.set_replicas(name, n).await
    }

    async fn nodes(&self) -> Result<Vec<Node>> {
        Ok(Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing Nodes"))?
            .items)
    }

    async fn pods(&self) -> Result<Vec<Pod>> {
        Ok(Api::<Pod>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing pods"))?
            .items)
    }

    async fn instances(&self) -> Result<Vec<KwokInstance>> {
        Ok(Api::<KwokInstance>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing kwok instances"))?
            .items
            .into_iter()
            .filter(|i| !providers::kwok::is_outage(i))
            .collect())
    }

    async fn claims(&self) -> Result<Vec<NodeClaim>> {
        Ok(Api::<NodeClaim>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing NodeClaims"))?
            .items)
    }

    /// Notes new instances (launches) and checks every NodePool's budget against the Nodes
    /// carrying the disruption taint now.
    async fn observe(&mut self) -> Result<()> {
        for i in self.instances().await? {
            self.launched.insert(i.name_any());
        }
        let nodes = self.nodes().await?;
        let mut tainted: BTreeMap<String, usize> = BTreeMap::new();
        for n in &nodes {
            let disrupting = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == keys::DISRUPTION_TAINT));
            if disrupting && !self.failed.contains(&n.name_any()) {
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
        // Where the bare pods are (for the count of pods lost with a failed Node).
        let pods = self.pods().await?;
        for p in pods {
            if let Some(slot) = self.bare.get_mut(&p.name_any()) {
                *slot = p.spec.as_ref().and_then(|s| s.node_name.clone());
            }
        }
        Ok(())
    }

    /// The kill phase; returns the kills done.
    async fn kill_phase(&mut self, deadline: Instant) -> Result<usize> {
        let mut kills = 0usize;
        let mut by_point: BTreeMap<&str, usize> = BTreeMap::new();
        let mut next = 0usize;
        let mut running = None::<Running>;
        let mut last_observe = Instant::now();
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
                    let at = 1 + self.rng.below(3) as u64;
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
                        kills += 1;
                        running = None; // dropping it SIGKILLs a live one
                    }
                }
            }
            if self.rng.chance(30) {
                self.scale_random().await?;
            }
            if last_observe.elapsed() > Duration::from_millis(400) {
                self.observe().await?;
                last_observe = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop(running);
        eprintln!(
            "kill phase: {} launches, {kills} kills by point {by_point:?}",
            self.launched.len()
        );
        Ok(kills)
    }

    /// One random disruption-relevant event; returns how many events it was.
    async fn event(&mut self) -> Result<usize> {
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
            // A node failure (the Node removed) or a spot interruption (the instance reclaimed
            // and its Node gone).
            let interruption = roll >= 75;
            let nodes = self.nodes().await?;
            let candidates: Vec<&Node> = nodes
                .iter()
                .filter(|n| n.metadata.deletion_timestamp.is_none())
                .filter(|n| {
                    !interruption || n.labels().get("lane").map(String::as_str) == Some(SPOT_POOL)
                })
                .collect();
            if candidates.is_empty() {
                return Ok(0);
            }
            let name = candidates[self.rng.below(candidates.len())].name_any();
            self.failed.insert(name.clone());
            // The bare pods lost with the Node are those bound to it when it fails: cordoned
            // first, so that the harness scheduler binds nothing more to it, then read fresh (the
            // last observation may predate a binding).
            let cordon = json!({"spec": {"unschedulable": true}});
            Api::<Node>::all(self.client.clone())
                .patch(&name, &PatchParams::default(), &Patch::Merge(cordon))
                .await
                .map_err(kerr("cordoning a Node to fail"))?;
            let on_node: BTreeSet<String> = self
                .pods()
                .await?
                .into_iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name))
                .map(|p| p.name_any())
                .collect();
            let lost: Vec<String> = self
                .bare
                .keys()
                .filter(|p| on_node.contains(*p))
                .cloned()
                .collect();
            for p in lost {
                self.bare.remove(&p);
                self.bare_lost_with_node += 1;
            }
            if interruption {
                let _ = Api::<KwokInstance>::all(self.client.clone())
                    .delete(&name, &DeleteParams::default())
                    .await;
            }
            let _ = Api::<Node>::all(self.client.clone())
                .delete(&name, &DeleteParams::default())
                .await;
            return Ok(1);
        }
        if roll < 87 {
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
        if roll < 93 {
            let pools: Vec<String> = self.budgets.keys().cloned().collect();
            let name = pools[self.rng.below(pools.len())].clone();
            let n = 1 + self.rng.below(3);
            let patch = json!({"spec": {"disruption": {"budgets": [{"nodes": n.to_string()}]}}});
            Api::<NodePool>::all(self.client.clone())
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(kerr("changing a budget"))?;
            let entry = self.budgets.entry(name).or_insert((n, n));
            *entry = (n, entry.0);
            return Ok(1);
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
            let mut pod = pod_template(&name, lane, false, annotations);
            pod["metadata"]["name"] = json!(name);
            pod["metadata"]["namespace"] = json!(NS);
            let p: Pod = serde_json::from_value(pod).map_err(|e| cfg(e.to_string()))?;
            Api::<Pod>::namespaced(self.client.clone(), NS)
                .create(&PostParams::default(), &p)
                .await
                .map_err(kerr("creating a protected pod"))?;
            self.bare.insert(name, None);
            return Ok(1);
        }
        let name = self.bare.keys().next().cloned().expect("not empty");
        self.bare.remove(&name);
        let _ = Api::<Pod>::namespaced(self.client.clone(), NS)
            .delete(&name, &DeleteParams::default())
            .await;
        Ok(1)
    }

    async fn replay(&mut self, deadline: Instant) -> Result<usize> {
        let mut events = 0usize;
        let mut last_observe = Instant::now();
        while events < self.args.disruption_events {
            if Instant::now() > deadline {
                eprintln!("replay stopped at its deadline after {events} events");
                break;
            }
            events += self.event().await?;
            if last_observe.elapsed() > Duration::from_millis(400) {
                self.observe().await?;
                last_observe = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        Ok(events)
    }

    /// Waits until no pod is pending and no empty Node is left beyond `minNodes`, then for
    /// two more garbage-collection passes; gives up at the settle timeout.
    async fn settle(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.args.settle_timeout;
        let mut quiet_since: Option<Instant> = None;
        loop {
            self.observe().await?;
            let pods = self.pods().await?;
            let pending = pods.iter().filter(|p| unplaced(p)).count();
            let empty = self.empty_nodes(&pods).await?.len();
            let wanted: i32 = self.replicas.values().sum();
            let live = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.owner_references().iter().any(|o| o.kind == "ReplicaSet"))
                .count();
            if pending == 0 && empty == 0 && live == wanted as usize {
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(8) {
                    return Ok(());
                }
            } else {
                quiet_since = None;
            }
            if Instant::now() > deadline {
                eprintln!(
                    "not settled after {:?}: {pending} pods pending, {empty} empty nodes, {live} of {wanted} replicas",
                    self.args.settle_timeout
                );
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Managed Nodes (not being deleted) with no running pod, beyond their pool's `minNodes`.
    async fn empty_nodes(&self, pods: &[Pod]) -> Result<Vec<String>> {
        let busy: HashSet<String> = pods
            .iter()
            .filter(|p| !terminal(p))
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        let mut per_pool: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for n in self.nodes().await? {
            if n.metadata.deletion_timestamp.is_some() || busy.contains(&n.name_any()) {
                continue;
            }
            if let Some(pool) = n.labels().get(keys::POOL_LABEL) {
                per_pool.entry(pool.clone()).or_default().push(n.name_any());
            }
        }
        let all_nodes = self.nodes().await?;
        let mut out = Vec::new();
        for (pool, mut empty) in per_pool {
            // minNodes keeps nodes of the spot pool; the empty ones count against it last.
            if pool == SPOT_POOL {
                let total = all_nodes
                    .iter()
                    .filter(|n| n.labels().get(keys::POOL_LABEL) == Some(&pool))
                    .filter(|n| n.metadata.deletion_timestamp.is_none())
                    .count();
                let keep = 1usize.saturating_sub(total - empty.len());
                empty.truncate(empty.len().saturating_sub(keep));
            }
            out.extend(empty);
        }
        Ok(out)
    }

    async fn count(&mut self, result: &mut ReliabilityResult, server_url: &str) -> Result<()> {
        let instances = self.instances().await?;
        let claims = self.claims().await?;
        let nodes = self.nodes().await?;
        let pods = self.pods().await?;
        let claim_names: HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
        let leaked: Vec<String> = instances
            .iter()
            .map(|i| i.name_any())
            .filter(|n| !claim_names.contains(n))
            .collect();
        if !leaked.is_empty() {
            eprintln!("leaked instances: {leaked:?}");
        }
        result.leaked_instances = leaked.len();

        let mut by_provider: HashMap<String, usize> = HashMap::new();
        for n in &nodes {
            if let Some(pid) = n.spec.as_ref().and_then(|s| s.provider_id.clone()) {
                *by_provider.entry(pid).or_default() += 1;
            }
        }
        let claimed: HashSet<String> = claims
            .iter()
            .filter_map(|c| c.status.as_ref()?.provider_id.clone())
            .collect();
        let shared_nodes: usize = by_provider.values().map(|n| n - 1).sum();
        let unclaimed: Vec<String> = nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_ref())
                    .is_some_and(|p| {
                        p.starts_with(providers::kwok::PROVIDER_ID_PREFIX) && !claimed.contains(p)
                    })
            })
            .map(|n| n.name_any())
            .collect();
        let empty = self.empty_nodes(&pods).await?;
        if shared_nodes + unclaimed.len() + empty.len() > 0 {
            eprintln!(
                "duplicate nodes: {shared_nodes} sharing an instance, unclaimed {unclaimed:?}, empty {empty:?}"
            );
        }
        result.duplicate_nodes = shared_nodes + unclaimed.len() + empty.len();

        let instance_names: HashSet<String> = instances.iter().map(|i| i.name_any()).collect();
        let mut claims_by_pid: HashMap<String, usize> = HashMap::new();
        let mut claims_by_node: HashMap<String, usize> = HashMap::new();
        let mut instanceless = Vec::new();
        for c in &claims {
            let Some(s) = c.status.as_ref() else { continue };
            if let Some(pid) = &s.provider_id {
                *claims_by_pid.entry(pid.clone()).or_default() += 1;
                let name = providers::kwok::instance_name(pid).unwrap_or_default();
                if !instance_names.contains(name) && c.metadata.deletion_timestamp.is_none() {
                    instanceless.push(c.name_any());
                }
            }
            if let Some(n) = &s.node_name {
                *claims_by_node.entry(n.clone()).or_default() += 1;
            }
        }
        let shared_claims: usize = claims_by_pid
            .values()
            .chain(claims_by_node.values())
            .map(|n| n - 1)
            .sum();
        if shared_claims + instanceless.len() > 0 {
            eprintln!("duplicate claims: {shared_claims} sharing, instanceless {instanceless:?}");
        }
        result.duplicate_claims = shared_claims + instanceless.len();

        let mut lost = 0usize;
        for (name, want) in &self.replicas {
            let have = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none() && !terminal(p))
                .filter(|p| p.labels().get("app") == Some(name))
                .count();
            lost += (*want as usize).saturating_sub(have);
        }
        let present: HashSet<String> = pods.iter().map(|p| p.name_any()).collect();
        let gone: Vec<&String> = self.bare.keys().filter(|b| !present.contains(*b)).collect();
        if !gone.is_empty() {
            eprintln!("bare pods lost: {gone:?}");
        }
        result.lost_pods = lost + gone.len();
        let unplaced: Vec<String> = pods
            .iter()
            .filter(|p| unplaced(p))
            .map(|p| p.name_any())
            .collect();
        if !unplaced.is_empty() {
            eprintln!("unplaced pods: {unplaced:?}");
        }
        result.unplaced_satisfiable_pods = unplaced.len();

        let a = audit(server_url)?;
        result.api_faults_injected = a["faultsInjected"].as_u64().unwrap_or(0);
        let mut violations = self.budget_violations;
        for r in a["records"].as_array().into_iter().flatten() {
            let node = r["node"].as_str().unwrap_or_default();
            if self.failed.contains(node) {
                continue;
            }
            match r["call"].as_str() {
                Some("evict") if r["accepted"] == true && !r["protected"].is_null() => {
                    eprintln!("safety: protected pod evicted: {r}");
                    violations += 1;
                }
                Some("deleteNode") => {
                    for p in r["pods"].as_array().into_iter().flatten() {
                        if !p["protected"].is_null() || p["pdbAllowed"] == 0 {
                            eprintln!("safety: Node {node} deleted under pod {p}");
                            violations += 1;
                        }
                    }
                }
                _ => {}
            }
        }
        result.safety_violations = violations;
        result.cloud_faults_injected = std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("injected cloud fault"))
            .count() as u64;
        Ok(())
    }
}

fn terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// A live pod no Node holds.
fn unplaced(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && !terminal(p)
        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
}

async fn bench(args: &ReliabilityArgs) -> Result<ReliabilityResult> {
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!(
        "gpu-autoscaler-bench-reliability-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| cfg(e.to_string()))?;
    let (server, clean) = start_server(args, &dir)?;
    eprintln!(
        "fake API server at {}; logs in {}",
        server.url,
        dir.display()
    );
    let client = client_from(&clean).await?;
    let mut b = Bench {
        args,
        client,
        kubeconfig: server.kubeconfig.clone(),
        log: dir.join("controller.log"),
        rng: SplitMix64::new(args.seed),
        started_controllers: 0,
        failed: HashSet::new(),
        bare: BTreeMap::new(),
        bare_lost_with_node: 0,
        budgets: BTreeMap::new(),
        budget_violations: 0,
        over_budget: BTreeSet::new(),
        launched: HashSet::new(),
        replicas: BTreeMap::new(),
    };
    b.setup().await?;
    // The phases share 14 minutes; settling has its own timeout.
    let kill_deadline = started + Duration::from_secs(9 * 60);
    let kills = b.kill_phase(kill_deadline).await?;
    let launches = b.launched.len();
    // The restart after the last kill, then the replay with that one controller.
    let last = b.controller(None)?;
    let replay_deadline = started + Duration::from_secs(13 * 60);
    let events = b.replay(replay_deadline).await?;
    b.settle().await?;
    let mut result = ReliabilityResult {
        launches,
        kill_points: kills,
        disruption_events: events,
        cloud_fault_rate: args.cloud_fault_rate,
        api_fault_rate: args.api_fault_rate,
        ..ReliabilityResult::default()
    };
    b.count(&mut result, &server.url).await?;
    drop(last);
    result.wall_seconds = started.elapsed().as_secs_f64();
    let clean_run = result.leaked_instances
        + result.duplicate_nodes
        + result.duplicate_claims
        + result.lost_pods
        + result.unplaced_satisfiable_pods
        + result.safety_violations
        == 0;
    if args.kubeconfig.is_none() && clean_run {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("logs kept in {}", dir.display());
    }
    Ok(result)
}
