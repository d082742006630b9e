//! `GcpProvider`: the [`CloudProvider`] on Compute Engine.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use autoscaler_core::{CapacityType, InstanceType};
use google_cloud_compute_v1::model;
use providers::{
    Action, CloudProvider, Instance, InstanceState, LaunchRequest, Launched, NodeClassRef,
    OfferingKey, ProviderError,
};
use tokio::sync::Mutex;

use crate::api::{Api, CallStats, Failure, Family, api_error};
use crate::catalog::{self, AcceleratorFacts, BuildOptions, Built, Embedded, MachineFacts};
use crate::config::GcpSettings;
use crate::error::GcpError;
use crate::launch::{self, OpOutcome, Template, gce_labels};

mod group;
mod placement;

pub use group::{GROUP_LABEL, group_id};
pub use placement::{description as placement_description, policy_url};

/// The machine and accelerator types of the region's zones, as last fetched.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    /// Zones looked at.
    pub zones: Vec<String>,
    /// One entry per (machine type, zone).
    pub machines: Vec<MachineFacts>,
    /// One entry per (accelerator type, zone).
    pub accelerators: Vec<AcceleratorFacts>,
}

struct FactsCache {
    at: Instant,
    facts: Arc<Facts>,
}

/// The Compute Engine provider. Share it behind an `Arc`; every method takes `&self`.
pub struct GcpProvider {
    settings: GcpSettings,
    api: Api,
    embedded: Embedded,
    facts: Mutex<Option<FactsCache>>,
}

/// The project from the settings, else the environment (what gcloud and the client libraries
/// read). The metadata server is not asked: outside GCE that would be a network probe that
/// hangs, and on GKE the project is configured for the autoscaler anyway.
fn resolve_project(explicit: &str) -> Result<String, GcpError> {
    if !explicit.is_empty() {
        return Ok(explicit.to_string());
    }
    for var in [
        "GOOGLE_CLOUD_PROJECT",
        "CLOUDSDK_CORE_PROJECT",
        "GCLOUD_PROJECT",
    ] {
        if let Ok(v) = std::env::var(var)
            && !v.is_empty()
        {
            return Ok(v);
        }
    }
    Err(GcpError::Config(
        "no GCP project: pass --project, set project in the settings, or set GOOGLE_CLOUD_PROJECT"
            .into(),
    ))
}

fn is_http(f: &Failure, code: u16) -> bool {
    f.http == Some(code)
}

fn metadata_map(m: Option<&model::Metadata>) -> BTreeMap<String, String> {
    m.map(|m| {
        m.items
            .iter()
            .filter_map(|i| Some((i.key.clone()?, i.value.clone().unwrap_or_default())))
            .collect()
    })
    .unwrap_or_default()
}

impl GcpProvider {
    /// Connects with Application Default Credentials (or none, for an `http://` endpoint or
    /// `anonymous: true`).
    ///
    /// # Errors
    /// [`GcpError::Config`] for invalid settings or a missing project;
    /// [`GcpError::Credentials`] when ADC cannot be loaded.
    pub async fn connect(mut settings: GcpSettings) -> Result<Self, GcpError> {
        settings.validate()?;
        settings.project = resolve_project(&settings.project)?;
        let api = Api::connect(&settings).await?;
        Ok(GcpProvider {
            embedded: Embedded::load(&settings.on_demand_prices, &settings.spot_prices),
            settings,
            api,
            facts: Mutex::new(None),
        })
    }

    /// The settings in use (project resolved).
    pub fn settings(&self) -> &GcpSettings {
        &self.settings
    }

    /// Counters of API attempts, throttling and retries since the start.
    pub fn stats(&self) -> &CallStats {
        &self.api.stats
    }

    /// Forgets the cached machine and accelerator types.
    pub async fn invalidate(&self) {
        *self.facts.lock().await = None;
    }

    fn project(&self) -> &str {
        &self.settings.project
    }

