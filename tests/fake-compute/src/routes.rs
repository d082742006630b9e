//! Routing a request to the state: list paging, aggregated lists, and one arm per call the
//! fake serves.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::Method;
use axum::response::Response;
use serde_json::{Value, json};

use crate::{API, FakeState, HttpFault, api_error, ok};

impl FakeState {
    fn take_http_fault(&mut self, method: &str) -> Option<HttpFault> {
        let i = self.http_faults.iter().position(|f| f.method == method)?;
        self.http_faults.remove(i)
    }

    fn page(
        &self,
        items: Vec<Value>,
        q: &BTreeMap<String, String>,
    ) -> (Vec<Value>, Option<String>) {
        let size = q
            .get("maxResults")
            .and_then(|m| m.parse::<usize>().ok())
            .unwrap_or(self.page_size)
            .min(self.page_size)
            .max(1);
        let start = q
            .get("pageToken")
            .and_then(|t| t.parse::<usize>().ok())
            .unwrap_or(0);
        let end = (start + size).min(items.len());
        let next = (end < items.len()).then(|| end.to_string());
        (
            items
                .get(start..end)
                .map(<[Value]>::to_vec)
                .unwrap_or_default(),
            next,
        )
    }

    /// An aggregated list: `items` keyed `zones/{z}`, each with `key` or a warning.
    fn aggregated(
        &self,
        key: &str,
        kind: &str,
        all: Vec<(String, Value)>,
        zones: &BTreeSet<String>,
        q: &BTreeMap<String, String>,
    ) -> Value {
        let (zone_of, values): (Vec<String>, Vec<Value>) = all.into_iter().unzip();
        let start = q
            .get("pageToken")
            .and_then(|t| t.parse::<usize>().ok())
            .unwrap_or(0);
        let (page, next) = self.page(values, q);
        let mut items = serde_json::Map::new();
        for z in zones {
            items.insert(
                format!("zones/{z}"),
                json!({"warning": {
                    "code": "NO_RESULTS_ON_PAGE",
                    "message": "There are no results for scope 'zones/{z}' on this page.",
                    "data": [{"key": "scope", "value": format!("zones/{z}")}],
                }}),
            );
        }
        for (i, v) in page.into_iter().enumerate() {
            let z = &zone_of[start + i];
            let entry = items
                .entry(format!("zones/{z}"))
                .or_insert_with(|| json!({}));
            if entry.get("warning").is_some() {
                *entry = json!({ key: [] });
            }
            if let Some(list) = entry[key].as_array_mut() {
                list.push(v);
            }
        }
        let mut out = json!({
            "kind": kind,
            "id": format!("projects/{}/aggregated/{key}", self.project),
            "items": items,
            "selfLink": format!("{API}/projects/{}/aggregated/{key}", self.project),
        });
        if let Some(n) = next {
            out["nextPageToken"] = json!(n);
        }
        out
    }

    fn list(&self, kind: &str, id: &str, items: Vec<Value>, q: &BTreeMap<String, String>) -> Value {
        let (page, next) = self.page(items, q);
        let mut out = json!({
            "kind": kind,
            "id": id,
            "items": page,
            "selfLink": format!("{API}/{id}"),
        });
        if let Some(n) = next {
            out["nextPageToken"] = json!(n);
        }
        out
    }

    fn zones(&self) -> BTreeSet<String> {
        self.machine_types
            .keys()
            .chain(self.accelerator_types.keys())
            .cloned()
            .collect()
    }

