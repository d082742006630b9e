//! Instances and their zonal operations: insert, bulkInsert, setLabels, delete, the
//! operations' progress, and the faults inserts meet.

use super::filter::{matches, parse_filter};
use std::collections::BTreeMap;

use axum::response::Response;
use serde_json::{Value, json};

use crate::{API, FakeState, Op, api_error, last, ok};

impl FakeState {
    /// An instance resource from an insert body.
    pub(super) fn materialize(&mut self, zone: &str, mut body: Value, status: &str) -> Value {
        let id = self.id();
        let name = body["name"].as_str().unwrap_or_default().to_string();
        let project = self.project.clone();
        let zone_url = format!("{API}/projects/{project}/zones/{zone}");
        body["kind"] = json!("compute#instance");
        body["id"] = json!(id.to_string());
        body["creationTimestamp"] = json!("2026-11-30T12:00:00.000-08:00");
        body["zone"] = json!(zone_url);
        body["status"] = json!(status);
        // Base64 of the fingerprint bytes, as the API sends it (12 digits decode to 9 bytes).
        body["labelFingerprint"] = json!(format!("{id:012}"));
        body["selfLink"] = json!(format!("{zone_url}/instances/{name}"));
        let mt = last(body["machineType"].as_str().unwrap_or_default()).to_string();
        body["machineType"] = json!(format!("{zone_url}/machineTypes/{mt}"));
        if let Some(accels) = body["guestAccelerators"].as_array_mut() {
            for a in accels {
                let t = last(a["acceleratorType"].as_str().unwrap_or_default()).to_string();
                a["acceleratorType"] = json!(format!("{zone_url}/acceleratorTypes/{t}"));
            }
        }
        body
    }

    fn new_op(
        &mut self,
        zone: &str,
        kind: &str,
        target: &str,
        error: Option<&str>,
        starts: &[String],
    ) -> Value {
        let id = self.id();
        let name = format!(
            "operation-1764532800000-{id:013x}-{:08x}-{:08x}",
            id * 7,
            id * 13
        );
        let project = self.project.clone();
        let zone_url = format!("{API}/projects/{project}/zones/{zone}");
        let mut v = json!({
            "kind": "compute#operation",
            "id": id.to_string(),
            "name": name,
            "zone": zone_url,
            "operationType": kind,
            "targetLink": format!("{zone_url}/instances/{target}"),
            "targetId": (id + 1).to_string(),
            "status": "RUNNING",
            "user": "fake@fake-project.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": "2026-11-30T12:00:00.000-08:00",
            "startTime": "2026-11-30T12:00:00.000-08:00",
            "selfLink": format!("{zone_url}/operations/{name}"),
        });
        if let Some(code) = error {
            let (message, http, http_msg, details) = match code {
                "QUOTA_EXCEEDED" => (
                    format!(
                        "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally. (zone {zone})"
                    ),
                    403,
                    "FORBIDDEN",
                    json!([{"quotaInfo": {"metricName": "compute.googleapis.com/gpus_all_regions", "limitName": "GPUS-ALL-REGIONS-per-project", "limit": 0}}]),
                ),
                _ => (
                    format!(
                        "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."
                    ),
                    503,
                    "SERVICE UNAVAILABLE",
                    json!([]),
                ),
            };
            v["error"] =
                json!({"errors": [{"code": code, "message": message, "errorDetails": details}]});
            v["httpErrorStatusCode"] = json!(http);
            v["httpErrorMessage"] = json!(http_msg);
        }
        let polls = self.op_polls;
        let op = Op {
            value: v.clone(),
            polls_left: polls,
            starts: starts
                .iter()
                .map(|n| (zone.to_string(), n.clone()))
                .collect(),
        };
        self.operations.insert((zone.to_string(), name), op);
        if polls == 0 {
            return self.advance(zone, v["name"].as_str().unwrap_or_default());
        }
        v
    }