    /// Machine and accelerator types of the region, from the cache while younger than the TTL.
    ///
    /// # Errors
    /// API failures after retries.
    pub async fn facts(&self) -> Result<Arc<Facts>, GcpError> {
        // Held across the fetch, so that concurrent callers wait for one refresh.
        let mut cache = self.facts.lock().await;
        let ttl = Duration::from_secs(u64::try_from(self.settings.catalog_ttl_s).unwrap_or(0));
        if let Some(c) = cache.as_ref()
            && c.at.elapsed() < ttl
        {
            return Ok(c.facts.clone());
        }
        let facts = Arc::new(self.fetch_facts().await?);
        *cache = Some(FactsCache {
            at: Instant::now(),
            facts: facts.clone(),
        });
        Ok(facts)
    }

    async fn fetch_facts(&self) -> Result<Facts, GcpError> {
        let project = self.project();
        let mut machines = Vec::new();
        let zones: Vec<String> = if self.settings.zones.is_empty() {
            // One aggregated call finds the region's zones and their machine types together.
            let prefix = format!("{}-", self.settings.region);
            let mut zones = BTreeSet::new();
            paginate(
                |token| async move {
                    self.api
                        .call_ok(Family::Read, "machineTypes.aggregatedList", || {
                            self.api
                                .machine_types
                                .aggregated_list()
                                .set_project(project.to_string())
                                .set_page_token(token.clone())
                                .send()
                        })
                        .await
                },
                |page| {
                    for (scope, list) in &page.items {
                        let zone = catalog::last_segment(scope);
                        if !zone.starts_with(&prefix) {
                            continue;
                        }
                        for m in &list.machine_types {
                            if let Some(f) = MachineFacts::from_api(m, zone) {
                                zones.insert(f.zone.clone());
                                machines.push(f);
                            }
                        }
                    }
                    page.next_page_token
                },
            )
            .await?;
            zones.into_iter().collect()
        } else {
            for zone in &self.settings.zones {
                paginate(
                    |token| async move {
                        self.api
                            .call_ok(Family::Read, "machineTypes.list", || {
                                self.api
                                    .machine_types
                                    .list()
                                    .set_project(project.to_string())
                                    .set_zone(zone.clone())
                                    .set_page_token(token.clone())
                                    .send()
                            })
                            .await
                    },
                    |page| {
                        machines.extend(
                            page.items
                                .iter()
                                .filter_map(|m| MachineFacts::from_api(m, zone)),
                        );
                        page.next_page_token
                    },
                )
                .await?;
            }
            self.settings.zones.clone()
        };
        let mut accelerators = Vec::new();
        for zone in &zones {
            paginate(
                |token| async move {
                    self.api
                        .call_ok(Family::Read, "acceleratorTypes.list", || {
                            self.api
                                .accelerator_types
                                .list()
                                .set_project(project.to_string())
                                .set_zone(zone.clone())
                                .set_page_token(token.clone())
                                .send()
                        })
                        .await
                },
                |page| {
                    accelerators.extend(
                        page.items
                            .iter()
                            .filter_map(|a| AcceleratorFacts::from_api(a, zone)),
                    );
                    page.next_page_token
                },
            )
            .await?;
        }
        machines.sort_by(|a, b| (&a.name, &a.zone).cmp(&(&b.name, &b.zone)));
        accelerators.sort_by(|a, b| (&a.name, &a.zone).cmp(&(&b.name, &b.zone)));
        Ok(Facts {
            zones,
            machines,
            accelerators,
        })
    }

    /// The catalog for node class `class` with what was left out (for the `catalog` command).
    ///
    /// # Errors
    /// API failures after retries.
    pub async fn catalog(&self, class: &str) -> Result<Built, GcpError> {
        let facts = self.facts().await?;
        let (_, c) = self.settings.class(class);
        Ok(catalog::build(
            &facts.machines,
            &facts.accelerators,
            &self.embedded,
            &BuildOptions {
                region: self.settings.region.clone(),
                boot_disk_gib: c.boot_disk_gib,
                max_pods: c.max_pods,
                spot: self.settings.spot,
            },
        ))
    }

    /// Waits for a zonal operation to be DONE, up to `timeout`, with `zoneOperations.wait`.
    async fn wait(
        &self,
        zone: &str,
        op: model::Operation,
        timeout: Duration,
    ) -> Result<model::Operation, GcpError> {
        self.poll(op, timeout, |name| {
            self.api
                .call_ok(Family::Read, "zoneOperations.wait", move || {
                    self.api
                        .operations
                        .wait()
                        .set_project(self.project().to_string())
                        .set_zone(zone.to_string())
                        .set_operation(name.clone())
                        .send()
                })
        })
        .await
    }

