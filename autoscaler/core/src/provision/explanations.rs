//! Explanations: the reason a pod gets no place, summarised for its event.

use crate::requirements::Requirements;
use crate::resources::{Resources, format_amount};

use super::Planner;
use super::shapes::{Shape, term_fits_shape};

impl<'a> Planner<'a> {
    pub(super) fn summarize(&self, mut reasons: Vec<String>) -> String {
        if self.snap.pools.is_empty() {
            return "no NodePool exists".into();
        }
        if !reasons.is_empty() && reasons.iter().all(|r| r.starts_with("taint ")) {
            let mut taints: Vec<String> = reasons
                .iter()
                .filter_map(|r| {
                    r.strip_prefix("taint ")
                        .and_then(|r| r.split(" of NodePool").next())
                        .map(str::to_string)
                })
                .collect();
            taints.dedup();
            return format!(
                "taint {} not tolerated by any NodePool the pod can use",
                taints.join(", ")
            );
        }
        reasons.dedup();
        if reasons.is_empty() {
            return "no NodePool can launch a node for this pod".into();
        }
        reasons.join("; ")
    }

    pub(super) fn no_fit_reason(
        &self,
        pi: usize,
        ci: usize,
        term: &Requirements,
        need: &Resources,
    ) -> String {
        let pool = &self.snap.pools[pi];
        let compatible: Vec<&Shape> = self
            .shapes
            .iter()
            .enumerate()
            .filter(|(s, sh)| {
                sh.pool == pi && self.classes[ci].shape_ok[*s] && term_fits_shape(term, sh)
            })
            .map(|(_, sh)| sh)
            .collect();
        if compatible.is_empty() {
            if self.classes[ci].share && !pool.sharing.fractional {
                return format!(
                    "NodePool {} does not offer fractional GPU shares (gpuSharing.fractional)",
                    pool.name
                );
            }
            let class = &self.classes[ci];
            let port_taken = self
                .shapes
                .iter()
                .filter(|sh| sh.pool == pi && term_fits_shape(term, sh))
                .flat_map(|sh| sh.host_ports.iter())
                .find(|(h, _)| class.host_ports.iter().any(|w| w.conflicts(h)));
            if let Some((port, ds)) = port_taken {
                return format!(
                    "host port {} is taken by DaemonSet {ds} on the nodes of NodePool {}",
                    port.describe(),
                    pool.name
                );
            }
            let any_in_pool = self.shapes.iter().any(|s| s.pool == pi);
            if !any_in_pool {
                return format!(
                    "NodePool {} has no instance type with an available offering",
                    pool.name
                );
            }
            return format!(
                "no instance type in NodePool {} matches the pod's node selector and affinity",
                pool.name
            );
        }
        // The resource that fails everywhere decides the message, as users read it.
        for (name, amount) in need.iter() {
            if compatible.iter().all(|s| s.allocatable.get(name) < amount) {
                return format!(
                    "no instance type in NodePool {} offers {} {name}",
                    pool.name,
                    format_amount(name, amount)
                );
            }
        }
        format!(
            "no instance type in NodePool {} fits the pod's requests {need} together",
            pool.name
        )
    }
}
