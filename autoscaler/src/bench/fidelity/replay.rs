//! The controller side of `bench fidelity`: the fake API server with its harness scheduler,
//! `gpu-autoscaler run --provider kwok` with the simulator's cadence divided by the
//! compression, and the workload replayed on the real clock while NodeClaims and binds are
//! observed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use autoscaler::controller::Result;
use autoscaler::controller::provreq::{BEST_EFFORT_ATOMIC, CHECK_CAPACITY, CONSUME_ANNOTATION};
use autoscaler_sim::Scenario;
use autoscaler_sim::scenario::ProvReqClass;
use autoscaler_sim::workload::Workload;
use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use nodepools::{NodeClaim, NodePool};
use serde_json::{Value, json};

use super::objects;
use super::{FidelityArgs, NodeSpan, Timeline};
use crate::bench::e2e::{Killed, cfg, fake_apiserver_bin, kerr, spawn_fake_apiserver};

/// How often the replay reads pods, NodeClaims and ProvisioningRequests (real time): every
/// half virtual second, within 20-100 ms. A bind is timed, a runtime started and a finished
/// pod deleted when the replay looks, so each lags the simulator's instant by up to this
/// much: at 15x, 100 ms would be a virtual second and a half.
fn observe_every(compression: f64) -> Duration {
    Duration::from_secs_f64((0.5 / compression).clamp(0.02, 0.1))
}

/// What the controller did.
pub(super) struct Run {
    /// Its nodes and binds, in virtual seconds.
    pub(super) timeline: Timeline,
    /// Wall seconds of the replay.
    pub(super) wall_seconds: f64,
}

fn provreq_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource {
            group: "autoscaling.x-k8s.io".into(),
            version: "v1".into(),
            api_version: "autoscaling.x-k8s.io/v1".into(),
            kind: "ProvisioningRequest".into(),
            plural: "provisioningrequests".into(),
        },
    )
}

/// Starts the fake API server (or uses the one of `--kubeconfig`); returns it and the kubeconfig.
fn start_server(args: &FidelityArgs, dir: &Path) -> Result<(Option<Killed>, PathBuf)> {
    if let Some(k) = &args.kubeconfig {
        return Ok((None, k.clone()));
    }
    let bin = fake_apiserver_bin(args.fake_apiserver.as_ref())?;
    // The harness scheduler's pass every virtual second (it also runs on every write).
    let binder_ms = ((1000.0 / args.compression).round() as u64).max(1);
    let mut text = nodepools::crds::to_yaml().map_err(|e| cfg(e.to_string()))?;
    text.push_str("\n---\n");
    text.push_str(providers::kwok::CRD_YAML);
    let provreq_crd =
        super::shared_data().join("crds/autoscaling.x-k8s.io_provisioningrequests.yaml");
    match std::fs::read_to_string(&provreq_crd) {
        Ok(t) => {
            text.push_str("\n---\n");
            text.push_str(&t);
        }
        Err(_) => eprintln!(
            "{} is absent: ProvisioningRequests are not served on the controller side",
            provreq_crd.display()
        ),
    }
    let crds = dir.join("crds.yaml");
    std::fs::write(&crds, text).map_err(|e| cfg(e.to_string()))?;
    let kubeconfig = dir.join("kubeconfig");
    let mut cmd = Command::new(&bin);
    cmd.args([
        "--port",
        "0",
        "--history",
        "200000",
        "--binder",
        "--no-workloads",
    ])
    .args(["--binder-interval-ms", &binder_ms.to_string()])
    // As kube-scheduler (and the simulator's scheduler) score nodes, not the first by name.
    .args(["--binder-score", "least-allocated"])
    .arg("--kubeconfig")
    .arg(&kubeconfig)
    .arg("--crd")
    .arg(&crds);
    let (child, _url) = spawn_fake_apiserver(cmd)?;
    Ok((Some(child), kubeconfig))
}

/// `secs` virtual seconds on the real clock, as a duration flag (milliseconds, at least 1).
fn flag(secs: i64, compression: f64) -> String {
    format!(
        "{}ms",
        ((secs as f64 * 1000.0 / compression).round() as i64).max(1)
    )
}