    /// Polls an operation until it is no longer running, up to `timeout`: `fetch` is the
    /// scope's `wait` call (it blocks server-side until DONE or about two minutes), with a
    /// pause between calls.
    async fn poll<F, Fut>(
        &self,
        mut op: model::Operation,
        timeout: Duration,
        fetch: F,
    ) -> Result<model::Operation, GcpError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<model::Operation, GcpError>>,
    {
        let start = Instant::now();
        let name = op.name.clone().unwrap_or_default();
        loop {
            if launch::outcome(&op) != OpOutcome::Running {
                return Ok(op);
            }
            if start.elapsed() >= timeout || name.is_empty() {
                return Err(GcpError::OperationTimeout {
                    operation: name,
                    waited_s: start.elapsed().as_secs(),
                });
            }
            op = fetch(name.clone()).await?;
            if launch::outcome(&op) == OpOutcome::Running {
                tokio::time::sleep(Duration::from_millis(self.settings.timeouts.poll_ms)).await;
            }
        }
    }

    fn to_instance(&self, i: &model::Instance) -> Option<Instance> {
        let name = i.name.clone()?;
        let zone = catalog::last_segment(i.zone.as_deref()?).to_string();
        let gce: BTreeMap<String, String> = i
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let metadata = metadata_map(i.metadata.as_ref());
        let mut tags = launch::neutral_tags(&gce, &metadata);
        if let Some(p) = i.resource_policies.first() {
            tags.insert(
                providers::tags::PLACEMENT_GROUP.to_string(),
                catalog::last_segment(p).to_string(),
            );
        }
        let machine = catalog::last_segment(i.machine_type.as_deref().unwrap_or_default());
        let instance_type = match i.guest_accelerators.first() {
            Some(a) if machine.starts_with("n1-") => {
                let accel = catalog::last_segment(a.accelerator_type.as_deref().unwrap_or(""));
                let count = u32::try_from(a.accelerator_count.unwrap_or(0)).unwrap_or(0);
                catalog::n1_rules()
                    .iter()
                    .find(|r| r.accelerator == accel)
                    .map_or_else(
                        || machine.to_string(),
                        |r| catalog::attached_name(machine, r, count),
                    )
            }
            _ => machine.to_string(),
        };
        let scheduling = i.scheduling.as_ref();
        let spot = scheduling.is_some_and(|s| {
            s.preemptible == Some(true)
                || s.provisioning_model.as_ref().and_then(|m| m.name()) == Some("SPOT")
        });
        let capacity_type = if spot {
            CapacityType::Spot
        } else {
            CapacityType::OnDemand
        };
        let state = match i.status.as_ref().and_then(|s| s.name()) {
            Some("RUNNING") => InstanceState::Running,
            Some("STOPPING" | "SUSPENDING" | "DEPROVISIONING") => InstanceState::ShuttingDown,
            Some("TERMINATED" | "STOPPED" | "SUSPENDED") => InstanceState::Terminated,
            _ => InstanceState::Pending,
        };
        // N1 combinations outside the price table are priced from the machine's shape, known
        // when the catalog is cached (best effort: never wait for a refresh here).
        let shape = self.facts.try_lock().ok().and_then(|c| {
            c.as_ref()
                .and_then(|c| c.facts.machines.iter().find(|m| m.name == machine).cloned())
        });
        let (on_demand, spot_price) = self.embedded.prices(&instance_type, shape.as_ref());
        Some(Instance {
            provider_id: launch::provider_id(self.project(), &zone, &name),
            claim: tags.get(providers::tags::CLAIM).cloned(),
            pool: tags.get(providers::tags::POOL).cloned(),
            price: if spot { spot_price } else { on_demand },
            instance_type,
            zone,
            capacity_type,
            state,
            tags,
        })
    }

    async fn get_by_name(&self, zone: &str, name: &str) -> Result<Option<Instance>, GcpError> {
        let r = self
            .api
            .call(Family::Read, "instances.get", || {
                self.api
                    .instances
                    .get()
                    .set_project(self.project().to_string())
                    .set_zone(zone.to_string())
                    .set_instance(name.to_string())
                    .send()
            })
            .await?;
        match r {
            Ok(i) => Ok(self.to_instance(&i)),
            Err(f) if is_http(&f, 404) => Ok(None),
            Err(f) => Err(api_error("instances.get", f)),
        }
    }

