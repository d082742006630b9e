//! A fault-injecting HTTP proxy in front of moto.
//!
//! moto never refuses capacity (its instant fleets put everything on the first override and
//! never fill `Errors`) and never throttles, so this proxy plays EC2's part there:
//!
//! - **Exhausted offerings**: CreateFleet overrides whose (instance type, subnet) is exhausted
//!   are removed from the request before it reaches moto, and reported back as
//!   `InsufficientInstanceCapacity` items in the answer's `errorSet`, as EC2 does when a fleet
//!   skips pools without capacity. When every override is exhausted the proxy answers itself
//!   with the errors and no instance. Alternatively a whole CreateFleet call can be refused
//!   with an API error (`InsufficientInstanceCapacity`, HTTP 500).
//! - **Placement groups**, which moto (5.2) does not emulate at all (it answers 500):
//!   CreatePlacementGroup (with tags, `InvalidPlacementGroup.Duplicate` for a taken name),
//!   DescribePlacementGroups (filtered by `tag:KEY` and `group-name`) and DeletePlacementGroup
//!   (`InvalidPlacementGroup.Unknown` for an unknown name) are answered by the proxy itself.
//!   moto ignores `Placement` on CreateFleet overrides; the proxy records it, and can refuse
//!   every fleet into a group for capacity (a full cluster placement group).
//! - **Faults**: the next N requests (optionally of one action) get an EC2 error answer with a
//!   chosen status and code (`503 RequestLimitExceeded`, `500 InternalError`); or, at seeded
//!   rates per request ([`Proxy::fault_rates`], drawn by [`providers::faults`]): a CreateFleet
//!   whose first override is refused for capacity, `503 RequestLimitExceeded`,
//!   `500 InternalError`, and timeouts (no answer until the client gave up), half of them after
//!   moto carried the request out.
//! - **ClientToken idempotency** of CreateFleet, which moto (5.2) ignores: EC2 answers a
//!   repeated token with the first call's answer (and `IdempotentParameterMismatch` when the
//!   parameters differ), so the proxy keeps each token's answer and replays it.
//!
//! Everything else is forwarded unchanged. Requests are recorded per action.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use providers::faults::{CloudFaultCounts, CloudFaultInjector, CloudFaultRates, FaultKind};

/// One injected error answer.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Only requests of this action (`CreateFleet`); `None`: any.
    pub action: Option<String>,
    /// HTTP status.
    pub status: u16,
    /// EC2 error code.
    pub code: String,
}

/// A CreateFleet's other parameters, and the status and body it was answered with.
type FleetAnswer = (Vec<(String, String)>, StatusCode, Bytes);

#[derive(Default)]
struct ProxyState {
    /// (instance type, subnet id); a `None` subnet exhausts the type everywhere.
    exhausted: BTreeSet<(String, Option<String>)>,
    /// Refuse every CreateFleet call as a whole with this code (HTTP 500).
    refuse_fleets: Option<String>,
    faults: VecDeque<Fault>,
    requests: BTreeMap<String, u32>,
    /// Overrides ((type, subnet) pairs) of every CreateFleet as received.
    fleets: Vec<Vec<(String, String)>>,
    /// `Placement.GroupName` of each override of every CreateFleet as received.
    fleet_groups: Vec<Vec<Option<String>>>,
    /// Placement groups by name: (id, strategy, tags).
    placement_groups: BTreeMap<String, (String, String, BTreeMap<String, String>)>,
    /// Refuse every fleet into a placement group for capacity.
    full_groups: bool,
    /// Faults at a rate per request, and how long a timed-out request hangs.
    rates: Option<(Arc<CloudFaultInjector>, Duration)>,
    /// CreateFleet answers by ClientToken: the request's other parameters, status, body.
    tokens: BTreeMap<String, FleetAnswer>,
    /// ClientToken of every CreateFleet as received (replays included).
    fleet_tokens: Vec<String>,
    /// Carry out the next request of this action, then answer 503 instead of its result.
    lose_next: Option<String>,
}

/// The running proxy; stopped on drop.
pub struct Proxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<Mutex<ProxyState>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Shared {
    upstream: String,
    state: Arc<Mutex<ProxyState>>,
}

fn lock(s: &Mutex<ProxyState>) -> MutexGuard<'_, ProxyState> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

