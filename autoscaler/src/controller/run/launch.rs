//! Launching: the offerings a claim may take, the rate-limited and retried cloud calls, and
//! the launch tasks that record their outcome on the claim.
//!
//! # Placement groups
//!
//! Placement groups: a NodeClaim created from a `NewClaim` with a group carries the annotation
//! `gpu-autoscaler.dev/placement-group` = `providers::placement_group_name(cluster, group)`
//! (`gpu-autoscaler-<cluster>-<group>-<hash>`, at most 63 characters of `[a-z0-9-]`, valid on AWS
//! and GCP and as a label value), written before the cloud call like the claim itself; every launch
//! reads it back into `LaunchRequest::placement_group`, so a relaunch after a crash uses the same
//! group. Providers treat it as a preference (`CloudProvider::launch`). GC calls
//! `CloudProvider::collect_placement_groups` with the live instances, the groups claims still name,
//! and `--gc-grace`, in a background task (one at a time, no retry loop: the next GC pass is the
//! retry), so a slow or failing placement API never holds up the reconcile loop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use autoscaler_core::instance::InstanceType;
use autoscaler_core::offerings::candidates;
use autoscaler_core::overlay::{Overlay, apply_overlays};
use kube::ResourceExt;
use nodepools::conditions::{self, reasons};
use nodepools::{NodeClaim, NodeClaimStatus, NodePool};
use providers::{CloudProvider, LaunchRequest, NodeClassRef, ProviderError};
use serde_json::json;

use crate::controller::actuator::{reference, set_condition};
use crate::controller::error::{Error, Result};
use crate::controller::keys;
use crate::controller::metrics::{PoolLabel, ReasonLabel};

use super::guard::LaunchCatalog;
use super::provisioning::*;
use super::{Controller, InFlight, Shared, class_of, epoch};

/// The launch request of a claim: its candidates (minus offerings marked unavailable), the
/// node's labels (the claim's, plus the claim label) and taints.
fn launch_request<P: CloudProvider + 'static>(
    shared: &Shared<P>,
    claim: &NodeClaim,
    catalog: &LaunchCatalog,
    now: i64,
) -> Result<LaunchRequest> {
    let name = claim.name_any();
    let spec = claim
        .spec
        .to_core()
        .map_err(|e| Error::Config(format!("NodeClaim {name}: {e}")))?;
    let offered = {
        let u = shared.unavailable.lock().expect("lock");
        candidates(&spec.requirements, &catalog.types, &u, now)
    };
    let mut node_labels = claim.labels().clone();
    node_labels.insert(keys::CLAIM_LABEL.into(), name.clone());
    let request = LaunchRequest {
        claim: name.clone(),
        pool: spec.node_pool.clone(),
        class: claim
            .spec
            .node_class_ref
            .as_ref()
            .map(|c| NodeClassRef {
                group: c.group.clone(),
                kind: c.kind.clone(),
                name: c.name.clone(),
            })
            .unwrap_or_default(),
        candidates: offered.iter().map(|(k, _)| k.clone()).collect(),
        labels: node_labels,
        taints: spec.taints.clone(),
        startup_taints: spec.startup_taints.clone(),
        placement_group: placement_group_of(claim),
        gpu_sharing: catalog.sharing.clone(),
    };
    Ok(request)
}

/// The placement group a claim is to be launched into, as written by [`claim_object`].
pub fn placement_group_of(claim: &NodeClaim) -> Option<String> {
    claim
        .annotations()
        .get(keys::PLACEMENT_GROUP_ANNOTATION)
        .filter(|g| !g.is_empty())
        .cloned()
}

