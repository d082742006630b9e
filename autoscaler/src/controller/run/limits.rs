//! Cluster-wide limits for the snapshots: the `--max-nodes-total`, `--cores-total`,
//! `--memory-total` and `--gpu-total` flags, and every CapacityQuota object (once its CRD is
//! served). A quota that does not parse is left out and reported once per generation, naming
//! the field.

use autoscaler_core::model::ClusterLimit;
use kube::ResourceExt;
use providers::CloudProvider;

use super::Controller;

impl<P: CloudProvider + 'static> Controller<P> {
    /// The flags' limit (if any flag is set), then each valid CapacityQuota by name.
    pub(super) fn cluster_limits(&mut self) -> Vec<ClusterLimit> {
        let mut out: Vec<ClusterLimit> = self.args.limits.to_core().into_iter().collect();
        let Some(store) = self.stores.quotas.get() else {
            return out;
        };
        let mut quotas = store.state();
        quotas.sort_by_key(|q| q.name_any());
        for q in quotas {
            match q.to_core() {
                Ok(l) => out.push(l),
                Err(e) => {
                    let key = format!("{}@{}", q.name_any(), q.metadata.generation.unwrap_or(0));
                    if self.quota_problems.insert(key) {
                        tracing::warn!(
                            quota = %q.name_any(),
                            problems = %e,
                            "CapacityQuota left out: it does not parse"
                        );
                    }
                }
            }
        }
        out
    }
}
