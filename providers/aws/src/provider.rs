//! `AwsProvider`: the [`CloudProvider`] on EC2.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use autoscaler_core::{CapacityType, InstanceType};
use aws_config::meta::region::RegionProviderChain;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use providers::{
    Action, CloudProvider, Instance, LaunchRequest, Launched, NodeClassRef, OfferingKey,
    ProviderError, tags,
};
use tokio::sync::Mutex;

use crate::api::{Api, CallStats, Family};
use crate::catalog::{Embedded, Market, TypeFacts};
use crate::clock::{Clock, SystemClock};
use crate::config::{AwsSettings, NodeClass};
use crate::error::AwsError;

mod classes;
mod fleet;
mod market;
mod placement;
mod templates;

/// Root volume of the region-wide catalog (no node class): the embedded catalog's AWS value.
const DEFAULT_ROOT_GIB: u32 = 20;

/// The provider id of an EC2 instance, as the AWS cloud controller writes `spec.providerID`.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// The instance id of a provider id (`aws:///us-east-1a/i-0abc` → `i-0abc`).
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    let id = rest.rsplit('/').next()?;
    id.starts_with("i-").then_some(id)
}

fn filter(
    name: &str,
    values: impl IntoIterator<Item = impl Into<String>>,
) -> aws_sdk_ec2::types::Filter {
    aws_sdk_ec2::types::Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().map(Into::into).collect()))
        .build()
}

fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<aws_sdk_ec2::types::Filter> {
    tags.iter()
        .map(|(k, v)| filter(&format!("tag:{k}"), [v.clone()]))
        .collect()
}

fn tag_map(t: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    t.iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

/// A node class with its selectors resolved against the account.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedClass {
    /// Class name as configured.
    pub name: String,
    /// The class.
    pub class: NodeClass,
    /// AMI per architecture (`amd64`, `arm64`).
    pub amis: BTreeMap<String, String>,
    /// Subnet per zone.
    pub subnets: BTreeMap<String, String>,
    /// Security group ids.
    pub security_groups: Vec<String>,
}

struct MarketCache {
    at: i64,
    facts: Arc<Vec<TypeFacts>>,
    market: Arc<Market>,
}

/// What the fleet requests of one batch of a launch share.
#[derive(Clone, Copy)]
struct FleetInput<'a> {
    class: &'a ResolvedClass,
    template: &'a str,
    arch: &'a HashMap<&'a str, &'a str>,
    ct: CapacityType,
    batch: &'a [OfferingKey],
    zone_of_subnet: &'a HashMap<&'a str, &'a str>,
}

/// Tag on the placement groups this provider creates: when (epoch seconds on the provider's
/// clock), since EC2 does not say. Garbage collection spares younger groups.
pub const PLACEMENT_GROUP_CREATED_TAG: &str = "gpu-autoscaler.dev/created-at";

/// The AWS EC2 provider. Share it behind an `Arc`; every method takes `&self`.
pub struct AwsProvider {
    settings: AwsSettings,
    region: String,
    api: Api,
    clock: Arc<dyn Clock>,
    embedded: Embedded,
    market: Mutex<Option<MarketCache>>,
    classes: Mutex<HashMap<String, (i64, Arc<ResolvedClass>)>>,
    templates: Mutex<HashMap<String, String>>,
}

/// The region from the settings, else the environment, else the shared config profile. The
/// instance-metadata service is not asked: outside EC2 that would be a network probe that
/// hangs, and on EC2 the region is always configured for the autoscaler anyway.
async fn resolve_region(explicit: Option<String>) -> Result<String, AwsError> {
    let chain = RegionProviderChain::first_try(explicit.map(Region::new))
        .or_else(aws_config::environment::region::EnvironmentVariableRegionProvider::new())
        .or_else(aws_config::profile::ProfileFileRegionProvider::new());
    chain.region().await.map(|r| r.to_string()).ok_or_else(|| {
        AwsError::Config(
            "no AWS region: pass --region, set AWS_REGION, or set region in the profile".into(),
        )
    })
}

impl AwsProvider {
    /// Connects with the SDK's default credential chain (environment, profile, web identity,
    /// container and instance metadata), the system clock and `settings`.
    ///
    /// # Errors
    /// [`AwsError::Config`] for invalid settings or a missing region. Credentials are looked up
    /// lazily, at the first call.
    pub async fn connect(settings: AwsSettings) -> Result<Self, AwsError> {
        Self::connect_with_clock(settings, Arc::new(SystemClock)).await
    }