    /// Instances of this cluster matching an extra label filter, over every zone.
    async fn list_filtered(&self, extra: Option<String>) -> Result<Vec<Instance>, GcpError> {
        let mut filter = format!(
            "({})",
            launch::label_filter(gce_labels::CLUSTER, &self.settings.cluster)
        );
        if let Some(e) = extra {
            filter.push_str(&format!(" AND ({e})"));
        }
        let mut out = Vec::new();
        let filter = &filter;
        paginate(
            |token| async move {
                self.api
                    .call_ok(Family::Read, "instances.aggregatedList", || {
                        self.api
                            .instances
                            .aggregated_list()
                            .set_project(self.project().to_string())
                            .set_filter(filter.clone())
                            .set_page_token(token.clone())
                            .send()
                    })
                    .await
            },
            |page| {
                for list in page.items.values() {
                    out.extend(list.instances.iter().filter_map(|i| self.to_instance(i)));
                }
                page.next_page_token
            },
        )
        .await?;
        out.sort_by(|a, b| a.provider_id.cmp(&b.provider_id));
        Ok(out)
    }

    /// The instance launched for `claim`, if any (in any zone).
    async fn find_claim(&self, claim: &str) -> Result<Option<Instance>, GcpError> {
        let filter = match launch::to_label_value(claim) {
            Some(v) => launch::label_filter(gce_labels::CLAIM, &v),
            // A claim name too long for a label: the instance name derived from it is unique.
            None => format!("name = \"{}\"", launch::instance_name(claim)),
        };
        Ok(self
            .list_filtered(Some(filter))
            .await?
            .into_iter()
            .find(|i| i.claim.as_deref() == Some(claim) && i.state != InstanceState::Terminated))
    }

    async fn launch_inner(&self, request: &LaunchRequest) -> Result<Launched, GcpError> {
        if request.candidates.is_empty() {
            return Err(GcpError::InvalidRequest("no candidate offerings".into()));
        }
        // Idempotency beyond the request-id window: an instance already carrying the claim's
        // label is the answer, whatever zone it landed in.
        if let Some(instance) = self.find_claim(&request.claim).await? {
            return Ok(Launched {
                instance,
                unavailable: Vec::new(),
            });
        }
        let facts = self.facts().await?;
        let (_, class) = self.settings.class(&request.class.name);
        let policy = match &request.placement_group {
            Some(g) => self.placement_for_launch(&request.claim, g).await?,
            None => None,
        };
        let mut unavailable = Vec::new();
        let mut known_any = false;
        for offering in &request.candidates {
            let (machine, _) = launch::machine_and_gpus(&offering.instance_type);
            let Some(m) = facts
                .machines
                .iter()
                .find(|m| m.name == machine && m.zone == offering.zone)
            else {
                if facts.machines.iter().any(|m| m.name == machine) {
                    // Known type, not in this zone: nothing to buy here.
                    known_any = true;
                    unavailable.push(offering.clone());
                } else {
                    tracing::warn!(instance_type = %offering.instance_type, "unknown machine type; skipped");
                }
                continue;
            };
            known_any = true;
            let template = Template {
                project: self.project(),
                cluster: &self.settings.cluster,
                class: &class,
                builtin_gpu: m.accelerator.is_some(),
            };
            let inside = match policy.as_deref() {
                Some(p) => match self
                    .try_offering(&template, request, offering, Some(p))
                    .await
                {
                    Ok(Some(i)) => Some(i),
                    // Refused inside the placement group (no room close together, or the
                    // policy does not suit the machine): the group is a preference, so the
                    // same offering is asked for outside it.
                    Ok(None)
                    | Err(GcpError::Api {
                        transient: false, ..
                    }) => {
                        tracing::info!(claim = %request.claim, offering = %offering, placement_group = %p, "refused inside the placement group, launching outside it");
                        None
                    }
                    Err(e) => return Err(e),
                },
                None => None,
            };
            let got = match inside {
                Some(i) => Some(i),
                None => {
                    self.try_offering(&template, request, offering, None)
                        .await?
                }
            };
            match got {
                Some(instance) => {
                    return Ok(Launched {
                        instance,
                        unavailable,
                    });
                }
                None => unavailable.push(offering.clone()),
            }
        }
        if !known_any {
            return Err(GcpError::InvalidRequest(format!(
                "no candidate names a machine type of region {}",
                self.settings.region
            )));
        }
        Err(GcpError::InsufficientCapacity(unavailable))
    }

