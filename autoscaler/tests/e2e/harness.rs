//! The end-to-end harness: a fake API server on 127.0.0.1 with the harness scheduler, and the
//! real `gpu-autoscaler` binary pointed at it through a kubeconfig, with the kwok provider.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fake_apiserver::{BinderOptions, FakeApiServer, Options, RunningServer};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use nodepools::{NodeClaim, NodePool};
use providers::kwok::KwokInstance;
use serde_json::{Value, json};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Flags that keep every delay short, so a test runs in seconds.
pub const FAST: &[&str] = &[
    "--batch-idle=200ms",
    "--batch-max=2s",
    "--kwok-register-delay=1s",
    "--kwok-ready-delay=1s",
    "--kwok-gpu-delay=2s",
    "--disruption-interval=1s",
    "--validation-delay=1s",
    "--scale-down-delay-after-add=0s",
    "--scale-down-delay-after-failure=2s",
    "--gc-interval=2s",
    "--gc-grace=4s",
    "--loop-interval=100ms",
    "--lease-duration=3s",
    "--lease-retry=300ms",
    "--namespace=kube-system",
    "--metrics-addr=127.0.0.1:0",
];

/// A fake cluster.
pub struct Cluster {
    /// The server, kept alive for the test's duration.
    pub _server: RunningServer,
    /// A client for the test's own reads and writes.
    pub client: kube::Client,
    /// Where kubeconfig and controller logs go.
    pub dir: PathBuf,
    /// The kubeconfig file.
    pub kubeconfig: PathBuf,
}

/// A running controller; killed when dropped.
pub struct Controller {
    /// The process.
    pub child: std::process::Child,
    /// Its log file.
    pub log: PathBuf,
}

impl Controller {
    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The value of an unlabelled metric on the controller's `/metrics` page, once it serves one
    /// (its address is the `metrics=` field of the start-up log line).
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metric_with(name, &[])
    }

    /// The value of the series of metric `name` whose labels are exactly `labels` (in any
    /// order), once the controller serves it.
    pub fn metric_with(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.metrics_page()?.lines().find_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let (n, set) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            let got: BTreeMap<String, String> = set
                .split(',')
                .filter(|p| !p.is_empty())
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.to_string(), v.trim_matches('"').to_string()))
                })
                .collect();
            (n == name && got == want).then(|| v.trim().parse().ok())?
        })
    }

    /// The controller's whole `/metrics` page.
    pub fn metrics_page(&self) -> Option<String> {
        use std::io::{Read, Write};
        let log = self.log();
        let addr = log
            .split_whitespace()
            .find_map(|w| w.strip_prefix("metrics="))?
            .to_string();
        let mut conn = std::net::TcpStream::connect(&addr).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            conn,
            "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut page = String::new();
        conn.read_to_string(&mut page).ok()?;
        Some(page)
    }

    /// How many times the controller has finished loop `name` (`round` for a whole round,
    /// `gc` for a garbage-collection pass), by its `loop_duration_seconds` histogram; 0
    /// until it serves its metrics.
    pub fn loops(&self, name: &str) -> u64 {
        self.metric_with(
            "gpu_autoscaler_loop_duration_seconds_count",
            &[("name", name)],
        )
        .map_or(0, |n| n as u64)
    }

    /// Waits until loop `name` has finished `n` more times than when called. All but the
    /// first of those began after the call, so they saw every object written before it:
    /// how a test shows that something does *not* happen, without a sleep.
    pub async fn more_loops(&self, name: &str, n: u64) {
        let from = self.loops(name);
        // A round takes well under a second here; a minute allows for a loaded machine.
        let deadline = Duration::from_secs(60);
        eventually(&format!("{n} more `{name}` loops"), deadline, || async {
            (self.loops(name) >= from + n).then_some(())
        })
        .await;
    }

    /// SIGKILL, no chance to clean up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait (graceful shutdown).
    pub fn terminate(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill9();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- controller log {} ----\n{}",
                self.log.display(),
                self.log()
            );
        }
    }
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

impl Cluster {
    /// A fresh server with the CRDs registered and the harness scheduler binding pods.
    pub async fn start() -> Cluster {
        Self::start_with(&[]).await
    }

    /// [`Self::start`], with more CRDs (YAML texts) registered.
    pub async fn start_with(extra_crds: &[&str]) -> Cluster {
        Self::start_opts(options(), extra_crds).await
    }

