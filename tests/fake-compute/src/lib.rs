//! A local fake of the Compute Engine REST API (v1), for this crate's tests and the binary's
//! end-to-end tests (cargo feature `testing`). No Compute emulator exists; the client library
//! can be pointed at any endpoint, so this serves the calls the provider makes, shaped as the
//! public API reference documents them:
//!
//! - `GET  /compute/v1/projects/{p}/aggregated/machineTypes` and `.../zones/{z}/machineTypes`
//!   (`compute#machineTypeAggregatedList` with per-zone `machineTypes` or a
//!   `NO_RESULTS_ON_PAGE` warning; `compute#machineTypeList`), paged by `maxResults` and
//!   `pageToken`;
//! - `GET  .../zones/{z}/acceleratorTypes`;
//! - `POST .../zones/{z}/instances?requestId=` → a zonal `compute#operation`; the same request
//!   id answers with the same operation (as the real API deduplicates), another insert of an
//!   existing name answers HTTP 409 `alreadyExists`; a GPU or Spot VM that does not terminate on
//!   maintenance answers 400, as the API does; injected faults end the operation DONE
//!   with `error.errors[]` (`ZONE_RESOURCE_POOL_EXHAUSTED`, `QUOTA_EXCEEDED`) and
//!   `httpErrorStatusCode`, and create no instance;
//! - `POST .../zones/{z}/instances/bulkInsert` (named instances, `minCount == count`): all
//!   instances or, with a fault, none; `POST .../instances/{name}/setLabels` with the
//!   `labelFingerprint` check (412 `conditionNotMet`);
//! - `GET  .../zones/{z}/instances/{name}`, `DELETE` of the same (404 `notFound` when absent),
//!   `GET .../zones/{z}/instances` and `GET .../aggregated/instances` with `filter` on
//!   `labels.KEY = "VALUE"` and `name = "VALUE"` terms joined by `AND`;
//! - `GET  .../zones/{z}/operations/{op}` and `POST .../operations/{op}/wait`: operations start
//!   `RUNNING` and are `DONE` after a configurable number of polls.
//! - Resource policies (placement groups): `POST .../regions/{r}/resourcePolicies` (409
//!   `alreadyExists` for a taken name, a DONE regional operation otherwise), `GET` of one and
//!   of the list, `DELETE` (400 `resourceInUseByAnotherResource` while an instance lists it,
//!   404 `notFound` when absent); `GET`/`POST wait` of `.../regions/{r}/operations/{op}`
//!   (regional operations are DONE at once). Instances (insert and bulkInsert) referencing an
//!   unknown policy answer 404; their `resourcePolicies` are kept as full URLs. A full
//!   placement ([`FakeCompute::fill_placement`]) fails every insert into a policy with
//!   `ZONE_RESOURCE_POOL_EXHAUSTED`.
//!
//! HTTP errors carry the documented body, `{"error": {"code", "message", "errors": [{"domain",
//! "reason", "message"}]}}`. Faults can also be queued per method as HTTP answers (429
//! `rateLimitExceeded`, 503 `backendError`, 403 `quotaExceeded`) to exercise retries.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

const API: &str = "https://www.googleapis.com/compute/v1";

/// An operation error that an insert meets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Zone it applies to; `None`: every zone (quota is regional).
    pub zone: Option<String>,
    /// Machine type it applies to; `None`: every type.
    pub machine_type: Option<String>,
    /// `SPOT` or `STANDARD`; `None`: both.
    pub provisioning_model: Option<String>,
    /// Error code (`ZONE_RESOURCE_POOL_EXHAUSTED`, `QUOTA_EXCEEDED`).
    pub code: String,
    /// How many inserts it fails; `None`: all.
    pub remaining: Option<u32>,
}

/// An HTTP error queued for the next call of a method.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HttpFault {
    method: String,
    status: u16,
    reason: String,
}

#[derive(Clone, Debug)]
struct Op {
    value: Value,
    polls_left: u32,
    /// Instances (zone, name) that turn RUNNING when the operation is DONE.
    starts: Vec<(String, String)>,
}

