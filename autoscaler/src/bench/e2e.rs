//! `gpu-autoscaler bench e2e`: the real controller binary against a local fake API server.
//!
//! 1. Starts the `fake-apiserver` binary (built next to this one: `cargo build --release -p
//!    fake-apiserver`) on 127.0.0.1 and fills it with `--nodes` Ready nodes carrying
//!    `--pods-per-node` bound pods each, plus one NodePool.
//! 2. Starts `gpu-autoscaler run --provider fake` against it with the controller's default
//!    timings (loop, disruption and garbage-collection intervals are not overridden).
//!
//! Then one of two cases:
//!
//! - The burst (default): once the controller's first round is done, creates `--burst` pending
//!   one-GPU pods (each marked `PodScheduled=False, reason=Unschedulable`, as kube-scheduler
//!   does) and notes when each was created. A pod's pending-to-launch latency runs from its
//!   creation to the moment the controller logs the fake provider's answer to the launch call
//!   of the NodeClaim that lists the pod (the claim its `TriggeredScaleUp` event names); the
//!   fake answers at once, so that is the time of the call. p50 and p99 are reported with the
//!   controller's RSS after the burst and its peak RSS (`VmHWM`) over the run.
//! - The backlog (`--backlog N`): creates N such pods before the controller starts, then
//!   reports the time from starting the controller (and from its caches' sync) to its first
//!   launch call, and its peak RSS at that moment.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nodepools::NodePool;
use serde::Serialize;
use serde_json::json;

use autoscaler::controller::{Error, Result};

/// Options of `bench e2e`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct E2eArgs {
    /// Existing nodes.
    #[arg(long, default_value_t = 100)]
    pub(crate) nodes: usize,
    /// Bound pods per existing node.
    #[arg(long, default_value_t = 30)]
    pub(crate) pods_per_node: usize,
    /// Pending one-GPU pods in the burst.
    #[arg(long, default_value_t = 200)]
    pub(crate) burst: usize,
    /// Run the backlog case instead: this many pending one-GPU pods exist before the
    /// controller starts; report the time to its first launch call and its peak RSS.
    #[arg(long)]
    pub(crate) backlog: Option<usize>,
    /// Also write the result as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// The fake-apiserver binary (default: next to this executable).
    #[arg(long)]
    pub(crate) fake_apiserver: Option<PathBuf>,
    /// Concurrent requests while filling the server.
    #[arg(long, default_value_t = 32)]
    pub(crate) concurrency: usize,
}

/// The result.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct E2eResult {
    /// Existing nodes.
    pub(crate) nodes: usize,
    /// Pods cached (existing plus burst or backlog).
    pub(crate) pods: usize,
    /// Burst: median time from a pod's creation to the launch call of the claim that lists
    /// it, seconds.
    pub(crate) pending_to_launch_p50_s: Option<f64>,
    /// Burst: the 99th percentile of the same, seconds.
    pub(crate) pending_to_launch_p99_s: Option<f64>,
    /// Backlog: pending pods when the controller started.
    pub(crate) backlog_pods: Option<usize>,
    /// Backlog: seconds from starting the controller to its first launch call.
    pub(crate) first_launch_s: Option<f64>,
    /// Backlog: seconds from the controller's caches' sync to its first launch call.
    pub(crate) first_launch_after_sync_s: Option<f64>,
    /// Controller resident memory at the end (after the burst; at the first launch of the
    /// backlog), MiB.
    pub(crate) controller_rss_mib: f64,
    /// The controller's peak resident memory (`VmHWM`) until then, MiB.
    pub(crate) controller_peak_rss_mib: f64,
}

