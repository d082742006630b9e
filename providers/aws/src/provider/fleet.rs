//! Launching with `CreateFleet`: the claim's live instance looked up first, batches of
//! overrides per capacity type, refused offerings reported, and the instance read back.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use autoscaler_core::CapacityType;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType,
    InstanceLifecycleType, InstanceStateName, OnDemandOptionsRequest, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use providers::{Instance, InstanceState, LaunchRequest, Launched, OfferingKey, tags};

use crate::api::Family;
use crate::catalog::Market;
use crate::error::AwsError;
use crate::launch::{self, FleetFailure, FleetOutcome};

use super::{AwsProvider, FleetInput, filter, provider_id, tag_map};

impl AwsProvider {
    /// The running or pending instance of this cluster tagged with `claim`, if any.
    async fn claim_instance(&self, claim: &str) -> Result<Option<Instance>, AwsError> {
        let mut found = self
            .describe(vec![
                filter(
                    &format!("tag:{}", tags::CLUSTER),
                    [self.settings.cluster.clone()],
                ),
                filter(&format!("tag:{}", tags::CLAIM), [claim.to_string()]),
                filter("instance-state-name", ["pending", "running"]),
            ])
            .await?;
        Ok((!found.is_empty()).then(|| found.remove(0)))
    }

    /// Instances matching `filters`, sorted by provider id.
    pub(super) async fn describe(
        &self,
        filters: Vec<aws_sdk_ec2::types::Filter>,
    ) -> Result<Vec<Instance>, AwsError> {
        let market = self.cached_market();
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let t = token.clone();
            let page = self
                .api
                .call(Family::Describe, "DescribeInstances", || {
                    self.api
                        .client
                        .describe_instances()
                        .set_filters(Some(filters.clone()))
                        .set_next_token(t.clone())
                        .send()
                })
                .await?;
            for r in page.reservations() {
                for i in r.instances() {
                    if let Some(i) = self.to_instance(i, market.as_deref()) {
                        out.push(i);
                    }
                }
            }
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        out.sort_by(|a, b| a.provider_id.cmp(&b.provider_id));
        Ok(out)
    }

    pub(super) fn to_instance(
        &self,
        i: &aws_sdk_ec2::types::Instance,
        market: Option<&Market>,
    ) -> Option<Instance> {
        let id = i.instance_id()?;
        let zone = i
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or("")
            .to_string();
        let capacity_type = if i.instance_lifecycle() == Some(&InstanceLifecycleType::Spot) {
            CapacityType::Spot
        } else {
            CapacityType::OnDemand
        };
        let state = match i.state().and_then(|s| s.name()) {
            Some(InstanceStateName::Pending) | None => InstanceState::Pending,
            Some(InstanceStateName::Running) => InstanceState::Running,
            Some(InstanceStateName::Terminated) => InstanceState::Terminated,
            // Stopped machines run no node; for the autoscaler they are on their way out.
            Some(_) => InstanceState::ShuttingDown,
        };
        let instance_type = i.instance_type().map_or("", |t| t.as_str()).to_string();
        let tags = tag_map(i.tags());
        let key = OfferingKey::new(&instance_type, &zone, capacity_type);
        Some(Instance {
            provider_id: provider_id(&zone, id),
            claim: tags.get(tags::CLAIM).cloned(),
            pool: tags.get(tags::POOL).cloned(),
            price: market.and_then(|m| self.price(m, &key)),
            instance_type,
            zone,
            capacity_type,
            state,
            tags,
        })
    }