    pub(super) fn route(
        &mut self,
        method: &Method,
        path: &str,
        q: &BTreeMap<String, String>,
        body: &[u8],
    ) -> Response {
        let Some(rest) = path.strip_prefix("/compute/v1/projects/") else {
            return api_error(404, "notFound", &format!("no such path {path}"));
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let project = self.project.clone();
        if parts.first() != Some(&project.as_str()) {
            return api_error(
                404,
                "notFound",
                &format!(
                    "The resource 'projects/{}' was not found",
                    parts.first().unwrap_or(&"")
                ),
            );
        }
        let get = *method == Method::GET;
        let post = *method == Method::POST;
        let rpc = match (&parts[1..], get, post) {
            (["aggregated", "machineTypes"], true, _) => "machineTypes.aggregatedList",
            (["aggregated", "instances"], true, _) => "instances.aggregatedList",
            (["zones", _, "machineTypes"], true, _) => "machineTypes.list",
            (["zones", _, "acceleratorTypes"], true, _) => "acceleratorTypes.list",
            (["zones", _, "instances"], true, _) => "instances.list",
            (["zones", _, "instances"], _, true) => "instances.insert",
            (["zones", _, "instances", "bulkInsert"], _, true) => "instances.bulkInsert",
            (["zones", _, "instances", _, "setLabels"], _, true) => "instances.setLabels",
            (["zones", _, "instances", _], true, _) => "instances.get",
            (["zones", _, "instances", _], false, false) if *method == Method::DELETE => {
                "instances.delete"
            }
            (["zones", _, "operations", _], true, _) => "zoneOperations.get",
            (["zones", _, "operations", _, "wait"], _, true) => "zoneOperations.wait",
            (["regions", _, "resourcePolicies"], true, _) => "resourcePolicies.list",
            (["regions", _, "resourcePolicies"], _, true) => "resourcePolicies.insert",
            (["regions", _, "resourcePolicies", _], true, _) => "resourcePolicies.get",
            (["regions", _, "resourcePolicies", _], false, false) if *method == Method::DELETE => {
                "resourcePolicies.delete"
            }
            (["regions", _, "operations", _], true, _) => "regionOperations.get",
            (["regions", _, "operations", _, "wait"], _, true) => "regionOperations.wait",
            _ => return api_error(404, "notFound", &format!("no such method {method} {path}")),
        };
        if let Some(f) = self.take_http_fault(rpc) {
            let message = match f.reason.as_str() {
                "rateLimitExceeded" => "Rate Limit Exceeded".to_string(),
                "quotaExceeded" => {
                    "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.".to_string()
                }
                _ => "Internal error. Please try again or contact Google Support.".to_string(),
            };
            return api_error(f.status, &f.reason, &message);
        }
        let zone = parts.get(2).copied().unwrap_or_default().to_string();
        match rpc {
            "machineTypes.aggregatedList" => {
                let all = self
                    .machine_types
                    .iter()
                    .flat_map(|(z, l)| l.iter().map(move |v| (z.clone(), v.clone())))
                    .collect();
                let zones = self.zones();
                ok(self.aggregated(
                    "machineTypes",
                    "compute#machineTypeAggregatedList",
                    all,
                    &zones,
                    q,
                ))
            }
            "machineTypes.list" => {
                let items = self.machine_types.get(&zone).cloned().unwrap_or_default();
                ok(self.list(
                    "compute#machineTypeList",
                    &format!("projects/{project}/zones/{zone}/machineTypes"),
                    items,
                    q,
                ))
            }
            "acceleratorTypes.list" => {
                let items = self
                    .accelerator_types
                    .get(&zone)
                    .cloned()
                    .unwrap_or_default();
                ok(self.list(
                    "compute#acceleratorTypeList",
                    &format!("projects/{project}/zones/{zone}/acceleratorTypes"),
                    items,
                    q,
                ))
            }
            "instances.aggregatedList" => match self.filtered_instances(None, q) {
                Ok(all) => {
                    let zones = self.zones();
                    ok(self.aggregated(
                        "instances",
                        "compute#instanceAggregatedList",
                        all,
                        &zones,
                        q,
                    ))
                }
                Err(e) => api_error(400, "invalid", &e),
            },
            "instances.list" => match self.filtered_instances(Some(&zone), q) {
                Ok(all) => ok(self.list(
                    "compute#instanceList",
                    &format!("projects/{project}/zones/{zone}/instances"),
                    all.into_iter().map(|(_, v)| v).collect(),
                    q,
                )),
                Err(e) => api_error(400, "invalid", &e),
            },
            "instances.insert" => self.insert(&zone, q, body),
            "instances.bulkInsert" => self.bulk_insert(&zone, q, body),
            "instances.setLabels" => self.set_labels(&zone, parts[4], body),
            "instances.get" => match self.instances.get(&(zone.clone(), parts[4].to_string())) {
                Some(v) => ok(v.clone()),
                None => api_error(
                    404,
                    "notFound",
                    &format!(
                        "The resource 'projects/{project}/zones/{zone}/instances/{}' was not found",
                        parts[4]
                    ),
                ),
            },
            "instances.delete" => self.delete(&zone, parts[4], q),
            // `zone` is the region on these paths.
            "resourcePolicies.insert" => self.insert_policy(&zone, q, body),
            "resourcePolicies.delete" => self.delete_policy(&zone, parts[4]),
            "resourcePolicies.get" => {
                match self
                    .resource_policies
                    .get(&(zone.clone(), parts[4].to_string()))
                {
                    Some(v) => ok(v.clone()),
                    None => api_error(
                        404,
                        "notFound",
                        &format!(
                            "The resource 'projects/{project}/regions/{zone}/resourcePolicies/{}' was not found",
                            parts[4]
                        ),
                    ),
                }
            }
            "resourcePolicies.list" => {
                let items = self
                    .resource_policies
                    .iter()
                    .filter(|((r, _), _)| *r == zone)
                    .map(|(_, v)| v.clone())
                    .collect();
                ok(self.list(
                    "compute#resourcePolicyList",
                    &format!("projects/{project}/regions/{zone}/resourcePolicies"),
                    items,
                    q,
                ))
            }
            "regionOperations.get" | "regionOperations.wait" => {
                match self.operations.get(&(zone.clone(), parts[4].to_string())) {
                    Some(op) => ok(op.value.clone()),
                    None => api_error(
                        404,
                        "notFound",
                        &format!(
                            "The resource 'projects/{project}/regions/{zone}/operations/{}' was not found",
                            parts[4]
                        ),
                    ),
                }
            }
            "zoneOperations.get" | "zoneOperations.wait" => {
                let v = self.advance(&zone, parts[4]);
                if v.is_null() {
                    api_error(
                        404,
                        "notFound",
                        &format!(
                            "The resource 'projects/{project}/zones/{zone}/operations/{}' was not found",
                            parts[4]
                        ),
                    )
                } else {
                    ok(v)
                }
            }
            _ => api_error(404, "notFound", "unreachable"),
        }
    }
}
