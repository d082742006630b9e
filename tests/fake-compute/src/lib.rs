//! `fake-compute`: a local fake of the Compute Engine REST API (v1), for the GCP provider's
//! tests and the binary's end-to-end tests (a dev-dependency only). No Compute emulator exists; the client library
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
//! `rateLimitExceeded`, 503 `backendError`, 403 `quotaExceeded`) to exercise retries, or drawn
//! at seeded rates per call ([`FakeCompute::fault_rates`], by [`providers::faults`]): an insert
//! whose operation ends in `ZONE_RESOURCE_POOL_EXHAUSTED`, 429, 503, and timeouts (no answer
//! until the client gave up), half of them after the call took effect.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use providers::faults::{CloudFaultCounts, CloudFaultInjector, CloudFaultRates, FaultKind};
use serde_json::{Value, json};

mod catalog;
mod filter;
mod instances;
mod policies;
mod routes;

use catalog::{default_accelerators, default_machines};

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
    /// Faults at a rate per call, and how long a timed-out call hangs.
    rates: Option<(Arc<CloudFaultInjector>, Duration)>,
    /// The insert being served met an injected capacity fault.
    refuse_now: bool,
}

/// The fake's state. Clones share it.
#[derive(Clone)]
pub struct FakeCompute {
    state: Arc<Mutex<FakeState>>,
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
pub fn settings_for(addr: SocketAddr, project: &str, cluster: &str) -> provider_gcp::GcpSettings {
    let mut s = provider_gcp::GcpSettings {
        project: project.into(),
        endpoint_url: Some(format!("http://{addr}")),
        cluster: cluster.into(),
        retry: providers::common::RetrySettings {
            max_attempts: 3,
            base_delay_ms: 1,
            max_delay_ms: 5,
        },
        ..provider_gcp::GcpSettings::default()
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

    /// Faults at `rates` per call from now on, seeded by `seed`; a timed-out call is answered
    /// (too late) after `hang`, which should exceed the client's attempt timeout.
    pub fn fault_rates(&self, rates: CloudFaultRates, seed: u64, hang: Duration) {
        self.lock().rates = Some((Arc::new(CloudFaultInjector::new(rates, seed)), hang));
    }

    /// The faults injected at a rate so far.
    pub fn fault_counts(&self) -> CloudFaultCounts {
        self.lock()
            .rates
            .as_ref()
            .map(|(f, _)| f.counts())
            .unwrap_or_default()
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
}

async fn handle(
    State(fake): State<FakeCompute>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let q = query(&uri);
    let path = uri.path();
    // Inserts ask for capacity; an injected refusal ends their operation in a stockout.
    let insert = method == Method::POST
        && (path.ends_with("/instances") || path.ends_with("/instances/bulkInsert"));
    let (fault, hang) = {
        let mut s = fake.lock();
        s.calls.push(format!(
            "{method} {}{}",
            path.trim_start_matches("/compute/v1"),
            uri.query().map(|q| format!("?{q}")).unwrap_or_default()
        ));
        match &s.rates {
            Some((f, hang)) => (f.pick(insert), *hang),
            None => (None, Duration::ZERO),
        }
    };
    match fault {
        Some(FaultKind::Throttle) => {
            return api_error(429, "rateLimitExceeded", "Rate Limit Exceeded");
        }
        Some(FaultKind::ServerError) => {
            return api_error(
                503,
                "backendError",
                "Internal error. Please try again or contact Google Support.",
            );
        }
        Some(FaultKind::TimeoutBefore) => {
            // The client gives up first (and drops the connection, which ends this task).
            tokio::time::sleep(hang).await;
            return api_error(504, "deadlineExceeded", "no answer in time");
        }
        _ => {}
    }
    let r = {
        let mut s = fake.lock();
        s.refuse_now = fault == Some(FaultKind::InsufficientCapacity);
        let r = s.route(&method, path, &q, &body);
        s.refuse_now = false;
        r
    };
    if fault == Some(FaultKind::TimeoutAfter) {
        tokio::time::sleep(hang).await;
    }
    r
}
