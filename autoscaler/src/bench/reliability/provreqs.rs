//! Booked ProvisioningRequests in the replay, as Kueue makes them: a PodTemplate and a
//! `best-effort-atomic-scale-up` request for GPU pods; once booked, the pods that consume it
//! (bare, `do-not-disrupt`); then the request deleted, as Kueue does when the workload ends.
//! While a request holds capacity, a Node of its booking carrying the disruption taint or
//! being deleted by anyone but the benchmark is a safety violation.
//!
//! The ProvisioningRequest CRD is not ours: it comes from the shared data
//! (`crds/autoscaling.x-k8s.io_provisioningrequests.yaml`); without it, or against a given
//! server that does not serve it, the replay says so and has no requests.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use autoscaler::controller::Result;
use autoscaler::controller::provreq::{self, ProvisioningRequest, State, Target};
use k8s_openapi::api::core::v1::PodTemplate;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::workload::pod_template;
use super::{Bench, GPU_POOL, NS};
use crate::bench::e2e::{cfg, kerr};

/// The CRD file's name in the shared data.
const CRD_FILE: &str = "crds/autoscaling.x-k8s.io_provisioningrequests.yaml";
/// Requests live at once.
const LIVE: usize = 2;
/// A request not booked after this long is withdrawn (as Kueue's admission check would retry
/// it as a new one).
const GIVE_UP: Duration = Duration::from_secs(60);

/// The ProvisioningRequest CRD: `explicit`, else `$GPU_AUTOSCALER_SHARED_DATA`, else the first
/// `shared/data` beside the current directory or one of its ancestors.
pub(super) fn crd_path(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(d) = std::env::var_os("GPU_AUTOSCALER_SHARED_DATA") {
        return Some(PathBuf::from(d).join(CRD_FILE));
    }
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .map(|a| a.join("shared/data").join(CRD_FILE))
        .find(|p| p.exists())
}

/// One request of the benchmark's.
pub(super) struct Request {
    created: Instant,
    /// Its consuming pods were created.
    consumed: bool,
    /// Seen holding capacity (Launching or Booked) at least once.
    pub(super) booked: bool,
}

