//! The region's market: instance-type facts, zones and spot prices from the EC2 API, cached
//! for `catalog_ttl_s`, and the catalog built from them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use autoscaler_core::{CapacityType, InstanceType};
use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_ec2::types::LocationType;
use providers::OfferingKey;

use crate::api::Family;
use crate::catalog::{self, BuildOptions, Market, TypeFacts};
use crate::error::AwsError;

use super::{AwsProvider, DEFAULT_ROOT_GIB, MarketCache, filter};

impl AwsProvider {
    pub(super) fn ttl(&self) -> i64 {
        self.settings.catalog_ttl_s
    }

    /// Instance type facts and the market, from the cache while younger than the TTL.
    pub(super) async fn market(&self) -> Result<(Arc<Vec<TypeFacts>>, Arc<Market>), AwsError> {
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
            zone_ids: self.zone_ids_or_none().await,
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

    /// [`Self::fetch_zone_ids`], or none when the call fails (a role without
    /// `ec2:DescribeAvailabilityZones`): only requirements on zone IDs go unmet then, as on
    /// a cloud without them, rather than the whole catalog.
    async fn zone_ids_or_none(&self) -> BTreeMap<String, String> {
        match self.fetch_zone_ids().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "no zone IDs: requirements on topology.k8s.aws/zone-id match no zone");
                BTreeMap::new()
            }
        }
    }

    /// Zone name to zone ID for the region's availability zones (one call, no paging).
    async fn fetch_zone_ids(&self) -> Result<BTreeMap<String, String>, AwsError> {
        let out = self
            .api
            .call(Family::Describe, "DescribeAvailabilityZones", || {
                self.api.client.describe_availability_zones().send()
            })
            .await?;
        Ok(out
            .availability_zones()
            .iter()
            .filter_map(|z| Some((z.zone_name()?.to_string(), z.zone_id()?.to_string())))
            .collect())
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
    pub(super) fn cached_market(&self) -> Option<Arc<Market>> {
        self.market
            .try_lock()
            .ok()
            .and_then(|c| c.as_ref().map(|c| c.market.clone()))
    }

    pub(super) fn price(&self, market: &Market, key: &OfferingKey) -> Option<f64> {
        match key.capacity_type {
            CapacityType::Spot => market
                .spot
                .get(&(key.instance_type.clone(), key.zone.clone()))
                .copied(),
            CapacityType::OnDemand => self.embedded.on_demand.get(&key.instance_type).copied(),
        }
    }
}
