//! The wiring of `gpu-autoscaler run`: client, reflectors, leader election, the reconcile loop,
//! metrics and health.
//!
//! One loop, run only by the leader every `--loop-interval`, performs in order: the kwok
//! provider's boot step (kwok only), the cluster's health (too many unready nodes halt
//! provisioning and disruption), provisioning (when the batcher closes a window), the NodeClaim
//! lifecycle ([`super::lifecycle::step`] per claim) and the termination of deleted managed
//! Nodes, disruption (every `--disruption-interval`), garbage collection (every
//! `--gc-interval`), NodePool status and metrics: `Controller::round` calls one method per
//! stage, each in its own module below. Launches and terminations run as spawned tasks
//! (rate-limited, retried with backoff) so a slow cloud never stalls the loop.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use autoscaler_core::disruption::DisruptionState;
use autoscaler_core::instance::InstanceType;
use autoscaler_core::labels;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use nodepools::NodePool;
use providers::kwok::{KwokConfig, KwokProvider};
use providers::{
    CloudProvider, NodeClassRef, ProviderError, UnavailableOfferings, fake::FakeProvider,
};
use tokio::sync::watch;

use super::actuator::Actuator;
use super::batcher::{BatchConfig, Batcher};
use super::error::{Error, Result};
use super::leader::{self, LeaderConfig};
use super::metrics::{Health, Liveness, LoopLabel, Metrics};
use super::pod_problems;
use super::settings::{LogFormat, PreferencePolicy, ProviderKind, RunArgs};
use super::snapshot::SnapshotBuilder;
use autoscaler_core::disruption::execute::Job;

mod claims;
mod disruption;
mod gc;
mod guard;
mod health;
mod launch;
mod limits;
mod provisioning;
mod provreqs;
mod status;
pub(crate) mod stores;
mod termination;
mod visibility;

pub use autoscaler_core::offerings::candidates;
use guard::GuardState;
pub use launch::placement_group_of;
pub use provisioning::{claim_object, quantities, requirement_exprs};
pub use stores::{Late, Stores};

/// Seconds since the Unix epoch: the core's clock.
fn epoch() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Where the last plan that placed a pending pod put it.
struct Nomination {
    /// The claim: in flight, or behind the existing node the pod is to be bound to.
    claim: String,
    /// When that plan was made ([`Controller::millis`]).
    at_ms: u64,
}

/// Shared between the loop and its launch and termination tasks.
struct Shared<P> {
    provider: Arc<P>,
    actuator: Actuator,
    metrics: Arc<Metrics>,
    limiter: DefaultDirectRateLimiter,
    unavailable: Mutex<UnavailableOfferings>,
    /// Claims with a launch task running (or just finished, until the store shows it).
    launching: Mutex<HashMap<String, Instant>>,
    /// Claims whose launch task is running right now (a task's [`InFlight`] guard removes
    /// them when it ends, however it ends). A claim in here keeps its finalizer: the task may
    /// still create an instance that nothing would record.
    in_flight: Mutex<HashSet<String>>,
    /// A placement group collection is running (at most one at a time).
    collecting_groups: AtomicBool,
    /// Terminations running beside the loop (`None`), or done at that instant (kept a while,
    /// until the cache shows the released finalizer), by `claim/<name>` or `node/<name>`.
    terminating: Mutex<HashMap<String, Option<Instant>>>,
}

impl<P: CloudProvider + 'static> Shared<P> {
    /// A provider operation under the rate limit, made once. Retrying transient failures is
    /// the provider's job (one retry layer: AWS and GCP retry each API call, kwok each
    /// operation, `max_attempts` 5 by default), so an error here has exhausted those retries
    /// and is final for this round; the next round plans again.
    async fn cloud<T, F, Fut>(&self, what: &str, f: F) -> Result<T, ProviderError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        self.limiter.until_ready().await;
        let (before, after) = match what {
            "launch" => (Some("launch:before"), Some("launch:after")),
            "terminate" => (Some("terminate:before"), Some("terminate:after")),
            _ => (None, None),
        };
        if let Some(p) = before {
            crate::controller::crashpoint::reached(p);
        }
        let started = Instant::now();
        let result = f().await;
        if let Some(p) = after {
            crate::controller::crashpoint::reached(p);
        }
        let code = match &result {
            Ok(_) => "ok",
            Err(e) => e.code(),
        };
        self.metrics.cloud_call(
            self.provider.name(),
            what,
            code,
            started.elapsed().as_secs_f64(),
        );
        result
    }
}