    /// One insert, into the resource policy `policy` (a URL) if any: `Some(instance)` on
    /// success, `None` when the offering lacks capacity or quota.
    async fn try_offering(
        &self,
        template: &Template<'_>,
        request: &LaunchRequest,
        offering: &OfferingKey,
        policy: Option<&str>,
    ) -> Result<Option<Instance>, GcpError> {
        let zone = offering.zone.clone();
        let name = launch::instance_name(&request.claim);
        let mut body = launch::instance_body(template, request, offering);
        // Inside and outside a placement group are two requests: the server would answer a
        // reused request id with the first one's (failed) operation.
        let request_id = match policy {
            Some(p) => {
                body.resource_policies = vec![p.to_string()];
                launch::request_id(&format!("{}/placement/{p}", request.claim), offering)
            }
            None => launch::request_id(&request.claim, offering),
        };
        let sent = self
            .api
            .call(Family::Mutate, "instances.insert", || {
                self.api
                    .instances
                    .insert()
                    .set_project(self.project().to_string())
                    .set_zone(zone.clone())
                    .set_request_id(request_id.clone())
                    .set_body(body.clone())
                    .send()
            })
            .await?;
        let op = match sent {
            Ok(op) => op,
            Err(f) if is_http(&f, 409) => return self.adopt(&zone, &name, &request.claim).await,
            Err(f) if is_unavailable_failure(&f) => {
                tracing::info!(offering = %offering, reason = %f.reason, "offering refused");
                return Ok(None);
            }
            Err(f) => return Err(api_error("instances.insert", f)),
        };
        let timeout = Duration::from_secs(self.settings.timeouts.operation_s);
        let op = self.wait(&zone, op, timeout).await?;
        match launch::outcome(&op) {
            OpOutcome::Done => match self.get_by_name(&zone, &name).await? {
                Some(i) => Ok(Some(i)),
                None => Err(GcpError::Api {
                    operation: "instances.insert",
                    code: "missing".into(),
                    message: format!("insert of {name} completed but the instance is gone"),
                    transient: true,
                }),
            },
            OpOutcome::Failed {
                already_exists: true,
                ..
            } => self.adopt(&zone, &name, &request.claim).await,
            OpOutcome::Failed {
                unavailable: true,
                code,
                message,
                ..
            } => {
                tracing::info!(offering = %offering, %code, %message, "offering refused");
                Ok(None)
            }
            OpOutcome::Failed { code, message, .. } => Err(GcpError::Api {
                operation: "instances.insert",
                code,
                message,
                transient: false,
            }),
            OpOutcome::Running => unreachable!("wait returns only finished operations"),
        }
    }

    /// The instance `name` exists already (409 or RESOURCE_ALREADY_EXISTS): ours if it carries
    /// the claim, a conflict otherwise.
    async fn adopt(
        &self,
        zone: &str,
        name: &str,
        claim: &str,
    ) -> Result<Option<Instance>, GcpError> {
        match self.get_by_name(zone, name).await? {
            Some(i) if i.claim.as_deref() == Some(claim) => Ok(Some(i)),
            Some(_) => Err(GcpError::InvalidRequest(format!(
                "instance {name} in {zone} exists and belongs to another claim or cluster"
            ))),
            // Deleted between the conflict and the get: the next attempt will insert anew.
            None => Err(GcpError::Api {
                operation: "instances.insert",
                code: "409".into(),
                message: format!("instance {name} existed and then vanished"),
                transient: true,
            }),
        }
    }

