//! Placement groups on Compute Engine: a regional resource policy with
//! `groupPlacementPolicy.collocation = COLLOCATED` (compact placement) per all-or-nothing group,
//! named as the controller names the group, that the group's instances list in
//! `resourcePolicies`.
//!
//! Resource policies carry no labels, so this cluster's policies are told apart by their
//! `description` ([`description`]); their age comes from the server's `creationTimestamp`.

use std::collections::BTreeSet;
use std::time::Duration;

use google_cloud_compute_v1::model::{
    self, ResourcePolicy, ResourcePolicyGroupPlacementPolicy,
    resource_policy_group_placement_policy::Collocation,
};
use providers::{Instance, InstanceState, tags};

use super::{GcpProvider, is_http, paginate};
use crate::api::{Family, api_error};
use crate::error::GcpError;
use crate::launch::{self, OpOutcome};

/// The `description` of the placement policies of `cluster`: how collection finds its own.
pub fn description(cluster: &str) -> String {
    format!("gpu-autoscaler placement group of cluster {cluster}")
}

/// The partial URL of the resource policy `name` of `region`, as instances reference it.
pub fn policy_url(project: &str, region: &str, name: &str) -> String {
    format!("projects/{project}/regions/{region}/resourcePolicies/{name}")
}

/// The request id of the insert of placement policy `name` in `cluster`: a retry is the same
/// request.
fn insert_request_id(cluster: &str, name: &str) -> String {
    launch::request_id(
        &format!("placement/{cluster}/{name}"),
        &providers::OfferingKey::new("", "", autoscaler_core::CapacityType::OnDemand),
    )
}

