//! The HTTP surface: path routing, discovery documents, CRUD handlers and streaming watches.
//!
//! Routing is done by hand in one fallback handler because resource types appear at run time
//! (CRDs), which a static axum route table cannot express.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Query, State as AxState};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::SinkExt;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::Shared;
use crate::error::{Error, Result};
use crate::faults::{Class, Verdict};
use crate::resources::{self, Builtin, ResourceDef};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, ChangeKind, Part, PatchKind, State, WriteOpts, meta_str};

/// Builds the router over shared state; `faults` says whether configured faults apply to
/// its callers.
pub(crate) fn router(shared: Arc<Shared>, faults: bool) -> Router {
    Router::new()
        .fallback(handle)
        .layer(DefaultBodyLimit::max(32 << 20))
        .with_state(Ctx { shared, faults })
}

/// The router's state.
#[derive(Clone)]
struct Ctx {
    shared: Arc<Shared>,
    faults: bool,
}

/// The fault class of a request, `None` for discovery and health endpoints.
fn fault_class(req: &Req) -> Option<Class> {
    let segs = req.path.trim_matches('/').split('/').count();
    let resource = (req.path.starts_with("/api/") && segs >= 3)
        || (req.path.starts_with("/apis/") && segs >= 4);
    if !resource {
        return None;
    }
    Some(match req.method {
        Method::GET if req.flag("watch") => Class::Watch,
        Method::GET => Class::Read,
        Method::POST => Class::Write { update: false },
        _ => Class::Write { update: true },
    })
}

fn injected(code: u16) -> Response {
    let e = match code {
        409 => Error::Conflict {
            message: "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again (injected fault)".into(),
            kind: String::new(),
            name: String::new(),
        },
        429 => Error::TooManyRequests {
            message: "the server is currently unable to handle the request (injected fault)".into(),
            causes: Vec::new(),
        },
        503 => Error::Unavailable("the server is currently unable to handle the request (injected fault)".into()),
        _ => Error::Internal("an error on the server has prevented the request from succeeding (injected fault)".into()),
    };
    let mut r = error_response(&e);
    if code == 429 || code == 503 {
        r.headers_mut().insert(
            header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    r
}

fn json_response(code: StatusCode, body: Vec<u8>) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn value_response(code: StatusCode, v: &Value) -> Response {
    json_response(code, serde_json::to_vec(v).unwrap_or_default())
}

fn error_response(e: &Error) -> Response {
    value_response(e.code(), &e.to_status())
}

fn success_status(code: u16, details: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code, "details": details})
}

async fn handle(
    AxState(ctx): AxState<Ctx>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<Vec<(String, String)>>,
    body: Bytes,
) -> Response {
    let req = Req {
        method,
        path: uri.path().to_string(),
        headers,
        query,
        body,
        faults: ctx.faults && ctx.shared.injector.faults.enabled(),
        audited: ctx.faults,
    };
    let sh = ctx.shared;
    let verdict = match fault_class(&req) {
        _ if req.faults
            && sh
                .injector
                .loses_create_answer(req.method == Method::POST, &req.path) =>
        {
            Verdict::FailAfter(503)
        }
        Some(class) if req.faults => sh.injector.decide(class),
        _ => Verdict::Pass,
    };
    if let Verdict::Fail(code) = verdict {
        return injected(code);
    }
    let response = match dispatch(&sh, &req) {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    match verdict {
        // The write went through (or failed on its own); the client hears of a server error.
        Verdict::FailAfter(code) => injected(code),
        _ => response,
    }
}

struct Req {
    method: Method,
    path: String,
    headers: HeaderMap,
    query: Vec<(String, String)>,
    body: Bytes,
    /// Whether configured faults apply to this request.
    faults: bool,
    /// Whether the request comes through the router of the system under test (faults
    /// configured or not), whose disruptive calls are audited (`store/audit.rs`).
    audited: bool,
}

impl Req {
    fn q(&self, k: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.q(k), Some("true" | "1"))
    }

    fn opts(&self) -> WriteOpts {
        WriteOpts {
            dry_run: self.q("dryRun") == Some("All"),
            field_manager: self.q("fieldManager").map(str::to_string),
            grace_period: self.q("gracePeriodSeconds").and_then(|g| g.parse().ok()),
        }
    }

    fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
    }

    /// Whether the client asked for `PartialObjectMetadata` (kube's metadata-only API).
    fn meta_only(&self) -> bool {
        self.headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("as=PartialObjectMetadata"))
    }

    fn body_value(&self) -> Result<Value> {
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        if self.content_type().contains("yaml") {
            serde_norway::from_slice(&self.body)
                .map_err(|e| Error::BadRequest(format!("invalid YAML body: {e}")))
        } else {
            serde_json::from_slice(&self.body)
                .map_err(|e| Error::BadRequest(format!("invalid JSON body: {e}")))
        }
    }
}