    /// [`Self::start_with`] with the server's options (start from [`options`]). With faults
    /// configured, the test's own client is exempt from them: only the controller gets them.
    pub async fn start_opts(options: Options, extra_crds: &[&str]) -> Cluster {
        let faults = options.faults.enabled();
        let server = FakeApiServer::new(options);
        for f in [
            "deploy/crds/gpu-autoscaler.dev_nodepools.yaml",
            "deploy/crds/gpu-autoscaler.dev_nodeclaims.yaml",
            "deploy/crds/gpu-autoscaler.dev_capacityquotas.yaml",
            "deploy/crds/gpu-autoscaler.dev_nodeoverlays.yaml",
        ] {
            server
                .register_crd_file(root().join(f))
                .expect("CRD registers");
        }
        server
            .register_crd_yaml(providers::kwok::CRD_YAML)
            .expect("kwok CRD registers");
        for crd in extra_crds {
            server.register_crd_yaml(crd).expect("extra CRD registers");
        }
        let running = server
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .expect("server starts");
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("gpu-autoscaler-e2e-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, running.kubeconfig_yaml()).unwrap();
        let client = if faults {
            server.client_without_faults()
        } else {
            running.client().await.expect("client")
        };
        Cluster {
            _server: running,
            client,
            dir,
            kubeconfig,
        }
    }

    /// The server's state and helpers.
    pub fn server(&self) -> &FakeApiServer {
        self._server.server()
    }

    /// Starts the controller binary with [`FAST`] flags plus `extra`.
    pub fn controller(&self, name: &str, extra: &[&str]) -> Controller {
        self.controller_with_env(name, extra, &[])
    }

    /// [`Self::controller`] with `env` added to its environment (a kill point, say).
    pub fn controller_with_env(
        &self,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Controller {
        let mut args = vec!["run".to_string()];
        args.extend(
            FAST.iter()
                .filter(|f| {
                    // A flag given in `extra` overrides the default here.
                    let name = f.split('=').next().unwrap_or(f);
                    !extra.iter().any(|e| e.split('=').next() == Some(name))
                })
                .map(|f| f.to_string()),
        );
        args.push(format!("--identity={name}"));
        args.extend(extra.iter().map(|e| e.to_string()));
        self.controller_exact(name, &args, env)
    }

    /// Starts the controller binary with exactly `args` (the subcommand included) and `env`
    /// added to the test's kubeconfig; its stderr goes to `<name>.log`.
    pub fn controller_exact(
        &self,
        name: &str,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Controller {
        let log = self.dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            // GPU_AUTOSCALER_E2E_LOG raises the controller's log level when diagnosing a test.
            .env(
                "RUST_LOG",
                std::env::var("GPU_AUTOSCALER_E2E_LOG")
                    .unwrap_or_else(|_| "info,kube=warn,tower=warn,hyper=warn".into()),
            )
            .env_remove("POD_NAMESPACE")
            .env_remove("POD_NAME")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("controller starts");
        Controller { child, log }
    }

    /// Creates an object from JSON through the API.
    pub async fn create<K>(&self, v: Value) -> K
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        K::Scope: Scoped,
    {
        let obj: K = serde_json::from_value(v).expect("literal object");
        let ns = obj.meta().namespace.clone();
        let api: Api<K> = K::Scope::api(self.client.clone(), ns.as_deref());
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create")
    }

    /// Every NodeClaim.
    pub async fn claims(&self) -> Vec<NodeClaim> {
        Api::<NodeClaim>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// Every Node.
    pub async fn nodes(&self) -> Vec<Node> {
        Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// A Node the controller has registered (our finalizer on it) and nobody is deleting. A
    /// Node deleted before registration is removed at once and re-registered, as a kubelet
    /// does, so tests that lose a node pick one of these (a loaded machine can win that race).
    pub async fn registered_node(&self) -> Option<Node> {
        self.nodes().await.into_iter().find(|n| {
            n.metadata.deletion_timestamp.is_none()
                && n.metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == "gpu-autoscaler.dev/termination")
        })
    }

    /// Every kwok instance (the emulated cloud's instance table).
    pub async fn instances(&self) -> Vec<KwokInstance> {
        Api::<KwokInstance>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// A pod.
    pub async fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .unwrap()
    }

    /// Deletes Node `name` as `kubectl delete node` does.
    pub async fn delete_node(&self, name: &str) {
        Api::<Node>::all(self.client.clone())
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .expect("deleting the node");
    }

    /// The events of `reason` about the `kind` object named `name`, whole (count and series
    /// included).
    pub async fn events(&self, kind: &str, name: &str, reason: &str) -> Vec<Event> {
        Api::<Event>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .expect("listing events")
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                    })
            })
            .collect()
    }