#[derive(Default)]
struct FakeState {
    project: String,
    /// zone -> machine types (JSON as the API returns them).
    machine_types: BTreeMap<String, Vec<Value>>,
    /// zone -> accelerator types.
    accelerator_types: BTreeMap<String, Vec<Value>>,
    /// (zone, name) -> instance.
    instances: BTreeMap<(String, String), Value>,
    /// (zone, name) -> operation.
    operations: BTreeMap<(String, String), Op>,
    /// request id -> (zone, operation name).
    request_ids: BTreeMap<String, (String, String)>,
    faults: Vec<Fault>,
    http_faults: VecDeque<HttpFault>,
    op_polls: u32,
    page_size: usize,
    next_id: u64,
    calls: Vec<String>,
    /// (region, name) -> resource policy.
    resource_policies: BTreeMap<(String, String), Value>,
    /// Inserts into a resource policy fail for capacity.
    placement_full: bool,
}

/// The fake's state. Clones share it.
#[derive(Clone)]
pub struct FakeCompute {
    state: Arc<Mutex<FakeState>>,
}

/// Machine types of the default fake: (name, vCPUs, memory MiB, built-in accelerator, zones).
type MachineRow = (
    &'static str,
    i64,
    i64,
    Option<(&'static str, i64)>,
    &'static [&'static str],
);

const ABCF: &[&str] = &[
    "us-central1-a",
    "us-central1-b",
    "us-central1-c",
    "us-central1-f",
];
const ABC: &[&str] = &["us-central1-a", "us-central1-b", "us-central1-c"];
const AB: &[&str] = &["us-central1-a", "us-central1-b"];
const A: &[&str] = &["us-central1-a"];

fn default_machines() -> Vec<MachineRow> {
    vec![
        ("e2-micro", 2, 1024, None, ABCF),
        ("e2-standard-4", 4, 16384, None, ABCF),
        ("e2-standard-8", 8, 32768, None, ABCF),
        ("n2-standard-8", 8, 32768, None, ABCF),
        ("n1-standard-4", 4, 15360, None, ABCF),
        ("n1-standard-8", 8, 30720, None, ABCF),
        ("n1-standard-16", 16, 61440, None, ABCF),
        ("n1-standard-32", 32, 122880, None, ABCF),
        ("n1-standard-64", 64, 245760, None, ABCF),
        ("n1-highmem-96", 96, 638976, None, ABCF),
        ("g2-standard-4", 4, 16384, Some(("nvidia-l4", 1)), ABC),
        ("g2-standard-8", 8, 32768, Some(("nvidia-l4", 1)), ABC),
        ("g2-standard-24", 24, 98304, Some(("nvidia-l4", 2)), ABC),
        ("g2-standard-48", 48, 196608, Some(("nvidia-l4", 4)), ABC),
        ("g2-standard-96", 96, 393216, Some(("nvidia-l4", 8)), ABC),
        (
            "a2-highgpu-1g",
            12,
            87040,
            Some(("nvidia-tesla-a100", 1)),
            ABCF,
        ),
        (
            "a2-highgpu-8g",
            96,
            696320,
            Some(("nvidia-tesla-a100", 8)),
            ABCF,
        ),
        (
            "a2-megagpu-16g",
            96,
            1392640,
            Some(("nvidia-tesla-a100", 16)),
            ABCF,
        ),
        (
            "a2-ultragpu-1g",
            12,
            174080,
            Some(("nvidia-a100-80gb", 1)),
            AB,
        ),
        (
            "a2-ultragpu-8g",
            96,
            1392640,
            Some(("nvidia-a100-80gb", 8)),
            AB,
        ),
        (
            "a3-highgpu-1g",
            26,
            239616,
            Some(("nvidia-h100-80gb", 1)),
            AB,
        ),
        (
            "a3-highgpu-8g",
            208,
            1916928,
            Some(("nvidia-h100-80gb", 8)),
            AB,
        ),
        (
            "a3-megagpu-8g",
            208,
            1916928,
            Some(("nvidia-h100-mega-80gb", 8)),
            A,
        ),
        (
            "a3-ultragpu-8g",
            224,
            3022848,
            Some(("nvidia-h200-141gb", 8)),
            A,
        ),
        ("a4-highgpu-8g", 224, 3968000, Some(("nvidia-b200", 8)), A),
        (
            "g4-standard-48",
            48,
            184320,
            Some(("nvidia-rtx-pro-6000", 1)),
            A,
        ),
    ]
}