pub(super) struct Killed(pub(super) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a benchmark until it ends or SIGINT/SIGTERM arrives; on a signal the benchmark's future
/// is dropped, and with it the guards that kill the fake API server and controllers it started.
pub(super) async fn until_signal<T>(
    bench: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::select! {
        r = bench => r,
        _ = autoscaler::controller::run::shutdown_signal() => Err(cfg(
            "interrupted: the benchmark stopped the processes it had started",
        )),
    }
}

/// The fake-apiserver binary: `given`, or the one next to this executable.
///
/// # Errors
/// When it does not exist, saying how to build it.
pub(super) fn fake_apiserver_bin(given: Option<&PathBuf>) -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| cfg(e.to_string()))?;
    let bin = given
        .cloned()
        .unwrap_or_else(|| exe.with_file_name("fake-apiserver"));
    if !bin.exists() {
        return Err(cfg(format!(
            "{} not found: build it with `cargo build --release -p fake-apiserver` (or pass --fake-apiserver)",
            bin.display()
        )));
    }
    Ok(bin)
}

/// Spawns the fake API server `cmd` (its stdout piped) and waits for the URL it prints first.
///
/// # Errors
/// When it cannot be started or says nothing.
pub(super) fn spawn_fake_apiserver(mut cmd: Command) -> Result<(Killed, String)> {
    let mut child = Killed(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| cfg(format!("starting the fake API server: {e}")))?,
    );
    let mut url = String::new();
    BufReader::new(child.0.stdout.take().expect("piped"))
        .read_line(&mut url)
        .map_err(|e| cfg(e.to_string()))?;
    Ok((child, url.trim().to_string()))
}

pub(super) fn cfg(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

pub(super) fn kerr(what: &str) -> impl FnOnce(kube::Error) -> Error + '_ {
    move |e| Error::kube(what, e)
}

fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

