//! `gpu-autoscaler explain pod NAMESPACE/NAME | node NAME | nodepool NAME`: why a pod is
//! pending, why a node stays (or goes), where a NodePool stands, asked of a live cluster.
//!
//! It reads the cluster once, as the user running it (kubeconfig, or the in-cluster config):
//! a list of Pods, Nodes, NodePools, NodeClaims, DaemonSets and PodDisruptionBudgets across
//! all namespaces, and, with `--provider aws|gcp`, the cloud's instance types and prices. It
//! turns them into the core's snapshot with the controller's own translation and snapshot
//! code ([`crate::controller::snapshot`]), takes the instance types from the same settings as
//! `run` (`--provider`, `--catalog`, `--catalog-file`, `--region`, and the disruption flags),
//! and asks the core ([`autoscaler_core::explain`]) for the answer. Nothing is written.
//!
//! What the running controller keeps only in memory is approximated from the objects: a
//! node's unneeded time counts from the `lastTransitionTime` of its claim's `Consolidatable`
//! condition when that is `True`, the last scale-up is the newest NodeClaim's creation, and
//! the offerings the cloud recently refused, the shapes that delivered too little, the
//! bookings of ProvisioningRequests and the gang minimums of PodGroups are not known. The
//! node answer therefore also prints the condition the controller wrote, which is its own
//! word.
//!
//! `--json` prints one object of a stable shape: `apiVersion` ([`API_VERSION`]), `kind`
//! (`Pod`, `Node`, `NodePool`) and the explanation under `pod`, `node` or `nodePool` (the
//! core's types in camelCase); a node's also carries `nodeClaim` and `condition`. Fields
//! are only ever added.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use autoscaler_core::disruption::{DisruptionState, plan_disruption};
use autoscaler_core::explain::{self, Outcome, PodExplanation};
use autoscaler_core::instance::InstanceType;
use autoscaler_core::model::PodKey;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};
use nodepools::{NodeClaim, NodeOverlay, NodePool};
use serde_json::{Value, json};

use crate::controller::cache::CachedPod;
use crate::controller::consolidatable;
use crate::controller::gangs::GangObjects;
use crate::controller::settings::RunArgs;
use crate::controller::snapshot::{Built, Inputs, SnapshotBuilder};
use crate::controller::volumes::{VolumeIndex, VolumeObjects};
use crate::controller::{Error, Result, pod_problems, provreq, translate};

/// The `apiVersion` of `explain --json` output.
pub const API_VERSION: &str = "gpu-autoscaler.dev/explain/v1";

/// What kind of object to explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A pod, written `NAMESPACE/NAME`: why it is pending, or where it goes.
    Pod,
    /// A node: why it stays, or why it was chosen for removal.
    Node,
    /// A NodePool: usage against limits, budgets, instance types left out and why.
    Nodepool,
}

/// Options of `explain`: the object, `--json`, and every option of `run`, so that the
/// instance types (`--provider`, `--catalog`, `--catalog-file`, `--region`) and the
/// disruption settings are the controller's.
#[derive(clap::Args, Clone, Debug)]
pub struct ExplainArgs {
    /// What to explain.
    #[arg(value_enum)]
    pub kind: Kind,
    /// Its name: `NAMESPACE/NAME` for a pod, the name for a node or a NodePool.
    pub name: String,
    /// Print JSON (`apiVersion: gpu-autoscaler.dev/explain/v1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// The controller's settings.
    #[command(flatten)]
    pub settings: RunArgs,
}

/// The object asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A pod.
    Pod(PodKey),
    /// A node.
    Node(String),
    /// A NodePool.
    Pool(String),
}