    async fn delete_inner(&self, provider_id: &str) -> Result<(), GcpError> {
        let Some((project, zone, name)) = launch::parse_provider_id(provider_id) else {
            return Err(GcpError::InvalidRequest(format!(
                "{provider_id} is not a gce:// provider id"
            )));
        };
        if project != self.project() {
            return Err(GcpError::InvalidRequest(format!(
                "{provider_id} is in project {project}, not {}",
                self.project()
            )));
        }
        let request_id = launch::delete_request_id(provider_id);
        let sent = self
            .api
            .call(Family::Mutate, "instances.delete", || {
                self.api
                    .instances
                    .delete()
                    .set_project(project.to_string())
                    .set_zone(zone.to_string())
                    .set_instance(name.to_string())
                    .set_request_id(request_id.clone())
                    .send()
            })
            .await?;
        let op = match sent {
            Ok(op) => op,
            Err(f) if is_http(&f, 404) => return Ok(()),
            Err(f) => return Err(api_error("instances.delete", f)),
        };
        // Deleting a GPU VM takes a minute or more; the deletion proceeds without us, so a
        // short wait catches quick failures and a timeout is not an error.
        let wait = Duration::from_secs(self.settings.timeouts.operation_s.min(60));
        match self.wait(zone, op, wait).await {
            Ok(op) => match launch::outcome(&op) {
                OpOutcome::Failed {
                    not_found: false,
                    code,
                    message,
                    ..
                } => Err(GcpError::Api {
                    operation: "instances.delete",
                    code,
                    message,
                    transient: true,
                }),
                _ => Ok(()),
            },
            Err(GcpError::OperationTimeout { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn get_inner(&self, provider_id: &str) -> Result<Instance, GcpError> {
        let (_, zone, name) = launch::parse_provider_id(provider_id)
            .ok_or_else(|| GcpError::NotFound(provider_id.to_string()))?;
        self.get_by_name(zone, name)
            .await?
            .ok_or_else(|| GcpError::NotFound(provider_id.to_string()))
    }
}

/// A synchronous refusal that means "this offering, not now": quota (403 `quotaExceeded`,
/// `QUOTA_EXCEEDED`) or a stockout answered at once, and 404 for a machine or accelerator type
/// the zone does not have.
fn is_unavailable_failure(f: &Failure) -> bool {
    let r = f.reason.as_str();
    matches!(
        r,
        "quotaExceeded" | "QUOTA_EXCEEDED" | "ZONE_RESOURCE_POOL_EXHAUSTED" | "RESOURCE_EXHAUSTED"
    ) || (f.http == Some(403) && f.message.contains("Quota"))
        || f.http == Some(404)
}

impl CloudProvider for GcpProvider {
    fn name(&self) -> &str {
        "gcp"
    }

    async fn instance_types(
        &self,
        class: &NodeClassRef,
    ) -> Result<Vec<InstanceType>, ProviderError> {
        self.catalog(&class.name)
            .await
            .map(|b| b.types)
            .map_err(|e| e.into_provider(Action::InstanceTypes))
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, ProviderError> {
        self.launch_inner(request)
            .await
            .map_err(|e| e.into_provider(Action::Launch))
    }

    fn atomic_groups(&self) -> bool {
        true
    }

    async fn launch_group(
        &self,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Launched>, ProviderError> {
        // instances.bulkInsert with count = minCount: Compute Engine creates all or none.
        GcpProvider::launch_group(self, requests).await
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

    async fn collect_placement_groups(
        &self,
        live: &[Instance],
        keep: &BTreeSet<String>,
        grace_s: i64,
    ) -> Result<Vec<String>, ProviderError> {
        self.collect_placement_inner(live, keep, grace_s)
            .await
            .map_err(|e| e.into_provider(Action::CollectPlacementGroups))
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        self.list_filtered(None)
            .await
            .map(|v| {
                v.into_iter()
                    .filter(|i| i.state != InstanceState::Terminated)
                    .collect()
            })
            .map_err(|e| e.into_provider(Action::List))
    }
}

/// Follows `nextPageToken` from the first page to the last: `fetch(token)` reads one page,
/// `take(page)` keeps its items and hands back the page's next token.
async fn paginate<P, F, Fut>(
    mut fetch: F,
    mut take: impl FnMut(P) -> Option<String>,
) -> Result<(), GcpError>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<P, GcpError>>,
{
    let mut token = String::new();
    loop {
        match take(fetch(token).await?) {
            Some(t) if !t.is_empty() => token = t,
            _ => return Ok(()),
        }
    }
}
