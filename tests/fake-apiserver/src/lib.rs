//! A stateful in-memory fake of the Kubernetes API server, for controller tests.
//!
//! No kube-apiserver can be installed on the project's machines, so end-to-end tests of the
//! `gpu-autoscaler` controller run against this: the same HTTP API (JSON only), with the
//! semantics the controller relies on — a global resourceVersion, list + watch from a
//! resourceVersion with bookmarks and 410 Gone, label and field selectors, merge / JSON /
//! strategic merge patches and (approximated) server-side apply, optimistic concurrency, status
//! subresources, finalizers, the Eviction API enforcing PodDisruptionBudgets, pod binding,
//! CRDs registered from YAML with structural-schema and CEL validation, and an optional
//! harness scheduler ([`BinderOptions`]). `README.md` beside `Cargo.toml` lists exactly what is
//! and is not supported.
//!
//! Two ways to use it:
//!
//! * in-process: [`FakeApiServer::client`] hands its axum [`Router`](axum::Router) to
//!   `kube::Client::new` — no socket at all;
//! * over HTTP on 127.0.0.1: [`FakeApiServer::serve`] (or [`FakeApiServer::start`]) returns a
//!   [`RunningServer`] whose [`kubeconfig_yaml`](RunningServer::kubeconfig_yaml) points a real
//!   binary at it; the `fake-apiserver` binary does the same from the command line.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fake_apiserver::Error> {
//! use fake_apiserver::{FakeApiServer, Options};
//! let server = FakeApiServer::new(Options::default());
//! server.register_crd_file("deploy/crds/gpu-autoscaler.dev_nodepools.yaml")?;
//! let running = server.serve("127.0.0.1:0".parse().unwrap()).await?;
//! std::fs::write("/tmp/kubeconfig", running.kubeconfig_yaml()).unwrap();
//! // ... run the controller with KUBECONFIG=/tmp/kubeconfig ...
//! running.shutdown().await;
//! # Ok(()) }
//! ```

mod binder;
mod dra;
mod error;
mod faults;
mod http;
mod patch;
mod quantity;
mod resources;
mod schema;
mod selector;
mod store;
mod workloads;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

pub use binder::{BinderOptions, Score as BinderScore};
pub use error::{Error, Result};
pub use faults::{FaultCounts, FaultRates, Faults};
pub use selector::{FieldSelector, LabelSelector};

use store::{State, WriteOpts};

/// Server settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// How many changes the watch history keeps; a watch from an older resourceVersion gets 410.
    /// Each retained change pins two object versions, so this bounds the server's memory.
    pub history_limit: usize,
    /// Changes a watch may fall behind before it is ended with 410 (the client relists), as the
    /// real server drops slow watchers. The broadcast ring keeps this many changes alive.
    pub watch_buffer: usize,
    /// How often watches that asked for bookmarks get one.
    pub bookmark_interval: Duration,
    /// Delete the pods bound to a Node when the Node is deleted (what pod GC does), after
    /// [`pod_gc_delay`](Self::pod_gc_delay).
    pub gc_orphan_pods: bool,
    /// How long a pod bound to a deleted Node stays before pod GC force-deletes it (zero: at
    /// once, inline with the Node's deletion).
    pub pod_gc_delay: Duration,
    /// Graceful pod deletion: `Some(scale)` gives a deleted bound pod a `deletionTimestamp` and
    /// removes it after its grace period (`DeleteOptions.gracePeriodSeconds`, else the pod's
    /// `terminationGracePeriodSeconds`, else 30 s) times `scale` (e.g. 0.1 so tests stay fast);
    /// finalizers still hold it after that. `None` removes pods at once.
    pub graceful_deletion: Option<f64>,
    /// Run the workload controllers: pods of ReplicaSets (and Deployments through them),
    /// StatefulSets and DaemonSets held by the server are created and recreated.
    pub workloads: bool,
    /// Serve `resourceVersion=0` lists from the state this long ago (within the retained
    /// history), as kube-apiserver's lagging watch cache can; `None` serves them current.
    pub stale_lists: Option<Duration>,
    /// Calls failing at a configured rate; the default injects nothing.
    pub faults: Faults,
    /// Run the harness scheduler (binder); `None` leaves pods pending until a test binds them.
    pub binder: Option<BinderOptions>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            history_limit: 10_000,
            watch_buffer: 16_384,
            bookmark_interval: Duration::from_secs(1),
            gc_orphan_pods: true,
            pod_gc_delay: Duration::ZERO,
            graceful_deletion: None,
            workloads: true,
            stale_lists: None,
            faults: Faults::default(),
            binder: None,
        }
    }
}