/// Records a launch's outcome on the claim: Launched with the instance, or Launched=False
/// with the capacity or request error (transient errors leave the claim Pending for a retry).
/// The claim's capacity and allocatable are the instance type as the NodePool's node (GPU
/// sharing applied): what it was launched for, which initialization checks the Node against.
async fn record_launch<P: CloudProvider + 'static>(
    shared: &Shared<P>,
    claim: &NodeClaim,
    catalog: &LaunchCatalog,
    result: Result<providers::Launched, ProviderError>,
    now: i64,
) -> Result<()> {
    let name = claim.name_any();
    let node_pool = claim.spec.node_pool.clone();
    let mut status: NodeClaimStatus = claim.status.clone().unwrap_or_default();
    let ts = jiff::Timestamp::now();
    match result {
        Ok(launched) => {
            shared
                .unavailable
                .lock()
                .expect("lock")
                .mark_all(launched.unavailable.clone(), now);
            let i = &launched.instance;
            let it = catalog.types.iter().find(|t| t.name == i.instance_type);
            status.provider_id = Some(i.provider_id.clone());
            status.instance_type = Some(i.instance_type.clone());
            status.zone = Some(i.zone.clone());
            status.capacity_type = Some(i.capacity_type.as_str().into());
            if let Some(it) = it {
                status.capacity = quantities(&it.capacity);
                status.allocatable = quantities(&it.allocatable());
            }
            set_condition(
                &mut status.conditions,
                (conditions::LAUNCHED, true),
                reasons::SUCCEEDED,
                "",
                ts,
                claim.metadata.generation,
            );
            set_condition(
                &mut status.conditions,
                (conditions::REGISTERED, false),
                reasons::NODE_NOT_FOUND,
                "waiting for the Node to join",
                ts,
                claim.metadata.generation,
            );
            shared
                .metrics
                .launches
                .get_or_create(&PoolLabel {
                    pool: node_pool.clone(),
                })
                .inc();
            tracing::info!(claim = %name, instance = %i.provider_id, instance_type = %i.instance_type, zone = %i.zone, "launched");
        }
        Err(e) => {
            let reason = match &e {
                ProviderError::InsufficientCapacity { offerings, .. } => {
                    shared
                        .unavailable
                        .lock()
                        .expect("lock")
                        .mark_all(offerings.clone(), now);
                    reasons::INSUFFICIENT_CAPACITY
                }
                ProviderError::InvalidRequest { .. } => reasons::LAUNCH_FAILED,
                // Transient and retried already: leave the claim Pending for the next round.
                _ => {
                    shared
                        .metrics
                        .launch_failures
                        .get_or_create(&ReasonLabel {
                            reason: "Transient".into(),
                        })
                        .inc();
                    return Err(e.into());
                }
            };
            shared
                .metrics
                .launch_failures
                .get_or_create(&ReasonLabel {
                    reason: reason.into(),
                })
                .inc();
            set_condition(
                &mut status.conditions,
                (conditions::LAUNCHED, false),
                reason,
                &e.to_string(),
                ts,
                claim.metadata.generation,
            );
            tracing::warn!(claim = %name, error = %e, "launch failed");
            shared
                .actuator
                .event(&reference(claim), true, reason, "Launch", e.to_string())
                .await;
        }
    }
    shared
        .actuator
        .patch_claim_status(&name, &json!(status))
        .await
}

/// Launches one claim and records the outcome on it.
async fn launch<P: CloudProvider + 'static>(
    shared: &Shared<P>,
    claim: &NodeClaim,
    catalog: &LaunchCatalog,
) -> Result<()> {
    let now = epoch();
    let request = launch_request(shared, claim, catalog, now)?;
    tracing::info!(claim = %request.claim, candidates = request.candidates.len(), "launching");
    let result = shared
        .cloud("launch", || shared.provider.launch(&request))
        .await;
    record_launch(shared, claim, catalog, result, now).await
}

/// Launches the claims of an all-or-nothing group with the provider's atomic group launch
/// when they share one template (the claim label is added at registration instead), or one
/// by one otherwise. A failed group launch fails every claim, so the caller rolls back.
async fn launch_group<P: CloudProvider + 'static>(
    shared: &Shared<P>,
    claims: &[Arc<NodeClaim>],
    catalog: &LaunchCatalog,
) -> Result<()> {
    let now = epoch();
    let mut requests = Vec::with_capacity(claims.len());
    for c in claims {
        let mut r = launch_request(shared, c, catalog, now)?;
        r.labels.remove(keys::CLAIM_LABEL);
        requests.push(r);
    }
    let shared_template = requests.windows(2).all(|w| {
        w[0].pool == w[1].pool
            && w[0].class == w[1].class
            && w[0].candidates == w[1].candidates
            && w[0].labels == w[1].labels
            && w[0].taints == w[1].taints
            && w[0].startup_taints == w[1].startup_taints
            && w[0].placement_group == w[1].placement_group
            && w[0].gpu_sharing == w[1].gpu_sharing
    });
    if !shared_template {
        tracing::info!(
            claims = claims.len(),
            "group claims differ: launching one by one"
        );
        for c in claims {
            launch(shared, c, catalog).await?;
        }
        return Ok(());
    }
    let result = shared
        .cloud("launch group", || shared.provider.launch_group(&requests))
        .await;
    match result {
        Ok(launched) => {
            tracing::info!(claims = claims.len(), "group launched atomically");
            for (c, l) in claims.iter().zip(launched) {
                record_launch(shared, c, catalog, Ok(l), now).await?;
            }
        }
        Err(e) => {
            for c in claims {
                record_launch(shared, c, catalog, Err(e.clone()), now).await?;
            }
        }
    }
    Ok(())
}