fn lock(sh: &Shared) -> std::sync::MutexGuard<'_, State> {
    // A panic while holding the lock leaves consistent-enough state for a test fake.
    sh.state.lock().unwrap_or_else(|p| p.into_inner())
}

fn dispatch(sh: &Arc<Shared>, req: &Req) -> Result<Response> {
    let segs: Vec<&str> = req
        .path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segs.as_slice() {
        ["version"] => Ok(value_response(
            StatusCode::OK,
            &json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0-fake", "platform": "linux/amd64"}),
        )),
        ["healthz" | "readyz" | "livez"] => Ok((StatusCode::OK, "ok").into_response()),
        // Test support: the audit of disruptive calls and the faults injected so far.
        ["debug", "audit"] => {
            let faults = sh.injector.counts();
            let records = lock(sh).audit.clone();
            Ok(value_response(
                StatusCode::OK,
                &json!({"records": records, "faultsInjected": faults.total()}),
            ))
        }
        ["api"] => Ok(value_response(
            StatusCode::OK,
            &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        )),
        ["api", "v1"] => Ok(value_response(
            StatusCode::OK,
            &group_version_doc(sh, "", "v1"),
        )),
        ["apis"] => Ok(value_response(StatusCode::OK, &group_list(sh))),
        ["apis", g] => {
            let list = group_list(sh);
            let group = list["groups"]
                .as_array()
                .and_then(|gs| gs.iter().find(|x| x["name"] == *g))
                .cloned()
                .ok_or_else(|| Error::NotFound {
                    message: format!("group {g} not found"),
                    kind: String::new(),
                    name: g.to_string(),
                })?;
            let mut group = group;
            group["kind"] = json!("APIGroup");
            group["apiVersion"] = json!("v1");
            Ok(value_response(StatusCode::OK, &group))
        }
        ["apis", g, v] => {
            let doc = group_version_doc(sh, g, v);
            if doc["resources"].as_array().is_none_or(|r| r.is_empty()) {
                return Err(Error::NotFound {
                    message: format!("the server could not find the requested resource ({g}/{v})"),
                    kind: String::new(),
                    name: String::new(),
                });
            }
            Ok(value_response(StatusCode::OK, &doc))
        }
        ["api", "v1", rest @ ..] => resource(sh, req, "", "v1", rest),
        ["apis", g, v, rest @ ..] => resource(sh, req, g, v, rest),
        _ => Err(Error::NotFound {
            message: "the server could not find the requested resource".into(),
            kind: String::new(),
            name: String::new(),
        }),
    }
}

fn group_version_doc(sh: &Shared, group: &str, version: &str) -> Value {
    let defs = lock(sh).defs();
    let matching: Vec<&ResourceDef> = defs
        .iter()
        .map(|d| d.as_ref())
        .filter(|d| d.group == group && d.version(version).is_some())
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    resources::api_resource_list(&matching, &gv)
}