    pub(super) async fn launch_inner(&self, req: &LaunchRequest) -> Result<Launched, AwsError> {
        if req.candidates.is_empty() {
            return Err(AwsError::InvalidRequest(format!(
                "claim {}: no candidate offerings",
                req.claim
            )));
        }
        // A retry after a lost answer or a crash: the instance exists already.
        if let Some(instance) = self.claim_instance(&req.claim).await? {
            return Ok(Launched {
                instance,
                unavailable: Vec::new(),
            });
        }
        let class = self.resolve_class(&req.class.name).await?;
        if class.amis.is_empty() {
            return Err(AwsError::Config(format!(
                "node class {:?}: no AMI matches {:?}",
                class.name, class.class.ami
            )));
        }
        let (facts, market) = self.market().await?;
        let arch: HashMap<&str, &str> = facts
            .iter()
            .map(|f| (f.name.as_str(), f.arch.as_str()))
            .collect();
        let mut remaining = Vec::new();
        let mut skipped = Vec::new();
        for k in &req.candidates {
            let why = match arch.get(k.instance_type.as_str()) {
                None => Some("unknown instance type"),
                Some(a) if !class.amis.contains_key(*a) => Some("no AMI for its architecture"),
                Some(_) if !class.subnets.contains_key(&k.zone) => Some("no subnet in its zone"),
                Some(_) => None,
            };
            match why {
                Some(w) => skipped.push(format!("{k}: {w}")),
                None if !remaining.contains(k) => remaining.push(k.clone()),
                None => {}
            }
        }
        if remaining.is_empty() {
            return Err(AwsError::InvalidRequest(format!(
                "claim {}: node class {:?} cannot launch any candidate ({})",
                req.claim,
                class.name,
                skipped.join("; ")
            )));
        }
        let boot = launch::boot_labels(&req.labels);
        let user_data = launch::user_data(
            &self.settings.cluster,
            &class.class,
            &boot,
            &req.taints,
            &req.startup_taints,
        );
        let default_ami = class
            .amis
            .get("amd64")
            .or_else(|| class.amis.values().next())
            .cloned()
            .unwrap_or_default();
        let template = self
            .ensure_template(&class, &user_data, &default_ami)
            .await?;
        let tags =
            launch::instance_tags(&self.settings.cluster, &req.pool, &req.claim, &class.class);
        let zone_of_subnet: HashMap<&str, &str> = class
            .subnets
            .iter()
            .map(|(z, s)| (s.as_str(), z.as_str()))
            .collect();
        let group = match &req.placement_group {
            Some(g) => self.placement_group_for_launch(&req.claim, g).await?,
            None => None,
        };

        let mut unavailable: Vec<OfferingKey> = Vec::new();
        while let Some((ct, batch)) = launch::next_batch(&remaining) {
            let fleet = FleetInput {
                class: &class,
                template: &template,
                arch: &arch,
                ct,
                batch: &batch,
                zone_of_subnet: &zone_of_subnet,
            };
            let grouped = match group.as_deref() {
                Some(g) => {
                    let mut in_group = tags.clone();
                    in_group.insert(tags::PLACEMENT_GROUP.into(), g.to_string());
                    let o = self.create_fleet(req, &fleet, &in_group, Some(g)).await;
                    let code = match &o {
                        Err(AwsError::Api { code, .. }) => Err(code.as_str()),
                        Err(_) => Err(""),
                        Ok(f) => Ok(f),
                    };
                    if launch::refused_in_group(code) {
                        // The group is a preference: an offering refused inside it may well
                        // have capacity elsewhere, so it is not marked unavailable either.
                        tracing::info!(
                            claim = %req.claim,
                            placement_group = %g,
                            outcome = ?o,
                            "EC2 fleet: refused inside the placement group, launching outside it"
                        );
                        None
                    } else {
                        Some((o, in_group))
                    }
                }
                None => None,
            };
            let (outcome, used_tags) = match grouped {
                Some(o) => o,
                None => (
                    self.create_fleet(req, &fleet, &tags, None).await,
                    tags.clone(),
                ),
            };
            match outcome {
                Ok(FleetOutcome::Launched {
                    instance_id,
                    instance_type,
                    unavailable: refused,
                }) => {
                    unavailable.extend(refused);
                    let instance = self
                        .launched_instance(
                            &instance_id,
                            instance_type,
                            ct,
                            &batch,
                            &used_tags,
                            &market,
                        )
                        .await;
                    tracing::info!(
                        claim = %req.claim,
                        instance = %instance.provider_id,
                        instance_type = %instance.instance_type,
                        placement_group = used_tags.get(tags::PLACEMENT_GROUP).map_or("", String::as_str),
                        "EC2 fleet launched an instance"
                    );
                    return Ok(Launched {
                        instance,
                        unavailable,
                    });
                }
                Ok(FleetOutcome::NoCapacity {
                    unavailable: refused,
                }) => {
                    tracing::info!(claim = %req.claim, refused = refused.len(), "EC2 fleet: insufficient capacity, trying the remaining candidates");
                    unavailable.extend(refused);
                }
                Ok(FleetOutcome::Failed { failures }) => {
                    let f = &failures[0];
                    return Err(AwsError::Api {
                        operation: "CreateFleet",
                        code: f.code.clone(),
                        message: failures
                            .iter()
                            .map(|f| format!("{}: {}", f.code, f.message))
                            .collect::<Vec<_>>()
                            .join("; "),
                        transient: false,
                    });
                }
                Err(AwsError::Api { code, .. }) if launch::is_capacity_error(&code) => {
                    unavailable.extend(batch.iter().cloned());
                }
                Err(e) => return Err(e),
            }
            remaining.retain(|k| !batch.contains(k));
        }
        let mut seen = BTreeSet::new();
        unavailable.retain(|k| seen.insert(k.clone()));
        Err(AwsError::InsufficientCapacity(unavailable))
    }