impl<P: CloudProvider + 'static> Controller<P> {
    /// The kwok provider's boot step (kwok only): instances launched become Nodes.
    pub(super) async fn boot_kwok_instances(&self) {
        if let Some(k) = &self.kwok
            && let Err(e) = k.materialize().await
        {
            tracing::warn!(error = %e, "kwok: booting instances");
        }
    }

    /// Instance types per NodePool name, refreshed every five minutes per node class, with the
    /// insufficient-capacity cache applied.
    pub(super) async fn instance_types(
        &mut self,
        pools: &[Arc<NodePool>],
    ) -> BTreeMap<String, Arc<Vec<InstanceType>>> {
        self.refresh_catalogs(pools).await;
        self.cached_instance_types(pools)
    }

    /// Fetches the catalog of every node class of `pools` not fetched in the last five minutes.
    pub(super) async fn refresh_catalogs(&mut self, pools: &[Arc<NodePool>]) {
        for np in pools {
            let class = class_of(np);
            let fresh = self
                .types
                .get(&class)
                .is_some_and(|(at, _)| at.elapsed() < Duration::from_secs(300));
            if !fresh {
                let shared = self.shared.clone();
                let c = class.clone();
                match shared
                    .cloud("instance types", || shared.provider.instance_types(&c))
                    .await
                {
                    Ok(t) => {
                        self.types
                            .insert(class.clone(), (Instant::now(), Arc::new(t)));
                    }
                    Err(e) => tracing::warn!(error = %e, "listing instance types"),
                }
            }
        }
    }

    /// [`Self::instance_types`] from the catalogs already fetched (no cloud call), with the
    /// NodeOverlays applied: pools whose node class has none yet are absent.
    pub(super) fn cached_instance_types(
        &self,
        pools: &[Arc<NodePool>],
    ) -> BTreeMap<String, Arc<Vec<InstanceType>>> {
        let now = epoch();
        let overlays = self.overlays();
        let mut out = BTreeMap::new();
        for np in pools {
            if let Some((_, t)) = self.types.get(&class_of(np)) {
                let mut t = apply_overlays(t, &overlays);
                self.shared
                    .unavailable
                    .lock()
                    .expect("lock")
                    .apply(&mut t, now);
                self.guard.shapes.apply_to_pool(&np.name_any(), &mut t, now);
                out.insert(np.name_any(), Arc::new(t));
            }
        }
        out
    }

    /// The NodeOverlays that parse; one that does not is left out and reported once per
    /// generation, naming the field.
    pub(super) fn overlays(&self) -> Vec<Overlay> {
        let Some(store) = self.stores.overlays.get() else {
            return Vec::new();
        };
        let objects = store.state();
        let (ok, refused) = crate::controller::overlays::parse(objects.iter().map(|o| o.as_ref()));
        let mut told = self.overlay_problems.lock().expect("lock");
        for r in refused {
            if told.insert(r.key.clone()) {
                tracing::warn!(overlay = %r.key, problems = %r.problems, "NodeOverlay left out: it does not parse");
            }
        }
        ok
    }

    /// Launches a group of claims of one NodePool in a task with [`launch_group`], unless one of
    /// them is being launched already.
    pub(super) fn spawn_group_launch(&self, claims: Vec<Arc<NodeClaim>>) {
        let names: Vec<String> = claims.iter().map(|c| c.name_any()).collect();
        {
            let mut l = self.shared.launching.lock().expect("lock");
            if names.iter().any(|n| l.contains_key(n)) {
                return;
            }
            for n in &names {
                l.insert(n.clone(), Instant::now());
            }
        }
        let pool = claims
            .first()
            .map(|c| c.spec.node_pool.clone())
            .unwrap_or_default();
        let catalog = self.launch_catalog(&pool);
        if catalog.is_none() || claims.iter().any(|c| c.spec.node_pool != pool) {
            // No catalog yet, or claims of several pools (no shared template): next round,
            // or one by one.
            let mut l = self.shared.launching.lock().expect("lock");
            for n in &names {
                l.remove(n);
            }
            drop(l);
            if catalog.is_some() {
                for c in claims {
                    self.spawn_launch(c);
                }
            }
            return;
        }
        let Some(catalog) = catalog else { return };
        let shared = self.shared.clone();
        let guard = InFlight::new(&shared, names.clone());
        tokio::spawn(async move {
            let _guard = guard;
            if let Err(e) = launch_group(&shared, &claims, &catalog).await {
                tracing::warn!(claims = ?names, error = %e, "group launch");
            }
        });
    }

    /// Launches in a task: rate-limited, retried, and recorded on the claim.
    pub(super) fn spawn_launch(&self, claim: Arc<NodeClaim>) {
        let name = claim.name_any();
        {
            let mut l = self.shared.launching.lock().expect("lock");
            if l.contains_key(&name) {
                return;
            }
            l.insert(name.clone(), Instant::now());
        }
        let shared = self.shared.clone();
        let pool = claim.spec.node_pool.clone();
        let Some(catalog) = self.launch_catalog(&pool) else {
            // No catalog yet (the provider did not answer): try again next round rather than
            // fail the claim for want of candidates.
            self.shared.launching.lock().expect("lock").remove(&name);
            return;
        };
        let guard = InFlight::new(&shared, vec![name]);
        tokio::spawn(async move {
            let _guard = guard;
            if let Err(e) = launch(&shared, &claim, &catalog).await {
                tracing::warn!(claim = %claim.name_any(), error = %e, "launch");
            }
        });
    }
}