/// Seconds since the epoch of an RFC 3339 timestamp (`creationTimestamp`), if it parses.
fn epoch_s(ts: &str) -> Option<i64> {
    ts.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

impl GcpProvider {
    /// The resource policy a launch goes into: `name`, made sure to exist (returned as the URL
    /// instances reference); `None` (launch outside any group, logged) when Compute Engine
    /// refuses to make it for a reason retrying will not change (permissions, quota).
    ///
    /// # Errors
    /// Transient failures (throttling, 5xx, timeouts), so the caller retries the launch.
    pub(super) async fn placement_for_launch(
        &self,
        claim: &str,
        name: &str,
    ) -> Result<Option<String>, GcpError> {
        match self.ensure_placement_policy(name).await {
            Ok(()) => Ok(Some(policy_url(
                self.project(),
                &self.settings.region,
                name,
            ))),
            Err(e @ GcpError::Throttled { .. })
            | Err(e @ GcpError::OperationTimeout { .. })
            | Err(
                e @ GcpError::Api {
                    transient: true, ..
                },
            ) => Err(e),
            Err(e) => {
                tracing::warn!(%claim, placement_group = %name, error = %e, "cannot create the placement policy; launching outside it");
                Ok(None)
            }
        }
    }

    /// Creates the compact placement policy `name` in the region, described as this cluster's;
    /// one that exists already is success.
    ///
    /// # Errors
    /// API failures other than "already exists", and a failed operation.
    pub async fn ensure_placement_policy(&self, name: &str) -> Result<(), GcpError> {
        let body = ResourcePolicy::new()
            .set_name(name)
            .set_description(description(&self.settings.cluster))
            .set_group_placement_policy(
                ResourcePolicyGroupPlacementPolicy::new().set_collocation(Collocation::Collocated),
            );
        let request_id = insert_request_id(&self.settings.cluster, name);
        let sent = self
            .api
            .call(Family::Mutate, "resourcePolicies.insert", || {
                self.api
                    .resource_policies
                    .insert()
                    .set_project(self.project().to_string())
                    .set_region(self.settings.region.clone())
                    .set_request_id(request_id.clone())
                    .set_body(body.clone())
                    .send()
            })
            .await?;
        let op = match sent {
            Ok(op) => op,
            Err(f) if is_http(&f, 409) => return Ok(()),
            Err(f) => return Err(api_error("resourcePolicies.insert", f)),
        };
        let timeout = Duration::from_secs(self.settings.timeouts.operation_s);
        match launch::outcome(&self.wait_region(op, timeout).await?) {
            OpOutcome::Done
            | OpOutcome::Failed {
                already_exists: true,
                ..
            } => {
                tracing::info!(placement_group = %name, "created placement policy");
                Ok(())
            }
            OpOutcome::Failed { code, message, .. } => Err(GcpError::Api {
                operation: "resourcePolicies.insert",
                code,
                message,
                transient: false,
            }),
            OpOutcome::Running => unreachable!("wait_region returns only finished operations"),
        }
    }

    /// Waits for a regional operation to be DONE, up to `timeout`, with
    /// `regionOperations.wait`.
    async fn wait_region(
        &self,
        op: model::Operation,
        timeout: Duration,
    ) -> Result<model::Operation, GcpError> {
        self.poll(op, timeout, |name| {
            self.api
                .call_ok(Family::Read, "regionOperations.wait", move || {
                    self.api
                        .region_operations
                        .wait()
                        .set_project(self.project().to_string())
                        .set_region(self.settings.region.clone())
                        .set_operation(name.clone())
                        .send()
                })
        })
        .await
    }

    /// This cluster's placement policies in the region (by [`description`]) with their
    /// creation times (epoch seconds, `None` when unreadable), sorted by name.
    ///
    /// # Errors
    /// API failures.
    pub async fn placement_policies(&self) -> Result<Vec<(String, Option<i64>)>, GcpError> {
        let mine = description(&self.settings.cluster);
        let mut out = Vec::new();
        paginate(
            |token| async move {
                self.api
                    .call_ok(Family::Read, "resourcePolicies.list", || {
                        self.api
                            .resource_policies
                            .list()
                            .set_project(self.project().to_string())
                            .set_region(self.settings.region.clone())
                            .set_page_token(token.clone())
                            .send()
                    })
                    .await
            },
            |page| {
                out.extend(
                    page.items
                        .iter()
                        .filter(|p| p.description.as_deref() == Some(mine.as_str()))
                        .filter(|p| p.group_placement_policy.is_some())
                        .filter_map(|p| {
                            Some((
                                p.name.clone()?,
                                p.creation_timestamp.as_deref().and_then(epoch_s),
                            ))
                        }),
                );
                page.next_page_token
            },
        )
        .await?;
        out.sort();
        Ok(out)
    }

    pub(super) async fn collect_placement_inner(
        &self,
        live: &[Instance],
        keep: &BTreeSet<String>,
        grace_s: i64,
    ) -> Result<Vec<String>, GcpError> {
        let used: BTreeSet<&String> = live
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .filter_map(|i| i.tags.get(tags::PLACEMENT_GROUP))
            .collect();
        let now = jiff::Timestamp::now().as_second();
        let mut deleted = Vec::new();
        let mut failed: Option<GcpError> = None;
        for (name, created) in self.placement_policies().await? {
            let old = created.is_none_or(|at| now.saturating_sub(at) >= grace_s);
            if used.contains(&name) || keep.contains(&name) || !old {
                continue;
            }
            let sent = self
                .api
                .call(Family::Mutate, "resourcePolicies.delete", || {
                    self.api
                        .resource_policies
                        .delete()
                        .set_project(self.project().to_string())
                        .set_region(self.settings.region.clone())
                        .set_resource_policy(name.clone())
                        .send()
                })
                .await;
            match sent {
                Ok(Ok(_)) => {
                    tracing::info!(placement_group = %name, "deleted unused placement policy");
                    deleted.push(name);
                }
                // Gone already, or still used by an instance this listing does not show.
                Ok(Err(f)) if is_http(&f, 404) || f.reason == "resourceInUseByAnotherResource" => {}
                Ok(Err(f)) => {
                    let e = api_error("resourcePolicies.delete", f);
                    tracing::warn!(placement_group = %name, error = %e, "deleting placement policy");
                    failed.get_or_insert(e);
                }
                Err(e) => {
                    tracing::warn!(placement_group = %name, error = %e, "deleting placement policy");
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(deleted),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_urls_and_times() {
        assert_eq!(
            policy_url("p", "us-central1", "gpu-autoscaler-c-g-0000abcd"),
            "projects/p/regions/us-central1/resourcePolicies/gpu-autoscaler-c-g-0000abcd"
        );
        assert_ne!(description("prod"), description("prod-2"));
        assert_eq!(
            insert_request_id("c", "n"),
            insert_request_id("c", "n"),
            "a retry is the same request"
        );
        assert_ne!(insert_request_id("c", "n"), insert_request_id("c", "m"));
        assert_eq!(epoch_s("1970-01-01T00:01:00.000-00:00"), Some(60));
        assert_eq!(
            epoch_s("2026-11-30T12:00:00.000-08:00"),
            Some(1_796_068_800)
        );
        assert_eq!(epoch_s("yesterday"), None);
    }
}