/// Marks claims as having a launch task running until dropped.
struct InFlight<P> {
    shared: Arc<Shared<P>>,
    claims: Vec<String>,
}

impl<P> InFlight<P> {
    fn new(shared: &Arc<Shared<P>>, claims: Vec<String>) -> Self {
        shared
            .in_flight
            .lock()
            .expect("lock")
            .extend(claims.iter().cloned());
        InFlight {
            shared: shared.clone(),
            claims,
        }
    }
}

impl<P> Drop for InFlight<P> {
    fn drop(&mut self) {
        let mut f = self.shared.in_flight.lock().expect("lock");
        for c in &self.claims {
            f.remove(c);
        }
    }
}

/// The leader's state across rounds.
struct Controller<P> {
    shared: Arc<Shared<P>>,
    kwok: Option<KwokProvider>,
    stores: Stores,
    args: RunArgs,
    batcher: Batcher,
    /// When a plan last brought the NodePools up to their `minNodes`
    /// (`--enforce-node-group-min-size`): at most once per `--replan-interval`.
    last_warm: Option<Instant>,
    /// Warm claims this leader created that the claim cache does not show yet, with when: no
    /// plan brings the pools up again until it does, so a claim is never counted out (and
    /// launched again) while the cache catches up.
    warm_unseen: Vec<(String, Instant)>,
    /// Warm claims followed until they come up, and the pools whose warm nodes did not.
    warm_backoff: crate::controller::warm_backoff::WarmBackoff,
    builder: SnapshotBuilder,
    started: Instant,
    types: HashMap<NodeClassRef, (Instant, Arc<Vec<InstanceType>>)>,
    disruption_state: DisruptionState,
    jobs: Vec<Job>,
    last_disruption: Option<Instant>,
    last_gc: Option<Instant>,
    last_pool_status: Option<Instant>,
    /// When the status stage last fetched catalogs no pending pod had needed yet.
    last_catalog_fetch: Option<Instant>,
    orphans: HashMap<String, i64>,
    /// The cloud's instances, listed at most once per lifecycle round when a claim being
    /// deleted never recorded its instance or a deleted Node may need draining.
    round_instances: Option<Vec<providers::Instance>>,
    /// Deleted claims whose unrecorded instance's Node runs pods that must move (warned of
    /// once).
    held: HashSet<String>,
    /// NodeClaims this leader deleted for expiry, and when: until the cache shows the deletion,
    /// the next pass would find them expired again and tell their node a second time.
    expired: HashMap<String, Instant>,
    /// Deleted Nodes being drained before their instance is terminated.
    draining: HashMap<String, termination::Draining>,
    /// What pending pods were told of why they get no node (`NotTriggerScaleUp`).
    notices: pod_problems::Notices,
    /// Pending pods the last plans put on claims, in flight or initialized
    /// ([`Snapshot::nominated`]): in memory, so a new leader plans its first round from
    /// scratch.
    ///
    /// [`Snapshot::nominated`]: autoscaler_core::model::Snapshot::nominated
    nominations: BTreeMap<autoscaler_core::model::PodKey, Nomination>,
    /// The planner's instance-type shapes, built again only when the NodePools or DaemonSets
    /// of a round's snapshot changed ([`autoscaler_core::provision::plan_cached`]).
    shapes: autoscaler_core::provision::ShapeCache,
    /// What disruption passes derive from the NodePools alone, built again only when they
    /// changed ([`autoscaler_core::disruption::plan_disruption_cached`]).
    disruption_cache: autoscaler_core::disruption::DisruptionCache,
    first_round: bool,
    /// Whether the ProvisioningRequest retry back-offs were read back from the requests: on
    /// the first round the ProvisioningRequest stage runs, which need not be the first round.
    provreq_backoff_restored: bool,
    /// ProvisioningRequests: retry back-offs and bookings too large for their status.
    provreq_memory: provreqs::Memory,
    /// The launch guard and the shapes kept out of planning for delivering too little.
    guard: GuardState,
    /// This replica's identity (leader election, events, the status ConfigMap).
    identity: String,
    /// Conditions, events and the status summary already published.
    visibility: visibility::Visibility,
    /// When the last round completed (ms since the epoch; 0 before the first).
    last_round_ms: i64,
    /// CapacityQuotas already reported as not parsing (`name@generation`).
    quota_problems: std::collections::BTreeSet<String>,
    /// NodeOverlays already reported as not parsing (`name@generation`); behind a lock because
    /// the catalogs are read through `&self`.
    overlay_problems: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// The cluster's health as of this round (`None` before the first).
    health: Option<autoscaler_core::health::ClusterHealth>,
}