impl Proxy {
    /// Starts a proxy on a free 127.0.0.1 port forwarding to `upstream` (`127.0.0.1:PORT`).
    pub async fn start(upstream_url: &str) -> Proxy {
        let upstream = upstream_url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let app = Router::new().fallback(handle).with_state(Shared {
            upstream,
            state: state.clone(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { url, state, task }
    }

    /// Makes `instance_type` in `subnet` (every subnet for `None`) refuse capacity.
    pub fn exhaust(&self, instance_type: &str, subnet: Option<&str>) {
        lock(&self.state)
            .exhausted
            .insert((instance_type.to_string(), subnet.map(str::to_string)));
    }

    /// Refuses every CreateFleet call with an API error of `code` (or stops doing so).
    pub fn refuse_fleets(&self, code: Option<&str>) {
        lock(&self.state).refuse_fleets = code.map(str::to_string);
    }

    /// Answers the next `n` requests (of `action`, or any) with `status` and `code`.
    pub fn fail_next(&self, n: usize, action: Option<&str>, status: u16, code: &str) {
        let mut s = lock(&self.state);
        for _ in 0..n {
            s.faults.push_back(Fault {
                action: action.map(str::to_string),
                status,
                code: code.to_string(),
            });
        }
    }

    /// Faults at `rates` per request from now on, seeded by `seed`; a timed-out request is
    /// answered (too late) after `hang`, which should exceed the client's attempt timeout.
    pub fn fault_rates(&self, rates: CloudFaultRates, seed: u64, hang: Duration) {
        lock(&self.state).rates = Some((Arc::new(CloudFaultInjector::new(rates, seed)), hang));
    }

    /// The faults injected at a rate so far.
    pub fn fault_counts(&self) -> CloudFaultCounts {
        lock(&self.state)
            .rates
            .as_ref()
            .map(|(f, _)| f.counts())
            .unwrap_or_default()
    }

    /// Carries out the next request of `action` and answers it with a 503 (a lost answer:
    /// the caller cannot tell that it took effect).
    pub fn lose_next_answer(&self, action: &str) {
        lock(&self.state).lose_next = Some(action.to_string());
    }

    /// The ClientToken of every CreateFleet request received, in order.
    pub fn fleet_tokens(&self) -> Vec<String> {
        lock(&self.state).fleet_tokens.clone()
    }

    /// Requests seen for `action`, faults included.
    pub fn requests(&self, action: &str) -> u32 {
        lock(&self.state).requests.get(action).copied().unwrap_or(0)
    }

    /// Requests seen so far by action, faults included.
    pub fn all_requests(&self) -> BTreeMap<String, u32> {
        lock(&self.state).requests.clone()
    }

    /// Overrides of every CreateFleet call as received, (type, subnet) in order.
    pub fn fleets(&self) -> Vec<Vec<(String, String)>> {
        lock(&self.state).fleets.clone()
    }

    /// `Placement.GroupName` of each override of every CreateFleet call as received.
    pub fn fleet_groups(&self) -> Vec<Vec<Option<String>>> {
        lock(&self.state).fleet_groups.clone()
    }

    /// The placement groups that exist: name → (strategy, tags).
    pub fn placement_groups(&self) -> BTreeMap<String, (String, BTreeMap<String, String>)> {
        lock(&self.state)
            .placement_groups
            .iter()
            .map(|(n, (_, s, t))| (n.clone(), (s.clone(), t.clone())))
            .collect()
    }

    /// Makes every fleet into a placement group fail for capacity (or stops doing so).
    pub fn fill_placement_groups(&self, full: bool) {
        lock(&self.state).full_groups = full;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn ec2_error(status: u16, code: &str, message: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>fault-injected</RequestID></Response>"
    );
    let mut r = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body,
    )
        .into_response();
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/xml"));
    r
}

/// `LaunchTemplateConfigs.1.Overrides.N.Field` → (N, Field).
fn override_field(key: &str) -> Option<(u32, &str)> {
    let rest = key.strip_prefix("LaunchTemplateConfigs.1.Overrides.")?;
    let (n, field) = rest.split_once('.')?;
    Some((n.parse().ok()?, field))
}

fn error_items(refused: &[(String, String)]) -> String {
    refused
        .iter()
        .map(|(t, s)| {
            format!(
                "<item><launchTemplateAndOverrides><overrides><instanceType>{t}</instanceType><subnetId>{s}</subnetId></overrides></launchTemplateAndOverrides><errorCode>InsufficientInstanceCapacity</errorCode><errorMessage>We currently do not have sufficient {t} capacity in the Availability Zone you requested.</errorMessage></item>"
            )
        })
        .collect()
}

fn xml_ok(action: &str, inner: &str) -> Response {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{action}Response xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>proxy</requestId>{inner}</{action}Response>"
    );
    let mut r = (StatusCode::OK, xml).into_response();
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/xml"));
    r
}

/// `Prefix.N.Field` values grouped by N.
fn indexed(pairs: &[(String, String)], prefix: &str) -> BTreeMap<u32, BTreeMap<String, String>> {
    let mut out: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for (k, v) in pairs {
        if let Some(rest) = k.strip_prefix(prefix)
            && let Some((n, field)) = rest.split_once('.')
            && let Ok(n) = n.parse()
        {
            out.entry(n)
                .or_default()
                .insert(field.to_string(), v.clone());
        }
    }
    out
}

/// Answers the placement group actions moto lacks; `None` for every other action.
fn placement_group_action(
    s: &mut ProxyState,
    action: &str,
    pairs: &[(String, String)],
) -> Option<Response> {
    let param = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    match action {
        "CreatePlacementGroup" => {
            let name = param("GroupName").unwrap_or_default();
            if s.placement_groups.contains_key(&name) {
                return Some(ec2_error(
                    400,
                    "InvalidPlacementGroup.Duplicate",
                    &format!("The Placement Group '{name}' already exists."),
                ));
            }
            let strategy = param("Strategy").unwrap_or_default();
            let mut tags = BTreeMap::new();
            // TagSpecification.1.Tag.N.Key / .Value
            for t in indexed(pairs, "TagSpecification.1.Tag.").values() {
                if let Some(k) = t.get("Key") {
                    tags.insert(k.clone(), t.get("Value").cloned().unwrap_or_default());
                }
            }
            let id = format!("pg-{:017x}", s.placement_groups.len() + 1);
            s.placement_groups
                .insert(name.clone(), (id.clone(), strategy.clone(), tags));
            Some(xml_ok(
                "CreatePlacementGroup",
                &format!(
                    "<placementGroup><groupName>{name}</groupName><groupId>{id}</groupId><state>available</state><strategy>{strategy}</strategy></placementGroup>"
                ),
            ))
        }
        "DescribePlacementGroups" => {
            let filters = indexed(pairs, "Filter.");
            let items: String = s
                .placement_groups
                .iter()
                .filter(|(name, (_, _, tags))| {
                    filters.values().all(|f| {
                        let fname = f.get("Name").map_or("", String::as_str);
                        let values: Vec<&String> = f
                            .iter()
                            .filter(|(k, _)| k.starts_with("Value."))
                            .map(|(_, v)| v)
                            .collect();
                        if let Some(key) = fname.strip_prefix("tag:") {
                            tags.get(key).is_some_and(|v| values.contains(&v))
                        } else if fname == "group-name" {
                            values.contains(name)
                        } else {
                            true
                        }
                    })
                })
                .map(|(name, (id, strategy, tags))| {
                    let tag_items: String = tags
                        .iter()
                        .map(|(k, v)| format!("<item><key>{k}</key><value>{v}</value></item>"))
                        .collect();
                    format!(
                        "<item><groupName>{name}</groupName><groupId>{id}</groupId><state>available</state><strategy>{strategy}</strategy><tagSet>{tag_items}</tagSet></item>"
                    )
                })
                .collect();
            Some(xml_ok(
                "DescribePlacementGroups",
                &format!("<placementGroupSet>{items}</placementGroupSet>"),
            ))
        }
        "DeletePlacementGroup" => {
            let name = param("GroupName").unwrap_or_default();
            if s.placement_groups.remove(&name).is_none() {
                return Some(ec2_error(
                    400,
                    "InvalidPlacementGroup.Unknown",
                    &format!("The Placement Group '{name}' is unknown."),
                ));
            }
            Some(xml_ok("DeletePlacementGroup", "<return>true</return>"))
        }
        _ => None,
    }
}

async fn handle(State(sh): State<Shared>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 16 << 20).await else {
        return ec2_error(400, "ProxyError", "unreadable request body");
    };
    let pairs: Vec<(String, String)> = form_urlencoded::parse(&bytes).into_owned().collect();
    let action = pairs
        .iter()
        .find(|(k, _)| k == "Action")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let fleet = action == "CreateFleet";
    let token = pairs
        .iter()
        .find(|(k, _)| k == "ClientToken")
        .map(|(_, v)| v.clone())
        .filter(|_| fleet);
    let (fault, hang) = {
        let mut s = lock(&sh.state);
        *s.requests.entry(action.clone()).or_default() += 1;
        if let Some(t) = &token {
            s.fleet_tokens.push(t.clone());
        }
        let pos = s
            .faults
            .iter()
            .position(|f| f.action.as_deref().is_none_or(|a| a == action));
        if let Some(f) = pos.and_then(|i| s.faults.remove(i)) {
            return ec2_error(f.status, &f.code, "fault injected by the test proxy");
        }
        match &s.rates {
            Some((f, hang)) => (f.pick(fleet), *hang),
            None => (None, Duration::ZERO),
        }
    };
    match fault {
        Some(FaultKind::Throttle) => {
            return ec2_error(503, "RequestLimitExceeded", "Request limit exceeded.");
        }
        Some(FaultKind::ServerError) => {
            return ec2_error(500, "InternalError", "An internal error has occurred.");
        }
        Some(FaultKind::TimeoutBefore) => {
            // The client gives up first (and drops the connection, which ends this task).
            tokio::time::sleep(hang).await;
            return ec2_error(504, "RequestTimeout", "no answer in time");
        }
        _ => {}
    }
    // The request's parameters as EC2 compares them for idempotency (signing aside).
    let params: Vec<(String, String)> = pairs
        .iter()
        .filter(|(k, _)| k != "ClientToken")
        .cloned()
        .collect();
    if let Some(t) = &token {
        let saved = lock(&sh.state).tokens.get(t).cloned();
        if let Some((p, status, body)) = saved {
            let r = if p == params {
                xml_response(status, body)
            } else {
                ec2_error(
                    400,
                    "IdempotentParameterMismatch",
                    "The client token has been used with different parameters.",
                )
            };
            return late(fault, hang, r).await;
        }
    }
    let r = answer(
        &sh,
        parts,
        &pairs,
        bytes,
        fault == Some(FaultKind::InsufficientCapacity),
    )
    .await;
    let r = match &token {
        Some(t) if r.status() == StatusCode::OK => {
            let status = r.status();
            let Ok(body) = axum::body::to_bytes(r.into_body(), 16 << 20).await else {
                return ec2_error(502, "ProxyError", "unreadable answer");
            };
            lock(&sh.state)
                .tokens
                .insert(t.clone(), (params, status, body.clone()));
            xml_response(status, body)
        }
        _ => r,
    };
    let lost = {
        let mut s = lock(&sh.state);
        let lost = s.lose_next.as_deref() == Some(action.as_str());
        if lost {
            s.lose_next = None;
        }
        lost
    };
    if lost {
        return ec2_error(503, "Unavailable", "the answer was lost on its way back");
    }
    late(fault, hang, r).await
}

/// `r`, held back for `hang` when the request timed out after taking effect.
async fn late(fault: Option<FaultKind>, hang: Duration, r: Response) -> Response {
    if fault == Some(FaultKind::TimeoutAfter) {
        tokio::time::sleep(hang).await;
    }
    r
}

fn xml_response(status: StatusCode, body: Bytes) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/xml"));
    r
}