/// Accelerator types of the default fake: (name, description, max cards, zones).
fn default_accelerators() -> Vec<(&'static str, &'static str, i64, &'static [&'static str])> {
    vec![
        ("nvidia-tesla-t4", "NVIDIA T4", 4, ABCF),
        ("nvidia-tesla-v100", "NVIDIA V100", 8, AB),
        (
            "nvidia-tesla-p100",
            "NVIDIA P100",
            4,
            &["us-central1-c", "us-central1-f"],
        ),
        (
            "nvidia-tesla-p4",
            "NVIDIA P4",
            4,
            &["us-central1-a", "us-central1-c"],
        ),
        ("nvidia-l4", "NVIDIA L4", 8, ABC),
        ("nvidia-tesla-a100", "NVIDIA A100 40GB", 16, ABCF),
        ("nvidia-a100-80gb", "NVIDIA A100 80GB", 8, AB),
        ("nvidia-h100-80gb", "NVIDIA H100 80GB", 8, AB),
        ("nvidia-h100-mega-80gb", "NVIDIA H100 Mega 80GB", 8, A),
        ("nvidia-h200-141gb", "NVIDIA H200 141GB", 8, A),
        ("nvidia-b200", "NVIDIA B200", 8, A),
        ("nvidia-rtx-pro-6000", "NVIDIA RTX PRO 6000", 8, A),
    ]
}

fn api_error(status: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    });
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(body),
    )
        .into_response()
}

fn ok(v: Value) -> Response {
    (StatusCode::OK, axum::Json(v)).into_response()
}

fn last(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// One `field = "value"` (or `!=`) term of a list filter.
#[derive(Debug, PartialEq, Eq)]
struct Term {
    field: String,
    value: String,
    negate: bool,
}

/// Parses the subset of Compute list filters the provider uses: terms `field = "value"`,
/// `field != value`, each optionally in parentheses, joined by `AND` or juxtaposition.
fn parse_filter(f: &str) -> Option<Vec<Term>> {
    let mut terms = Vec::new();
    let normalized = f.replace(['(', ')'], " ");
    let tokens: Vec<&str> = normalized
        .split_whitespace()
        .filter(|t| *t != "AND")
        .collect();
    let mut i = 0;
    while i < tokens.len() {
        // `a=b` / `a!=b` written without spaces, or `a = b`.
        let (field, op, value, used) = if let Some((a, b)) = tokens[i].split_once("!=") {
            (a, "!=", b, 1)
        } else if let Some((a, b)) = tokens[i].split_once('=') {
            (a, "=", b, 1)
        } else {
            let op = *tokens.get(i + 1)?;
            if op != "=" && op != "!=" && op != "eq" && op != "ne" {
                return None;
            }
            (tokens[i], op, *tokens.get(i + 2)?, 3)
        };
        if field.is_empty() || value.is_empty() {
            return None;
        }
        terms.push(Term {
            field: field.to_string(),
            value: value.trim_matches('"').to_string(),
            negate: op == "!=" || op == "ne",
        });
        i += used;
    }
    Some(terms)
}

fn matches(instance: &Value, terms: &[Term]) -> bool {
    terms.iter().all(|t| {
        let actual = if let Some(key) = t.field.strip_prefix("labels.") {
            instance["labels"][key].as_str()
        } else {
            instance[t.field.as_str()].as_str()
        };
        (actual == Some(t.value.as_str())) != t.negate
    })
}

fn query(uri: &Uri) -> BTreeMap<String, String> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0.into_iter().collect())
        .unwrap_or_default()
}

impl Default for FakeCompute {
    fn default() -> Self {
        Self::new("fake-project")
    }
}

/// Provider settings for a fake served at `addr`: project `project`, cluster `cluster`, and
/// retries and polls of a millisecond or so, so tests do not wait on backoff meant for a cloud.
pub fn settings_for(addr: SocketAddr, project: &str, cluster: &str) -> crate::GcpSettings {
    let mut s = crate::GcpSettings {
        project: project.into(),
        endpoint_url: Some(format!("http://{addr}")),
        cluster: cluster.into(),
        retry: providers::common::RetrySettings {
            max_attempts: 3,
            base_delay_ms: 1,
            max_delay_ms: 5,
        },
        ..crate::GcpSettings::default()
    };
    s.timeouts.poll_ms = 1;
    s
}

