//! Garbage collection: instances without a claim and claims without an instance.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use kube::ResourceExt;
use providers::{CloudProvider, InstanceState, ProviderError};

use crate::controller::lifecycle::{self, Phase};

use super::launch::*;
use super::{Controller, due, epoch};

impl<P: CloudProvider + 'static> Controller<P> {
    /// The stage: garbage collection every `--gc-interval`.
    pub(super) async fn gc_stage(&mut self) {
        if due(&mut self.last_gc, self.args.gc_interval) {
            let t = Instant::now();
            self.gc().await;
            self.observe("gc", t);
        }
    }

    /// Instances without a claim (after the grace period) are terminated; claims whose
    /// instance is gone are deleted.
    async fn gc(&mut self) {
        let shared = self.shared.clone();
        let instances = match shared.cloud("list", || shared.provider.list()).await {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "gc: listing instances");
                return;
            }
        };
        let claims = self.stores.claims.state();
        let names: HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
        let now = epoch();
        let grace = crate::controller::settings::whole_seconds(self.args.gc_grace);
        let mut still = HashMap::new();
        for i in &instances {
            let owned = i.claim.as_ref().is_some_and(|c| names.contains(c));
            if owned || i.state == InstanceState::Terminated {
                continue;
            }
            let since = self.orphans.get(&i.provider_id).copied().unwrap_or(now);
            if now - since >= grace {
                tracing::info!(instance = %i.provider_id, "gc: terminating instance without a NodeClaim");
                match shared
                    .cloud("gc", || shared.provider.delete(&i.provider_id))
                    .await
                {
                    Ok(()) => {
                        shared.metrics.gc_instances.inc();
                    }
                    Err(e) => tracing::warn!(error = %e, "gc: terminating"),
                }
            } else {
                still.insert(i.provider_id.clone(), since);
            }
        }
        self.orphans = still;
        let live: HashSet<&str> = instances
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .map(|i| i.provider_id.as_str())
            .collect();
        for c in &claims {
            let Some(pid) = lifecycle::provider_id(c) else {
                continue;
            };
            if live.contains(pid) || lifecycle::phase(c) == Phase::Deleting {
                continue;
            }
            let gone = match shared.cloud("get", || shared.provider.get(pid)).await {
                Err(ProviderError::NotFound { .. }) => true,
                Ok(i) => i.state == InstanceState::Terminated,
                Err(_) => false,
            };
            if gone {
                tracing::info!(claim = %c.name_any(), "gc: instance is gone, deleting NodeClaim");
                let _ = shared.actuator.delete_claim(&c.name_any()).await;
            }
        }
        // Placement groups no live instance is in and no claim names any more (a claim's
        // group must survive until its launch, however late). In the background, one
        // collection at a time and without the retry loop: the next GC pass is the retry,
        // and the reconcile loop never waits on the cloud's placement API.
        let keep: BTreeSet<String> = claims
            .iter()
            .filter_map(|c| placement_group_of(c))
            .collect();
        if shared.collecting_groups.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(async move {
            // Cleared however the task ends (a panic too), or collection would stop for good.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(false, Ordering::SeqCst);
                }
            }
            let _done = Done(&shared.collecting_groups);
            shared.limiter.until_ready().await;
            match shared
                .provider
                .collect_placement_groups(&instances, &keep, grace)
                .await
            {
                Ok(deleted) => {
                    for g in deleted {
                        tracing::info!(placement_group = %g, "gc: deleted unused placement group");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "gc: collecting placement groups"),
            }
        });
    }
}