impl Target {
    /// The target `name` names for `kind`.
    ///
    /// # Errors
    /// [`Error::Usage`] for a pod not written `NAMESPACE/NAME`, or an empty name.
    pub fn parse(kind: Kind, name: &str) -> Result<Target> {
        let plain = |what: &str| {
            if name.is_empty() || name.contains('/') {
                Err(Error::Usage(format!(
                    "{what} name {name:?}: expected NAME, without a namespace"
                )))
            } else {
                Ok(name.to_string())
            }
        };
        match kind {
            Kind::Pod => match name.split_once('/') {
                Some((ns, n)) if !ns.is_empty() && !n.is_empty() && !n.contains('/') => {
                    Ok(Target::Pod(PodKey {
                        namespace: ns.to_string(),
                        name: n.to_string(),
                    }))
                }
                _ => Err(Error::Usage(format!(
                    "pod {name:?}: expected NAMESPACE/NAME, e.g. default/train-0"
                ))),
            },
            Kind::Node => plain("node").map(Target::Node),
            Kind::Nodepool => plain("NodePool").map(Target::Pool),
        }
    }
}

/// The cluster as one read of the API.
#[derive(Clone, Debug, Default)]
pub struct ClusterRead {
    /// Every pod, as the controller caches it.
    pub pods: Vec<Arc<CachedPod>>,
    /// The phase of every finished pod.
    pub finished: BTreeMap<PodKey, String>,
    /// Every node.
    pub nodes: Vec<Arc<Node>>,
    /// Every NodePool.
    pub pools: Vec<Arc<NodePool>>,
    /// Every NodeClaim.
    pub claims: Vec<Arc<NodeClaim>>,
    /// Every DaemonSet.
    pub daemonsets: Vec<Arc<DaemonSet>>,
    /// Every PodDisruptionBudget.
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    /// Every NodeOverlay (none when its CRD is not installed).
    pub overlays: Vec<Arc<NodeOverlay>>,
    /// Every PersistentVolumeClaim, PersistentVolume and StorageClass (volume topology).
    pub volumes: VolumeObjects,
    /// Each Namespace's labels, by name (pod affinity terms selecting namespaces by label).
    pub namespaces: BTreeMap<String, autoscaler_core::requirements::Labels>,
    /// Plan without pods' preferences, as the controller does under
    /// `--preference-policy=ignore` (false from [`ClusterRead::list`]; the caller sets it).
    pub ignore_preferences: bool,
    /// Plan under the controller's `--min-values-policy` (`Strict` from [`ClusterRead::list`];
    /// the caller sets it).
    pub min_values_policy: autoscaler_core::model::MinValuesPolicy,
}

/// Every object of kind `K`, 500 at a time.
async fn list_all<K>(api: Api<K>, what: &str) -> Result<Vec<Arc<K>>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|e| Error::kube(format!("listing {what}"), e))?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        out.extend(page.items.into_iter().map(Arc::new));
        match next {
            Some(c) => params = params.continue_token(&c),
            None => return Ok(out),
        }
    }
}

impl ClusterRead {
    /// Lists everything an explanation reads.
    ///
    /// # Errors
    /// [`Error::Kube`] naming the list that failed (no access, no server).
    pub async fn list(client: &kube::Client) -> Result<Self> {
        let raw = list_all(Api::<Pod>::all(client.clone()), "pods").await?;
        let mut finished = BTreeMap::new();
        let mut pods = Vec::with_capacity(raw.len());
        for p in raw {
            let p = Arc::unwrap_or_clone(p);
            if !translate::is_active(&p) {
                let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                finished.insert(translate::pod_key(&p), phase.unwrap_or_default());
            }
            pods.push(Arc::new(CachedPod::from(p)));
        }
        Ok(ClusterRead {
            pods,
            finished,
            nodes: list_all(Api::all(client.clone()), "nodes").await?,
            pools: list_all(Api::all(client.clone()), "NodePools").await?,
            claims: list_all(Api::all(client.clone()), "NodeClaims").await?,
            daemonsets: list_all(Api::all(client.clone()), "DaemonSets").await?,
            pdbs: list_all(Api::all(client.clone()), "PodDisruptionBudgets").await?,
            overlays: match list_all(Api::all(client.clone()), "NodeOverlays").await {
                Err(e) if e.status() == Some(404) => Vec::new(),
                other => other?,
            },
            volumes: VolumeObjects {
                claims: list_all(Api::all(client.clone()), "PersistentVolumeClaims").await?,
                volumes: list_all(Api::all(client.clone()), "PersistentVolumes").await?,
                classes: list_all(Api::all(client.clone()), "StorageClasses").await?,
                // As the controller reads them: optional, so a role without them (or an
                // API server without them) costs the attach limits only.
                csi_nodes: match list_all(Api::all(client.clone()), "CSINodes").await {
                    Err(e) if matches!(e.status(), Some(403 | 404)) => Vec::new(),
                    other => other?,
                },
            },
            // A role without Namespaces costs the terms that select them by label only.
            namespaces: crate::controller::snapshot::namespace_labels(
                match list_all::<Namespace>(Api::all(client.clone()), "Namespaces").await {
                    Err(e) if matches!(e.status(), Some(403 | 404)) => Vec::new(),
                    other => other?,
                }
                .iter()
                .map(|n| n.as_ref()),
            ),
            ignore_preferences: false,
            min_values_policy: Default::default(),
        })
    }