impl FakeCompute {
    /// A fake of project `project` with the default us-central1 zones, machine types (CPU,
    /// N1, G2, A2, A3, A4, G4) and accelerator types, operations DONE after one poll.
    pub fn new(project: &str) -> Self {
        let fake = FakeCompute {
            state: Arc::new(Mutex::new(FakeState {
                project: project.to_string(),
                op_polls: 1,
                page_size: 500,
                next_id: 1000,
                ..FakeState::default()
            })),
        };
        for (name, cpus, mem, accel, zones) in default_machines() {
            for z in zones {
                fake.add_machine_type(z, name, cpus, mem, accel);
            }
        }
        for (name, desc, max, zones) in default_accelerators() {
            for z in zones {
                fake.add_accelerator_type(z, name, desc, max);
            }
        }
        fake
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        // A panicking test thread must not hide the state from the others.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lists `name` in `zone` as a machine type (`accelerator`: built-in GPUs).
    pub fn add_machine_type(
        &self,
        zone: &str,
        name: &str,
        cpus: i64,
        memory_mb: i64,
        accelerator: Option<(&str, i64)>,
    ) {
        let mut s = self.lock();
        s.next_id += 1;
        let project = s.project.clone();
        let mut v = json!({
            "kind": "compute#machineType",
            "id": s.next_id.to_string(),
            "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
            "name": name,
            "description": format!("{cpus} vCPUs, {} GB RAM", memory_mb / 1024),
            "guestCpus": cpus,
            "memoryMb": memory_mb,
            "imageSpaceGb": 0,
            "maximumPersistentDisks": 128,
            "maximumPersistentDisksSizeGb": "263168",
            "zone": zone,
            "selfLink": format!("{API}/projects/{project}/zones/{zone}/machineTypes/{name}"),
            "isSharedCpu": name.starts_with("e2-micro"),
            "architecture": "X86_64",
        });
        if let Some((a, n)) = accelerator {
            v["accelerators"] = json!([{"guestAcceleratorType": a, "guestAcceleratorCount": n}]);
        }
        s.machine_types.entry(zone.to_string()).or_default().push(v);
    }

    /// Lists accelerator type `name` in `zone`.
    pub fn add_accelerator_type(&self, zone: &str, name: &str, description: &str, max: i64) {
        let mut s = self.lock();
        s.next_id += 1;
        let project = s.project.clone();
        let v = json!({
            "kind": "compute#acceleratorType",
            "id": s.next_id.to_string(),
            "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
            "name": name,
            "description": description,
            "zone": format!("{API}/projects/{project}/zones/{zone}"),
            "selfLink": format!("{API}/projects/{project}/zones/{zone}/acceleratorTypes/{name}"),
            "maximumCardsPerInstance": max,
        });
        s.accelerator_types
            .entry(zone.to_string())
            .or_default()
            .push(v);
    }

    /// Inserts into zone/type/model (each `None` = any) fail with operation error `code`
    /// (`ZONE_RESOURCE_POOL_EXHAUSTED`, `QUOTA_EXCEEDED`), `times` times or always.
    pub fn fail_inserts(
        &self,
        zone: Option<&str>,
        machine_type: Option<&str>,
        provisioning_model: Option<&str>,
        code: &str,
        times: Option<u32>,
    ) {
        self.lock().faults.push(Fault {
            zone: zone.map(Into::into),
            machine_type: machine_type.map(Into::into),
            provisioning_model: provisioning_model.map(Into::into),
            code: code.to_string(),
            remaining: times,
        });
    }

    /// The next call of `method` (`instances.insert`, `instances.get`,
    /// `instances.aggregatedList`, `machineTypes.aggregatedList`...) answers HTTP `status` with
    /// `reason` (`rateLimitExceeded`, `backendError`, `quotaExceeded`).
    pub fn fail_next_http(&self, method: &str, status: u16, reason: &str) {
        self.lock().http_faults.push_back(HttpFault {
            method: method.to_string(),
            status,
            reason: reason.to_string(),
        });
    }

    /// Operations are DONE after `polls` polls (0: DONE at once).
    pub fn set_operation_polls(&self, polls: u32) {
        self.lock().op_polls = polls;
    }

    /// Forgets every request id, as the real API does after its deduplication window.
    pub fn forget_request_ids(&self) {
        self.lock().request_ids.clear();
    }

    /// Lists return at most `n` items per page.
    pub fn set_page_size(&self, n: usize) {
        self.lock().page_size = n.max(1);
    }

    /// Puts an instance in place as if someone else had created it (labels as GCE labels).
    pub fn plant_instance(
        &self,
        zone: &str,
        name: &str,
        machine_type: &str,
        labels: &[(&str, &str)],
    ) {
        let mut s = self.lock();
        let body = json!({
            "name": name,
            "machineType": format!("zones/{zone}/machineTypes/{machine_type}"),
            "labels": labels.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        });
        let v = s.materialize(zone, body, "RUNNING");
        s.instances.insert((zone.to_string(), name.to_string()), v);
    }

    /// Every instance as JSON, by zone and name.
    pub fn instances(&self) -> Vec<Value> {
        self.lock().instances.values().cloned().collect()
    }

    /// Every resource policy as JSON, by region and name.
    pub fn resource_policies(&self) -> Vec<Value> {
        self.lock().resource_policies.values().cloned().collect()
    }

    /// Plants a resource policy as another tool would have made it (`creationTimestamp` as
    /// given, RFC 3339).
    pub fn plant_resource_policy(
        &self,
        region: &str,
        name: &str,
        description: &str,
        created: &str,
    ) {
        let mut s = self.lock();
        let v = s.policy(
            region,
            json!({"name": name, "description": description,
            "groupPlacementPolicy": {"collocation": "COLLOCATED"}}),
            created,
        );
        s.resource_policies
            .insert((region.to_string(), name.to_string()), v);
    }

    /// Makes every insert into a resource policy fail for capacity (or stops doing so).
    pub fn fill_placement(&self, full: bool) {
        self.lock().placement_full = full;
    }

    /// Every call as `METHOD path?query`, in order.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// How many calls' lines contain `needle`.
    pub fn count_calls(&self, needle: &str) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.contains(needle))
            .count()
    }

    /// Serves the fake on `127.0.0.1` at an ephemeral port on the current tokio runtime; the
    /// server stops when the runtime does.
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub async fn serve(&self) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        self.serve_on(listener)
    }

    /// Serves the fake on an already bound listener.
    ///
    /// # Errors
    /// When the listener's address cannot be read.
    pub fn serve_on(&self, listener: tokio::net::TcpListener) -> std::io::Result<SocketAddr> {
        let addr = listener.local_addr()?;
        let app = Router::new().fallback(handle).with_state(self.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(addr)
    }
}