fn class_of(np: &NodePool) -> NodeClassRef {
    np.spec
        .template
        .node_class_ref
        .as_ref()
        .map(|c| NodeClassRef {
            group: c.group.clone(),
            kind: c.kind.clone(),
            name: c.name.clone(),
        })
        .unwrap_or_default()
}

impl<P: CloudProvider + 'static> Controller<P> {
    /// One round of the loop: the stages in order, each in its own module and timed under its
    /// own name (`loop_seconds`). Stages that run less often than every round check their
    /// interval themselves.
    async fn round(&mut self) {
        let started = Instant::now();
        if self.first_round {
            // A new leader (a restart, a failover) goes on from what the last one recorded.
            self.disruption_state =
                super::consolidatable::restored_state(&self.stores.claims.state());
        }
        self.boot_kwok_instances().await;
        // Pending pods first: the claims stage makes a call or more per claim and per deleted
        // Node, seconds in all under API and cloud faults, and a new leader after a restart
        // should not keep a backlog of pods waiting for its clean-up. Planning reads claims in
        // flight from the cache either way; a claim the lifecycle deletes this round has its
        // pods planned again next round.
        self.health_stage().await;
        self.provisioning_stage().await;
        self.claims_stage().await;
        self.disruption_stage().await;
        self.gc_stage().await;
        self.status_stage().await;
        self.cluster_status_stage(self.last_round_ms).await;
        self.first_round = false;
        self.last_round_ms = jiff::Timestamp::now().as_millisecond();
        self.observe("round", started);
    }

    fn observe(&self, name: &str, since: Instant) {
        self.shared
            .metrics
            .loop_seconds
            .get_or_create(&LoopLabel { name: name.into() })
            .observe(since.elapsed().as_secs_f64());
    }

    fn millis(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Whether a stage run every `every` is due; if so, its last run is now.
fn due(last: &mut Option<Instant>, every: Duration) -> bool {
    if last.is_none_or(|at| at.elapsed() >= every) {
        *last = Some(Instant::now());
        return true;
    }
    false
}

fn identity(args: &RunArgs) -> String {
    args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "gpu-autoscaler".into());
        format!("{host}-{}", std::process::id())
    })
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// `gpu-autoscaler run`: builds a runtime and runs the controller until SIGTERM or SIGINT.
///
/// # Errors
/// Configuration, client or server errors, or lost leadership.
pub fn run_blocking(args: RunArgs) -> Result<()> {
    init_logging(args.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Config(format!("starting the async runtime: {e}")))?;
    rt.block_on(run(args))
}

/// The instance types the kwok and fake providers offer: `--catalog-file`, else the embedded
/// `--catalog`, filtered to `--region`. AWS and GCP discover their own (an empty list here).
///
/// # Errors
/// [`Error::Config`] naming the file and the bad entry, a catalog file given to a cloud
/// provider, or no instance type left for the region.
pub fn catalog_of(args: &RunArgs) -> Result<Vec<InstanceType>> {
    let cloud = matches!(args.provider, ProviderKind::Aws | ProviderKind::Gcp);
    let (mut catalog, source) = match &args.catalog_file {
        Some(_) if cloud => {
            return Err(Error::Config(
                "--catalog-file serves the kwok and fake providers; AWS and GCP read their \
                 instance types and prices from the cloud"
                    .into(),
            ));
        }
        Some(path) => {
            let types = providers::catalog::read_user_catalog(path)
                .map_err(|e| Error::Config(format!("--catalog-file {}: {e}", path.display())))?;
            (types, format!("catalog file {}", path.display()))
        }
        None => (
            providers::catalog::default_catalog_for(&args.catalog),
            format!("embedded {:?} catalog (catalogs: aws, gcp)", args.catalog),
        ),
    };
    if !args.region.is_empty() {
        catalog.retain(|t| t.labels.get(labels::REGION) == Some(&args.region));
    }
    if catalog.is_empty() && !cloud {
        return Err(Error::Config(format!(
            "no instance types in the {source} for region {:?}",
            args.region
        )));
    }
    Ok(catalog)
}

