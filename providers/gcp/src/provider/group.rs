//! All-or-nothing groups with `instances.bulkInsert`: `count = minCount = n` in one zone, so
//! that Compute Engine creates every instance or none (for gang-scheduled training jobs whose
//! NodeClaims are useless alone).
//!
//! bulkInsert shares one set of instance properties; only names differ per instance. So the
//! group's instances carry the shared labels plus a group label, and each gets its claim label
//! with `instances.setLabels` afterwards. The group label makes a retry find the group (all of
//! it, since the insert is atomic) instead of creating it again.

use std::collections::BTreeMap;
use std::time::Duration;

use google_cloud_compute_v1::model::{
    self, BulkInsertInstanceResource, BulkInsertInstanceResourcePerInstanceProperties,
    InstanceProperties, InstancesSetLabelsRequest,
};
use providers::{Action, Instance, LaunchRequest, Launched, OfferingKey, ProviderError};

use super::{GcpProvider, is_unavailable_failure};
use crate::api::{Family, api_error};
use crate::error::GcpError;
use crate::launch::{self, OpOutcome, Template, gce_labels};

/// GCE label naming the group an instance was bulk-inserted with.
pub const GROUP_LABEL: &str = "gpu-autoscaler-group";

/// The group's id: a UUID of its sorted claim names (label-safe as is).
pub fn group_id(requests: &[LaunchRequest]) -> String {
    let mut claims: Vec<&str> = requests.iter().map(|r| r.claim.as_str()).collect();
    claims.sort_unstable();
    launch::request_id(
        &format!("group/{}", claims.join(",")),
        &OfferingKey::new("", "", autoscaler_core::CapacityType::OnDemand),
    )
}

/// The shared properties of a group, from the single-instance body: bare machine and
/// accelerator type names (bulkInsert rejects URLs there), no per-instance metadata.
fn properties(body: &model::Instance, offering: &OfferingKey, group: &str) -> InstanceProperties {
    let (machine, attached) = launch::machine_and_gpus(&offering.instance_type);
    let mut labels = body.labels.clone();
    labels.remove(gce_labels::CLAIM);
    labels.insert(GROUP_LABEL.into(), group.to_string());
    let mut metadata = body.metadata.clone().unwrap_or_default();
    metadata.items.retain(|i| {
        i.key.as_deref() != Some(launch::metadata_keys::CLAIM)
            && i.key.as_deref() != Some(launch::metadata_keys::STARTUP_SCRIPT)
    });
    let mut p = InstanceProperties::new()
        .set_machine_type(machine)
        .set_labels(labels)
        .set_metadata(metadata)
        .set_network_interfaces(body.network_interfaces.clone())
        .set_disks(body.disks.clone())
        .set_service_accounts(body.service_accounts.clone());
    if let Some(s) = &body.scheduling {
        p = p.set_scheduling(s.clone());
    }
    if let Some(t) = &body.tags {
        p = p.set_tags(t.clone());
    }
    if let Some((accel, count)) = attached {
        p = p.set_guest_accelerators([model::AcceleratorConfig::new()
            .set_accelerator_type(accel)
            .set_accelerator_count(i32::try_from(count).unwrap_or(i32::MAX))]);
    }
    p
}