fn group_list(sh: &Shared) -> Value {
    let defs = lock(sh).defs();
    let mut groups: Vec<(String, Vec<String>, String)> = Vec::new();
    for d in defs.iter().filter(|d| !d.group.is_empty()) {
        let entry = match groups.iter_mut().find(|(g, _, _)| *g == d.group) {
            Some(e) => e,
            None => {
                groups.push((d.group.clone(), Vec::new(), d.storage_version.clone()));
                groups.last_mut().expect("just pushed")
            }
        };
        for v in &d.versions {
            if !entry.1.contains(&v.name) {
                entry.1.push(v.name.clone());
            }
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, vs, pref)| {
            let versions: Vec<Value> = vs.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
            json!({"name": g, "versions": versions, "preferredVersion": {"groupVersion": format!("{g}/{pref}"), "version": pref}})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// How one object is shown to the client: requested version, optionally metadata only.
#[derive(Clone)]
struct View {
    api_version: String,
    kind: String,
    meta_only: bool,
}

impl View {
    fn render(&self, obj: &Arc<Value>) -> Vec<u8> {
        if self.meta_only {
            let v = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": obj.get("metadata")});
            return serde_json::to_vec(&v).unwrap_or_default();
        }
        if obj.get("apiVersion").and_then(Value::as_str) == Some(self.api_version.as_str()) {
            serde_json::to_vec(obj.as_ref()).unwrap_or_default()
        } else {
            // A CRD with several versions and no conversion webhook: only apiVersion changes.
            let mut v = (**obj).clone();
            v["apiVersion"] = json!(self.api_version);
            serde_json::to_vec(&v).unwrap_or_default()
        }
    }

    fn response(&self, code: StatusCode, obj: &Arc<Value>) -> Response {
        json_response(code, self.render(obj))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        if self.meta_only {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": meta})
        } else {
            json!({"apiVersion": self.api_version, "kind": self.kind, "metadata": meta})
        }
    }
}

fn resource(
    sh: &Arc<Shared>,
    req: &Req,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Response> {
    let st = lock(sh);
    let lookup = |plural: &str| -> Option<Arc<ResourceDef>> {
        st.def(group, plural)
            .filter(|d| d.version(version).is_some())
    };
    let (ns, def, tail): (Option<&str>, Arc<ResourceDef>, &[&str]) = match rest {
        ["namespaces", ns, plural, tail @ ..] if lookup(plural).is_some_and(|d| d.namespaced) => {
            (Some(*ns), lookup(plural).expect("checked"), tail)
        }
        [plural, tail @ ..] => (
            None,
            lookup(plural).ok_or_else(|| Error::NotFound {
                message: "the server could not find the requested resource".into(),
                kind: plural.to_string(),
                name: String::new(),
            })?,
            tail,
        ),
        [] => unreachable!("rest is non-empty by the routes above"),
    };
    drop(st);
    let view = View {
        api_version: def.api_version(version),
        kind: def.kind.clone(),
        meta_only: req.meta_only(),
    };
    let need_ns = |op: &str| -> Result<&str> {
        match (def.namespaced, ns) {
            (true, Some(n)) => Ok(n),
            (true, None) => Err(Error::MethodNotAllowed(format!(
                "{op} of namespaced {} needs a namespace",
                def.plural
            ))),
            (false, _) => Ok(""),
        }
    };
    let opts = req.opts();
    match (tail, &req.method) {
        ([], &Method::GET) => {
            let labels = LabelSelector::parse(req.q("labelSelector").unwrap_or_default())?;
            let fields =
                FieldSelector::parse(req.q("fieldSelector").unwrap_or_default(), &def.selectable)?;
            if req.flag("watch") {
                return watch(sh, req, def, view, ns.map(str::to_string), labels, fields);
            }
            list(sh, req, &def, &view, ns, &labels, &fields)
        }
        ([], &Method::POST) => {
            let ns = need_ns("create")?;
            let obj = lock(sh).create(&def, ns, req.body_value()?, &opts)?;
            Ok(view.response(StatusCode::CREATED, &obj))
        }
        ([], &Method::DELETE) => {
            let labels = LabelSelector::parse(req.q("labelSelector").unwrap_or_default())?;
            let fields =
                FieldSelector::parse(req.q("fieldSelector").unwrap_or_default(), &def.selectable)?;
            let mut st = lock(sh);
            let items = st.list(&def, ns, &labels, &fields, None, None)?.items;
            for o in items {
                let (ons, name) = (meta_str(&o, "namespace"), meta_str(&o, "name"));
                st.delete(&def, ons, name, &Value::Null, &opts)?;
            }
            Ok(value_response(
                StatusCode::OK,
                &success_status(200, json!({"kind": def.plural, "group": def.group})),
            ))
        }
        ([name], m) => {
            let ns = need_ns("access")?;
            object(sh, req, &def, &view, ns, name, m, Part::Main, &opts)
        }
        ([name, "status"], m) if def.status => {
            let ns = need_ns("access")?;
            object(sh, req, &def, &view, ns, name, m, Part::Status, &opts)
        }
        ([name, "eviction"], &Method::POST) if def.builtin == Some(Builtin::Pod) => {
            let ns = need_ns("eviction")?;
            let mut st = lock(sh);
            if req.audited && !opts.dry_run {
                st.audit_eviction(ns, name);
            }
            let evicted = st.evict(ns, name, &req.body_value()?, &opts);
            if req.audited && !opts.dry_run {
                st.audit_eviction_outcome(ns, name, evicted.is_ok());
            }
            drop(st);
            evicted?;
            Ok(value_response(
                StatusCode::CREATED,
                &success_status(201, json!({"name": name, "kind": "pods"})),
            ))
        }
        ([name, "binding"], &Method::POST) if def.builtin == Some(Builtin::Pod) => {
            let ns = need_ns("binding")?;
            let body = req.body_value()?;
            let node = body
                .pointer("/target/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            lock(sh).bind(ns, name, node, &opts)?;
            Ok(value_response(
                StatusCode::CREATED,
                &success_status(201, json!({"name": name, "kind": "pods"})),
            ))
        }
        _ => Err(Error::NotFound {
            message: "the server could not find the requested resource".into(),
            kind: def.plural.clone(),
            name: String::new(),
        }),
    }
}

/// For a write to a Node by the system under test: the removal record to keep if the write
/// releases the last finalizer of the Node being deleted (`store/audit.rs`).
fn audited_node_release(
    st: &State,
    req: &Req,
    def: &ResourceDef,
    name: &str,
    opts: &WriteOpts,
) -> Option<Value> {
    (req.audited && !opts.dry_run && def.builtin == Some(Builtin::Node))
        .then(|| st.node_release(name))
        .flatten()
}

#[allow(clippy::too_many_arguments)]
fn object(
    sh: &Arc<Shared>,
    req: &Req,
    def: &ResourceDef,
    view: &View,
    ns: &str,
    name: &str,
    method: &Method,
    part: Part,
    opts: &WriteOpts,
) -> Result<Response> {
    match *method {
        Method::GET => {
            let obj = lock(sh).get(def, ns, name)?;
            Ok(view.response(StatusCode::OK, &obj))
        }
        Method::PUT => {
            let body = req.body_value()?;
            let mut st = lock(sh);
            let release = audited_node_release(&st, req, def, name, opts);
            let obj = st.update(def, ns, name, body, part, opts)?;
            st.audit_node_release(release);
            drop(st);
            Ok(view.response(StatusCode::OK, &obj))
        }
        Method::PATCH => {
            let ct = req.content_type();
            let kind = if ct.starts_with("application/json-patch+json") {
                PatchKind::Json
            } else if ct.starts_with("application/merge-patch+json") {
                PatchKind::Merge
            } else if ct.starts_with("application/strategic-merge-patch+json") {
                PatchKind::Strategic
            } else if ct.starts_with("application/apply-patch+yaml") {
                PatchKind::Apply
            } else {
                return Err(Error::UnsupportedMediaType(format!(
                    "the body of the request was in an unknown format: {ct}"
                )));
            };
            let body = if kind == PatchKind::Apply {
                serde_norway::from_slice(&req.body)
                    .map_err(|e| Error::BadRequest(format!("invalid apply body: {e}")))?
            } else {
                serde_json::from_slice(&req.body)
                    .map_err(|e| Error::BadRequest(format!("invalid patch body: {e}")))?
            };
            let mut st = lock(sh);
            let existed = st.get(def, ns, name).is_ok();
            let release = audited_node_release(&st, req, def, name, opts);
            let obj = st.patch(def, ns, name, kind, &body, part, opts)?;
            st.audit_node_release(release);
            drop(st);
            let code = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok(view.response(code, &obj))
        }
        Method::DELETE if part == Part::Main => {
            let body = req.body_value()?;
            let mut opts = opts.clone();
            if body["dryRun"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "All"))
            {
                opts.dry_run = true;
            }
            if let Some(g) = body["gracePeriodSeconds"].as_i64() {
                opts.grace_period = Some(g);
            }
            let mut st = lock(sh);
            if req.audited && !opts.dry_run && def.builtin == Some(Builtin::Node) {
                st.audit_node_delete(name);
            }
            let (obj, gone) = st.delete(def, ns, name, &body["preconditions"], &opts)?;
            drop(st);
            if gone {
                let uid = obj["metadata"]["uid"].clone();
                Ok(value_response(
                    StatusCode::OK,
                    &success_status(
                        200,
                        json!({"name": name, "group": def.group, "kind": def.plural, "uid": uid}),
                    ),
                ))
            } else {
                Ok(view.response(StatusCode::OK, &obj))
            }
        }
        _ => Err(Error::MethodNotAllowed(format!(
            "{method} is not supported here"
        ))),
    }
}

fn list(
    sh: &Shared,
    req: &Req,
    def: &ResourceDef,
    view: &View,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Result<Response> {
    let limit = match req.q("limit") {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| Error::BadRequest(format!("invalid limit {l:?}")))?,
        ),
        None => None,
    };
    let st = lock(sh);
    if req.q("resourceVersionMatch") == Some("Exact")
        && let Some(rv) = req.q("resourceVersion")
        && rv != st.rv.to_string()
    {
        // Lists at an exact past revision would need snapshots; only "now" is served.
        return Err(Error::Gone(format!(
            "too old resource version: {rv} ({})",
            st.rv
        )));
    }
    let stale = sh
        .options
        .stale_lists
        .filter(|_| req.q("resourceVersion") == Some("0") && req.q("continue").is_none());
    let result = match stale {
        // The watch cache's view: served without pagination, as kube-apiserver does for
        // resourceVersion=0 lists.
        Some(lag) => st.list_as_of(def, ns, labels, fields, lag)?,
        None => st.list(def, ns, labels, fields, limit, req.q("continue"))?,
    };
    drop(st);
    // Serialise outside the lock, item by item, without cloning the objects.
    let (api_version, kind) = if view.meta_only {
        (
            "meta.k8s.io/v1".to_string(),
            "PartialObjectMetadataList".to_string(),
        )
    } else {
        (view.api_version.clone(), def.list_kind.clone())
    };
    let mut meta = json!({"resourceVersion": result.rv.to_string()});
    if let Some(c) = &result.continue_token {
        meta["continue"] = json!(c);
    }
    let mut out = Vec::with_capacity(256 + result.items.len() * 1024);
    out.extend_from_slice(
        format!(
            "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
            json!(kind),
            json!(api_version),
            meta
        )
        .as_bytes(),
    );
    for (i, item) in result.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&view.render(item));
    }
    out.extend_from_slice(b"]}");
    Ok(json_response(StatusCode::OK, out))
}

/// What a watch selects.
struct Filter {
    key: String,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// The watch event a change produces for this watch, if any. An object that starts or stops
    /// matching the selectors shows up as ADDED or DELETED, as with the real watch cache.
    fn event(&self, c: &Change) -> Option<(&'static str, Arc<Value>)> {
        if *c.key != *self.key {
            return None;
        }
        if let Some(ns) = &self.ns
            && c.namespace != *ns
        {
            return None;
        }
        let now = self.matches(&c.object);
        match c.kind {
            ChangeKind::Added => now.then(|| ("ADDED", c.object.clone())),
            ChangeKind::Deleted => now.then(|| ("DELETED", c.object.clone())),
            ChangeKind::Modified => {
                let before = c.prev.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some(("MODIFIED", c.object.clone())),
                    (false, true) => Some(("ADDED", c.object.clone())),
                    (true, false) => {
                        let mut old = (**c.prev.as_ref().expect("matched")).clone();
                        old["metadata"]["resourceVersion"] = json!(c.rv.to_string());
                        Some(("DELETED", Arc::new(old)))
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

/// The change's object when its watch events are held back (`FakeApiServer::hold_watch_events`).
fn held_object(
    held: &tokio::sync::watch::Receiver<std::collections::BTreeSet<crate::HeldObject>>,
    c: &Change,
) -> Option<crate::HeldObject> {
    let h = held.borrow();
    if h.is_empty() {
        return None;
    }
    let name = c.object["metadata"]["name"].as_str().unwrap_or_default();
    let o = (c.key.to_string(), c.namespace.clone(), name.to_string());
    h.contains(&o).then_some(o)
}

fn event_line(kind: &str, body: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(body.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(body);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn gone_line(rv: &str, current: u64) -> Bytes {
    let status = Error::Gone(format!("too old resource version: {rv} ({current})")).to_status();
    event_line("ERROR", &serde_json::to_vec(&status).unwrap_or_default())
}

fn watch(
    sh: &Arc<Shared>,
    req: &Req,
    def: Arc<ResourceDef>,
    view: View,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
) -> Result<Response> {
    let filter = Filter {
        key: def.key(),
        ns,
        labels,
        fields,
    };
    let bookmarks = req.flag("allowWatchBookmarks");
    let send_initial = req.flag("sendInitialEvents");
    let timeout = req
        .q("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map(Duration::from_secs);
    let rv_param = req.q("resourceVersion").unwrap_or_default().to_string();
    let mut initial: Vec<Bytes> = Vec::new();
    // History events of held objects: stashed like live ones.
    let mut held_initial: Vec<(crate::HeldObject, Bytes)> = Vec::new();
    let (mut rx, start_rv) = {
        let st = lock(sh);
        let current = st.rv;
        let rx = st.tx.subscribe();
        if send_initial || rv_param.is_empty() || rv_param == "0" {
            // No resourceVersion (or "0"): synthetic ADDED events for the current state.
            let items = st
                .list(
                    &def,
                    filter.ns.as_deref(),
                    &filter.labels,
                    &filter.fields,
                    None,
                    None,
                )?
                .items;
            for o in &items {
                initial.push(event_line("ADDED", &view.render(o)));
            }
            if send_initial {
                let bm = view.bookmark(current, true);
                initial.push(event_line(
                    "BOOKMARK",
                    &serde_json::to_vec(&bm).unwrap_or_default(),
                ));
            }
        } else {
            let from: u64 = rv_param
                .parse()
                .map_err(|_| Error::BadRequest(format!("invalid resourceVersion {rv_param:?}")))?;
            if from < st.compacted || (req.faults && sh.injector.watch_gone()) {
                // Like the real server: 200, then one ERROR event carrying 410, then the end.
                let body = Body::from(gone_line(&rv_param, current));
                return Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response());
            }
            let held_now = sh.held.subscribe();
            for c in st.history.iter().filter(|c| c.rv > from) {
                if let Some((kind, obj)) = filter.event(c) {
                    let line = event_line(kind, &view.render(&obj));
                    match held_object(&held_now, c) {
                        Some(o) => held_initial.push((o, line)),
                        None => initial.push(line),
                    }
                }
            }
        }
        (rx, current)
    };
    let (mut tx, body_rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(256);
    let sh = sh.clone();
    let drop_watches = req.faults && sh.injector.faults.watch_drop > 0.0;
    let mut shutdown = sh.shutdown.subscribe();
    let mut expire = sh.expire.subscribe();
    let mut held = sh.held.subscribe();
    tokio::spawn(async move {
        // Lines of held objects, delivered when their hold is released.
        let mut stash: Vec<(crate::HeldObject, Bytes)> = held_initial;
        for line in initial {
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
        let mut last = start_rv;
        let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(365 * 24 * 3600)));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(sh.options.bookmark_interval);
        tick.tick().await;
        loop {
            // A client that went away is only noticed here; without this, a watch on a quiet
            // resource would keep its task and broadcast receiver until it lagged out.
            if tx.is_closed() {
                return;
            }
            let line = tokio::select! {
                biased;
                _ = shutdown.changed() => return,
                _ = expire.changed() => Some(gone_line(&last.to_string(), last)),
                _ = &mut deadline => return,
                _ = held.changed() => {
                    let now_held = held.borrow_and_update().clone();
                    let (keep, go): (Vec<_>, Vec<_>) =
                        stash.drain(..).partition(|(o, _)| now_held.contains(o));
                    stash = keep;
                    for (_, l) in go {
                        if tx.send(Ok(l)).await.is_err() {
                            return;
                        }
                    }
                    None
                }
                r = rx.recv() => match r {
                    Ok(c) => {
                        last = c.rv;
                        let line = filter.event(&c).map(|(k, o)| event_line(k, &view.render(&o)));
                        match (line, held_object(&held, &c)) {
                            (Some(l), Some(o)) => {
                                stash.push((o, l));
                                None
                            }
                            (line, _) => line,
                        }
                    }
                    Err(RecvError::Lagged(_)) => Some(gone_line(&last.to_string(), last)),
                    Err(RecvError::Closed) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    // Everything up to `current` was broadcast before we read it (under the
                    // lock), so after draining the channel the bookmark is truthful.
                    let current = lock(&sh).rv;
                    let mut lines = Vec::new();
                    loop {
                        match rx.try_recv() {
                            Ok(c) => {
                                last = c.rv;
                                if let Some((k, o)) = filter.event(&c) {
                                    let l = event_line(k, &view.render(&o));
                                    match held_object(&held, &c) {
                                        Some(o) => stash.push((o, l)),
                                        None => lines.push(l),
                                    }
                                }
                            }
                            Err(TryRecvError::Empty) => break,
                            Err(TryRecvError::Lagged(_)) => {
                                let _ = tx.send(Ok(gone_line(&last.to_string(), last))).await;
                                return;
                            }
                            Err(TryRecvError::Closed) => return,
                        }
                    }
                    // A bookmark past a held event would let the client resume beyond it.
                    if stash.is_empty() {
                        last = last.max(current);
                        lines.push(event_line("BOOKMARK", &serde_json::to_vec(&view.bookmark(last, false)).unwrap_or_default()));
                    }
                    for l in lines {
                        if tx.send(Ok(l)).await.is_err() {
                            return;
                        }
                    }
                    None
                }
            };
            if drop_watches && sh.injector.watch_drop() {
                // Cut without an ERROR event: the client resumes from its last resourceVersion.
                return;
            }
            if let Some(line) = line {
                let is_error = line.starts_with(b"{\"type\":\"ERROR\"");
                if tx.send(Ok(line)).await.is_err() || is_error {
                    return;
                }
            }
        }
    });
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(body_rx),
    )
        .into_response())
}
