//! `gpu-autoscaler bench e2e`: the real controller binary against a local fake API server.
//!
//! 1. Starts the `fake-apiserver` binary (built next to this one: `cargo build --release -p
//!    fake-apiserver`) on 127.0.0.1 and fills it with `--nodes` Ready nodes carrying
//!    `--pods-per-node` bound pods each, plus one NodePool.
//! 2. Starts `gpu-autoscaler run --provider fake` against it and waits for its caches.
//! 3. Creates a burst of `--burst` pending one-GPU pods, marks each `PodScheduled=False,
//!    reason=Unschedulable` (what kube-scheduler does) and notes when.
//! 4. Watches NodeClaims; each claim covers `spec.resources.requests.pods` pods. Pods are
//!    matched to claims first come, first served (the pods are identical), giving each pod a
//!    pending-to-create latency; p50 and p99 are reported with the controller's RSS after the
//!    burst and its peak RSS over the run (which includes a disruption pass over the cluster).
//!
//! Disruption is planned every hour only, so that the numbers measure provisioning alone.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use nodepools::{NodeClaim, NodePool};
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
    /// Pods cached (existing plus burst).
    pub(crate) pods: usize,
    /// Median pending-to-NodeClaim latency, seconds.
    pub pending_to_create_p50_s: f64,
    /// 99th percentile, seconds.
    pub pending_to_create_p99_s: f64,
    /// Controller resident memory after the burst, MiB.
    pub(crate) controller_rss_mib: f64,
    /// The controller's peak resident memory over the whole run (sync, the first round's
    /// disruption pass over the whole cluster, the burst), MiB.
    pub(crate) controller_peak_rss_mib: f64,
}

pub(super) struct Killed(pub(super) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
    let result = rt.block_on(bench(&args))?;
    let text = serde_json::to_string_pretty(&result).expect("serializable");
    println!("{text}");
    if let Some(path) = &args.json {
        std::fs::write(path, &text).map_err(|e| cfg(format!("writing {}: {e}", path.display())))?;
    }
    Ok(result)
}