/// The controller's flags: every interval the simulator models, divided by the compression.
fn controller_args(s: &Scenario, c: f64) -> Vec<String> {
    let k = &s.cluster;
    let (cadence, d) = (&k.cadence, &k.disruption);
    let booking = s
        .workloads
        .iter()
        .find_map(|w| match &w.generator {
            autoscaler_sim::scenario::Generator::Groups {
                provisioning_request: Some(r),
                ..
            } => Some(r.booking_s),
            _ => None,
        })
        .unwrap_or(600);
    let mut a: Vec<String> = [
        "run",
        "--provider=kwok",
        "--leader-elect=false",
        "--metrics-addr=127.0.0.1:0",
        "--log-format=json",
        "--namespace=kube-system",
        "--identity=fidelity",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Every case sells the embedded AWS catalog (`catalog: aws`, checked when it loads).
    a.push("--catalog=aws".into());
    // A round every virtual second: the simulator acts at the very second a batch closes.
    a.push(format!("--loop-interval={}", flag(1, c)));
    for (name, secs) in [
        ("batch-idle", cadence.batch_idle_s),
        ("batch-max", cadence.batch_max_s),
        ("replan-interval", cadence.replan_s),
        ("disruption-interval", cadence.disruption_interval_s),
        ("validation-delay", d.validation_delay_s),
        ("scale-down-delay-after-add", d.delay_after_scale_up_s),
        ("scale-down-delay-after-delete", d.delay_after_delete_s),
        ("scale-down-delay-after-failure", d.delay_after_failure_s),
        ("replacement-timeout", k.disruption_timeouts.replacement_s),
        ("provreq-retry", cadence.provreq_retry_s),
        ("provreq-retry-max", cadence.provreq_retry_max_s),
        ("provreq-booking", booking),
        ("kwok-register-delay", k.launch_cpu_s),
        ("kwok-ready-delay", k.registration_s),
        ("kwok-gpu-delay", k.device_plugin_s),
        ("registration-timeout", 900),
        ("initialization-timeout", 900),
        ("drain-timeout", k.disruption_timeouts.drain_s),
    ] {
        a.push(format!("--{name}={}", flag(secs, c)));
    }
    a.push(format!(
        "--ignore-daemonsets-utilization={}",
        d.ignore_daemonset_utilization
    ));
    a
}

/// One workload pod on the controller side.
#[derive(Default)]
struct PodRun {
    /// Created and not deleted by us.
    live: bool,
    /// Deleted for good (completed or scheduled deletion).
    done: bool,
    /// When the current incarnation's runtime is up (virtual seconds).
    ends: Option<i64>,
    /// The node it is bound to.
    bound: bool,
}

/// Replays `w` against the controller for the scenario's duration.
pub(super) async fn run(
    args: &FidelityArgs,
    s: &Scenario,
    w: &Workload,
    pools: &[NodePool],
) -> Result<Run> {
    let c = args.compression;
    let horizon = s.duration_s;
    let dir = std::env::temp_dir().join(format!(
        "gpu-autoscaler-bench-fidelity-{}-{}",
        std::process::id(),
        s.name
    ));
    std::fs::create_dir_all(&dir).map_err(|e| cfg(e.to_string()))?;
    let (server, kubeconfig) = start_server(args, &dir)?;
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).map_err(|e| cfg(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| cfg(e.to_string()))?;
    let client = kube::Client::try_from(config).map_err(|e| cfg(e.to_string()))?;

    let np_api: Api<NodePool> = Api::all(client.clone());
    for np in pools {
        np_api
            .create(&PostParams::default(), &objects::compressed_pool(np, c))
            .await
            .map_err(kerr("creating a NodePool"))?;
    }
    for b in &w.pdbs {
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": b.name, "namespace": b.namespace},
            "spec": {"maxUnavailable": b.max_unavailable,
                     "selector": {"matchExpressions": objects::expressions(&b.selector)}}
        }))
        .map_err(|e| cfg(e.to_string()))?;
        Api::<PodDisruptionBudget>::namespaced(client.clone(), &b.namespace)
            .create(&PostParams::default(), &pdb)
            .await
            .map_err(kerr("creating a PodDisruptionBudget"))?;
    }

    let log = dir.join("controller.log");
    let log_file = std::fs::File::create(&log).map_err(|e| cfg(e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| cfg(e.to_string()))?;
    let controller = Killed(
        Command::new(&exe)
            .args(controller_args(s, c))
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn,autoscaler=info")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| cfg(format!("starting the controller: {e}")))?,
    );
    let synced = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("caches synced")
    {
        if Instant::now() > synced {
            return Err(cfg(format!(
                "the controller did not sync within 120 s; see {}",
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut replay = Replay {
        client: client.clone(),
        w,
        c,
        start: Instant::now(),
        pods: (0..w.pods.len()).map(|_| PodRun::default()).collect(),
        by_name: w
            .pods
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .collect(),
        claims: BTreeMap::new(),
        first_bound: BTreeMap::new(),
        first_node: BTreeMap::new(),
        requests: BTreeMap::new(),
    };
    let in_request: BTreeSet<usize> = w
        .groups
        .iter()
        .filter(|g| g.provisioning_request.is_some())
        .flat_map(|g| g.members.iter().map(|m| *m as usize))
        .collect();
    let mut order: Vec<usize> = (0..w.pods.len())
        .filter(|i| w.pods[*i].arrival < horizon && !in_request.contains(i))
        .collect();
    order.sort_by_key(|i| (w.pods[*i].arrival, *i));
    let mut next = 0;
    let mut next_request = 0;
    let requests: Vec<usize> = (0..w.groups.len())
        .filter(|g| w.groups[*g].provisioning_request.is_some())
        .filter(|g| {
            w.groups[*g]
                .members
                .first()
                .is_some_and(|m| w.pods[*m as usize].arrival < horizon)
        })
        .collect();
    // Pods are created at their arrival to within a few milliseconds (the loop sleeps until
    // the next arrival); the cluster is read every `observe_every` at most.
    let mut observed = Instant::now();
    let observe = observe_every(c);
    loop {
        let now = replay.now();
        if now >= horizon {
            break;
        }
        let mut due = Vec::new();
        while next < order.len() && w.pods[order[next]].arrival <= now {
            due.push(order[next]);
            next += 1;
        }
        replay.create(&due, None).await?;
        while next_request < requests.len()
            && w.pods[w.groups[requests[next_request]].members[0] as usize].arrival <= now
        {
            replay.request(requests[next_request]).await?;
            next_request += 1;
        }
        if observed.elapsed() >= observe {
            observed = Instant::now();
            replay.admit(now).await?;
            replay.observe(now).await?;
            replay.finish_due(now).await?;
        }
        let next_arrival = order
            .get(next)
            .map(|i| w.pods[*i].arrival)
            .into_iter()
            .chain(
                requests
                    .get(next_request)
                    .map(|g| w.pods[w.groups[*g].members[0] as usize].arrival),
            )
            .min();
        let until_arrival = next_arrival.map_or(observe, |t| {
            let at = Duration::from_secs_f64(t as f64 / c);
            at.saturating_sub(replay.start.elapsed())
        });
        let until_observe = observe.saturating_sub(observed.elapsed());
        tokio::time::sleep(until_arrival.min(until_observe)).await;
    }
    let wall = replay.start.elapsed().as_secs_f64();
    drop(controller);
    drop(server);
    let mut first_on: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
    for (pod, node) in &replay.first_node {
        let at = replay.first_bound.get(pod).copied().unwrap_or(0);
        first_on.entry(node).or_default().push((at, pod));
    }
    let timeline = Timeline {
        nodes: replay
            .claims
            .iter()
            .filter_map(|(name, (key, launched, gone))| {
                let mut on = first_on.remove(name.as_str()).unwrap_or_default();
                on.sort();
                Some(NodeSpan {
                    key: key.clone()?,
                    launched: *launched,
                    gone: *gone,
                    pods: on.into_iter().map(|(_, p)| p.to_string()).collect(),
                })
            })
            .collect(),
        bound: replay.first_bound.into_iter().collect(),
    };
    if args.keep {
        eprintln!("case {}: the controller's log is {}", s.name, log.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(Run {
        timeline,
        wall_seconds: wall,
    })
}

/// A ProvisioningRequest on the controller side: created (virtual second), when its pods
/// are to be created once Provisioned.
struct RequestRun {
    namespace: String,
    admit_at: Option<i64>,
    admitted: bool,
}

struct Replay<'a> {
    client: kube::Client,
    w: &'a Workload,
    c: f64,
    start: Instant,
    pods: Vec<PodRun>,
    by_name: HashMap<String, usize>,
    /// Per NodeClaim: `pool/type` once launched, first seen, gone.
    claims: BTreeMap<String, (Option<String>, i64, Option<i64>)>,
    first_bound: BTreeMap<String, i64>,
    /// The node each pod was first bound to (a kwok Node is named as its NodeClaim).
    first_node: BTreeMap<String, String>,
    requests: BTreeMap<usize, RequestRun>,
}

impl Replay<'_> {
    /// Virtual seconds since the replay started.
    fn now(&self) -> i64 {
        (self.start.elapsed().as_secs_f64() * self.c) as i64
    }

    /// Creates the pods `idx` (of ProvisioningRequest `request`, with its consume annotation).
    async fn create(&mut self, idx: &[usize], request: Option<&str>) -> Result<()> {
        let w = self.w;
        let objs: Vec<(String, Value)> = idx
            .iter()
            .map(|i| {
                let spec = &w.pods[*i];
                let t = &w.templates[spec.template as usize];
                let gang = spec
                    .group
                    .map(|g| &w.groups[g as usize])
                    .filter(|g| g.coscheduled())
                    .map(|g| (g.name.as_str(), g.members.len()));
                let mut v = objects::pod(t, &spec.name, gang);
                if let Some(r) = request {
                    v["metadata"]["annotations"][CONSUME_ANNOTATION] = json!(r);
                }
                (t.key.namespace.clone(), v)
            })
            .collect();
        // One at a time, in the simulator's order: the harness scheduler takes pods of equal
        // priority in creation order, as the simulator's takes them by index (created in
        // parallel, a request's identical pods were bound in a random order).
        for (ns, v) in objs {
            let p: Pod = serde_json::from_value(v)
                .map_err(|e| cfg(format!("a workload pod does not read as a Pod: {e}")))?;
            match Api::<Pod>::namespaced(self.client.clone(), &ns)
                .create(&PostParams::default(), &p)
                .await
            {
                Ok(_) => {}
                // Still terminating from its eviction: the next round retries.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(kerr("creating workload pods")(e)),
            }
        }
        for i in idx {
            self.pods[*i].live = true;
        }
        Ok(())
    }

    /// Creates ProvisioningRequest `g` with the PodTemplate of its pods (Kueue's part).
    async fn request(&mut self, g: usize) -> Result<()> {
        let group = &self.w.groups[g];
        let Some(spec) = group.provisioning_request else {
            return Ok(());
        };
        let first = &self.w.pods[group.members[0] as usize];
        let t = &self.w.templates[first.template as usize];
        let ns = t.key.namespace.clone();
        let template_name = format!("ppt-{}", group.name);
        let pod = objects::pod(t, &template_name, None);
        let pt: PodTemplate = serde_json::from_value(json!({
            "metadata": {"name": template_name, "namespace": ns},
            "template": {"metadata": {"labels": pod["metadata"]["labels"]}, "spec": pod["spec"]}
        }))
        .map_err(|e| cfg(e.to_string()))?;
        Api::<PodTemplate>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), &pt)
            .await
            .map_err(kerr("creating a PodTemplate"))?;
        let class = match spec.class {
            ProvReqClass::BestEffortAtomic => BEST_EFFORT_ATOMIC,
            ProvReqClass::CheckCapacity => CHECK_CAPACITY,
        };
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": group.name, "namespace": ns},
            "spec": {"provisioningClassName": class,
                     "podSets": [{"podTemplateRef": {"name": template_name},
                                  "count": group.members.len()}]}
        }))
        .map_err(|e| cfg(e.to_string()))?;
        match provreq_api(&self.client, &ns)
            .create(&PostParams::default(), &obj)
            .await
        {
            Ok(_) => {}
            // Without the CRD the request cannot exist: its pods come as a plain gang, as
            // under a policy that does not serve requests.
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let members: Vec<usize> = group.members.iter().map(|m| *m as usize).collect();
                return self.create(&members, None).await;
            }
            Err(e) => return Err(kerr("creating a ProvisioningRequest")(e)),
        }
        self.requests.insert(
            g,
            RequestRun {
                namespace: ns,
                admit_at: None,
                admitted: false,
            },
        );
        Ok(())
    }

    /// Kueue's part: a Provisioned request's pods are created after the admission delay.
    async fn admit(&mut self, now: i64) -> Result<()> {
        let pending: Vec<usize> = self
            .requests
            .iter()
            .filter(|(_, r)| !r.admitted)
            .map(|(g, _)| *g)
            .collect();
        for g in pending {
            let group = &self.w.groups[g];
            let delay = group
                .provisioning_request
                .map_or(0, |r| r.admission_delay_s);
            let r = self.requests.get_mut(&g).expect("listed");
            if r.admit_at.is_none() {
                let obj = provreq_api(&self.client, &r.namespace)
                    .get(&group.name)
                    .await
                    .map_err(kerr("reading a ProvisioningRequest"))?;
                let provisioned = obj.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Provisioned" && c["status"] == "True");
                if provisioned {
                    r.admit_at = Some(now + delay);
                }
            }
            if r.admit_at.is_some_and(|t| t <= now) {
                r.admitted = true;
                let members: Vec<usize> = group.members.iter().map(|m| *m as usize).collect();
                let name = group.name.clone();
                self.create(&members, Some(&name)).await?;
            }
        }
        Ok(())
    }

    /// Reads pods and NodeClaims: first binds, runtimes started, evictions, claims.
    async fn observe(&mut self, now: i64) -> Result<()> {
        let pods = Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing pods"))?;
        let mut present = vec![false; self.pods.len()];
        for p in &pods.items {
            let Some(&i) = self.by_name.get(&p.name_any()) else {
                continue;
            };
            present[i] = true;
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_ref());
            let st = &mut self.pods[i];
            if let Some(node) = node.filter(|_| !st.bound) {
                st.bound = true;
                self.first_bound.entry(p.name_any()).or_insert(now);
                self.first_node
                    .entry(p.name_any())
                    .or_insert_with(|| node.clone());
                st.ends = self.w.pods[i].runtime.map(|r| now + r);
            }
        }
        // A live pod gone without our deleting it was evicted: its owner makes it again.
        let evicted: Vec<usize> = (0..self.pods.len())
            .filter(|i| self.pods[*i].live && !self.pods[*i].done && !present[*i])
            .collect();
        let mut evicted = evicted;
        // A gang restarts as a whole, as the simulator's do (a training job whose worker is
        // evicted restarts every worker): its members still running are stopped too and made
        // again with it.
        let partners: BTreeSet<usize> = evicted
            .iter()
            .filter_map(|i| self.w.pods[*i].group)
            .map(|g| &self.w.groups[g as usize])
            .filter(|g| g.coscheduled())
            .flat_map(|g| g.members.iter().map(|m| *m as usize))
            .filter(|m| present[*m] && self.pods[*m].live && !self.pods[*m].done)
            .filter(|m| self.pods[*m].bound)
            .collect();
        for m in partners {
            self.delete(m, "stopping a gang's member").await?;
            evicted.push(m);
        }
        for i in &evicted {
            self.pods[*i].bound = false;
            self.pods[*i].ends = None;
        }
        if !evicted.is_empty() {
            let mut plain = Vec::new();
            for i in evicted {
                let request = self.w.pods[i]
                    .group
                    .map(|g| &self.w.groups[g as usize])
                    .filter(|g| g.provisioning_request.is_some())
                    .map(|g| g.name.clone());
                match request {
                    Some(r) => self.create(&[i], Some(&r)).await?,
                    None => plain.push(i),
                }
            }
            self.create(&plain, None).await?;
        }
        let claims = Api::<NodeClaim>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing NodeClaims"))?;
        let mut seen = BTreeSet::new();
        for nc in &claims.items {
            let name = nc.name_any();
            seen.insert(name.clone());
            let e = self.claims.entry(name).or_insert((None, now, None));
            if let Some(t) = nc.status.as_ref().and_then(|s| s.instance_type.as_ref()) {
                e.0 = Some(format!("{}/{t}", nc.spec.node_pool));
            }
            if nc.metadata.deletion_timestamp.is_some() && e.2.is_none() {
                e.2 = Some(now);
            }
        }
        for (name, e) in self.claims.iter_mut() {
            if !seen.contains(name) && e.2.is_none() {
                e.2 = Some(now);
            }
        }
        Ok(())
    }

    /// Deletes pods whose runtime is up or whose scheduled deletion has come.
    async fn finish_due(&mut self, now: i64) -> Result<()> {
        let due: Vec<usize> = (0..self.pods.len())
            .filter(|i| {
                let st = &self.pods[*i];
                st.live
                    && !st.done
                    && (st.ends.is_some_and(|t| t <= now)
                        || self.w.pods[*i].delete_at.is_some_and(|t| t <= now))
            })
            .collect();
        for i in due {
            self.pods[i].done = true;
            self.delete(i, "deleting a finished pod").await?;
        }
        Ok(())
    }

    /// Deletes pod `i` (gone already is fine); `doing` names the action in an error.
    async fn delete(&self, i: usize, doing: &'static str) -> Result<()> {
        let spec = &self.w.pods[i];
        let ns = &self.w.templates[spec.template as usize].key.namespace;
        match Api::<Pod>::namespaced(self.client.clone(), ns)
            .delete(&spec.name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(kerr(doing)(e)),
        }
    }
}