impl GcpProvider {
    /// Launches one instance per request, all or none, with `instances.bulkInsert`, trying the
    /// (shared) candidates in order. The requests must share NodePool, class, labels, taints and
    /// candidates (one template). Idempotent per group: a retry returns the group's instances.
    ///
    /// The instance boot script cannot carry per-instance values here, so it registers the
    /// kubelet without `--provider-id` (the cloud controller sets it, as for any GCE node).
    ///
    /// # Errors
    /// As [`providers::CloudProvider::launch`]; [`ProviderError::InvalidRequest`] for requests
    /// that do not share one template.
    pub async fn launch_group(
        &self,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Launched>, ProviderError> {
        self.launch_group_inner(requests)
            .await
            .map_err(|e| e.into_provider(Action::Launch))
    }

    async fn launch_group_inner(
        &self,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Launched>, GcpError> {
        let Some(first) = requests.first() else {
            return Err(GcpError::InvalidRequest("empty group".into()));
        };
        let shared = |r: &LaunchRequest| {
            r.pool == first.pool
                && r.class == first.class
                && r.candidates == first.candidates
                && r.labels == first.labels
                && r.taints == first.taints
                && r.startup_taints == first.startup_taints
                && r.placement_group == first.placement_group
        };
        if !requests.iter().all(shared) {
            return Err(GcpError::InvalidRequest(
                "a bulkInsert group needs one template: the same pool, class, labels, taints, \
                 candidates and placement group for every claim"
                    .into(),
            ));
        }
        if first.candidates.is_empty() {
            return Err(GcpError::InvalidRequest("no candidate offerings".into()));
        }
        let group = group_id(requests);
        let existing = self
            .list_filtered(Some(launch::label_filter(GROUP_LABEL, &group)))
            .await?;
        if !existing.is_empty() {
            return self.label_claims(requests, existing, Vec::new()).await;
        }
        let facts = self.facts().await?;
        let (_, class) = self.settings.class(&first.class.name);
        let policy = match &first.placement_group {
            Some(g) => self
                .placement_for_launch(&first.claim, g)
                .await?
                .map(|_| g.clone()),
            None => None,
        };
        let mut unavailable = Vec::new();
        // Each offering is tried inside the placement group first (when there is one), then
        // outside it: the group is a preference.
        let mut attempts: Vec<(&OfferingKey, Option<&str>)> = Vec::new();
        for o in &first.candidates {
            if let Some(p) = policy.as_deref() {
                attempts.push((o, Some(p)));
            }
            attempts.push((o, None));
        }
        for (offering, policy) in attempts {
            let (machine, _) = launch::machine_and_gpus(&offering.instance_type);
            let Some(m) = facts
                .machines
                .iter()
                .find(|m| m.name == machine && m.zone == offering.zone)
            else {
                unavailable.push(offering.clone());
                continue;
            };
            let template = Template {
                project: self.project(),
                cluster: &self.settings.cluster,
                class: &class,
                builtin_gpu: m.accelerator.is_some(),
            };
            let body = launch::instance_body(&template, first, offering);
            // No per-instance provider id in a shared script.
            let script =
                launch::startup_script(first, &class, &launch::node_labels(first, offering), "")
                    .replace(" --provider-id=", "");
            let mut props = properties(&body, offering, &group);
            if let Some(p) = policy {
                // Names, not URLs, in instance properties.
                props.resource_policies = vec![p.to_string()];
            }
            if let Some(md) = props.metadata.as_mut() {
                md.items.push(
                    model::metadata::Items::new()
                        .set_key(launch::metadata_keys::STARTUP_SCRIPT)
                        .set_value(script),
                );
            }
            let n = i64::try_from(requests.len()).unwrap_or(i64::MAX);
            let names: Vec<(String, BulkInsertInstanceResourcePerInstanceProperties)> = requests
                .iter()
                .map(|r| {
                    (
                        launch::instance_name(&r.claim),
                        BulkInsertInstanceResourcePerInstanceProperties::new(),
                    )
                })
                .collect();
            let resource = BulkInsertInstanceResource::new()
                .set_count(n)
                .set_min_count(n)
                .set_per_instance_properties(names)
                .set_instance_properties(props);
            let zone = offering.zone.clone();
            let request_id = match policy {
                Some(p) => launch::request_id(&format!("group/{group}/placement/{p}"), offering),
                None => launch::request_id(&format!("group/{group}"), offering),
            };
            let sent = self
                .api
                .call(Family::Mutate, "instances.bulkInsert", || {
                    self.api
                        .instances
                        .bulk_insert()
                        .set_project(self.project().to_string())
                        .set_zone(zone.clone())
                        .set_request_id(request_id.clone())
                        .set_body(resource.clone())
                        .send()
                })
                .await?;
            let op = match sent {
                Ok(op) => op,
                // Refused inside the placement group: the same offering outside it is next,
                // and it is not marked unavailable for what the group asked.
                Err(f) if policy.is_some() => {
                    tracing::info!(offering = %offering, reason = %f.reason, "group refused inside the placement group, launching outside it");
                    continue;
                }
                Err(f) if is_unavailable_failure(&f) => {
                    unavailable.push(offering.clone());
                    continue;
                }
                Err(f) => return Err(api_error("instances.bulkInsert", f)),
            };
            let timeout = Duration::from_secs(self.settings.timeouts.operation_s);
            match launch::outcome(&self.wait(&zone, op, timeout).await?) {
                OpOutcome::Done => {
                    let created = self
                        .list_filtered(Some(launch::label_filter(GROUP_LABEL, &group)))
                        .await?;
                    return self.label_claims(requests, created, unavailable).await;
                }
                OpOutcome::Failed { code, .. } if policy.is_some() => {
                    tracing::info!(offering = %offering, %code, "group refused inside the placement group, launching outside it");
                }
                OpOutcome::Failed {
                    unavailable: true, ..
                } => unavailable.push(offering.clone()),
                OpOutcome::Failed { code, message, .. } => {
                    return Err(GcpError::Api {
                        operation: "instances.bulkInsert",
                        code,
                        message,
                        transient: false,
                    });
                }
                OpOutcome::Running => unreachable!("wait returns only finished operations"),
            }
        }
        Err(GcpError::InsufficientCapacity(unavailable))
    }

    /// Puts each claim's label on its instance of the group (found by name) and returns the
    /// launches in request order.
    async fn label_claims(
        &self,
        requests: &[LaunchRequest],
        instances: Vec<Instance>,
        unavailable: Vec<OfferingKey>,
    ) -> Result<Vec<Launched>, GcpError> {
        let by_name: BTreeMap<String, Instance> = instances
            .into_iter()
            .filter_map(|i| {
                let name = launch::parse_provider_id(&i.provider_id)?.2.to_string();
                Some((name, i))
            })
            .collect();
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            let name = launch::instance_name(&r.claim);
            let Some(found) = by_name.get(&name) else {
                return Err(GcpError::Api {
                    operation: "instances.bulkInsert",
                    code: "incomplete".into(),
                    message: format!("group instance {name} is missing"),
                    transient: true,
                });
            };
            let instance = if found.claim.as_deref() == Some(r.claim.as_str()) {
                found.clone()
            } else {
                self.set_claim_label(&found.zone, &name, &r.claim).await?
            };
            out.push(Launched {
                instance,
                unavailable: unavailable.clone(),
            });
        }
        Ok(out)
    }

    /// `instances.setLabels` with the claim label added (read-modify-write with the label
    /// fingerprint, retried once on a fingerprint conflict).
    async fn set_claim_label(
        &self,
        zone: &str,
        name: &str,
        claim: &str,
    ) -> Result<Instance, GcpError> {
        let Some(value) = launch::to_label_value(claim) else {
            return Err(GcpError::InvalidRequest(format!(
                "claim name {claim} is too long for a GCE label"
            )));
        };
        for _ in 0..2 {
            let current = self
                .api
                .call_ok(Family::Read, "instances.get", || {
                    self.api
                        .instances
                        .get()
                        .set_project(self.project().to_string())
                        .set_zone(zone.to_string())
                        .set_instance(name.to_string())
                        .send()
                })
                .await?;
            let mut labels = current.labels.clone();
            labels.insert(gce_labels::CLAIM.into(), value.clone());
            let mut body = InstancesSetLabelsRequest::new().set_labels(labels);
            if let Some(fp) = current.label_fingerprint.clone() {
                body = body.set_label_fingerprint(fp);
            }
            let sent = self
                .api
                .call(Family::Mutate, "instances.setLabels", || {
                    self.api
                        .instances
                        .set_labels()
                        .set_project(self.project().to_string())
                        .set_zone(zone.to_string())
                        .set_instance(name.to_string())
                        .set_body(body.clone())
                        .send()
                })
                .await?;
            match sent {
                Ok(op) => {
                    let timeout = Duration::from_secs(self.settings.timeouts.operation_s);
                    self.wait(zone, op, timeout).await?;
                    return self.get_by_name(zone, name).await?.ok_or_else(|| {
                        GcpError::NotFound(launch::provider_id(self.project(), zone, name))
                    });
                }
                // Someone changed the labels in between: read again.
                Err(f) if f.http == Some(412) => continue,
                Err(f) => return Err(api_error("instances.setLabels", f)),
            }
        }
        Err(GcpError::Api {
            operation: "instances.setLabels",
            code: "412".into(),
            message: "label fingerprint kept changing".into(),
            transient: true,
        })
    }
}