impl FakeState {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A resource policy resource from an insert body.
    fn policy(&mut self, region: &str, mut body: Value, created: &str) -> Value {
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
    fn policy_urls(&self, zone: &str, refs: &Value) -> Result<Vec<String>, String> {
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

    fn insert_policy(
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

    fn delete_policy(&mut self, region: &str, name: &str) -> Response {
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

    /// An instance resource from an insert body.
    fn materialize(&mut self, zone: &str, mut body: Value, status: &str) -> Value {
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
    fn advance(&mut self, zone: &str, name: &str) -> Value {
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

    fn insert(&mut self, zone: &str, q: &BTreeMap<String, String>, body: &[u8]) -> Response {
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
    fn bulk_insert(&mut self, zone: &str, q: &BTreeMap<String, String>, body: &[u8]) -> Response {
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
    fn set_labels(&mut self, zone: &str, name: &str, body: &[u8]) -> Response {
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

    fn delete(&mut self, zone: &str, name: &str, q: &BTreeMap<String, String>) -> Response {
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

    fn filtered_instances(
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

    fn route(
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

async fn handle(
    State(fake): State<FakeCompute>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let q = query(&uri);
    let mut s = fake.lock();
    s.calls.push(format!(
        "{method} {}{}",
        uri.path().trim_start_matches("/compute/v1"),
        uri.query().map(|q| format!("?{q}")).unwrap_or_default()
    ));
    s.route(&method, uri.path(), &q, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_and_match() {
        let t =
            parse_filter("(labels.gpu-autoscaler-cluster = \"c1\") AND (labels.x != y)").unwrap();
        assert_eq!(t.len(), 2);
        assert!(t[1].negate);
        let inst = json!({"name": "n", "labels": {"gpu-autoscaler-cluster": "c1", "x": "z"}});
        assert!(matches(&inst, &t));
        assert!(!matches(
            &json!({"labels": {"gpu-autoscaler-cluster": "c2"}}),
            &t
        ));
        assert!(matches(&inst, &parse_filter("name=n").unwrap()));
        assert!(parse_filter("labels.a >").is_none());
    }
}
