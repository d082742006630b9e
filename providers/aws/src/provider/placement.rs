//! Placement groups: created (strategy `cluster`, tagged with the cluster and creation time)
//! before a launch that names one, and collected once no instance or claim uses them.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::{PlacementGroupState, PlacementStrategy, ResourceType, TagSpecification};
use providers::{Instance, InstanceState, tags};

use crate::api::Family;
use crate::error::AwsError;

use super::{AwsProvider, PLACEMENT_GROUP_CREATED_TAG, filter, tag_map};

impl AwsProvider {
    /// The placement group a launch goes into: `name`, made sure to exist; `None` (launch
    /// outside any group, logged) when EC2 refuses to make it for a reason retrying will not
    /// change (permissions, the account's placement group limit).
    ///
    /// # Errors
    /// Transient failures (throttling, 5xx), so the caller retries the launch.
    pub(super) async fn placement_group_for_launch(
        &self,
        claim: &str,
        name: &str,
    ) -> Result<Option<String>, AwsError> {
        match self.ensure_placement_group(name).await {
            Ok(()) => Ok(Some(name.to_string())),
            Err(e @ AwsError::Throttled { .. })
            | Err(
                e @ AwsError::Api {
                    transient: true, ..
                },
            ) => Err(e),
            Err(e) => {
                tracing::warn!(%claim, placement_group = %name, error = %e, "cannot create the placement group; launching outside it");
                Ok(None)
            }
        }
    }

    /// Creates the `cluster` placement group `name`, tagged as this cluster's with its
    /// creation time; one that exists already is success (another claim of the group, or an
    /// earlier attempt, made it).
    ///
    /// # Errors
    /// API errors other than `InvalidPlacementGroup.Duplicate`.
    pub async fn ensure_placement_group(&self, name: &str) -> Result<(), AwsError> {
        let tag_list = vec![
            aws_sdk_ec2::types::Tag::builder()
                .key(tags::CLUSTER)
                .value(&self.settings.cluster)
                .build(),
            aws_sdk_ec2::types::Tag::builder()
                .key(PLACEMENT_GROUP_CREATED_TAG)
                .value(self.clock.now_s().to_string())
                .build(),
        ];
        let r = self
            .api
            .call(Family::Mutate, "CreatePlacementGroup", || {
                self.api
                    .client
                    .create_placement_group()
                    .group_name(name)
                    .strategy(PlacementStrategy::Cluster)
                    .tag_specifications(
                        TagSpecification::builder()
                            .resource_type(ResourceType::PlacementGroup)
                            .set_tags(Some(tag_list.clone()))
                            .build(),
                    )
                    .send()
            })
            .await;
        match r {
            Ok(_) => {
                tracing::info!(placement_group = %name, "created placement group");
                Ok(())
            }
            Err(AwsError::Api { code, .. }) if code == "InvalidPlacementGroup.Duplicate" => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// This cluster's placement groups (by the cluster tag) with their creation times (epoch
    /// seconds from [`PLACEMENT_GROUP_CREATED_TAG`], `None` when absent or unreadable), sorted
    /// by name; groups being deleted are left out.
    ///
    /// # Errors
    /// API errors.
    pub async fn placement_groups(&self) -> Result<Vec<(String, Option<i64>)>, AwsError> {
        let out = self
            .api
            .call(Family::Describe, "DescribePlacementGroups", || {
                self.api
                    .client
                    .describe_placement_groups()
                    .filters(filter(
                        &format!("tag:{}", tags::CLUSTER),
                        [self.settings.cluster.clone()],
                    ))
                    .send()
            })
            .await?;
        let mut groups: Vec<(String, Option<i64>)> = out
            .placement_groups()
            .iter()
            .filter(|g| {
                !matches!(
                    g.state(),
                    Some(PlacementGroupState::Deleting | PlacementGroupState::Deleted)
                )
            })
            // The filter is the server's; check the tag again rather than trust it blindly.
            .filter(|g| tag_map(g.tags()).get(tags::CLUSTER) == Some(&self.settings.cluster))
            .filter_map(|g| {
                let created = tag_map(g.tags())
                    .get(PLACEMENT_GROUP_CREATED_TAG)
                    .and_then(|v| v.parse::<i64>().ok());
                Some((g.group_name()?.to_string(), created))
            })
            .collect();
        groups.sort();
        Ok(groups)
    }

    pub(super) async fn collect_placement_groups_inner(
        &self,
        live: &[Instance],
        keep: &BTreeSet<String>,
        grace_s: i64,
    ) -> Result<Vec<String>, AwsError> {
        let used: BTreeSet<&String> = live
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .filter_map(|i| i.tags.get(tags::PLACEMENT_GROUP))
            .collect();
        let now = self.clock.now_s();
        let mut deleted = Vec::new();
        let mut failed: Option<AwsError> = None;
        for (name, created) in self.placement_groups().await? {
            // A group without a readable creation time is as old as can be: only this
            // provider tags groups with the cluster, and it always writes the time.
            let old = created.is_none_or(|at| now.saturating_sub(at) >= grace_s);
            if used.contains(&name) || keep.contains(&name) || !old {
                continue;
            }
            let r = self
                .api
                .call(Family::Mutate, "DeletePlacementGroup", || {
                    self.api
                        .client
                        .delete_placement_group()
                        .group_name(&name)
                        .send()
                })
                .await;
            match r {
                Ok(_) => {
                    tracing::info!(placement_group = %name, "deleted unused placement group");
                    deleted.push(name);
                }
                // Gone already, or an instance is still in it (one this cluster's listing
                // does not show yet): nothing to do now.
                Err(AwsError::Api { code, .. })
                    if code == "InvalidPlacementGroup.Unknown"
                        || code == "InvalidPlacementGroup.InUse" => {}
                Err(e) => {
                    tracing::warn!(placement_group = %name, error = %e, "deleting placement group");
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