/// The instance types each NodePool's class offers, as `run` discovers them at start-up: the
/// kwok and fake providers' catalog ([`catalog_of`]) for every pool, or the cloud's answer per
/// node class (`--provider aws|gcp`). The leader's memory of refused offerings and of shapes
/// that delivered too little is not applied: it lives in the running controller only.
///
/// # Errors
/// A bad catalog setting ([`Error::Config`]), or the cloud provider's connection or listing
/// error.
pub async fn instance_types_for(
    args: &RunArgs,
    pools: &[Arc<NodePool>],
) -> Result<std::collections::BTreeMap<String, Arc<Vec<InstanceType>>>> {
    use kube::ResourceExt as _;
    #[cfg(any(feature = "aws", feature = "gcp"))]
    async fn per_class<P: CloudProvider>(
        provider: &P,
        pools: &[Arc<NodePool>],
    ) -> Result<std::collections::BTreeMap<String, Arc<Vec<InstanceType>>>> {
        let mut by_class: HashMap<NodeClassRef, Arc<Vec<InstanceType>>> = HashMap::new();
        let mut out = std::collections::BTreeMap::new();
        for np in pools {
            let class = class_of(np);
            let types = match by_class.get(&class) {
                Some(t) => t.clone(),
                None => {
                    let t = Arc::new(provider.instance_types(&class).await?);
                    by_class.insert(class, t.clone());
                    t
                }
            };
            out.insert(np.name_any(), types);
        }
        Ok(out)
    }
    match args.provider {
        ProviderKind::Kwok | ProviderKind::Fake => {
            let catalog = Arc::new(catalog_of(args)?);
            Ok(pools
                .iter()
                .map(|np| (np.name_any(), catalog.clone()))
                .collect())
        }
        #[cfg(feature = "aws")]
        ProviderKind::Aws => per_class(&connect_aws(args).await?, pools).await,
        #[cfg(feature = "gcp")]
        ProviderKind::Gcp => per_class(&connect_gcp(args).await?, pools).await,
        // `run` refuses these before it gets here; kept so that every build matches every kind.
        #[cfg(not(feature = "aws"))]
        ProviderKind::Aws => Err(Error::NotBuilt(crate::Cloud::Aws.feature())),
        #[cfg(not(feature = "gcp"))]
        ProviderKind::Gcp => Err(Error::NotBuilt(crate::Cloud::Gcp.feature())),
    }
}

/// The EC2 provider of `run`'s settings: the catalog comes from EC2, `--region` is the AWS
/// region.
#[cfg(feature = "aws")]
async fn connect_aws(args: &RunArgs) -> Result<provider_aws::AwsProvider> {
    args.aws
        .connect(Some(&args.region), Some(&args.cluster_name))
        .await
}

/// The Compute Engine provider of `run`'s settings: the catalog comes from Compute Engine,
/// `--endpoint-url` serves both clouds.
#[cfg(feature = "gcp")]
async fn connect_gcp(args: &RunArgs) -> Result<provider_gcp::GcpProvider> {
    args.gcp
        .connect(crate::gcp::Common {
            cluster: Some(&args.cluster_name),
            region: Some(&args.region),
            endpoint_url: args.aws.endpoint_url.as_deref(),
        })
        .await
}