/// A memory line of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`) in MiB; 0 when unreadable.
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Controller rounds completed so far, from its `/metrics` (0 when it cannot be read). A
/// short blocking exchange on the loopback.
fn rounds_done(addr: &str) -> u64 {
    use std::io::{Read, Write};
    let Ok(mut conn) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut body = String::new();
    if conn.write_all(request.as_bytes()).is_err() || conn.read_to_string(&mut body).is_err() {
        return 0;
    }
    body.lines()
        .find(|l| l.starts_with("gpu_autoscaler_loop_duration_seconds_count{name=\"round\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse::<f64>().ok())
        .map_or(0, |n| n as u64)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs the benchmark (blocking).
///
/// # Errors
/// When the fake server or the controller cannot be started, or an API call fails.
pub(crate) fn run(args: E2eArgs) -> Result<E2eResult> {
    if cfg!(debug_assertions) {
        eprintln!("warning: this is a debug build; timings are not representative (use --release)");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cfg(format!("starting the async runtime: {e}")))?;
    let result = rt.block_on(until_signal(bench(&args)))?;
    let text = serde_json::to_string_pretty(&result).expect("serializable");
    println!("{text}");
    if let Some(path) = &args.json {
        std::fs::write(path, &text).map_err(|e| cfg(format!("writing {}: {e}", path.display())))?;
    }
    Ok(result)
}

async fn bench(args: &E2eArgs) -> Result<E2eResult> {
    let exe = std::env::current_exe().map_err(|e| cfg(e.to_string()))?;
    let server_bin = fake_apiserver_bin(args.fake_apiserver.as_ref())?;
    let dir = std::env::temp_dir().join(format!("gpu-autoscaler-bench-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| cfg(e.to_string()))?;
    let crds = dir.join("crds.yaml");
    std::fs::write(
        &crds,
        nodepools::crds::to_yaml().map_err(|e| cfg(e.to_string()))?,
    )
    .map_err(|e| cfg(e.to_string()))?;
    let kubeconfig = dir.join("kubeconfig");
    let pending_pods = args.backlog.unwrap_or(args.burst);
    let total_pods = args.nodes * args.pods_per_node + pending_pods;
    let mut cmd = Command::new(&server_bin);
    cmd.args(["--port", "0", "--history"])
        .arg((total_pods * 4 + 100_000).to_string())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--crd")
        .arg(&crds);
    let (server, url) = spawn_fake_apiserver(cmd)?;
    eprintln!("fake API server at {url}");
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).map_err(|e| cfg(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| cfg(e.to_string()))?;
    let client = kube::Client::try_from(config).map_err(|e| cfg(e.to_string()))?;

    // Fill the cluster.
    let started = Instant::now();
    let pools: Api<NodePool> = Api::all(client.clone());
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {"template": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
        ]}}
    }))
    .expect("literal");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .map_err(kerr("creating the NodePool"))?;
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(0..args.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let name = format!("bench-node-{i:05}");
                let n: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {
                        "kubernetes.io/hostname": name,
                        "node.kubernetes.io/instance-type": "m5.2xlarge",
                        "topology.kubernetes.io/zone": "us-east-1a"}},
                    "spec": {"providerID": format!("existing://{name}")}
                }))
                .expect("literal");
                nodes.create(&PostParams::default(), &n).await?;
                let status = json!({"status": {
                    "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                    "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]}});
                nodes
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await?;
                Ok::<(), kube::Error>(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<()>>()
        .await
        .map_err(kerr("creating nodes"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    stream::iter(0..args.nodes * args.pods_per_node)
        .map(|i| {
            let pods = pods.clone();
            let node = format!("bench-node-{:05}", i / args.pods_per_node.max(1));
            async move {
                let p: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("existing-{i:07}"), "labels": {"app": "existing"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                            "uid": "00000000-0000-0000-0000-00000000000e", "controller": true}]},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "app",
                        "resources": {"requests": {"cpu": "200m", "memory": "512Mi"}}}]}
                }))
                .expect("literal");
                pods.create(&PostParams::default(), &p).await.map(|_| ())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<()>>()
        .await
        .map_err(kerr("creating pods"))?;
    eprintln!(
        "filled {} nodes and {} pods in {:.1}s",
        args.nodes,
        args.nodes * args.pods_per_node,
        started.elapsed().as_secs_f64()
    );

    if let Some(n) = args.backlog {
        let t = Instant::now();
        create_pending(&pods, "backlog", n, args.concurrency).await?;
        eprintln!(
            "created {n} pending pods in {:.1}s",
            t.elapsed().as_secs_f64()
        );
    }

    // The controller, with its default timings.
    let log = dir.join("controller.log");
    let log_file = std::fs::File::create(&log).map_err(|e| cfg(e.to_string()))?;
    let spawned_at = jiff::Timestamp::now();
    let controller = Killed(
        Command::new(&exe)
            .args([
                "run",
                "--provider=fake",
                "--leader-elect=false",
                "--metrics-addr=127.0.0.1:0",
                "--log-format=json",
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn,autoscaler=info")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| cfg(format!("starting the controller: {e}")))?,
    );
    let pid = controller.0.id();
    let result = match args.backlog {
        Some(n) => backlog(args, n, &log, pid, spawned_at).await?,
        None => burst(args, &pods, &client, &log, pid).await?,
    };
    drop(controller);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(E2eResult {
        nodes: args.nodes,
        pods: total_pods,
        ..result
    })
}

/// The controller's JSON log lines: timestamp and `fields`.
fn log_lines(log: &std::path::Path) -> Vec<(jiff::Timestamp, serde_json::Value)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut v = serde_json::from_str::<serde_json::Value>(line).ok()?;
            let at = v["timestamp"].as_str()?.parse::<jiff::Timestamp>().ok()?;
            Some((at, v["fields"].take()))
        })
        .collect()
}

/// When the controller logged each claim's launch (the fake provider's answer to the call).
fn launches(lines: &[(jiff::Timestamp, serde_json::Value)]) -> HashMap<String, jiff::Timestamp> {
    lines
        .iter()
        .filter(|(_, f)| f["message"] == "launched")
        .filter_map(|(at, f)| Some((f["claim"].as_str()?.to_string(), *at)))
        .collect()
}