    /// Sets Node `node`'s `Ready` condition, as the node lifecycle controller (`Unknown`) or a
    /// kubelet coming back (`True`) would.
    pub async fn set_ready(&self, node: &str, status: &str) {
        let now = jiff::Timestamp::now().to_string();
        Api::<Node>::all(self.client.clone())
            .patch_status(
                node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"conditions": [{
                    "type": "Ready", "status": status,
                    "reason": if status == "True" { "KubeletReady" } else { "NodeStatusUnknown" },
                    "message": "set by the test",
                    "lastHeartbeatTime": now, "lastTransitionTime": now
                }]}})),
            )
            .await
            .expect("setting the node's Ready condition");
    }

    /// A NodePool.
    pub async fn pool(&self, name: &str) -> NodePool {
        Api::<NodePool>::all(self.client.clone())
            .get(name)
            .await
            .unwrap()
    }
}

/// The harness server options: the harness scheduler binds pods every 100 ms.
pub fn options() -> Options {
    Options {
        binder: Some(BinderOptions {
            interval: Duration::from_millis(100),
            ..BinderOptions::default()
        }),
        ..Options::default()
    }
}

/// Picks namespaced or cluster APIs by the object's scope.
pub trait Scoped {
    /// The API for `ns` (ignored for cluster-scoped kinds).
    fn api<K: kube::Resource<Scope = Self, DynamicType = ()>>(
        client: kube::Client,
        ns: Option<&str>,
    ) -> Api<K>;
}

impl Scoped for k8s_openapi::NamespaceResourceScope {
    fn api<K: kube::Resource<Scope = Self, DynamicType = ()>>(
        client: kube::Client,
        ns: Option<&str>,
    ) -> Api<K> {
        Api::namespaced(client, ns.unwrap_or("default"))
    }
}

impl Scoped for k8s_openapi::ClusterResourceScope {
    fn api<K: kube::Resource<Scope = Self, DynamicType = ()>>(
        client: kube::Client,
        _ns: Option<&str>,
    ) -> Api<K> {
        Api::all(client)
    }
}

/// Polls `f` every 100 ms until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `gpu-autoscaler explain ARGS` against the cluster: (exit status, stdout, stderr).
pub fn run_explain(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"))
        .arg("explain")
        .args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// DaemonSet `kube-system/agent` (labels `app: agent`) tolerating every taint, its one
/// container asking for `requests`.
pub fn agent_daemonset(requests: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                "spec": {"tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "a", "image": "agent",
                        "resources": {"requests": requests}}]}}}})
}

/// A GPU NodePool: g4dn.xlarge (1 T4) only, tainted `nvidia.com/gpu:NoSchedule`, with a
/// device-plugin startup taint, empty nodes removed after `unneeded`.
pub fn gpu_pool(name: &str, unneeded: &str) -> Value {
    json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "ml"}},
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "node.gpu-autoscaler.dev/device-plugin", "effect": "NoSchedule"}],
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g4dn.xlarge"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]
            },
            "disruption": {"consolidateAfter": "0s", "unneededTime": unneeded,
                           "budgets": [{"nodes": "100%"}]}
        }
    })
}

/// A CPU NodePool of m5.xlarge (4 vCPU) nodes.
pub fn cpu_pool(name: &str, unneeded: &str) -> Value {
    json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]
            },
            "disruption": {"consolidateAfter": "0s", "unneededTime": unneeded,
                           "budgets": [{"nodes": "100%"}]}
        }
    })
}

/// A pod asking for one GPU, tolerating the GPU taint, owned by a ReplicaSet.
pub fn gpu_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-rs"),
                                 "uid": "00000000-0000-0000-0000-000000000001", "controller": true}]},
        "spec": {
            "containers": [{"name": "cuda", "image": "cuda:12",
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"nvidia.com/gpu": "1"}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        }
    })
}

/// A CPU pod with labels, owned by a ReplicaSet.
pub fn cpu_pod(name: &str, cpu: &str, labels: BTreeMap<&str, &str>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                 "uid": "00000000-0000-0000-0000-000000000002", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu}}}]}
    })
}