    /// [`Self::connect`] with a given clock for the caches.
    ///
    /// # Errors
    /// As [`Self::connect`].
    pub async fn connect_with_clock(
        settings: AwsSettings,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, AwsError> {
        settings.validate()?;
        let region = resolve_region(settings.region.clone()).await?;
        let attempt = Duration::from_millis(settings.timeouts.attempt_ms);
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_millis(settings.timeouts.connect_ms))
            .operation_attempt_timeout(attempt)
            .operation_timeout(attempt)
            .build();
        // The SDK's own retries are off: `Api::call` retries with the configured policy and
        // counts attempts, and two retry layers would multiply.
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region.clone()))
            .timeout_config(timeouts)
            .retry_config(RetryConfig::disabled());
        if let Some(url) = &settings.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if let Some(p) = &settings.profile {
            loader = loader.profile_name(p);
        }
        if let Some(f) = &settings.credentials_file {
            loader = loader.profile_files(
                EnvConfigFiles::builder()
                    .include_default_config_file(true)
                    .with_file(EnvConfigFileKind::Credentials, f)
                    .build(),
            );
        }
        let sdk = loader.load().await;
        let client = aws_sdk_ec2::Client::new(&sdk);
        Ok(AwsProvider {
            api: Api::new(client, &settings.limits, settings.retry.clone()),
            embedded: Embedded::load(&settings.on_demand_prices),
            settings,
            region,
            clock,
            market: Mutex::new(None),
            classes: Mutex::new(HashMap::new()),
            templates: Mutex::new(HashMap::new()),
        })
    }

    /// The region in use.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The settings in use.
    pub fn settings(&self) -> &AwsSettings {
        &self.settings
    }

    /// Counters of API attempts, throttling and retries since the start.
    pub fn stats(&self) -> &CallStats {
        &self.api.stats
    }

    /// Forgets the cached catalog, prices and resolved classes (the next call fetches anew).
    pub async fn invalidate(&self) {
        *self.market.lock().await = None;
        self.classes.lock().await.clear();
    }

    async fn get_inner(&self, pid: &str) -> Result<Instance, AwsError> {
        let id = instance_id(pid).ok_or_else(|| AwsError::NotFound(pid.to_string()))?;
        let market = self.cached_market();
        let out = self
            .api
            .call(Family::Describe, "DescribeInstances", || {
                self.api.client.describe_instances().instance_ids(id).send()
            })
            .await;
        let out = match out {
            Ok(o) => o,
            Err(AwsError::Api { code, .. }) if code.starts_with("InvalidInstanceID") => {
                return Err(AwsError::NotFound(pid.to_string()));
            }
            Err(e) => return Err(e),
        };
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find_map(|i| self.to_instance(i, market.as_deref()))
            .ok_or_else(|| AwsError::NotFound(pid.to_string()))
    }

    async fn delete_inner(&self, pid: &str) -> Result<(), AwsError> {
        let id = instance_id(pid).ok_or_else(|| {
            AwsError::InvalidRequest(format!("{pid:?} is not an AWS provider id"))
        })?;
        let r = self
            .api
            .call(Family::Mutate, "TerminateInstances", || {
                self.api
                    .client
                    .terminate_instances()
                    .instance_ids(id)
                    .send()
            })
            .await;
        match r {
            Ok(_) => Ok(()),
            // Gone already (or never existed): what the caller wanted.
            Err(AwsError::Api { code, .. }) if code == "InvalidInstanceID.NotFound" => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn list_inner(&self) -> Result<Vec<Instance>, AwsError> {
        self.describe(vec![
            filter(
                &format!("tag:{}", tags::CLUSTER),
                [self.settings.cluster.clone()],
            ),
            filter(
                "instance-state-name",
                ["pending", "running", "shutting-down", "stopping", "stopped"],
            ),
        ])
        .await
    }
}

impl CloudProvider for AwsProvider {
    fn name(&self) -> &str {
        "aws"
    }

    async fn instance_types(
        &self,
        class: &NodeClassRef,
    ) -> Result<Vec<InstanceType>, ProviderError> {
        self.catalog(Some(&class.name))
            .await
            .map_err(|e| e.into_provider(Action::InstanceTypes))
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, ProviderError> {
        self.launch_inner(request)
            .await
            .map_err(|e| e.into_provider(Action::Launch))
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        self.delete_inner(provider_id)
            .await
            .map_err(|e| e.into_provider(Action::Delete))
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, ProviderError> {
        self.get_inner(provider_id)
            .await
            .map_err(|e| e.into_provider(Action::Get))
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        self.list_inner()
            .await
            .map_err(|e| e.into_provider(Action::List))
    }

    async fn collect_placement_groups(
        &self,
        live: &[Instance],
        keep: &BTreeSet<String>,
        grace_s: i64,
    ) -> Result<Vec<String>, ProviderError> {
        self.collect_placement_groups_inner(live, keep, grace_s)
            .await
            .map_err(|e| e.into_provider(Action::CollectPlacementGroups))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        let p = provider_id("us-east-1a", "i-0abc");
        assert_eq!(p, "aws:///us-east-1a/i-0abc");
        assert_eq!(instance_id(&p), Some("i-0abc"));
        assert_eq!(instance_id("fake:///a/fake-1"), None);
        assert_eq!(instance_id("aws:///us-east-1a/vol-1"), None);
    }
}