    /// The snapshot the controller would build, with `pending` as the pods to plan for.
    fn built(
        &self,
        types: &BTreeMap<String, Arc<Vec<InstanceType>>>,
        pending: &BTreeSet<PodKey>,
        for_disruption: bool,
    ) -> Built {
        let gangs = GangObjects::default();
        let volumes = VolumeIndex::new(&self.volumes);
        let inputs = Inputs {
            pods: &self.pods,
            nodes: &self.nodes,
            pools: &self.pools,
            claims: &self.claims,
            daemonsets: &self.daemonsets,
            pdbs: &self.pdbs,
            instance_types: types,
            pending,
            gangs: &gangs,
            dra: &Default::default(),
            volumes: &volumes,
        };
        let mut builder = SnapshotBuilder {
            ignore_preferences: self.ignore_preferences,
            min_values_policy: self.min_values_policy,
            namespaces: self.namespaces.clone(),
        };
        let mut built = if for_disruption {
            builder.build_for_disruption(&inputs)
        } else {
            builder.build(&inputs)
        };
        provreq::offer_pin(&mut built.snapshot);
        built
    }

    /// The names of the nodes not being deleted.
    fn nodes_up(&self) -> BTreeSet<&str> {
        self.nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .filter_map(|n| n.metadata.name.as_deref())
            .collect()
    }

    /// The pods the controller plans for: the unschedulable ones, but for those preempting
    /// pods on a node that is up ([`CachedPod::preempting`]).
    fn unschedulable(&self) -> BTreeSet<PodKey> {
        let up = self.nodes_up();
        self.pods
            .iter()
            .filter(|p| p.unschedulable && !p.preempting(|n| up.contains(n)))
            .map(|p| p.key.clone())
            .collect()
    }

    /// What the leader remembers between disruption rounds, read back from the objects: each
    /// candidate's unneeded time from its claim's `Consolidatable=True` transition, and each
    /// NodePool's last scale-up from its newest NodeClaim.
    fn disruption_state(&self) -> DisruptionState {
        let mut state = DisruptionState::default();
        for c in &self.claims {
            let pool = c
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::controller::keys::POOL_LABEL));
            if let (Some(t), Some(pool)) = (&c.metadata.creation_timestamp, pool) {
                let t = translate::epoch_seconds(t);
                let last = &mut state.pools.entry(pool.clone()).or_default().last_scale_up;
                *last = Some(last.map_or(t, |l| l.max(t)));
            }
            let Some(status) = &c.status else { continue };
            let Some(node) = &status.node_name else {
                continue;
            };
            if let Some(cond) = status
                .conditions
                .iter()
                .find(|k| k.type_ == consolidatable::CONDITION && k.status == "True")
            {
                state.unneeded_since.insert(
                    node.clone(),
                    translate::epoch_seconds(&cond.last_transition_time),
                );
            }
        }
        state
    }
}

/// An answer: the text, and the JSON object.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// Plain text for a terminal.
    pub text: String,
    /// The `--json` object.
    pub json: Value,
}

