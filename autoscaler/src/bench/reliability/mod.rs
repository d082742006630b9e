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
//! 3. **Launches and kills.** Deployments swing between none and `--max-replicas` at random,
//!    so pods keep asking for new nodes and empty nodes are consolidated, while the controller
//!    (kwok provider, cloud faults at `--cloud-fault-rate` per cloud call) runs with
//!    `GPU_AUTOSCALER_KILL_AT` naming the next kill point in turn (before/after the NodeClaim
//!    write and the launch, registration, initialization, the disruption taint, the drain, the
//!    Node deletion, before/after the termination; `controller::crashpoint`) at its 1st or 2nd
//!    occurrence; a controller that has not reached it after `--max-lifetime` is SIGKILLed
//!    where it is. Each kill is followed by a restart. Until `--launches` instances were
//!    launched and `--kills` kills done.
//! 4. **Disruption replay.** One controller, no kills: `--disruption-events` events: pod churn
//!    through Deployments (each pod created or removed by a scale change is one event), pods
//!    deleted (their owner recreates them), node failures (the Node deleted), spot
//!    interruptions (the instance and its Node gone), PDBs switched between `maxUnavailable` 1
//!    and a percentage, NodePool budgets changed, protected bare pods created and deleted, and
//!    booked ProvisioningRequests (created, consumed by their pods, withdrawn; `provreqs`).
//! 5. **Settle and count** (see [`ReliabilityResult`]): leaked instances, duplicate nodes and
//!    claims, lost pods, unplaced pods, and safety violations from the server's audit of the
//!    controller's evictions and Node deletions (`GET /debug/audit`) and from the NodePool
//!    budgets and the bookings watched during the run.
//!
//! Every pod fits a NodePool, so every pending pod at the end is a satisfiable pod not placed.

mod accounting;
mod phases;
mod provreqs;
mod server;
mod workload;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use autoscaler::controller::Result;
use serde::Serialize;

use super::e2e::{Killed, cfg};
use super::rng::SplitMix64;
use server::{client_from, start_server};

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
    /// In the kill phase, Deployment swings (none to `--max-replicas`, or back) a second, on
    /// average (at most 10).
    #[arg(long, default_value_t = 0.25)]
    pub(crate) swings_per_second: f64,
    /// In the kill phase, failures a second, on average (at most 10), of Nodes running pods
    /// where there are any: half spot interruptions, half instance failures in any pool (the
    /// instance and its Node gone, its pods pending again).
    #[arg(long, default_value_t = 3.0)]
    pub(crate) failures_per_second: f64,
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
    /// The ProvisioningRequest CRD for the server the benchmark starts (default:
    /// `$GPU_AUTOSCALER_SHARED_DATA/crds/autoscaling.x-k8s.io_provisioningrequests.yaml`, or
    /// `shared/data/crds/...` beside the current directory or an ancestor). Without it the
    /// replay has no ProvisioningRequests, and says so.
    #[arg(long)]
    pub(crate) provisioning_request_crd: Option<PathBuf>,
    /// Give up on settling after this long (the default keeps the whole run within 15
    /// minutes: the kill phase ends by 10 and the replay by 12; settling may wait out the
    /// 3-minute memory of offerings that refused a launch).
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
    /// Of the disruption events, ProvisioningRequests that held capacity (Launching or
    /// Booked) while the replay ran.
    pub(crate) booked_provisioning_requests: usize,
    /// Evictions of protected pods, Nodes deleted under running protected or PDB-covered
    /// pods, budgets exceeded, Nodes of a live booking disrupted.
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
    for (flag, v) in [
        ("--swings-per-second", args.swings_per_second),
        ("--failures-per-second", args.failures_per_second),
    ] {
        if !(0.0..=10.0).contains(&v) {
            return Err(cfg(format!("{flag} {v}: expected 0 to 10")));
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| cfg(format!("starting the async runtime: {e}")))?;
    let result = rt.block_on(super::e2e::until_signal(bench(&args)))?;
    print_table(&result);
    let text = serde_json::to_string_pretty(&result).expect("serializable");
    println!("{text}");
    if let Some(path) = &args.json {
        std::fs::write(path, &text).map_err(|e| cfg(format!("writing {}: {e}", path.display())))?;
    }
    Ok(result)
}