/// The node a pod is bound to.
/// Marks pod `name` of `default` as a scheduler that gives up on it does
/// (`PodScheduled=False`, reason `Unschedulable`): for pods the harness scheduler leaves to
/// another `schedulerName`.
pub async fn mark_unschedulable(c: &Cluster, name: &str) {
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/0 nodes are available"}]}})),
        )
        .await
        .expect("status patch");
}

/// When the scheduler marked `p` unschedulable (`PodScheduled=False`), if it is.
pub fn unschedulable_since(p: &Pod) -> Option<jiff::Timestamp> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

pub fn bound_to(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// Whether the Node's allocatable of `resource` is non-zero.
pub fn allocatable(n: &Node, resource: &str) -> Option<String> {
    n.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .map(|q| q.0.clone())
}

/// A NodePool of m5.xlarge nodes labelled `lane=<name>`, with `disruption` merged over
/// `unneededTime: 0s` and a 100 % budget, and `extra` merged into the spec.
pub fn lane_pool(name: &str, disruption: Value, extra: Value) -> Value {
    let mut d =
        json!({"consolidateAfter": "0s", "unneededTime": "0s", "budgets": [{"nodes": "100%"}]});
    for (k, v) in disruption.as_object().unwrap() {
        d[k] = v.clone();
    }
    let mut pool = json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"lane": name}},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]
            },
            "disruption": d
        }
    });
    for (k, v) in extra.as_object().unwrap() {
        pool["spec"][k] = v.clone();
    }
    pool
}

/// A pod of `cpu` for lane `lane`, owned by a ReplicaSet.
pub fn lane_pod(name: &str, lane: &str, cpu: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-rs"),
                                 "uid": "00000000-0000-0000-0000-000000000003", "controller": true}]},
        "spec": {
            "nodeSelector": {"lane": lane},
            "containers": [{"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu}}}]
        }
    })
}

/// The status ConfigMap's summary (`gpu-autoscaler-status` in kube-system), parsed.
pub async fn summary(c: &Cluster) -> Option<serde_norway::Value> {
    let cm =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(c.client.clone(), "kube-system")
            .get_opt("gpu-autoscaler-status")
            .await
            .ok()??;
    serde_norway::from_str(cm.data?.get("status")?).ok()
}

/// A stand-in for the NVIDIA DRA driver's kubelet plugin: once a Node exists, it publishes the
/// ResourceSlice the core predicts for the Node's instance type (the embedded catalog's,
/// `autoscaler_core::dra::template::nvidia_slice`, whole GPUs), as the driver would on a real
/// node. It runs in the test, never in the controller; dropping it stops it.
pub struct FakeDraDriver(tokio::task::JoinHandle<()>);