/// The answer about `target` in `read`, with `types` per NodePool, the disruption settings of
/// `settings` and `now` (seconds since the epoch).
///
/// # Errors
/// [`Error::NotFound`] naming the object; [`Error::Usage`] for a node that cannot be read.
pub fn answer(
    target: &Target,
    read: &ClusterRead,
    types: &BTreeMap<String, Arc<Vec<InstanceType>>>,
    settings: &RunArgs,
    now: i64,
) -> Result<Answer> {
    let found = |kind: &'static str, name: &str, there: bool| {
        if there {
            Ok(())
        } else {
            Err(Error::NotFound {
                kind,
                name: name.to_string(),
            })
        }
    };
    match target {
        Target::Pod(key) => {
            let e = explain_pod(key, read, types)?;
            Ok(Answer {
                text: e.render(),
                json: json!({"apiVersion": API_VERSION, "kind": "Pod", "pod": e}),
            })
        }
        Target::Node(name) => {
            found(
                "node",
                name,
                read.nodes.iter().any(|n| n.name_any() == *name),
            )?;
            let built = read.built(types, &read.unschedulable(), true);
            explain_node(name, read, &built, settings, now)
        }
        Target::Pool(name) => {
            found(
                "NodePool",
                name,
                read.pools.iter().any(|p| p.name_any() == *name),
            )?;
            let built = read.built(types, &read.unschedulable(), true);
            explain_pool(name, read, &built, settings, now)
        }
    }
}

/// Why `object` (`pod ns/name`, `node name`) is not in the snapshot.
fn left_out(built: &Built, object: &str) -> String {
    built
        .problems
        .iter()
        .find(|(o, _)| o == object)
        .map_or_else(
            || "left out of the snapshot".to_string(),
            |(_, w)| w.clone(),
        )
}

fn explain_pod(
    key: &PodKey,
    read: &ClusterRead,
    types: &BTreeMap<String, Arc<Vec<InstanceType>>>,
) -> Result<PodExplanation> {
    let Some(p) = read.pods.iter().find(|p| &p.key == key) else {
        return Err(Error::NotFound {
            kind: "pod",
            name: key.to_string(),
        });
    };
    let done = |outcome| PodExplanation {
        pod: key.clone(),
        outcome,
        pools: vec![],
        hints: vec![],
        given_up: vec![],
    };
    if let Some(phase) = read.finished.get(key) {
        return Ok(done(Outcome::Finished {
            phase: phase.clone(),
        }));
    }
    if let Some(node) = &p.node_name {
        return Ok(done(Outcome::Bound {
            node: node.to_string(),
        }));
    }
    // The scheduler binds a preempting pod to its nominated node once the victims are gone.
    let up = read.nodes_up();
    if let Some(node) = p.nominated_node.as_deref()
        && p.preempting(|n| up.contains(n))
    {
        return Ok(done(Outcome::ExistingNode {
            node: node.to_string(),
        }));
    }
    if let Err(e) = p.core.as_ref() {
        return Ok(done(Outcome::Unschedulable {
            reason: pod_problems::not_triggered(e),
        }));
    }
    let mut pending = read.unschedulable();
    pending.insert(key.clone());
    let built = read.built(types, &pending, false);
    match explain::explain_pod(&built.snapshot, key) {
        Some(e) => Ok(e),
        None => {
            // Left out on purpose (a volume claim, DRA claim or PodGroup it waits for) says
            // why, as the controller's event does.
            let reason = match built.refused.iter().find(|(k, _)| k == key) {
                Some((_, why)) => pod_problems::not_triggered(why),
                None => left_out(&built, &format!("pod {key}")),
            };
            Ok(done(Outcome::Unschedulable { reason }))
        }
    }
}