/// Runs the controller until SIGTERM or SIGINT.
///
/// # Errors
/// Configuration, client or server errors, or lost leadership.
pub async fn run(args: RunArgs) -> Result<()> {
    // Bad settings, and a provider this build lacks, are refused before connecting.
    args.check()?;
    match args.provider {
        ProviderKind::Aws => crate::Cloud::Aws.require()?,
        ProviderKind::Gcp => crate::Cloud::Gcp.require()?,
        ProviderKind::Kwok | ProviderKind::Fake => {}
    }
    let catalog = catalog_of(&args)?;
    let config = kube::Config::infer()
        .await
        .map_err(|e| Error::KubeConfig(e.to_string()))?;
    let client =
        kube::Client::try_from(config.clone()).map_err(|e| Error::KubeConfig(e.to_string()))?;
    let evictions = {
        let mut c = config.clone();
        c.default_retry = false;
        kube::Client::try_from(c).map_err(|e| Error::KubeConfig(e.to_string()))?
    };
    match args.provider {
        ProviderKind::Kwok => {
            // kwok's machines are API objects. Its client leaves retries to the provider, so
            // an operation has one retry layer (kube's default would retry each call 15 times
            // on 429/503/504, under the provider's 5 attempts).
            let mut kwok_config = config;
            kwok_config.default_retry = false;
            let kwok_client = kube::Client::try_from(kwok_config)
                .map_err(|e| Error::KubeConfig(e.to_string()))?;
            let kwok = KwokProvider::new(
                kwok_client,
                catalog,
                KwokConfig {
                    cluster: args.cluster_name.clone(),
                    register_delay: args.kwok_register_delay,
                    ready_delay: args.kwok_ready_delay,
                    gpu_delay: args.kwok_gpu_delay,
                    launch_latency: args.kwok_launch_latency,
                    gpu_fraction: args.kwok_register_gpu_fraction,
                    faults: args.kwok_faults,
                    fault_seed: args.kwok_fault_seed,
                    register_taints: args.kwok_register_with_taints.0.clone(),
                    ..KwokConfig::default()
                },
            );
            run_with(client, evictions, Arc::new(kwok.clone()), Some(kwok), args).await
        }
        ProviderKind::Fake => {
            let fake = FakeProvider::new(catalog).with_cluster(args.cluster_name.clone());
            run_with(client, evictions, Arc::new(fake), None, args).await
        }
        #[cfg(feature = "aws")]
        ProviderKind::Aws => {
            let aws = connect_aws(&args).await?;
            run_with(client, evictions, Arc::new(aws), None, args).await
        }
        #[cfg(feature = "gcp")]
        ProviderKind::Gcp => {
            let gcp = connect_gcp(&args).await?;
            run_with(client, evictions, Arc::new(gcp), None, args).await
        }
        // Refused above (the same error); kept so that every build matches every kind.
        #[cfg(not(feature = "aws"))]
        ProviderKind::Aws => crate::Cloud::Aws.require(),
        #[cfg(not(feature = "gcp"))]
        ProviderKind::Gcp => crate::Cloud::Gcp.require(),
    }
}