impl Drop for FakeDraDriver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A core ResourceSlice as the `resource.k8s.io/v1` object the driver writes.
pub fn slice_object(s: &autoscaler_core::dra::ResourceSlice) -> Value {
    use autoscaler_core::dra::{AttributeValue, SliceNodes};
    let attribute = |a: &AttributeValue| match a {
        AttributeValue::Bool(b) => json!({"bool": b}),
        AttributeValue::Int(i) => json!({"int": i}),
        AttributeValue::String(s) => json!({"string": s}),
        AttributeValue::Version(v) => json!({"version": v}),
    };
    let quantities = |m: &BTreeMap<String, autoscaler_core::quantity::Quantity>| -> Value {
        m.iter()
            .map(|(k, q)| (k.clone(), json!({"value": q.to_string()})))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let devices: Vec<Value> = s
        .devices
        .iter()
        .map(|d| {
            let attrs: serde_json::Map<String, Value> = d
                .attributes
                .iter()
                .map(|(k, a)| (k.clone(), attribute(a)))
                .collect();
            let mut v = json!({"name": d.name, "attributes": attrs, "capacity": quantities(&d.capacity)});
            if !d.consumes_counters.is_empty() {
                v["consumesCounters"] = d
                    .consumes_counters
                    .iter()
                    .map(|c| json!({"counterSet": c.counter_set, "counters": quantities(&c.counters)}))
                    .collect();
            }
            v
        })
        .collect();
    let mut spec = json!({"driver": s.driver, "devices": devices,
        "pool": {"name": s.pool, "generation": s.generation, "resourceSliceCount": 1}});
    match &s.nodes {
        SliceNodes::Node(n) => spec["nodeName"] = json!(n),
        SliceNodes::AllNodes => spec["allNodes"] = json!(true),
        SliceNodes::Selector(_) => panic!("the NVIDIA driver publishes slices per node"),
    }
    if !s.shared_counters.is_empty() {
        spec["sharedCounters"] = s
            .shared_counters
            .iter()
            .map(|c| json!({"name": c.name, "counters": quantities(&c.counters)}))
            .collect();
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": s.name}, "spec": spec})
}

impl Cluster {
    /// Starts the fake DRA driver (see [`FakeDraDriver`]), polling Nodes every 200 ms.
    pub fn fake_dra_driver(&self) -> FakeDraDriver {
        self.fake_dra_driver_for(providers::catalog::default_catalog())
    }

    /// [`Self::fake_dra_driver`] for Nodes whose instance types are in `catalog` (a cloud
    /// provider's own, as the AWS and GCP tests read it from their fakes).
    pub fn fake_dra_driver_for(
        &self,
        catalog: Vec<autoscaler_core::InstanceType>,
    ) -> FakeDraDriver {
        use k8s_openapi::api::resource::v1::ResourceSlice;
        let client = self.client.clone();
        FakeDraDriver(tokio::spawn(async move {
            let nodes: Api<Node> = Api::all(client.clone());
            let slices: Api<ResourceSlice> = Api::all(client);
            loop {
                for n in nodes
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    let it = n
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("node.kubernetes.io/instance-type"))
                        .and_then(|t| catalog.iter().find(|c| &c.name == t));
                    let Some(slice) = it.and_then(|it| {
                        autoscaler_core::dra::template::nvidia_slice(it, &name, false)
                    }) else {
                        continue;
                    };
                    if slices.get_opt(&slice.name).await.ok().flatten().is_none() {
                        let obj: ResourceSlice = serde_json::from_value(slice_object(&slice))
                            .expect("a slice the API accepts");
                        let _ = slices.create(&PostParams::default(), &obj).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }))
    }

    /// Creates every document of a YAML file under the repository root (DeviceClasses,
    /// ResourceClaimTemplates, Pods; namespaced ones in `default`).
    pub async fn apply_file(&self, path: &str) {
        use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
        let text = std::fs::read_to_string(root().join(path)).expect("readable file");
        for doc in serde_norway::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).expect("YAML");
            match v["kind"].as_str() {
                Some("DeviceClass") => drop(self.create::<DeviceClass>(v).await),
                Some("ResourceClaimTemplate") => {
                    drop(self.create::<ResourceClaimTemplate>(v).await)
                }
                Some("ResourceClaim") => drop(self.create::<ResourceClaim>(v).await),
                Some("Pod") => drop(self.create::<Pod>(v).await),
                other => panic!("{path}: no kind {other:?} in the harness"),
            }
        }
    }
}

// Used by `dra_claim_scales_from_zero` (the aws and gcp test crates).
#[allow(dead_code)]
/// The devices allocated to the ResourceClaim the pod `name` (namespace `default`) got for its
/// first pod claim, as (driver, pool, device); empty while it has none.
async fn pod_claim_devices(c: &Cluster, name: &str) -> Vec<(String, String, String)> {
    use k8s_openapi::api::resource::v1::ResourceClaim;
    let Some(claim) = c.pod("default", name).await.and_then(|p| {
        p.status?
            .resource_claim_statuses?
            .first()?
            .resource_claim_name
            .clone()
    }) else {
        return Vec::new();
    };
    let Ok(claim) = Api::<ResourceClaim>::namespaced(c.client.clone(), "default")
        .get(&claim)
        .await
    else {
        return Vec::new();
    };
    claim
        .status
        .and_then(|s| s.allocation?.devices?.results)
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.driver, r.pool, r.device))
        .collect()
}

// Used by `dra_claim_scales_from_zero` (the aws and gcp test crates).
#[allow(dead_code)]
/// Whether the NodeClaim `name` has `Initialized=True` (for a DRA claim: its Node's slices
/// published the devices its instance type's template expects).
async fn claim_initialized(c: &Cluster, name: &str) -> bool {
    c.claims().await.iter().any(|cl| {
        cl.metadata.name.as_deref() == Some(name)
            && cl.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Initialized" && c.status == "True")
            })
    })
}