fn explain_node(
    name: &str,
    read: &ClusterRead,
    built: &Built,
    settings: &RunArgs,
    now: i64,
) -> Result<Answer> {
    let state = read.disruption_state();
    let config = settings.disruption_config();
    let Some(e) = explain::explain_node(&built.snapshot, &state, now, &config, name) else {
        let why = left_out(built, &format!("node {name}"));
        return Err(Error::Usage(format!("node {name} cannot be read: {why}")));
    };
    let claim = read
        .claims
        .iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name));
    let condition = claim.and_then(|c| {
        c.status
            .as_ref()?
            .conditions
            .iter()
            .find(|k| k.type_ == consolidatable::CONDITION)
            .cloned()
    });
    let mut text = e.render();
    match (claim, &condition) {
        (Some(c), Some(k)) => text.push_str(&format!(
            "  NodeClaim {}: the controller's last round wrote Consolidatable={} {} (since {}): {}\n",
            c.name_any(),
            k.status,
            k.reason,
            k.last_transition_time.0,
            k.message
        )),
        (Some(c), None) => text.push_str(&format!(
            "  NodeClaim {}: no Consolidatable condition yet\n",
            c.name_any()
        )),
        (None, _) => {}
    }
    let condition = condition.map(|k| {
        json!({
            "status": k.status,
            "reason": k.reason,
            "message": k.message,
            "lastTransitionTime": k.last_transition_time.0.to_string(),
        })
    });
    Ok(Answer {
        text,
        json: json!({
            "apiVersion": API_VERSION,
            "kind": "Node",
            "node": e,
            "nodeClaim": claim.map(|c| c.name_any()),
            "condition": condition,
        }),
    })
}

fn explain_pool(
    name: &str,
    read: &ClusterRead,
    built: &Built,
    settings: &RunArgs,
    now: i64,
) -> Result<Answer> {
    if let Some(problem) = built.invalid_pools.get(name) {
        return Ok(Answer {
            text: format!(
                "NodePool {name}\n  left out of planning: its spec does not validate: {problem}\n"
            ),
            json: json!({"apiVersion": API_VERSION, "kind": "NodePool", "invalid": problem}),
        });
    }
    let plan = plan_disruption(
        &built.snapshot,
        &read.disruption_state(),
        now,
        &settings.disruption_config(),
    );
    let e = explain::explain_pool(&built.snapshot, name, &plan.verdicts, now).ok_or_else(|| {
        Error::NotFound {
            kind: "NodePool",
            name: name.to_string(),
        }
    })?;
    Ok(Answer {
        text: e.render(),
        json: json!({"apiVersion": API_VERSION, "kind": "NodePool", "nodePool": e}),
    })
}

/// `gpu-autoscaler explain`: the answer as text, or as JSON with `--json`.
///
/// # Errors
/// A malformed name or bad catalog setting (before connecting), no kubeconfig or in-cluster
/// configuration, a failed list, or the object not found: each one line naming the thing.
pub async fn run(args: &ExplainArgs) -> Result<String> {
    let target = Target::parse(args.kind, &args.name)?;
    // Bad settings are refused before connecting, as `run` does.
    if matches!(
        args.settings.provider,
        crate::controller::settings::ProviderKind::Kwok
            | crate::controller::settings::ProviderKind::Fake
    ) {
        crate::controller::run::catalog_of(&args.settings)?;
    }
    let config = kube::Config::infer()
        .await
        .map_err(|e| Error::KubeConfig(e.to_string()))?;
    let client = kube::Client::try_from(config).map_err(|e| Error::KubeConfig(e.to_string()))?;
    let mut read = ClusterRead::list(&client).await?;
    read.ignore_preferences =
        args.settings.preference_policy == crate::controller::settings::PreferencePolicy::Ignore;
    read.min_values_policy = args.settings.min_values_policy.to_core();
    let types = crate::controller::run::instance_types_for(&args.settings, &read.pools).await?;
    // As the controller plans: overlays that do not parse are left out (it logs them).
    let (overlays, _) =
        crate::controller::overlays::parse(read.overlays.iter().map(|o| o.as_ref()));
    let types = crate::controller::overlays::apply(types, &overlays);
    let now = jiff::Timestamp::now().as_second();
    let a = answer(&target, &read, &types, &args.settings, now)?;
    Ok(if args.json {
        // A `Value` of strings, numbers and maps always serializes.
        serde_json::to_string_pretty(&a.json).unwrap_or_default() + "\n"
    } else {
        a.text
    })
}

/// [`run`] on a runtime of its own.
///
/// # Errors
/// As [`run`], and a runtime that does not start.
pub fn run_blocking(args: &ExplainArgs) -> Result<String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Config(format!("starting the async runtime: {e}")))?
        .block_on(run(args))
}