    /// One poll of an operation: counts down, and at zero marks it DONE (creating its
    /// instance, if any).
    pub(super) fn advance(&mut self, zone: &str, name: &str) -> Value {
        let key = (zone.to_string(), name.to_string());
        let Some(op) = self.operations.get_mut(&key) else {
            return Value::Null;
        };
        if op.value["status"] == "DONE" {
            return op.value.clone();
        }
        op.polls_left = op.polls_left.saturating_sub(1);
        if op.polls_left > 0 {
            return op.value.clone();
        }
        op.value["status"] = json!("DONE");
        op.value["progress"] = json!(100);
        op.value["endTime"] = json!("2026-11-30T12:00:30.000-08:00");
        let value = op.value.clone();
        for key in std::mem::take(&mut op.starts) {
            if let Some(inst) = self.instances.get_mut(&key) {
                inst["status"] = json!("RUNNING");
            }
        }
        value
    }

    pub(super) fn insert(
        &mut self,
        zone: &str,
        q: &BTreeMap<String, String>,
        body: &[u8],
    ) -> Response {
        if let Some(rid) = q.get("requestId")
            && let Some((z, op)) = self.request_ids.get(rid).cloned()
        {
            // The same request again: the same operation, in its current state.
            if let Some(op) = self.operations.get(&(z, op)) {
                return ok(op.value.clone());
            }
        }
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return api_error(400, "parseError", "Parse Error");
        };
        let Some(name) = body["name"].as_str().map(str::to_string) else {
            return api_error(
                400,
                "required",
                "Required field 'resource.name' not specified",
            );
        };
        let machine = last(body["machineType"].as_str().unwrap_or_default()).to_string();
        let project = self.project.clone();
        if !self
            .machine_types
            .get(zone)
            .is_some_and(|l| l.iter().any(|m| m["name"] == machine.as_str()))
        {
            return api_error(
                404,
                "notFound",
                &format!(
                    "The resource 'projects/{project}/zones/{zone}/machineTypes/{machine}' was not found"
                ),
            );
        }
        for a in body["guestAccelerators"].as_array().into_iter().flatten() {
            let t = last(a["acceleratorType"].as_str().unwrap_or_default());
            if !self
                .accelerator_types
                .get(zone)
                .is_some_and(|l| l.iter().any(|x| x["name"] == t))
            {
                return api_error(
                    404,
                    "notFound",
                    &format!(
                        "The resource 'projects/{project}/zones/{zone}/acceleratorTypes/{t}' was not found"
                    ),
                );
            }
        }
        if self
            .instances
            .contains_key(&(zone.to_string(), name.clone()))
        {
            return api_error(
                409,
                "alreadyExists",
                &format!(
                    "The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"
                ),
            );
        }
        let model = body["scheduling"]["provisioningModel"]
            .as_str()
            .unwrap_or("STANDARD")
            .to_string();
        if let Some(why) = self.scheduling_error(zone, &machine, &body) {
            return api_error(400, "invalid", why);
        }
        let policies = match self.policy_urls(zone, &body["resourcePolicies"]) {
            Ok(p) => p,
            Err(m) => return api_error(404, "notFound", &m),
        };
        let error = if self.placement_full && !policies.is_empty() {
            Some("ZONE_RESOURCE_POOL_EXHAUSTED".to_string())
        } else {
            self.fault_for(zone, &machine, &model)
        };
        // A successful insert's instance exists (PROVISIONING) while the operation runs, as on
        // the real API; a failing one never shows up.
        if error.is_none() {
            let mut body = body;
            if !policies.is_empty() {
                body["resourcePolicies"] = json!(policies);
            }
            let inst = self.materialize(zone, body, "PROVISIONING");
            self.instances
                .insert((zone.to_string(), name.clone()), inst);
        }
        let started = if error.is_none() {
            vec![name.clone()]
        } else {
            Vec::new()
        };
        let op = self.new_op(zone, "insert", &name, error.as_deref(), &started);
        if let Some(rid) = q.get("requestId") {
            let op_name = op["name"].as_str().unwrap_or_default().to_string();
            self.request_ids
                .insert(rid.clone(), (zone.to_string(), op_name));
        }
        ok(op)
    }

    /// The API's checks of `scheduling`: GPUs (attached or built in) cannot live-migrate, and
    /// Spot VMs must terminate on maintenance and not restart automatically.
    fn scheduling_error(&self, zone: &str, machine: &str, body: &Value) -> Option<&'static str> {
        let s = &body["scheduling"];
        let terminate = s["onHostMaintenance"] == "TERMINATE";
        let builtin = self.machine_types.get(zone).is_some_and(|l| {
            l.iter()
                .any(|m| m["name"] == machine && m.get("accelerators").is_some())
        });
        let attached = body["guestAccelerators"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        if (builtin || attached) && !terminate {
            return Some("Instances with guest accelerators do not support live migration.");
        }
        if s["provisioningModel"] == "SPOT" && (!terminate || s["automaticRestart"] == true) {
            return Some(
                "Invalid value for field 'resource.scheduling': Spot VMs must set onHostMaintenance to TERMINATE and automaticRestart to false.",
            );
        }
        None
    }

    /// The injected operation error an insert of `machine` as `model` in `zone` meets, if any
    /// (using one up).
    fn fault_for(&mut self, zone: &str, machine: &str, model: &str) -> Option<String> {
        if std::mem::take(&mut self.refuse_now) {
            return Some("ZONE_RESOURCE_POOL_EXHAUSTED".into());
        }
        let fault = self.faults.iter_mut().find(|f| {
            f.zone.as_deref().is_none_or(|z| z == zone)
                && f.machine_type.as_deref().is_none_or(|m| m == machine)
                && f.provisioning_model.as_deref().is_none_or(|p| p == model)
                && f.remaining != Some(0)
        })?;
        if let Some(r) = &mut fault.remaining {
            *r -= 1;
        }
        Some(fault.code.clone())
    }

    /// `instances.bulkInsert`: `count` instances named by `perInstanceProperties` from the
    /// shared `instanceProperties`, all or none (only `minCount == count` is served).
    pub(super) fn bulk_insert(
        &mut self,
        zone: &str,
        q: &BTreeMap<String, String>,
        body: &[u8],
    ) -> Response {
        if let Some(rid) = q.get("requestId")
            && let Some((z, op)) = self.request_ids.get(rid).cloned()
            && let Some(op) = self.operations.get(&(z, op))
        {
            return ok(op.value.clone());
        }
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return api_error(400, "parseError", "Parse Error");
        };
        let names: Vec<String> = body["perInstanceProperties"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let count = body["count"]
            .as_str()
            .and_then(|c| c.parse::<usize>().ok())
            .or_else(|| body["count"].as_u64().and_then(|c| usize::try_from(c).ok()))
            .unwrap_or(0);
        if names.is_empty() || names.len() != count || body["minCount"] != body["count"] {
            return api_error(
                400,
                "invalid",
                "the fake serves bulkInsert with named instances and minCount == count only",
            );
        }
        let props = &body["instanceProperties"];
        let machine = props["machineType"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let project = self.project.clone();
        if machine.contains('/') {
            return api_error(
                500,
                "backendError",
                "Internal error (machine type must be a name)",
            );
        }
        if !self
            .machine_types
            .get(zone)
            .is_some_and(|l| l.iter().any(|m| m["name"] == machine.as_str()))
        {
            return api_error(
                404,
                "notFound",
                &format!(
                    "The resource 'projects/{project}/zones/{zone}/machineTypes/{machine}' was not found"
                ),
            );
        }
        if let Some(taken) = names.iter().find(|n| {
            self.instances
                .contains_key(&(zone.to_string(), (*n).clone()))
        }) {
            return api_error(
                409,
                "alreadyExists",
                &format!(
                    "The resource 'projects/{project}/zones/{zone}/instances/{taken}' already exists"
                ),
            );
        }
        let model = props["scheduling"]["provisioningModel"]
            .as_str()
            .unwrap_or("STANDARD")
            .to_string();
        if let Some(why) = self.scheduling_error(zone, &machine, props) {
            return api_error(400, "invalid", why);
        }
        let policies = match self.policy_urls(zone, &props["resourcePolicies"]) {
            Ok(p) => p,
            Err(m) => return api_error(404, "notFound", &m),
        };
        let error = if self.placement_full && !policies.is_empty() {
            Some("ZONE_RESOURCE_POOL_EXHAUSTED".to_string())
        } else {
            self.fault_for(zone, &machine, &model)
        };
        let started = if error.is_none() {
            for n in &names {
                let mut inst = props.clone();
                inst["name"] = json!(n);
                if !policies.is_empty() {
                    inst["resourcePolicies"] = json!(policies);
                }
                inst["machineType"] = json!(format!("zones/{zone}/machineTypes/{machine}"));
                let v = self.materialize(zone, inst, "PROVISIONING");
                self.instances.insert((zone.to_string(), n.clone()), v);
            }
            names.clone()
        } else {
            Vec::new()
        };
        let op = self.new_op(zone, "bulkInsert", &names[0], error.as_deref(), &started);
        if let Some(rid) = q.get("requestId") {
            let op_name = op["name"].as_str().unwrap_or_default().to_string();
            self.request_ids
                .insert(rid.clone(), (zone.to_string(), op_name));
        }
        ok(op)
    }

    /// `instances.setLabels`: replaces the labels when the fingerprint matches (412 otherwise).
    pub(super) fn set_labels(&mut self, zone: &str, name: &str, body: &[u8]) -> Response {
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return api_error(400, "parseError", "Parse Error");
        };
        let project = self.project.clone();
        let id = self.id();
        let Some(inst) = self
            .instances
            .get_mut(&(zone.to_string(), name.to_string()))
        else {
            return api_error(
                404,
                "notFound",
                &format!(
                    "The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"
                ),
            );
        };
        if body["labelFingerprint"] != inst["labelFingerprint"] {
            return api_error(
                412,
                "conditionNotMet",
                "Labels fingerprint either invalid or resource labels have changed",
            );
        }
        inst["labels"] = body["labels"].clone();
        inst["labelFingerprint"] = json!(format!("{id:012}"));
        let op = self.new_op(zone, "setLabels", name, None, &[]);
        ok(op)
    }

    pub(super) fn delete(
        &mut self,
        zone: &str,
        name: &str,
        q: &BTreeMap<String, String>,
    ) -> Response {
        if let Some(rid) = q.get("requestId")
            && let Some((z, op)) = self.request_ids.get(rid).cloned()
            && let Some(op) = self.operations.get(&(z, op))
        {
            return ok(op.value.clone());
        }
        if self
            .instances
            .remove(&(zone.to_string(), name.to_string()))
            .is_none()
        {
            let project = self.project.clone();
            return api_error(
                404,
                "notFound",
                &format!(
                    "The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"
                ),
            );
        }
        let op = self.new_op(zone, "delete", name, None, &[]);
        if let Some(rid) = q.get("requestId") {
            let op_name = op["name"].as_str().unwrap_or_default().to_string();
            self.request_ids
                .insert(rid.clone(), (zone.to_string(), op_name));
        }
        ok(op)
    }

    pub(super) fn filtered_instances(
        &self,
        zone: Option<&str>,
        q: &BTreeMap<String, String>,
    ) -> Result<Vec<(String, Value)>, String> {
        let terms = match q.get("filter") {
            None => Vec::new(),
            Some(f) => parse_filter(f).ok_or_else(|| {
                format!("Invalid value for field 'filter': '{f}'. Invalid list filter expression.")
            })?,
        };
        Ok(self
            .instances
            .iter()
            .filter(|((z, _), v)| zone.is_none_or(|zone| zone == z) && matches(v, &terms))
            .map(|((z, _), v)| (z.clone(), v.clone()))
            .collect())
    }
}