// Used by the aws and gcp test crates, which include this harness.
#[allow(dead_code)]
/// The Node a kubelet on `claim`'s instance would register (a 4-vCPU, one-GPU machine):
/// Ready, GPU plugin up. The AWS and GCP tests play the kubelet with it.
pub fn kubelet_node(name: &str, provider_id: &str, claim: &nodepools::NodeClaim) -> Value {
    let status = claim.status.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = claim.metadata.labels.clone().unwrap_or_default();
    labels.insert("kubernetes.io/hostname".into(), name.into());
    labels.insert(
        "node.kubernetes.io/instance-type".into(),
        status.instance_type.clone().unwrap_or_default(),
    );
    labels.insert(
        "topology.kubernetes.io/zone".into(),
        status.zone.clone().unwrap_or_default(),
    );
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "providerID": provider_id,
            "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "15Gi", "pods": "58", "nvidia.com/gpu": "1"},
            "allocatable": {"cpu": "3920m", "memory": "13Gi", "pods": "58", "nvidia.com/gpu": "1"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "phase": "Running"
        }
    })
}

// Used by the aws and gcp test crates, which include this harness.
#[allow(dead_code)]
/// The part of the DRA guide's scale-from-zero example both cloud tests share, once the
/// controller runs, the fake DRA driver publishes the cloud's catalog and the pod `cuda-dra`
/// (one GPU from the `one-gpu-claim-template`) is pending: waits for the NodeClaim whose
/// provider ID starts with `provider_prefix` and checks that it waits for its Node's slices;
/// plays the kubelet (a Node named `node_name(provider ID)` whose GPU is a device, not an
/// extended resource); then checks that the pod is bound there holding that Node's GPU, that
/// the NodeClaim turns initialized, and that it is the only one. Deadlines are a minute each; a failure shows `ctl`'s log where it helps.
pub async fn dra_claim_scales_from_zero(
    c: &Cluster,
    ctl: &Controller,
    provider_prefix: &str,
    node_name: impl Fn(&str) -> String,
) {
    let claim = launched_claim(c, "the NodeClaim records the instance", provider_prefix).await;
    assert!(
        waits_for_slices(&claim),
        "the claim waits for its Node's slices"
    );
    let pid = claim.status.clone().unwrap().provider_id.unwrap();
    let node_name = node_name(&pid);
    // With the DRA driver the GPUs are devices, not an extended resource.
    let mut node = kubelet_node(&node_name, &pid, &claim);
    for k in ["capacity", "allocatable"] {
        node["status"][k]
            .as_object_mut()
            .unwrap()
            .remove("nvidia.com/gpu");
    }
    let _: Node = c.create(node).await;
    let bound = eventually(
        "the DRA pod bound to the new node",
        Duration::from_secs(60),
        || async {
            c.pod("default", "cuda-dra")
                .await
                .as_ref()
                .and_then(bound_to)
        },
    )
    .await;
    assert_eq!(bound, node_name, "{}", ctl.log());
    let devices = pod_claim_devices(c, "cuda-dra").await;
    assert_eq!(
        devices,
        [("gpu.nvidia.com".into(), node_name.clone(), "gpu-0".into())],
        "the pod's claim holds the new node's GPU"
    );
    let name = claim.metadata.name.clone().unwrap();
    eventually(
        "the NodeClaim initialized",
        Duration::from_secs(60),
        || async { claim_initialized(c, &name).await.then_some(()) },
    )
    .await;
    assert_eq!(c.claims().await.len(), 1, "one node for one GPU");
}

// Used by the aws and gcp test crates, which include this harness.
#[allow(dead_code)]
/// Whether `claim` has been launched on the cloud whose provider IDs start with
/// `provider_prefix` (`aws:///`, `gce://<project>/`).
pub fn launched_on(claim: &NodeClaim, provider_prefix: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .is_some_and(|p| p.starts_with(provider_prefix))
}

// Used by the aws and gcp test crates, which include this harness.
#[allow(dead_code)]
/// The first NodeClaim [`launched_on`] the cloud of `provider_prefix`, waited for a minute
/// (`what` names the wait when it times out).
pub async fn launched_claim(c: &Cluster, what: &str, provider_prefix: &str) -> NodeClaim {
    eventually(what, Duration::from_secs(60), || async {
        c.claims()
            .await
            .into_iter()
            .find(|cl| launched_on(cl, provider_prefix))
    })
    .await
}

/// Whether `claim` is a DRA claim that waits for its Node's ResourceSlices before it counts as
/// initialized (the `gpu-autoscaler.dev/dra` annotation is `true`).
pub fn waits_for_slices(claim: &NodeClaim) -> bool {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("gpu-autoscaler.dev/dra"))
        .is_some_and(|v| v == "true")
}