    /// One CreateFleet request for `fleet`'s batch, its instance tagged with `tags`, into
    /// `placement_group` if any.
    async fn create_fleet(
        &self,
        req: &LaunchRequest,
        fleet: &FleetInput<'_>,
        tags: &BTreeMap<String, String>,
        placement_group: Option<&str>,
    ) -> Result<FleetOutcome, AwsError> {
        let FleetInput {
            class,
            template,
            arch,
            ct,
            batch,
            zone_of_subnet,
        } = *fleet;
        let overrides = launch::fleet_overrides(
            batch,
            &class.subnets,
            |t| {
                let a = arch.get(t).copied().unwrap_or("amd64");
                class.amis.get(a).cloned()
            },
            placement_group,
        );
        let config = FleetLaunchTemplateConfigRequest::builder()
            .launch_template_specification(
                FleetLaunchTemplateSpecificationRequest::builder()
                    .launch_template_id(template)
                    .version("$Latest")
                    .build(),
            )
            .set_overrides(Some(overrides))
            .build();
        let tag_list: Vec<aws_sdk_ec2::types::Tag> = tags
            .iter()
            .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
            .collect();
        let token =
            launch::client_token_in(&self.settings.cluster, &req.claim, batch, placement_group);
        let (target, spot, on_demand) = match ct {
            CapacityType::Spot => (
                DefaultTargetCapacityType::Spot,
                Some(
                    SpotOptionsRequest::builder()
                        .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                        .build(),
                ),
                None,
            ),
            CapacityType::OnDemand => (
                DefaultTargetCapacityType::OnDemand,
                None,
                Some(
                    OnDemandOptionsRequest::builder()
                        .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                        .build(),
                ),
            ),
        };
        let out = self
            .api
            .call(Family::Mutate, "CreateFleet", || {
                self.api
                    .client
                    .create_fleet()
                    .r#type(FleetType::Instant)
                    .client_token(&token)
                    .target_capacity_specification(
                        TargetCapacitySpecificationRequest::builder()
                            .total_target_capacity(1)
                            .default_target_capacity_type(target.clone())
                            .build(),
                    )
                    .set_spot_options(spot.clone())
                    .set_on_demand_options(on_demand.clone())
                    .launch_template_configs(config.clone())
                    .tag_specifications(
                        TagSpecification::builder()
                            .resource_type(ResourceType::Instance)
                            .set_tags(Some(tag_list.clone()))
                            .build(),
                    )
                    .send()
            })
            .await?;
        let offering_of = |o: Option<&aws_sdk_ec2::types::FleetLaunchTemplateOverrides>| {
            let o = o?;
            let t = o.instance_type()?.as_str().to_string();
            let zone = o
                .subnet_id()
                .and_then(|s| zone_of_subnet.get(s).map(|z| z.to_string()))
                .or_else(|| o.availability_zone().map(str::to_string))?;
            Some(OfferingKey::new(t, zone, ct))
        };
        let instances: Vec<(String, Option<String>)> = out
            .instances()
            .iter()
            .flat_map(|i| {
                let t = i.instance_type().map(|t| t.as_str().to_string());
                i.instance_ids()
                    .iter()
                    .map(move |id| (id.clone(), t.clone()))
            })
            .collect();
        let failures: Vec<FleetFailure> = out
            .errors()
            .iter()
            .map(|e| FleetFailure {
                offering: offering_of(
                    e.launch_template_and_overrides()
                        .and_then(|l| l.overrides()),
                ),
                code: e.error_code().unwrap_or("Unknown").to_string(),
                message: e.error_message().unwrap_or("").to_string(),
            })
            .collect();
        Ok(launch::interpret(batch, instances, failures))
    }

    /// The instance a fleet just bought. Described when EC2 already shows it; otherwise (EC2 is
    /// eventually consistent) built from what the request said, as `Pending`.
    async fn launched_instance(
        &self,
        instance_id: &str,
        instance_type: Option<String>,
        ct: CapacityType,
        batch: &[OfferingKey],
        tags: &BTreeMap<String, String>,
        market: &Market,
    ) -> Instance {
        let described = self
            .api
            .call(Family::Describe, "DescribeInstances", || {
                self.api
                    .client
                    .describe_instances()
                    .instance_ids(instance_id)
                    .send()
            })
            .await;
        if let Ok(out) = described
            && let Some(i) = out
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .find_map(|i| self.to_instance(i, Some(market)))
        {
            return i;
        }
        let instance_type = instance_type
            .or_else(|| batch.first().map(|k| k.instance_type.clone()))
            .unwrap_or_default();
        let zone = batch
            .iter()
            .find(|k| k.instance_type == instance_type)
            .map(|k| k.zone.clone())
            .unwrap_or_default();
        let key = OfferingKey::new(&instance_type, &zone, ct);
        Instance {
            provider_id: provider_id(&zone, instance_id),
            claim: tags.get(tags::CLAIM).cloned(),
            pool: tags.get(tags::POOL).cloned(),
            price: self.price(market, &key),
            instance_type,
            zone,
            capacity_type: ct,
            state: InstanceState::Pending,
            tags: tags.clone(),
        }
    }
}
