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
use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType,
    InstanceLifecycleType, InstanceStateName, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateTagSpecificationRequest,
    LocationType, OnDemandOptionsRequest, PlacementGroupState, PlacementStrategy,
    RequestLaunchTemplateData, ResourceType, SpotAllocationStrategy, SpotOptionsRequest,
    TagSpecification, TargetCapacitySpecificationRequest, VolumeType,
};
use providers::{
    Action, CloudProvider, Instance, InstanceState, LaunchRequest, Launched, NodeClassRef,
    OfferingKey, ProviderError, tags,
};
use tokio::sync::Mutex;

use crate::api::{Api, CallStats, Family};
use crate::catalog::{self, BuildOptions, Embedded, Market, TypeFacts};
use crate::clock::{Clock, SystemClock};
use crate::config::{AwsSettings, DISCOVERY_TAG, NodeClass, Selector};
use crate::error::AwsError;
use crate::launch::{self, FleetFailure, FleetOutcome};

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

    fn ttl(&self) -> i64 {
        self.settings.catalog_ttl_s
    }

    /// Instance type facts and the market, from the cache while younger than the TTL.
    async fn market(&self) -> Result<(Arc<Vec<TypeFacts>>, Arc<Market>), AwsError> {
        // Held across the fetch, so that concurrent callers wait for one refresh instead of
        // each starting their own.
        let mut cache = self.market.lock().await;
        let now = self.clock.now_s();
        if let Some(c) = cache.as_ref()
            && now - c.at < self.ttl()
        {
            return Ok((c.facts.clone(), c.market.clone()));
        }
        let facts = self.fetch_facts().await?;
        let names: BTreeSet<&str> = facts.iter().map(|f| f.name.as_str()).collect();
        let mut market = Market {
            zones: self.fetch_zones().await?,
            spot: BTreeMap::new(),
        };
        market.zones.retain(|t, _| names.contains(t.as_str()));
        if self.settings.spot {
            // With a short list of types, ask for their prices only.
            let only = (!self.settings.instance_types.is_empty() && names.len() <= 200)
                .then(|| names.iter().map(|n| n.to_string()).collect::<Vec<_>>());
            market.spot = self.fetch_spot(now, only).await?;
            market.spot.retain(|(t, _), _| names.contains(t.as_str()));
        }
        let c = MarketCache {
            at: now,
            facts: Arc::new(facts),
            market: Arc::new(market),
        };
        let out = (c.facts.clone(), c.market.clone());
        *cache = Some(c);
        Ok(out)
    }

    async fn fetch_facts(&self) -> Result<Vec<TypeFacts>, AwsError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let t = token.clone();
            let page = self
                .api
                .call(Family::Describe, "DescribeInstanceTypes", || {
                    let mut r = self.api.client.describe_instance_types().max_results(100);
                    if !self.settings.instance_types.is_empty() {
                        r = r.filters(filter(
                            "instance-type",
                            self.settings.instance_types.clone(),
                        ));
                    }
                    r.set_next_token(t.clone()).send()
                })
                .await?;
            out.extend(page.instance_types().iter().filter_map(TypeFacts::from_sdk));
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out.dedup_by(|a, b| a.name == b.name);
        Ok(out)
    }

    async fn fetch_zones(&self) -> Result<BTreeMap<String, BTreeSet<String>>, AwsError> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut token: Option<String> = None;
        loop {
            let t = token.clone();
            let page = self
                .api
                .call(Family::Describe, "DescribeInstanceTypeOfferings", || {
                    self.api
                        .client
                        .describe_instance_type_offerings()
                        .location_type(LocationType::AvailabilityZone)
                        .max_results(1000)
                        .set_next_token(t.clone())
                        .send()
                })
                .await?;
            for o in page.instance_type_offerings() {
                if let (Some(t), Some(z)) = (o.instance_type(), o.location()) {
                    out.entry(t.as_str().to_string())
                        .or_default()
                        .insert(z.to_string());
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
        Ok(out)
    }

    async fn fetch_spot(
        &self,
        now: i64,
        only: Option<Vec<String>>,
    ) -> Result<BTreeMap<(String, String), f64>, AwsError> {
        // Latest price per (type, zone): keep the newest timestamp seen.
        let mut latest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
        let mut token: Option<String> = None;
        loop {
            let t = token.clone();
            let page = self
                .api
                .call(Family::Describe, "DescribeSpotPriceHistory", || {
                    // A start time of now asks for the price in force now, one entry per type
                    // and zone, instead of the history.
                    self.api
                        .client
                        .describe_spot_price_history()
                        .start_time(DateTime::from_secs(now))
                        .product_descriptions("Linux/UNIX")
                        .set_instance_types(
                            only.as_ref()
                                .map(|o| o.iter().map(|n| n.as_str().into()).collect()),
                        )
                        .max_results(1000)
                        .set_next_token(t.clone())
                        .send()
                })
                .await?;
            for p in page.spot_price_history() {
                let linux = p
                    .product_description()
                    .is_none_or(|d| d.as_str().starts_with("Linux/UNIX"));
                let (Some(t), Some(z), Some(price)) =
                    (p.instance_type(), p.availability_zone(), p.spot_price())
                else {
                    continue;
                };
                let Ok(price) = price.parse::<f64>() else {
                    continue;
                };
                if !(linux && price.is_finite() && price > 0.0) {
                    continue;
                }
                let at = p.timestamp().map_or(0, DateTime::secs);
                let e = latest
                    .entry((t.as_str().to_string(), z.to_string()))
                    .or_insert((at, price));
                if at > e.0 {
                    *e = (at, price);
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
        Ok(latest.into_iter().map(|(k, (_, p))| (k, p)).collect())
    }

    /// The node class for a NodePool's class name, resolved (cached for the TTL).
    ///
    /// # Errors
    /// [`AwsError::Config`] when no class of that name nor a default exists, or its
    /// selectors match nothing usable; API errors.
    pub async fn resolve_class(&self, name: &str) -> Result<Arc<ResolvedClass>, AwsError> {
        let (key, class) = self.settings.class(name).ok_or_else(|| {
            AwsError::Config(format!(
                "no AWS node class {name:?} and no {:?} class in the settings",
                crate::config::DEFAULT_CLASS
            ))
        })?;
        let now = self.clock.now_s();
        if let Some((at, r)) = self.classes.lock().await.get(key)
            && now - at < self.ttl()
        {
            return Ok(r.clone());
        }
        let discovery = Selector::tag(DISCOVERY_TAG, self.settings.cluster.clone());
        let subnets_sel = if class.subnets.is_empty() {
            &discovery
        } else {
            &class.subnets
        };
        let sg_sel = if class.security_groups.is_empty() {
            &discovery
        } else {
            &class.security_groups
        };
        let resolved = ResolvedClass {
            name: key.to_string(),
            class: class.clone(),
            amis: if class.ami.is_empty() {
                BTreeMap::new()
            } else {
                self.resolve_amis(&class.ami).await?
            },
            subnets: self.resolve_subnets(subnets_sel).await?,
            security_groups: self.resolve_security_groups(sg_sel).await?,
        };
        if resolved.subnets.is_empty() {
            return Err(AwsError::Config(format!(
                "node class {key:?}: no subnet matches {subnets_sel:?}"
            )));
        }
        let r = Arc::new(resolved);
        self.classes
            .lock()
            .await
            .insert(key.to_string(), (now, r.clone()));
        Ok(r)
    }

    async fn resolve_amis(&self, sel: &Selector) -> Result<BTreeMap<String, String>, AwsError> {
        let mut filters = tag_filters(&sel.tags);
        if let Some(n) = &sel.name {
            filters.push(filter("name", [n.clone()]));
        }
        filters.push(filter("state", ["available"]));
        let out = self
            .api
            .call(Family::Describe, "DescribeImages", || {
                let mut r = self.api.client.describe_images();
                if sel.ids.is_empty() {
                    r = r.set_filters(Some(filters.clone()));
                    if !sel.owners.is_empty() {
                        r = r.set_owners(Some(sel.owners.clone()));
                    }
                } else {
                    r = r.set_image_ids(Some(sel.ids.clone()));
                }
                r.send()
            })
            .await?;
        // Newest per architecture (creation dates are ISO 8601, so they sort as strings).
        let mut best: BTreeMap<String, (String, String)> = BTreeMap::new();
        for img in out.images() {
            let arch = match img.architecture().map(|a| a.as_str()) {
                Some("x86_64") => "amd64",
                Some("arm64") => "arm64",
                _ => continue,
            };
            let (Some(id), created) = (img.image_id(), img.creation_date().unwrap_or("")) else {
                continue;
            };
            let e = best
                .entry(arch.to_string())
                .or_insert((created.to_string(), id.to_string()));
            if (created, id) > (e.0.as_str(), e.1.as_str()) {
                *e = (created.to_string(), id.to_string());
            }
        }
        Ok(best.into_iter().map(|(a, (_, id))| (a, id)).collect())
    }

    async fn resolve_subnets(&self, sel: &Selector) -> Result<BTreeMap<String, String>, AwsError> {
        let filters = tag_filters(&sel.tags);
        let out = self
            .api
            .call(Family::Describe, "DescribeSubnets", || {
                let r = self.api.client.describe_subnets();
                if sel.ids.is_empty() {
                    r.set_filters(Some(filters.clone())).send()
                } else {
                    r.set_subnet_ids(Some(sel.ids.clone())).send()
                }
            })
            .await?;
        // The subnet with the most free addresses per zone; ties by id for determinism.
        let mut best: BTreeMap<String, (i32, String)> = BTreeMap::new();
        for s in out.subnets() {
            let (Some(zone), Some(id)) = (s.availability_zone(), s.subnet_id()) else {
                continue;
            };
            let free = s.available_ip_address_count().unwrap_or(0);
            let e = best
                .entry(zone.to_string())
                .or_insert((free, id.to_string()));
            if free > e.0 || (free == e.0 && id < e.1.as_str()) {
                *e = (free, id.to_string());
            }
        }
        Ok(best.into_iter().map(|(z, (_, id))| (z, id)).collect())
    }

    async fn resolve_security_groups(&self, sel: &Selector) -> Result<Vec<String>, AwsError> {
        let filters = tag_filters(&sel.tags);
        let out = self
            .api
            .call(Family::Describe, "DescribeSecurityGroups", || {
                let r = self.api.client.describe_security_groups();
                if sel.ids.is_empty() {
                    r.set_filters(Some(filters.clone())).send()
                } else {
                    r.set_group_ids(Some(sel.ids.clone())).send()
                }
            })
            .await?;
        let mut ids: Vec<String> = out
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The catalog as the planner sees it: for a configured node class (its zones, AMI
    /// architectures, root volume and max pods), or region-wide when `class` is `None` or not
    /// configured (no default class either).
    ///
    /// # Errors
    /// API errors; [`AwsError::Config`] when the class's selectors match nothing.
    pub async fn catalog(&self, class: Option<&str>) -> Result<Vec<InstanceType>, AwsError> {
        let (facts, market) = self.market().await?;
        let mut opts = BuildOptions {
            region: self.region.clone(),
            root_volume_gib: DEFAULT_ROOT_GIB,
            vm_memory_overhead_percent: self.settings.vm_memory_overhead_percent,
            max_pods: None,
            zones: None,
        };
        let mut archs: Option<BTreeSet<String>> = None;
        if let Some(name) = class
            && self.settings.class(name).is_some()
        {
            let r = self.resolve_class(name).await?;
            opts.root_volume_gib = r.class.root_volume_gib;
            opts.max_pods = r.class.max_pods;
            opts.zones = Some(r.subnets.keys().cloned().collect());
            if !r.amis.is_empty() {
                archs = Some(r.amis.keys().cloned().collect());
            }
        }
        let mut types = catalog::build(&facts, &market, &self.embedded, &opts);
        if let Some(a) = archs {
            types.retain(|t| a.contains(&t.arch));
        }
        Ok(types)
    }

    /// The market as last fetched, without waiting for a refresh in progress: prices on
    /// listed instances are informative, and GC must not wait for a catalog download.
    fn cached_market(&self) -> Option<Arc<Market>> {
        self.market
            .try_lock()
            .ok()
            .and_then(|c| c.as_ref().map(|c| c.market.clone()))
    }

    fn price(&self, market: &Market, key: &OfferingKey) -> Option<f64> {
        match key.capacity_type {
            CapacityType::Spot => market
                .spot
                .get(&(key.instance_type.clone(), key.zone.clone()))
                .copied(),
            CapacityType::OnDemand => self.embedded.on_demand.get(&key.instance_type).copied(),
        }
    }

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
    async fn describe(
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

    fn to_instance(
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

    /// The launch template for a class and boot configuration, created when missing.
    async fn ensure_template(
        &self,
        class: &ResolvedClass,
        user_data: &str,
        default_ami: &str,
    ) -> Result<String, AwsError> {
        let c = &class.class;
        let root = c.root_volume_gib.to_string();
        let sgs = class.security_groups.join(",");
        let tags_text = format!("{:?}", c.tags);
        let name = launch::template_name(
            &self.settings.cluster,
            &class.name,
            &[
                user_data,
                default_ami,
                &sgs,
                c.instance_profile.as_deref().unwrap_or(""),
                &root,
                &c.root_device_name,
                &tags_text,
            ],
        );
        if let Some(id) = self.templates.lock().await.get(&name) {
            return Ok(id.clone());
        }
        let existing = self.find_template(&name).await?;
        let id = match existing {
            Some(id) => id,
            None => match self
                .create_template(&name, class, user_data, default_ami)
                .await
            {
                Ok(id) => id,
                // Another replica (or an earlier attempt whose answer was lost) made it.
                Err(AwsError::Api { code, .. })
                    if code.starts_with("InvalidLaunchTemplateName.AlreadyExists") =>
                {
                    self.find_template(&name)
                        .await?
                        .ok_or_else(|| AwsError::Api {
                            operation: "DescribeLaunchTemplates",
                            code: "NotFound".into(),
                            message: format!("launch template {name} exists but cannot be found"),
                            transient: true,
                        })?
                }
                Err(e) => return Err(e),
            },
        };
        self.templates.lock().await.insert(name, id.clone());
        Ok(id)
    }

    async fn find_template(&self, name: &str) -> Result<Option<String>, AwsError> {
        let out = self
            .api
            .call(Family::Describe, "DescribeLaunchTemplates", || {
                self.api
                    .client
                    .describe_launch_templates()
                    .filters(filter("launch-template-name", [name.to_string()]))
                    .send()
            })
            .await?;
        Ok(out
            .launch_templates()
            .iter()
            .find(|t| t.launch_template_name() == Some(name))
            .and_then(|t| t.launch_template_id().map(str::to_string)))
    }

    async fn create_template(
        &self,
        name: &str,
        class: &ResolvedClass,
        user_data: &str,
        default_ami: &str,
    ) -> Result<String, AwsError> {
        let c = &class.class;
        let mut tags = c.tags.clone();
        tags.insert(tags::CLUSTER.into(), self.settings.cluster.clone());
        let tag_list: Vec<aws_sdk_ec2::types::Tag> = tags
            .iter()
            .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
            .collect();
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(default_ami)
            .set_security_group_ids(
                (!class.security_groups.is_empty()).then(|| class.security_groups.clone()),
            )
            .block_device_mappings(
                LaunchTemplateBlockDeviceMappingRequest::builder()
                    .device_name(&c.root_device_name)
                    .ebs(
                        LaunchTemplateEbsBlockDeviceRequest::builder()
                            .volume_size(i32::try_from(c.root_volume_gib).unwrap_or(i32::MAX))
                            .volume_type(VolumeType::Gp3)
                            .encrypted(true)
                            .delete_on_termination(true)
                            .build(),
                    )
                    .build(),
            )
            // IMDSv2 only, one hop: pods cannot reach the node's role credentials.
            .metadata_options(
                LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_tokens(LaunchTemplateHttpTokensState::Required)
                    .http_put_response_hop_limit(1)
                    .build(),
            )
            .user_data(aws_smithy_types::base64::encode(user_data))
            .tag_specifications(
                LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ResourceType::Volume)
                    .set_tags(Some(tag_list.clone()))
                    .build(),
            );
        if let Some(p) = &c.instance_profile {
            data = data.iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(p)
                    .build(),
            );
        }
        let data = data.build();
        let token = format!("lt-{:016x}", launch::fnv1a(&[name]));
        let out = self
            .api
            .call(Family::Mutate, "CreateLaunchTemplate", || {
                self.api
                    .client
                    .create_launch_template()
                    .launch_template_name(name)
                    .client_token(&token)
                    .launch_template_data(data.clone())
                    .tag_specifications(
                        TagSpecification::builder()
                            .resource_type(ResourceType::LaunchTemplate)
                            .set_tags(Some(tag_list.clone()))
                            .build(),
                    )
                    .send()
            })
            .await?;
        out.launch_template()
            .and_then(|t| t.launch_template_id())
            .map(str::to_string)
            .ok_or_else(|| AwsError::Api {
                operation: "CreateLaunchTemplate",
                code: "EmptyResponse".into(),
                message: "no launch template id in the answer".into(),
                transient: true,
            })
    }

    async fn launch_inner(&self, req: &LaunchRequest) -> Result<Launched, AwsError> {
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

    /// The placement group a launch goes into: `name`, made sure to exist; `None` (launch
    /// outside any group, logged) when EC2 refuses to make it for a reason retrying will not
    /// change (permissions, the account's placement group limit).
    ///
    /// # Errors
    /// Transient failures (throttling, 5xx), so the caller retries the launch.
    async fn placement_group_for_launch(
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

    async fn collect_placement_groups_inner(
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