fn print_table(r: &ReliabilityResult) {
    let rows: [(&str, String); 15] = [
        ("launches", r.launches.to_string()),
        ("kill points", r.kill_points.to_string()),
        ("disruption events", r.disruption_events.to_string()),
        (
            "  booked ProvisioningRequests",
            r.booked_provisioning_requests.to_string(),
        ),
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
    /// Nodes the benchmark failed or interrupted (what happens to them and their pods from
    /// then on is not the controller's doing), with the server's resourceVersion when it
    /// first did (the audit's calls on such a Node before that still count) and the uid of
    /// the Node it failed: a Node of the same name registered again is another Node, whose
    /// calls count.
    failed: HashMap<String, (u64, String)>,
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
    /// The server serves ProvisioningRequests.
    provreqs_served: bool,
    /// The benchmark's live ProvisioningRequests, oldest name first.
    requests: BTreeMap<String, provreqs::Request>,
    /// Requests seen holding capacity.
    booked_requests: BTreeSet<String>,
    /// (request, Node) pairs of a live booking seen disrupted.
    booking_violations: BTreeSet<(String, String)>,
    /// Wall time per part of the run (where the time went).
    spent: BTreeMap<&'static str, Duration>,
}

const GPU_POOL: &str = "gpu";
const SPOT_POOL: &str = "spot";
const CPU_POOL: &str = "cpu";
const NS: &str = "default";

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
        failed: HashMap::new(),
        bare: BTreeMap::new(),
        bare_lost_with_node: 0,
        budgets: BTreeMap::new(),
        budget_violations: 0,
        over_budget: BTreeSet::new(),
        launched: HashSet::new(),
        replicas: BTreeMap::new(),
        provreqs_served: false,
        requests: BTreeMap::new(),
        booked_requests: BTreeSet::new(),
        booking_violations: BTreeSet::new(),
        spent: BTreeMap::new(),
    };
    let t = Instant::now();
    b.setup().await?;
    b.spend("setup", t);
    b.provreqs_served = b.provreqs_served().await;
    if !b.provreqs_served {
        eprintln!(
            "the server does not serve ProvisioningRequests (no CRD, see \
             --provisioning-request-crd): the replay has none"
        );
    }
    // The phases share 12 minutes (the replay's 10,000 events take under 2 on a release
    // build); settling has its own timeout.
    let kill_deadline = started + Duration::from_secs(600);
    let kills = b.kill_phase(kill_deadline).await?;
    let launches = b.launched.len();
    // The restart after the last kill, then the replay with that one controller.
    let mut last = b.controller(None)?;
    let replay_deadline = started + Duration::from_secs(720);
    let events = b.replay(replay_deadline).await?;
    b.delete_requests().await;
    let t = Instant::now();
    b.settle().await?;
    b.spend("settling", t);
    // Nothing kills the replay's controller: one that is gone died (its last words are at the
    // end of the log), and the counts below are of a cluster nobody looked after.
    if let Ok(Some(status)) = last.process.0.try_wait() {
        eprintln!(
            "the replay's controller exited during the run ({status}); its log: {}",
            b.log.display()
        );
    }
    let mut result = ReliabilityResult {
        launches,
        kill_points: kills,
        disruption_events: events,
        booked_provisioning_requests: b.booked_requests.len(),
        cloud_fault_rate: args.cloud_fault_rate,
        api_fault_rate: args.api_fault_rate,
        ..ReliabilityResult::default()
    };
    let t = Instant::now();
    b.count(&mut result, &server.url).await?;
    b.spend("counting", t);
    let spent: Vec<String> = b
        .spent
        .iter()
        .map(|(k, v)| format!("{k} {:.1}s", v.as_secs_f64()))
        .collect();
    eprintln!("where the time went: {}", spent.join(", "));
    drop(last);
    // The replay's controller called the server until it was stopped just now, after the
    // audit above: its faults are read again, with no client left to draw another.
    result.api_faults_injected = server::audit(&server.url)?["faultsInjected"]
        .as_u64()
        .unwrap_or(0);
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