impl Bench<'_> {
    fn requests_api(&self) -> Api<ProvisioningRequest> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Whether the server serves ProvisioningRequests (a given server may not).
    pub(super) async fn provreqs_served(&self) -> bool {
        self.requests_api()
            .list(&ListParams::default().limit(1))
            .await
            .is_ok()
    }

    /// One request event: a new request while fewer than [`LIVE`] are live; else the oldest
    /// one's pods when it is booked, or its deletion once consumed, over or given up.
    pub(super) async fn provreq_event(&mut self) -> Result<usize> {
        if self.requests.len() < LIVE {
            return self.new_request().await;
        }
        let Some(name) = self.requests.keys().next().cloned() else {
            return Ok(0);
        };
        let pr = self.requests_api().get_opt(&name).await.ok().flatten();
        let state = pr.as_ref().map(provreq::state);
        let r = &self.requests[&name];
        if matches!(state, Some(State::Booked { .. })) && !r.consumed {
            let count = pr.as_ref().map_or(0, provreq::total_pods);
            for i in 0..count {
                self.consuming_pod(&name, i).await?;
            }
            if let Some(r) = self.requests.get_mut(&name) {
                r.consumed = true;
            }
            return Ok(count as usize);
        }
        let over = matches!(state, None | Some(State::Done));
        if r.consumed || over || r.created.elapsed() > GIVE_UP {
            self.delete_request(&name).await;
            return Ok(1);
        }
        Ok(0)
    }

    async fn new_request(&mut self) -> Result<usize> {
        let name = format!(
            "job-{}-{}",
            self.started_controllers,
            self.rng.below(1_000_000)
        );
        let template = format!("ppt-{name}-main");
        let mut t = pod_template(&name, GPU_POOL, true, json!({}));
        t["spec"]["restartPolicy"] = json!("Never");
        let pt: PodTemplate = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": template, "namespace": NS,
                         "labels": {"kueue.x-k8s.io/managed": "true"}},
            "template": t
        }))
        .map_err(|e| cfg(e.to_string()))?;
        Api::<PodTemplate>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &pt)
            .await
            .map_err(kerr("creating a PodTemplate"))?;
        let count = 1 + self.rng.below(2);
        let pr: ProvisioningRequest = serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"kueue.x-k8s.io/managed": "true"}},
            "spec": {
                "provisioningClassName": provreq::BEST_EFFORT_ATOMIC,
                "parameters": {},
                "podSets": [{"podTemplateRef": {"name": template}, "count": count}]
            }
        }))
        .map_err(|e| cfg(e.to_string()))?;
        self.requests_api()
            .create(&PostParams::default(), &pr)
            .await
            .map_err(kerr("creating a ProvisioningRequest"))?;
        self.requests.insert(
            name,
            Request {
                created: Instant::now(),
                consumed: false,
                booked: false,
            },
        );
        Ok(1)
    }

    /// A pod of the request's workload, as Kueue admits it: consuming the request, and
    /// `do-not-disrupt` so that it counts as a protected bare pod.
    async fn consuming_pod(&mut self, request: &str, i: u64) -> Result<()> {
        let name = format!("{request}-{i}");
        let annotations = json!({
            provreq::CONSUME_ANNOTATION: request,
            "karpenter.sh/do-not-disrupt": "true",
        });
        self.create_bare_pod(name, GPU_POOL, true, annotations, "a consuming pod")
            .await
    }

    async fn delete_request(&mut self, name: &str) {
        self.requests.remove(name);
        let _ = self
            .requests_api()
            .delete(name, &DeleteParams::default())
            .await;
        let _ = Api::<PodTemplate>::namespaced(self.client.clone(), NS)
            .delete(&format!("ppt-{name}-main"), &DeleteParams::default())
            .await;
    }

    /// Withdraws every request left (before settling: capacity booked for a workload that
    /// never comes would otherwise be kept empty by design).
    pub(super) async fn delete_requests(&mut self) {
        let names: Vec<String> = self.requests.keys().cloned().collect();
        for n in names {
            self.delete_request(&n).await;
        }
    }

    /// Notes the requests holding capacity, and counts a Node of a live booking that carries
    /// the disruption taint or is being deleted (`disrupting` leaves out the benchmark's own
    /// failures).
    /// `disrupting` are those Nodes, read BEFORE the requests: a booking seen live now was
    /// live when the Nodes were read too (bookings end; they do not start on tainted Nodes).
    pub(super) async fn check_bookings(&mut self, disrupting: &BTreeSet<String>) -> Result<()> {
        if !self.provreqs_served {
            return Ok(());
        }
        let prs = self
            .requests_api()
            .list(&ListParams::default())
            .await
            .map_err(kerr("listing ProvisioningRequests"))?
            .items;
        let claims = self.claims().await?;
        for pr in &prs {
            let (State::Launching(b) | State::Booked { booking: b, .. }) = provreq::state(pr)
            else {
                continue;
            };
            let name = pr.name_any();
            if let Some(r) = self.requests.get_mut(&name) {
                r.booked = true;
            }
            self.booked_requests.insert(name.clone());
            for target in b.targets.keys() {
                let node = match target {
                    Target::Node(n) => Some(n.clone()),
                    Target::Claim(c) => claims
                        .iter()
                        .find(|x| x.name_any() == *c)
                        .and_then(|x| x.status.as_ref()?.node_name.clone()),
                };
                let Some(node) = node else { continue };
                if disrupting.contains(&node)
                    && self.booking_violations.insert((name.clone(), node.clone()))
                {
                    eprintln!("safety: Node {node} of request {name}'s booking disrupted");
                }
            }
        }
        Ok(())
    }
}