/// Creates `n` pending one-GPU pods `<prefix>-<i>`, each marked Unschedulable as
/// kube-scheduler does; returns when each was created (just before its create call).
async fn create_pending(
    pods: &Api<Pod>,
    prefix: &str,
    n: usize,
    concurrency: usize,
) -> Result<HashMap<String, jiff::Timestamp>> {
    let created: Vec<(String, jiff::Timestamp)> = stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let name = format!("{prefix}-{i:06}");
                let p: Pod = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"app": prefix}},
                    "spec": {"containers": [{"name": "cuda", "image": "cuda",
                        "resources": {"requests": {"cpu": "1", "memory": "4Gi"},
                                      "limits": {"nvidia.com/gpu": "1"}}}]}
                }))
                .expect("literal");
                let at = jiff::Timestamp::now();
                pods.create(&PostParams::default(), &p).await?;
                let now = jiff::Timestamp::now();
                pods.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"phase": "Pending", "conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/N nodes are available", "lastTransitionTime": now.to_string()}]}})),
                )
                .await?;
                Ok::<_, kube::Error>((name, at))
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await
        .map_err(kerr("creating pending pods"))?;
    Ok(created.into_iter().collect())
}

/// Waits for the controller's log to contain `needle`; errors after `deadline`.
async fn wait_for_log(log: &std::path::Path, needle: &str, deadline: Instant) -> Result<()> {
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(needle)
    {
        if Instant::now() > deadline {
            return Err(cfg(format!(
                "the controller never logged {needle:?}; see {}",
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The backlog case: time from the controller's start to its first launch call.
async fn backlog(
    args: &E2eArgs,
    n: usize,
    log: &std::path::Path,
    pid: u32,
    spawned_at: jiff::Timestamp,
) -> Result<E2eResult> {
    let deadline = Instant::now() + Duration::from_secs(600);
    wait_for_log(log, "\"launched\"", deadline).await?;
    let rss = rss_mib(pid);
    let peak_rss = status_mib(pid, "VmHWM:");
    let lines = log_lines(log);
    let synced = lines
        .iter()
        .find(|(_, f)| f["message"] == "caches synced")
        .map(|(at, _)| *at);
    let first = launches(&lines).into_values().min();
    let Some(first) = first else {
        return Err(cfg(format!("no launch in {}", log.display())));
    };
    // Where the time to the first launch went: each message the controller logged before it,
    // at its first occurrence.
    let mut seen = std::collections::HashSet::new();
    for (at, f) in lines.iter().filter(|(at, _)| *at <= first) {
        let message = f["message"].as_str().unwrap_or_default();
        if f["message"] == "planned" || seen.insert(message) {
            let d = at.duration_since(spawned_at).as_secs_f64();
            eprintln!("controller at {d:6.2}s: {f}");
        }
    }
    let secs = |a: jiff::Timestamp, b: jiff::Timestamp| b.duration_since(a).as_secs_f64();
    Ok(E2eResult {
        nodes: args.nodes,
        pods: args.nodes * args.pods_per_node + n,
        pending_to_launch_p50_s: None,
        pending_to_launch_p99_s: None,
        backlog_pods: Some(n),
        first_launch_s: Some(secs(spawned_at, first)),
        first_launch_after_sync_s: synced.map(|s| secs(s, first)),
        controller_rss_mib: rss,
        controller_peak_rss_mib: peak_rss,
    })
}

/// The burst case: pending-to-launch latencies of a burst arriving at a running controller.
async fn burst(
    args: &E2eArgs,
    pods: &Api<Pod>,
    client: &kube::Client,
    log: &std::path::Path,
    pid: u32,
) -> Result<E2eResult> {
    let sync_deadline = Instant::now() + Duration::from_secs(300);
    wait_for_log(log, "caches synced", sync_deadline).await?;
    eprintln!("controller synced; RSS {:.1} MiB", rss_mib(pid));
    // The first round also plans disruption over the whole cluster; a burst arriving during
    // it would be measured waiting for it.
    let first_round = Instant::now();
    let metrics = log_lines(log)
        .into_iter()
        .find_map(|(_, f)| f["metrics"].as_str().map(str::to_string));
    match metrics {
        Some(addr) => {
            while rounds_done(&addr) == 0 && Instant::now() < sync_deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            eprintln!(
                "first round done {:.2}s after the sync",
                first_round.elapsed().as_secs_f64()
            );
        }
        None => eprintln!("the controller's metrics address is not in its log; not waiting"),
    }

    let burst_started = jiff::Timestamp::now();
    let created = create_pending(pods, "burst", args.burst, args.concurrency).await?;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(120);
    // Per pod, the claims its TriggeredScaleUp events name.
    let mut claims_of: HashMap<String, Vec<String>> = HashMap::new();
    let mut launched: HashMap<String, jiff::Timestamp>;
    loop {
        launched = launches(&log_lines(log));
        claims_of.clear();
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing events"))?;
        for e in list.items {
            if e.reason.as_deref() != Some("TriggeredScaleUp") {
                continue;
            }
            let (Some(pod), Some(note)) = (e.regarding.and_then(|r| r.name), e.note) else {
                continue;
            };
            if let Some(claim) = note
                .split_once("NodeClaim ")
                .and_then(|(_, rest)| rest.split_whitespace().next())
            {
                claims_of.entry(pod).or_default().push(claim.to_string());
            }
        }
        let done = created.keys().all(|p| {
            claims_of
                .get(p)
                .is_some_and(|cs| cs.iter().any(|c| launched.contains_key(c)))
        });
        if done {
            break;
        }
        if Instant::now() > deadline {
            let n = created
                .keys()
                .filter(|p| {
                    claims_of
                        .get(*p)
                        .is_some_and(|cs| cs.iter().any(|c| launched.contains_key(c)))
                })
                .count();
            return Err(cfg(format!(
                "only {n} of {} pods had their claim launched within 120 s; see {}",
                args.burst,
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let rss = rss_mib(pid);
    let peak_rss = status_mib(pid, "VmHWM:");
    // Where the time goes: the controller's planning rounds, relative to the burst's start.
    for (at, f) in log_lines(log) {
        if f["message"] == "planned" && at >= burst_started {
            let d = at.duration_since(burst_started).as_secs_f64();
            eprintln!("controller planned at {d:+.2}s: {f}");
        }
    }
    let mut lat: Vec<f64> = created
        .iter()
        .filter_map(|(pod, at)| {
            claims_of
                .get(pod)?
                .iter()
                .filter_map(|c| launched.get(c))
                .min()
                .map(|l| l.duration_since(*at).as_secs_f64())
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    let per_claim: BTreeMap<usize, usize> = {
        let mut pods_per: HashMap<&str, usize> = HashMap::new();
        for cs in claims_of.values() {
            if let Some(c) = cs.iter().find(|c| launched.contains_key(*c)) {
                *pods_per.entry(c.as_str()).or_default() += 1;
            }
        }
        pods_per.values().fold(BTreeMap::new(), |mut m, n| {
            *m.entry(*n).or_default() += 1;
            m
        })
    };
    eprintln!("claims launched for the burst (pods per claim: claims) {per_claim:?}");
    Ok(E2eResult {
        nodes: args.nodes,
        pods: 0,
        pending_to_launch_p50_s: Some(percentile(&lat, 0.5)),
        pending_to_launch_p99_s: Some(percentile(&lat, 0.99)),
        backlog_pods: None,
        first_launch_s: None,
        first_launch_after_sync_s: None,
        controller_rss_mib: rss,
        controller_peak_rss_mib: peak_rss,
    })
}