/// State shared by the router, watch tasks and the binder.
pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub options: Options,
    /// Flips to `true` when the server stops: open watches end.
    pub shutdown: tokio::sync::watch::Sender<bool>,
    /// Bumped to end every open watch with a 410 ERROR event.
    pub expire: tokio::sync::watch::Sender<u64>,
    /// Fault injection (a no-op without configured faults).
    pub injector: faults::Injector,
    /// Objects whose watch events are held back, as a lagging watch cache would:
    /// `(resource key, namespace, name)`.
    pub held: tokio::sync::watch::Sender<std::collections::BTreeSet<HeldObject>>,
}

/// An object whose watch events are held back: `(resource key, namespace, name)`.
pub(crate) type HeldObject = (String, String, String);

/// A fake API server: the state plus its HTTP router. Cheap to clone (shared state).
#[derive(Clone)]
pub struct FakeApiServer {
    shared: Arc<Shared>,
}

impl FakeApiServer {
    /// A fresh server with the built-in types and the `default`, `kube-system`, `kube-public`
    /// and `kube-node-lease` namespaces. With [`Options::binder`] set this must run inside a
    /// Tokio runtime (the binder is a spawned task).
    pub fn new(options: Options) -> Self {
        let mut state = State::new(
            options.history_limit,
            options.watch_buffer,
            options.gc_orphan_pods,
        );
        state.grace_scale = options.graceful_deletion;
        state.pod_gc_delay = options.pod_gc_delay;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            injector: faults::Injector::new(options.faults.clone()),
            options,
            shutdown: tokio::sync::watch::channel(false).0,
            expire: tokio::sync::watch::channel(0).0,
            held: tokio::sync::watch::channel(Default::default()).0,
        });
        let server = FakeApiServer { shared };
        if let Some(opts) = server.shared.options.binder.clone() {
            server.spawn_binder(opts);
        }
        // Outside a runtime (a synchronous unit test) the controllers run only through
        // `run_controllers_now`.
        if tokio::runtime::Handle::try_current().is_ok() {
            server.spawn_controllers();
        }
        server
    }

    fn spawn_controllers(&self) {
        let shared = self.shared.clone();
        let notify = self.lock().controllers_notify.clone();
        let mut shutdown = shared.shutdown.subscribe();
        // Grace periods and GC delays end without a write; a short tick notices.
        let tick = Duration::from_millis(50);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.changed() => return,
                    _ = notify.notified() => {}
                    _ = tokio::time::sleep(tick) => {}
                }
                let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                st.controllers_pass(shared.options.workloads);
            }
        });
    }

    /// Runs the cluster controllers (graceful termination, pod GC, workloads) until they make
    /// no more writes (at most 10 passes); returns the writes made. For deterministic tests.
    pub fn run_controllers_now(&self) -> usize {
        let mut total = 0;
        for _ in 0..10 {
            let n = self.lock().controllers_pass(self.shared.options.workloads);
            total += n;
            if n == 0 {
                break;
            }
        }
        total
    }

    /// The faults injected so far.
    pub fn faults_injected(&self) -> FaultCounts {
        self.shared.injector.counts()
    }

    /// Evictions accepted and refused (429 by a PodDisruptionBudget) so far.
    pub fn evictions(&self) -> (u64, u64) {
        self.lock().evictions
    }

    /// Starts a server with default options (no binder) on `addr`, e.g. `127.0.0.1:0`.
    pub async fn start(addr: SocketAddr) -> Result<RunningServer> {
        FakeApiServer::new(Options::default()).serve(addr).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spawn_binder(&self, opts: BinderOptions) {
        let shared = self.shared.clone();
        let notify = self.lock().notify.clone();
        let mut shutdown = shared.shutdown.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.changed() => return,
                    _ = notify.notified() => {
                        // Let a burst of writes land before scheduling them together: a pass
                        // scans every pod, so one pass per write would be quadratic.
                        tokio::time::sleep(opts.interval.min(Duration::from_millis(50))).await;
                    }
                    _ = tokio::time::sleep(opts.interval) => {}
                }
                let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                binder::schedule_pass(&mut st, &opts);
            }
        });
    }

    /// The axum router serving the API; hand it to `kube::Client::new` or serve it yourself.
    pub fn router(&self) -> axum::Router {
        http::router(self.shared.clone(), true)
    }

    /// A kube client talking to this server in-process (no socket), default namespace `default`.
    /// Configured faults apply to it as to every other caller.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.router(), "default")
    }

    /// An in-process kube client that [`Options::faults`] never touch: a test's own setup and
    /// assertions, while the system under test gets the faults.
    pub fn client_without_faults(&self) -> kube::Client {
        kube::Client::new(http::router(self.shared.clone(), false), "default")
    }

    /// Serves the API over plain HTTP on `addr` (use `127.0.0.1:0` for a free port).
    pub async fn serve(&self, addr: SocketAddr) -> Result<RunningServer> {
        self.serve_router(addr, self.router()).await
    }

    /// Serves the API on `addr` to callers that [`Options::faults`] never touch and whose
    /// calls are not audited: a test's own listener next to [`Self::serve`]'s.
    pub async fn serve_without_faults(&self, addr: SocketAddr) -> Result<RunningServer> {
        self.serve_router(addr, http::router(self.shared.clone(), false))
            .await
    }

    async fn serve_router(&self, addr: SocketAddr, router: axum::Router) -> Result<RunningServer> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Io {
                context: format!("binding {addr}"),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Io {
            context: "reading the bound address".into(),
            source,
        })?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let shared = self.shared.clone();
        let task = tokio::spawn(async move {
            let stop = async move {
                let _ = stop_rx.await;
                // End open watches so graceful shutdown does not wait for their timeouts.
                let _ = shared.shutdown.send(true);
            };
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(stop)
                .await;
        });
        Ok(RunningServer {
            server: self.clone(),
            addr,
            stop: Some(stop_tx),
            task: Some(task),
        })
    }

    /// Registers every CustomResourceDefinition in a (multi-document) YAML text, as
    /// `kubectl apply` would: the CRD objects are stored and their resources served at once.
    /// Returns the CRD names.
    pub fn register_crd_yaml(&self, yaml: &str) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let mut st = self.lock();
        let def = st
            .def("apiextensions.k8s.io", "customresourcedefinitions")
            .expect("builtin");
        for doc in serde_norway::Deserializer::from_str(yaml) {
            let v: Value =
                serde::Deserialize::deserialize(doc).map_err(|e| Error::Crd(e.to_string()))?;
            if v.is_null() {
                continue;
            }
            if v["kind"] != "CustomResourceDefinition" {
                return Err(Error::Crd(format!(
                    "expected kind CustomResourceDefinition, got {}",
                    v["kind"]
                )));
            }
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            // Re-registering replaces the definition (apply semantics).
            if st.get(&def, "", &name).is_ok() {
                let mut v = v;
                v["metadata"]["resourceVersion"] = Value::Null;
                st.update(&def, "", &name, v, store::Part::Main, &WriteOpts::default())
                    .map_err(|e| Error::Crd(e.to_string()))?;
            } else {
                st.create(&def, "", v, &WriteOpts::default())
                    .map_err(|e| Error::Crd(e.to_string()))?;
            }
            names.push(name);
        }
        Ok(names)
    }

    /// Reads a YAML file and registers the CRDs in it (see [`register_crd_yaml`](Self::register_crd_yaml)).
    pub fn register_crd_file(&self, path: impl AsRef<Path>) -> Result<Vec<String>> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            context: format!("reading {}", path.display()),
            source,
        })?;
        self.register_crd_yaml(&text)
    }

    /// The current (global) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Drops the retained watch history, as an etcd compaction would: watches and continue
    /// tokens from an older resourceVersion get 410 Gone afterwards.
    pub fn compact(&self) {
        self.lock().compact();
    }

    /// Ends every open watch with an ERROR event carrying 410 Gone (clients must relist).
    pub fn expire_watches(&self) {
        self.shared.expire.send_modify(|g| *g += 1);
    }

    /// Holds back every watch event of one object (`group` "" for the core API, the resource's
    /// plural, namespace "" when cluster-scoped) until [`release_watch_events`]: clients see a
    /// cache that lags behind the server, while lists and gets see the object. Events of other
    /// objects go on, so watchers see them out of order, as they would see a lagging informer's.
    /// No bookmark is sent past a held event. A watch that ends while it holds events loses them
    /// (its client resumes after the later events it saw): hold briefly, without watch faults.
    ///
    /// [`release_watch_events`]: Self::release_watch_events
    pub fn hold_watch_events(&self, group: &str, plural: &str, namespace: &str, name: &str) {
        let key = resources::key_of(group, plural);
        self.shared.held.send_modify(|h| {
            h.insert((key, namespace.to_string(), name.to_string()));
        });
    }

    /// Delivers the events [`hold_watch_events`](Self::hold_watch_events) held back, in order,
    /// and stops holding.
    pub fn release_watch_events(&self, group: &str, plural: &str, namespace: &str, name: &str) {
        let key = resources::key_of(group, plural);
        self.shared.held.send_modify(|h| {
            h.remove(&(key, namespace.to_string(), name.to_string()));
        });
    }

    /// Runs one pass of the harness scheduler now, with the given options; returns pods bound.
    /// Useful for deterministic tests that do not run the background binder.
    pub fn schedule_now(&self, opts: &BinderOptions) -> usize {
        binder::schedule_pass(&mut self.lock(), opts)
    }

    /// Reads an object directly (bypassing HTTP), e.g. to assert on the server's state.
    /// `plural` is qualified by `group` (`""` for core); `ns` is ignored for cluster-scoped types.
    pub fn get_object(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<Value> {
        let st = self.lock();
        let def = st.def(group, plural)?;
        st.get(&def, ns, name).ok().map(|o| (*o).clone())
    }

    /// Ends the binder and every open watch.
    pub fn stop_background(&self) {
        let _ = self.shared.shutdown.send(true);
    }
}

/// A server listening on 127.0.0.1. Dropping it stops it too (without waiting).
pub struct RunningServer {
    server: FakeApiServer,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl RunningServer {
    /// The server's base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's state and helpers.
    pub fn server(&self) -> &FakeApiServer {
        &self.server
    }

    /// A kubeconfig (context `fake`, namespace `default`, no credentials) pointing at the server.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_for(&self.url())
    }

    /// A kube client that connects over HTTP through [`kubeconfig_yaml`](Self::kubeconfig_yaml),
    /// exactly as a controller binary given that kubeconfig would.
    pub async fn client(&self) -> Result<kube::Client> {
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())
            .map_err(|e| Error::Client(e.to_string()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Client(e.to_string()))?;
        kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
    }

    /// Stops serving: open watches end, then the listener closes. The state is kept in
    /// [`server`](Self::server) until the last clone is dropped.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A kubeconfig for a plain-HTTP server URL.
pub fn kubeconfig_for(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {url}
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
    namespace: default
current-context: fake
users:
- name: fake
  user: {{}}
"
    )
}
