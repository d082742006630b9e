//! Resource policies (placement groups) and their regional operations.

use std::collections::BTreeMap;

use axum::response::Response;
use serde_json::{Value, json};

use crate::{API, FakeState, Op, api_error, last, ok};

impl FakeState {
    /// A resource policy resource from an insert body.
    pub(super) fn policy(&mut self, region: &str, mut body: Value, created: &str) -> Value {
        let id = self.id();
        let name = body["name"].as_str().unwrap_or_default().to_string();
        let region_url = format!("{API}/projects/{}/regions/{region}", self.project);
        body["kind"] = json!("compute#resourcePolicy");
        body["id"] = json!(id.to_string());
        body["creationTimestamp"] = json!(created);
        body["region"] = json!(region_url);
        body["status"] = json!("READY");
        body["selfLink"] = json!(format!("{region_url}/resourcePolicies/{name}"));
        body
    }

    /// The region of a zone (`us-central1-a` -> `us-central1`).
    fn region_of(zone: &str) -> &str {
        zone.rsplit_once('-').map_or(zone, |(r, _)| r)
    }

    /// The full URLs of the resource policies `refs` (URLs or names) of an instance in
    /// `zone`, or the 404 message for the first unknown one.
    pub(super) fn policy_urls(&self, zone: &str, refs: &Value) -> Result<Vec<String>, String> {
        let region = Self::region_of(zone);
        let mut out = Vec::new();
        for r in refs.as_array().into_iter().flatten() {
            let name = last(r.as_str().unwrap_or_default());
            if !self
                .resource_policies
                .contains_key(&(region.to_string(), name.to_string()))
            {
                return Err(format!(
                    "The resource 'projects/{}/regions/{region}/resourcePolicies/{name}' was not found",
                    self.project
                ));
            }
            out.push(format!(
                "{API}/projects/{}/regions/{region}/resourcePolicies/{name}",
                self.project
            ));
        }
        Ok(out)
    }

    /// A regional operation, DONE at once.
    fn region_op(&mut self, region: &str, kind: &str, target: &str) -> Value {
        let id = self.id();
        let name = format!("operation-1764532800000-{id:013x}-r");
        let region_url = format!("{API}/projects/{}/regions/{region}", self.project);
        let v = json!({
            "kind": "compute#operation",
            "id": id.to_string(),
            "name": name,
            "region": region_url,
            "operationType": kind,
            "targetLink": format!("{region_url}/resourcePolicies/{target}"),
            "status": "DONE",
            "progress": 100,
            "selfLink": format!("{region_url}/operations/{name}"),
        });
        self.operations.insert(
            (region.to_string(), name),
            Op {
                value: v.clone(),
                polls_left: 0,
                starts: Vec::new(),
            },
        );
        v
    }

    pub(super) fn insert_policy(
        &mut self,
        region: &str,
        q: &BTreeMap<String, String>,
        body: &[u8],
    ) -> Response {
        if let Some(rid) = q.get("requestId")
            && let Some((r, op)) = self.request_ids.get(rid).cloned()
            && let Some(op) = self.operations.get(&(r, op))
        {
            return ok(op.value.clone());
        }
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return api_error(400, "parseError", "Parse Error");
        };
        let name = body["name"].as_str().unwrap_or_default().to_string();
        let valid = name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid {
            return api_error(
                400,
                "invalid",
                &format!(
                    "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
                ),
            );
        }
        let key = (region.to_string(), name.clone());
        if self.resource_policies.contains_key(&key) {
            return api_error(
                409,
                "alreadyExists",
                &format!(
                    "The resource 'projects/{}/regions/{region}/resourcePolicies/{name}' already exists",
                    self.project
                ),
            );
        }
        let created = jiff::Timestamp::now().to_string();
        let v = self.policy(region, body, &created);
        self.resource_policies.insert(key, v);
        let op = self.region_op(region, "insert", &name);
        if let Some(rid) = q.get("requestId") {
            let op_name = op["name"].as_str().unwrap_or_default().to_string();
            self.request_ids
                .insert(rid.clone(), (region.to_string(), op_name));
        }
        ok(op)
    }

    pub(super) fn delete_policy(&mut self, region: &str, name: &str) -> Response {
        let project = self.project.clone();
        let key = (region.to_string(), name.to_string());
        if !self.resource_policies.contains_key(&key) {
            return api_error(
                404,
                "notFound",
                &format!(
                    "The resource 'projects/{project}/regions/{region}/resourcePolicies/{name}' was not found"
                ),
            );
        }
        let in_use = self.instances.iter().any(|((z, _), i)| {
            Self::region_of(z) == region
                && i["resourcePolicies"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| last(p.as_str().unwrap_or_default()) == name)
        });
        if in_use {
            return api_error(
                400,
                "resourceInUseByAnotherResource",
                &format!(
                    "The resource_policy resource 'projects/{project}/regions/{region}/resourcePolicies/{name}' is already being used by an instance"
                ),
            );
        }
        self.resource_policies.remove(&key);
        ok(self.region_op(region, "delete", name))
    }
}