/// Resolves on SIGINT or SIGTERM (SIGINT only off Unix).
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Runs the controller with `provider`; `evictions` is `client` without kube's retry layer
/// (see [`Actuator::new`]).
async fn run_with<P: CloudProvider + 'static>(
    client: kube::Client,
    evictions: kube::Client,
    provider: Arc<P>,
    kwok: Option<KwokProvider>,
    args: RunArgs,
) -> Result<()> {
    let me = identity(&args);
    let metrics = Arc::new(Metrics::new());
    metrics
        .build_info
        .get_or_create(&super::metrics::BuildLabel {
            version: env!("CARGO_PKG_VERSION").into(),
            provider: provider.name().into(),
        })
        .set(1);
    let health = Arc::new(Health {
        metrics: metrics.clone(),
        ready: AtomicBool::new(false),
        liveness: Liveness::new(args.stall_timeout),
    });
    let bound = super::metrics::serve(args.metrics_addr, health.clone()).await?;
    tracing::info!(identity = %me, metrics = %bound, provider = provider.name(), "starting");
    let stores = Stores::start(&client, args.optional_api_recheck).await;
    stores.ready().await;
    health.ready.store(true, Ordering::SeqCst);
    tracing::info!("caches synced");

    let (stop_tx, stop_rx) = watch::channel(false);
    let is_leader = Arc::new(AtomicBool::new(!args.leader_elect));
    let lease_cfg = LeaderConfig {
        namespace: args.namespace.clone(),
        name: args.lease_name.clone(),
        identity: me.clone(),
        lease_duration: args.lease_duration,
        retry: args.lease_retry,
    };
    let (lost_tx, mut lost_rx) = tokio::sync::mpsc::channel::<String>(1);
    if args.leader_elect {
        let (c, cfg, l, s) = (
            client.clone(),
            lease_cfg.clone(),
            is_leader.clone(),
            stop_rx.clone(),
        );
        tokio::spawn(async move {
            if let Err(why) = leader::run(c, cfg, l, s).await {
                let _ = lost_tx.send(why).await;
            }
        });
    }
    let qps = NonZeroU32::new(args.cloud_qps.max(1)).expect("non-zero");
    let shared = Arc::new(Shared {
        provider,
        actuator: Actuator::new(client.clone(), evictions, &me),
        metrics: metrics.clone(),
        limiter: RateLimiter::direct(Quota::per_second(qps)),
        unavailable: Mutex::new(UnavailableOfferings::default()),
        launching: Mutex::new(HashMap::new()),
        in_flight: Mutex::new(HashSet::new()),
        collecting_groups: AtomicBool::new(false),
        terminating: Mutex::new(HashMap::new()),
    });
    let mut ctl = Controller {
        shared,
        kwok,
        stores,
        batcher: Batcher::new(BatchConfig {
            idle_ms: u64::try_from(args.batch_idle.as_millis()).unwrap_or(u64::MAX),
            max_ms: u64::try_from(args.batch_max.as_millis()).unwrap_or(u64::MAX),
            replan_ms: u64::try_from(args.replan_interval.as_millis()).unwrap_or(u64::MAX),
        }),
        args: args.clone(),
        last_warm: None,
        warm_unseen: Vec::new(),
        warm_backoff: crate::controller::warm_backoff::WarmBackoff::new(
            crate::controller::settings::whole_seconds(args.launch_backoff),
            crate::controller::guard::GuardConfig::default().max_backoff_s,
        ),
        builder: SnapshotBuilder {
            ignore_preferences: args.preference_policy == PreferencePolicy::Ignore,
            min_values_policy: args.min_values_policy.to_core(),
            namespaces: Default::default(),
        },
        started: Instant::now(),
        types: HashMap::new(),
        disruption_state: DisruptionState::default(),
        jobs: Vec::new(),
        last_disruption: None,
        last_gc: None,
        last_pool_status: None,
        last_catalog_fetch: None,
        orphans: HashMap::new(),
        round_instances: None,
        held: HashSet::new(),
        expired: HashMap::new(),
        draining: HashMap::new(),
        notices: pod_problems::Notices::default(),
        nominations: BTreeMap::new(),
        shapes: autoscaler_core::provision::ShapeCache::default(),
        disruption_cache: autoscaler_core::disruption::DisruptionCache::default(),
        first_round: true,
        provreq_backoff_restored: false,
        provreq_memory: provreqs::Memory::default(),
        guard: GuardState::new(&args),
        identity: me.clone(),
        visibility: visibility::Visibility::default(),
        last_round_ms: 0,
        quota_problems: Default::default(),
        overlay_problems: Default::default(),
        health: None,
    };
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let mut lost: Option<String> = None;
    loop {
        let leading = is_leader.load(Ordering::SeqCst);
        metrics.leader.set(i64::from(leading));
        health
            .liveness
            .set_leading(leading, jiff::Timestamp::now().as_millisecond());
        if leading {
            ctl.round().await;
            let done = jiff::Timestamp::now().as_millisecond();
            health.liveness.round_done(done);
            metrics
                .last_round_timestamp_seconds
                .set(done as f64 / 1000.0);
        }
        tokio::select! {
            _ = tokio::time::sleep(args.loop_interval) => {}
            _ = &mut shutdown => {
                tracing::info!("shutting down");
                break;
            }
            why = lost_rx.recv() => {
                lost = why;
                break;
            }
        }
    }
    let _ = stop_tx.send(true);
    if let Some(why) = lost {
        return Err(Error::Config(format!("lost leadership: {why}")));
    }
    if args.leader_elect && is_leader.load(Ordering::SeqCst) {
        leader::release(client, &lease_cfg).await;
    }
    Ok(())
}