async fn bench(args: &E2eArgs) -> Result<E2eResult> {
    let exe = std::env::current_exe().map_err(|e| cfg(e.to_string()))?;
    let server_bin = args
        .fake_apiserver
        .clone()
        .unwrap_or_else(|| exe.with_file_name("fake-apiserver"));
    if !server_bin.exists() {
        return Err(cfg(format!(
            "{} not found: build it with `cargo build --release -p fake-apiserver` (or pass --fake-apiserver)",
            server_bin.display()
        )));
    }
    let dir = std::env::temp_dir().join(format!("gpu-autoscaler-bench-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| cfg(e.to_string()))?;
    let crds = dir.join("crds.yaml");
    std::fs::write(
        &crds,
        nodepools::crds::to_yaml().map_err(|e| cfg(e.to_string()))?,
    )
    .map_err(|e| cfg(e.to_string()))?;
    let kubeconfig = dir.join("kubeconfig");
    let total_pods = args.nodes * args.pods_per_node + args.burst;
    let mut server = Killed(
        Command::new(&server_bin)
            .args(["--port", "0", "--history"])
            .arg((total_pods * 4 + 100_000).to_string())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--crd")
            .arg(&crds)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| cfg(format!("starting {}: {e}", server_bin.display())))?,
    );
    let mut url = String::new();
    BufReader::new(server.0.stdout.take().expect("piped"))
        .read_line(&mut url)
        .map_err(|e| cfg(e.to_string()))?;
    eprintln!("fake API server at {}", url.trim());
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

    // The controller.
    let log = dir.join("controller.log");
    let log_file = std::fs::File::create(&log).map_err(|e| cfg(e.to_string()))?;
    let controller = Killed(
        Command::new(&exe)
            .args([
                "run",
                "--provider=fake",
                "--leader-elect=false",
                "--metrics-addr=127.0.0.1:0",
                "--loop-interval=100ms",
                "--disruption-interval=1h",
                "--gc-interval=1h",
                "--log-format=json",
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn,autoscaler=info")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| cfg(format!("starting the controller: {e}")))?,
    );
    let sync_deadline = Instant::now() + Duration::from_secs(300);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("caches synced")
    {
        if Instant::now() > sync_deadline {
            return Err(cfg(format!(
                "the controller did not sync; see {}",
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "controller synced; RSS {:.1} MiB",
        rss_mib(controller.0.id())
    );
    // The first round also plans disruption (then not again for an hour), over the whole
    // cluster; a burst arriving during it would be measured waiting for it.
    let first_round = Instant::now();
    let metrics = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l).ok()?["fields"]["metrics"]
                .as_str()
                .map(str::to_string)
        });
    match metrics {
        Some(addr) => {
            while rounds_done(&addr) == 0 && Instant::now() < sync_deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            eprintln!(
                "first round (with disruption) done {:.2}s after the sync",
                first_round.elapsed().as_secs_f64()
            );
        }
        None => eprintln!("the controller's metrics address is not in its log; not waiting"),
    }

    // Watch NodeClaims: (seen at, pods covered).
    let seen: Arc<Mutex<Vec<(Instant, usize)>>> = Arc::default();
    let watch_task = {
        let seen = seen.clone();
        let api: Api<NodeClaim> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut known = std::collections::HashSet::new();
            let stream = watcher(api, watcher::Config::default()).applied_objects();
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(c)) = stream.next().await {
                let name = c.metadata.name.clone().unwrap_or_default();
                if known.insert(name) {
                    let n = c
                        .spec
                        .resources
                        .requests
                        .get("pods")
                        .and_then(|q| q.0.parse::<usize>().ok())
                        .unwrap_or(1);
                    seen.lock().expect("lock").push((Instant::now(), n));
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The burst.
    let marked: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let last_mark: Arc<Mutex<jiff::Timestamp>> = Arc::default();
    stream::iter(0..args.burst)
        .map(|i| {
            let pods = pods.clone();
            let marked = marked.clone();
            let last_mark = last_mark.clone();
            async move {
                let name = format!("burst-{i:06}");
                let p: Pod = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"app": "burst"}},
                    "spec": {"containers": [{"name": "cuda", "image": "cuda",
                        "resources": {"requests": {"cpu": "1", "memory": "4Gi"},
                                      "limits": {"nvidia.com/gpu": "1"}}}]}
                }))
                .expect("literal");
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
                marked.lock().expect("lock").push(Instant::now());
                let at = jiff::Timestamp::now();
                let mut last = last_mark.lock().expect("lock");
                *last = (*last).max(at);
                Ok::<(), kube::Error>(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<()>>()
        .await
        .map_err(kerr("creating the burst"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let covered: usize = seen.lock().expect("lock").iter().map(|(_, n)| n).sum();
        if covered >= args.burst {
            break;
        }
        if Instant::now() > deadline {
            return Err(cfg(format!(
                "only {covered} of {} pods got a NodeClaim within 120 s; see {}",
                args.burst,
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rss = rss_mib(controller.0.id());
    let peak_rss = status_mib(controller.0.id(), "VmHWM:");
    watch_task.abort();
    let last_mark_at = *last_mark.lock().expect("lock");
    let mut marks = marked.lock().expect("lock").clone();
    marks.sort();
    let mut claims = seen.lock().expect("lock").clone();
    claims.sort_by_key(|(t, _)| *t);
    if let (Some(first), Some(last), Some(c0), Some(c1)) =
        (marks.first(), marks.last(), claims.first(), claims.last())
    {
        let s = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
        eprintln!(
            "burst marked over {:.2}s; NodeClaims seen {:.2}s to {:.2}s after the last mark",
            s(*first, *last),
            s(*last, c0.0),
            s(*last, c1.0)
        );
    }
    // Where the time goes, from the controller's own log: its planning rounds and the span
    // of its NodeClaim creations, relative to the last pod marked.
    let mut created = Vec::new();
    for line in std::fs::read_to_string(&log).unwrap_or_default().lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(at) = v["timestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        else {
            continue;
        };
        let d = at.duration_since(last_mark_at).as_secs_f64();
        match v["fields"]["message"].as_str() {
            Some("planned") => eprintln!("controller planned at {d:+.2}s: {}", v["fields"]),
            Some("created NodeClaim") => created.push(d),
            _ => {}
        }
    }
    if let (Some(a), Some(b)) = (created.first(), created.last()) {
        eprintln!("controller created NodeClaims from {a:+.2}s to {b:+.2}s");
    }
    let mut slots: Vec<Instant> = Vec::new();
    for (t, n) in &claims {
        slots.extend(std::iter::repeat_n(*t, *n));
    }
    let mut lat: Vec<f64> = marks
        .iter()
        .zip(slots.iter())
        .map(|(m, s)| s.saturating_duration_since(*m).as_secs_f64())
        .collect();
    lat.sort_by(f64::total_cmp);
    let by_count: BTreeMap<usize, usize> = claims.iter().fold(BTreeMap::new(), |mut m, (_, n)| {
        *m.entry(*n).or_default() += 1;
        m
    });
    eprintln!(
        "{} NodeClaims (pods per claim: count) {by_count:?}",
        claims.len()
    );
    drop(controller);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(E2eResult {
        nodes: args.nodes,
        pods: total_pods,
        pending_to_create_p50_s: percentile(&lat, 0.5),
        pending_to_create_p99_s: percentile(&lat, 0.99),
        controller_rss_mib: rss,
        controller_peak_rss_mib: peak_rss,
    })
}