/// The answer to one request that met no error fault: the proxy's own (placement groups,
/// exhausted offerings, with `ice_first` the first override refused too) or moto's.
async fn answer(
    sh: &Shared,
    parts: axum::http::request::Parts,
    pairs: &[(String, String)],
    bytes: Bytes,
    ice_first: bool,
) -> Response {
    let action = pairs
        .iter()
        .find(|(k, _)| k == "Action")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let mut body_out = bytes.clone();
    let mut refused: Vec<(String, String)> = Vec::new();
    {
        let mut s = lock(&sh.state);
        if let Some(r) = placement_group_action(&mut s, &action, pairs) {
            return r;
        }
        if action == "CreateFleet" {
            // Group override fields by index.
            let mut overrides: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
            for (k, v) in pairs {
                if let Some((n, field)) = override_field(k) {
                    overrides
                        .entry(n)
                        .or_default()
                        .insert(field.to_string(), v.clone());
                }
            }
            let get = |o: &BTreeMap<String, String>, f: &str| o.get(f).cloned().unwrap_or_default();
            s.fleets.push(
                overrides
                    .values()
                    .map(|o| (get(o, "InstanceType"), get(o, "SubnetId")))
                    .collect(),
            );
            s.fleet_groups.push(
                overrides
                    .values()
                    .map(|o| o.get("Placement.GroupName").cloned())
                    .collect(),
            );
            if let Some(code) = &s.refuse_fleets {
                let code = code.clone();
                return ec2_error(500, &code, "refused by the test proxy");
            }
            let is_exhausted = |o: &BTreeMap<String, String>| {
                let t = get(o, "InstanceType");
                (s.full_groups && o.contains_key("Placement.GroupName"))
                    || s.exhausted.contains(&(t.clone(), None))
                    || s.exhausted.contains(&(t, Some(get(o, "SubnetId"))))
            };
            // An injected capacity fault refuses the override EC2 would try first.
            let first = overrides.keys().next().copied().filter(|_| ice_first);
            let out = |n: &u32, o: &BTreeMap<String, String>| Some(*n) == first || is_exhausted(o);
            let kept: Vec<&BTreeMap<String, String>> = overrides
                .iter()
                .filter(|(n, o)| !out(n, o))
                .map(|(_, o)| o)
                .collect();
            refused = overrides
                .iter()
                .filter(|(n, o)| out(n, o))
                .map(|(_, o)| (get(o, "InstanceType"), get(o, "SubnetId")))
                .collect();
            if !refused.is_empty() {
                if kept.is_empty() {
                    let xml = format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CreateFleetResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>fault-injected</requestId><fleetId>fleet-00000000-0000-0000-0000-000000000000</fleetId><errorSet>{}</errorSet><fleetInstanceSet/></CreateFleetResponse>",
                        error_items(&refused)
                    );
                    let mut r = (StatusCode::OK, xml).into_response();
                    r.headers_mut()
                        .insert("content-type", HeaderValue::from_static("text/xml"));
                    return r;
                }
                // Forward the request without the refused overrides, renumbered.
                let mut ser = form_urlencoded::Serializer::new(String::new());
                for (k, v) in pairs {
                    if override_field(k).is_none() {
                        ser.append_pair(k, v);
                    }
                }
                for (i, o) in kept.iter().enumerate() {
                    for (f, v) in o.iter() {
                        ser.append_pair(
                            &format!("LaunchTemplateConfigs.1.Overrides.{}.{f}", i + 1),
                            v,
                        );
                    }
                }
                body_out = Bytes::from(ser.finish());
            }
        }
    }

    match forward(&sh.upstream, parts, body_out).await {
        Ok((status, headers, body)) => {
            let body = if refused.is_empty() {
                body
            } else {
                // Splice the refusals into moto's answer, where EC2 reports them.
                let text = String::from_utf8_lossy(&body).into_owned();
                let items = format!("<errorSet>{}</errorSet>", error_items(&refused));
                Bytes::from(text.replacen(
                    "</CreateFleetResponse>",
                    &format!("{items}</CreateFleetResponse>"),
                    1,
                ))
            };
            let mut r = Response::new(Body::from(body));
            *r.status_mut() = status;
            for (k, v) in headers.iter() {
                if k != "content-length" && k != "transfer-encoding" {
                    r.headers_mut().insert(k.clone(), v.clone());
                }
            }
            r
        }
        Err(e) => ec2_error(502, "ProxyError", &e),
    }
}

async fn forward(
    upstream: &str,
    parts: axum::http::request::Parts,
    body: Bytes,
) -> Result<(StatusCode, axum::http::HeaderMap, Bytes), String> {
    let stream = tokio::net::TcpStream::connect(upstream)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut builder = hyper::Request::builder()
        .method(parts.method.clone())
        .uri(parts.uri.path_and_query().map_or("/", |p| p.as_str()));
    for (k, v) in parts.headers.iter() {
        if k != "content-length" && k != "transfer-encoding" {
            builder = builder.header(k, v);
        }
    }
    let req = builder
        .header("content-length", body.len())
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let (p, b) = resp.into_parts();
    let bytes = b.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((p.status, p.headers, bytes))
}
