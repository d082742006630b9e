//! The in-memory object store: one global resourceVersion counter (as etcd has), a bounded
//! change history for watches, and the write paths (create, update, patch, delete) with the
//! semantics of the real API server's generic registry.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::error::{Error, Result};
use crate::patch;
use crate::resources::{self, Builtin, ResourceDef};
use crate::schema;
use crate::selector::{FieldSelector, LabelSelector};
use crate::workloads::force;

/// The kind of a change, as a watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One committed write, kept in the history and broadcast to watches.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub key: Arc<str>,
    pub namespace: String,
    pub kind: ChangeKind,
    pub object: Arc<Value>,
    /// The object before the write (for selector transitions); `None` for creates.
    pub prev: Option<Arc<Value>>,
    /// When it was committed (stale `resourceVersion=0` lists roll back to a past instant).
    pub at: std::time::Instant,
}

/// Objects of one resource type, keyed by `(namespace, name)` ("" for cluster-scoped).
pub(crate) struct Table {
    pub def: Arc<ResourceDef>,
    pub objects: BTreeMap<(String, String), Arc<Value>>,
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The main resource: everything but `status` (for types with a status subresource).
    Main,
    /// The `/status` subresource: only `status`.
    Status,
}

/// The patch flavours the server accepts, by Content-Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

/// Options of a write request.
#[derive(Clone, Debug, Default)]
pub(crate) struct WriteOpts {
    pub dry_run: bool,
    pub field_manager: Option<String>,
    /// `DeleteOptions.gracePeriodSeconds` of a delete or eviction.
    pub grace_period: Option<i64>,
}

/// A namespace and name.
pub(crate) type ObjKey = (String, String);

/// The result of a list: items (already filtered), the list's resourceVersion and a continue token.
pub(crate) struct ListResult {
    pub items: Vec<Arc<Value>>,
    pub rv: u64,
    pub continue_token: Option<String>,
}

/// The mutable server state. Always used under one mutex: writes are serialised, like etcd.
pub(crate) struct State {
    pub rv: u64,
    pub tables: BTreeMap<String, Table>,
    pub history: VecDeque<Arc<Change>>,
    /// Every change with `rv <= compacted` has been dropped from the history.
    pub compacted: u64,
    pub history_limit: usize,
    pub tx: broadcast::Sender<Arc<Change>>,
    pub gc_orphan_pods: bool,
    /// Woken on every commit (the harness scheduler waits on it).
    pub notify: Arc<tokio::sync::Notify>,
    /// The harness scheduler's parsed pod requests by pod uid (pod specs are immutable, so
    /// parsing each pod once keeps a scheduling pass linear in cheap lookups).
    pub request_cache: std::collections::HashMap<String, Arc<BTreeMap<String, i128>>>,
    /// Graceful pod deletion: a pod's grace period is multiplied by this; `None` removes pods
    /// at once (see `Options::graceful_deletion`).
    pub grace_scale: Option<f64>,
    /// How long pod GC waits before deleting a pod bound to a missing Node (zero: at once).
    pub pod_gc_delay: std::time::Duration,
    /// Terminating pods and when their grace period ends (the fake kubelet then removes them).
    pub removals: std::collections::HashMap<ObjKey, std::time::Instant>,
    /// Pods bound to a missing Node and since when (pod GC with a delay).
    pub orphan_since: std::collections::HashMap<ObjKey, std::time::Instant>,
    /// Pods evicted under a PodDisruptionBudget, by uid: listed in its `disruptedPods` (and not
    /// counted healthy) until they are gone.
    pub evicted: std::collections::HashMap<ObjKey, String>,
    /// Evictions accepted and refused with 429 (for tests to show the back-off path ran).
    pub evictions: (u64, u64),
    /// Woken on every commit, for the workload controllers (the binder has `notify`).
    pub controllers_notify: Arc<tokio::sync::Notify>,
    uid_counter: u64,
}

/// The current time in the API server's `metav1.Time` format (seconds, UTC).
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let o = obj.as_object_mut().expect("object");
    let m = o.entry("metadata").or_insert_with(|| json!({}));
    if !m.is_object() {
        *m = json!({});
    }
    m.as_object_mut().expect("object")
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// DNS-1123 subdomain, the rule for most object names.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A label value: at most 63 characters, alphanumerics with `-_.` inside.
fn valid_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name like a label value.
fn valid_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    !name.is_empty() && valid_label_value(name) && prefix.is_none_or(valid_name)
}

impl State {
    /// A new state with the built-in types and the default namespaces.
    pub fn new(history_limit: usize, watch_buffer: usize, gc_orphan_pods: bool) -> Self {
        let (tx, _) = broadcast::channel(watch_buffer.max(16));
        let mut s = State {
            rv: 0,
            tables: BTreeMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            history_limit: history_limit.max(1),
            tx,
            gc_orphan_pods,
            notify: Arc::new(tokio::sync::Notify::new()),
            request_cache: Default::default(),
            grace_scale: None,
            pod_gc_delay: std::time::Duration::ZERO,
            removals: Default::default(),
            orphan_since: Default::default(),
            evicted: Default::default(),
            evictions: (0, 0),
            controllers_notify: Arc::new(tokio::sync::Notify::new()),
            uid_counter: 0,
        };
        for def in resources::builtins() {
            s.add_def(def);
        }
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let def = s.def("", "namespaces").expect("builtin");
            s.create(&def, "", obj, &WriteOpts::default())
                .expect("default namespaces are valid");
        }
        s
    }

    fn add_def(&mut self, def: ResourceDef) {
        let key = def.key();
        let def = Arc::new(def);
        match self.tables.get_mut(&key) {
            Some(t) => t.def = def,
            None => {
                self.tables.insert(
                    key,
                    Table {
                        def,
                        objects: BTreeMap::new(),
                    },
                );
            }
        }
    }

    /// The definition of a resource by group and plural.
    pub fn def(&self, group: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.tables
            .get(&resources::key_of(group, plural))
            .map(|t| t.def.clone())
    }

    /// All definitions (for discovery).
    pub fn defs(&self) -> Vec<Arc<ResourceDef>> {
        self.tables.values().map(|t| t.def.clone()).collect()
    }

    fn next_uid(&mut self) -> String {
        self.uid_counter += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.uid_counter)
    }

    /// Every stored object of a type, in key order.
    pub fn tables_objects<'a>(
        &'a self,
        def: &ResourceDef,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        self.table(def).objects.values()
    }

    pub(crate) fn table(&self, def: &ResourceDef) -> &Table {
        self.tables
            .get(&def.key())
            .expect("defs come from the table")
    }

    fn scope_ns<'a>(def: &ResourceDef, ns: &'a str) -> &'a str {
        if def.namespaced { ns } else { "" }
    }

    /// Reads one object.
    pub fn get(&self, def: &ResourceDef, ns: &str, name: &str) -> Result<Arc<Value>> {
        self.table(def)
            .objects
            .get(&(Self::scope_ns(def, ns).to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| Error::not_found(&def.plural, &def.group, name))
    }

    /// Lists objects, filtered, in key order, optionally one page at a time.
    ///
    /// Pages after the first are served from the *current* state past the continue key, not
    /// from a snapshot at the first page's resourceVersion (a simplification: a reflector that
    /// then watches from the list's resourceVersion still converges).
    pub fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListResult> {
        let table = self.table(def);
        let (list_rv, after) = match continue_token {
            Some(tok) => {
                let mut parts = tok.splitn(3, '|');
                let rv: u64 = parts
                    .next()
                    .and_then(|r| r.parse().ok())
                    .ok_or_else(|| Error::BadRequest("invalid continue token".into()))?;
                let ns = parts.next().unwrap_or_default().to_string();
                let name = parts.next().unwrap_or_default().to_string();
                if rv < self.compacted {
                    return Err(Error::Gone(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
                    ));
                }
                (rv, Some((ns, name)))
            }
            None => (self.rv, None),
        };
        let lower = match after {
            Some(k) => std::ops::Bound::Excluded(k),
            None => std::ops::Bound::Unbounded,
        };
        let range = table.objects.range((lower, std::ops::Bound::Unbounded));
        let mut items = Vec::new();
        let mut last = None;
        let mut more = false;
        for ((ons, oname), obj) in range {
            if let Some(ns) = ns
                && def.namespaced
                && ons != ns
            {
                continue;
            }
            if !labels.matches(obj) || !fields.matches(obj) {
                continue;
            }
            if limit.is_some_and(|l| l > 0 && items.len() >= l) {
                more = true;
                break;
            }
            items.push(obj.clone());
            last = Some((ons.clone(), oname.clone()));
        }
        let continue_token = match (more, last) {
            (true, Some((ns, name))) => Some(format!("{list_rv}|{ns}|{name}")),
            _ => None,
        };
        Ok(ListResult {
            items,
            rv: list_rv,
            continue_token,
        })
    }

    /// Lists objects as they were `lag` ago (a lagging watch cache), rebuilt by undoing the
    /// retained history's later changes; the list's resourceVersion is that past revision, so a
    /// watch from it replays what the list missed. A history shorter than `lag` gives its oldest
    /// reconstructable revision.
    pub fn list_as_of(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        lag: std::time::Duration,
    ) -> Result<ListResult> {
        let cutoff = std::time::Instant::now().checked_sub(lag);
        let target = self
            .history
            .iter()
            .rev()
            .find(|c| cutoff.is_some_and(|t| c.at <= t))
            .map_or(self.compacted.min(self.rv), |c| c.rv);
        let key = def.key();
        let mut objects = self.table(def).objects.clone();
        for c in self.history.iter().rev().take_while(|c| c.rv > target) {
            if *c.key != *key {
                continue;
            }
            let k = (c.namespace.clone(), meta_str(&c.object, "name").to_string());
            match (&c.kind, &c.prev) {
                (ChangeKind::Added, _) => {
                    objects.remove(&k);
                }
                (_, Some(prev)) => {
                    objects.insert(k, prev.clone());
                }
                (_, None) => {}
            }
        }
        let items = objects
            .into_iter()
            .filter(|((ons, _), _)| !def.namespaced || ns.is_none_or(|n| n == ons))
            .filter(|(_, o)| labels.matches(o) && fields.matches(o))
            .map(|(_, o)| o)
            .collect();
        Ok(ListResult {
            items,
            rv: target,
            continue_token: None,
        })
    }

    /// Commits a write: bumps the global resourceVersion, stores, records and broadcasts.
    pub(crate) fn commit(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        mut obj: Value,
        kind: ChangeKind,
    ) -> Arc<Change> {
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let obj = Arc::new(obj);
        let key = (ns.to_string(), name.to_string());
        let table = self.tables.get_mut(&def.key()).expect("def from table");
        let prev = match kind {
            ChangeKind::Deleted => table.objects.remove(&key),
            _ => table.objects.insert(key, obj.clone()),
        };
        let change = Arc::new(Change {
            rv: self.rv,
            key: Arc::from(def.key()),
            namespace: ns.to_string(),
            kind,
            object: obj,
            prev,
            at: std::time::Instant::now(),
        });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        // No receiver is fine: nobody is watching.
        let _ = self.tx.send(change.clone());
        self.notify.notify_one();
        self.controllers_notify.notify_one();
        change
    }

    /// Drops all retained history, as an etcd compaction would: older resourceVersions get 410.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Checks the body's apiVersion/kind and fills them, plus namespace, in storage form.
    fn normalize_body(def: &ResourceDef, ns: &str, obj: &mut Value) -> Result<()> {
        if !obj.is_object() {
            return Err(Error::BadRequest("the body must be a JSON object".into()));
        }
        if let Some(k) = obj.get("kind").and_then(Value::as_str)
            && !k.is_empty()
            && k != def.kind
        {
            return Err(Error::BadRequest(format!(
                "the kind of the body ({k}) does not match the resource ({})",
                def.kind
            )));
        }
        if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
            && !av.is_empty()
            && !def.versions.iter().any(|v| def.api_version(&v.name) == av)
        {
            return Err(Error::BadRequest(format!(
                "apiVersion {av} is not served for {}",
                def.qualified_kind()
            )));
        }
        obj["apiVersion"] = json!(def.api_version(&def.storage_version));
        obj["kind"] = json!(def.kind);
        let m = meta_mut(obj);
        if def.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(b) if !b.is_empty() && b != ns => {
                    return Err(Error::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ));
                }
                _ => {
                    m.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            m.remove("namespace");
        }
        Ok(())
    }

    /// Admission and validation of a new object state (create when `old` is `None`).
    fn admit(&self, def: &ResourceDef, old: Option<&Value>, mut obj: Value) -> Result<Value> {
        let name = meta_str(&obj, "name").to_string();
        let kind = def.qualified_kind();
        let invalid = |field: &str, detail: String| Error::invalid(&kind, &name, field, &detail);
        if !valid_name(&name) {
            return Err(invalid(
                "metadata.name",
                format!(
                    "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
                ),
            ));
        }
        if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
            for (k, v) in labels {
                let v = v.as_str().unwrap_or_default();
                if !valid_label_key(k) {
                    return Err(invalid(
                        "metadata.labels",
                        format!(
                            "Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.'"
                        ),
                    ));
                }
                if !valid_label_value(v) {
                    return Err(invalid(
                        &format!("metadata.labels.{k}"),
                        format!(
                            "Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                        ),
                    ));
                }
            }
        }
        match def.builtin {
            Some(b) => {
                obj = resources::typed_roundtrip(b, obj).map_err(|e| {
                    Error::BadRequest(format!(
                        "{kind} in version \"{}\" cannot be handled as a {}: {e}",
                        def.storage_version, def.kind
                    ))
                })?;
                if let Some(old) = old {
                    check_immutable(b, old, &obj).map_err(|(f, d)| invalid(&f, d))?;
                }
            }
            None => {
                let version = def
                    .version(&def.storage_version)
                    .expect("storage version is served");
                if let Some(s) = &version.schema {
                    schema::prune(s, &mut obj, true);
                    schema::apply_defaults(s, &mut obj);
                    let mut causes = Vec::new();
                    schema::validate(s, &obj, "", &mut causes);
                    if let Some(compiled) = &version.cel
                        && let Err(errs) = kube::core::cel::validate_compiled(compiled, &obj, old)
                    {
                        for e in errs.iter() {
                            causes.push((
                                e.field_path.clone(),
                                format!("Invalid value: {}", e.message),
                            ));
                        }
                    }
                    if !causes.is_empty() {
                        let listed: Vec<String> =
                            causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
                        let message = if listed.len() == 1 {
                            format!("{kind} \"{name}\" is invalid: {}", listed[0])
                        } else {
                            format!("{kind} \"{name}\" is invalid: [{}]", listed.join(", "))
                        };
                        return Err(Error::Invalid {
                            message,
                            kind,
                            name,
                            causes,
                        });
                    }
                }
            }
        }
        Ok(obj)
    }

    /// Creates an object (POST, or server-side apply of a new object).
    pub fn create(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        mut obj: Value,
        opts: &WriteOpts,
    ) -> Result<Arc<Value>> {
        let ns = Self::scope_ns(def, ns);
        Self::normalize_body(def, ns, &mut obj)?;
        if def.namespaced {
            let nsdef = self.def("", "namespaces").expect("builtin");
            if self.get(&nsdef, "", ns).is_err() {
                return Err(Error::not_found("namespaces", "", ns));
            }
        }
        let m = meta_mut(&mut obj);
        if m.get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|r| !r.is_empty())
        {
            return Err(Error::BadRequest(
                "resourceVersion should not be set on objects to be created".into(),
            ));
        }
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            let prefix = m
                .get("generateName")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if prefix.is_empty() {
                return Err(Error::invalid(
                    &def.qualified_kind(),
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                ));
            }
            let table = &self.table(def).objects;
            let mut n = self.uid_counter + table.len() as u64;
            loop {
                n = n
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
                let suffix: String = (0..5)
                    .map(|i| {
                        alphabet[((n >> (8 * i + 11)) % alphabet.len() as u64) as usize] as char
                    })
                    .collect();
                let candidate = format!("{prefix}{suffix}");
                if !table.contains_key(&(ns.to_string(), candidate.clone())) {
                    name = candidate;
                    break;
                }
            }
        }
        let uid = self.next_uid();
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        m.insert("uid".into(), json!(uid));
        m.insert("creationTimestamp".into(), json!(now()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("managedFields");
        if def.tracks_generation() {
            m.insert("generation".into(), json!(1));
        }
        if self
            .table(def)
            .objects
            .contains_key(&(ns.to_string(), name.clone()))
        {
            return Err(Error::AlreadyExists {
                message: format!(
                    "{} \"{name}\" already exists",
                    resources::key_of(&def.group, &def.plural)
                ),
                kind: def.plural.clone(),
                name,
            });
        }
        prepare_create(def, &mut obj);
        let obj = self.admit(def, None, obj)?;
        if opts.dry_run {
            return Ok(Arc::new(obj));
        }
        if def.builtin == Some(Builtin::Crd) {
            // Register first so a bad CRD is rejected before it is stored.
            self.add_def(resources::from_crd(&obj).map_err(|e| {
                Error::invalid(&def.qualified_kind(), &name, "spec", &e.to_string())
            })?);
        }
        let change = self.commit(def, ns, &name, obj, ChangeKind::Added);
        self.after_write(def, &change);
        Ok(change.object.clone())
    }

    /// Replaces an object (PUT), or its status (PUT `/status`).
    pub fn update(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        mut body: Value,
        part: Part,
        opts: &WriteOpts,
    ) -> Result<Arc<Value>> {
        let ns = Self::scope_ns(def, ns);
        let old = self.get(def, ns, name)?;
        Self::normalize_body(def, ns, &mut body)?;
        let body_name = meta_str(&body, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(Error::BadRequest(
                "the name of the object does not match the name on the URL".into(),
            ));
        }
        let body_rv = meta_str(&body, "resourceVersion");
        if !body_rv.is_empty() && body_rv != meta_str(&old, "resourceVersion") {
            return Err(Error::conflict(
                &def.plural,
                &def.group,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut new = match part {
            Part::Status => {
                // Only status changes through /status, as the real status strategies do.
                let mut n = (*old).clone();
                match body.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        n.as_object_mut().expect("object").remove("status");
                    }
                }
                n
            }
            Part::Main => {
                if def.status {
                    match old.get("status") {
                        Some(s) => body["status"] = s.clone(),
                        None => {
                            body.as_object_mut().expect("object").remove("status");
                        }
                    }
                }
                body
            }
        };
        // Server-owned metadata cannot be changed by an update.
        {
            let om = old["metadata"].as_object().cloned().unwrap_or_default();
            let m = meta_mut(&mut new);
            m.insert("name".into(), json!(name));
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "generateName",
            ] {
                match om.get(f) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            m.remove("managedFields");
            m.insert(
                "resourceVersion".into(),
                old["metadata"]["resourceVersion"].clone(),
            );
        }
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            let before = finalizers(&old);
            if let Some(f) = finalizers(&new).into_iter().find(|f| !before.contains(f)) {
                return Err(Error::invalid(
                    &def.qualified_kind(),
                    name,
                    "metadata.finalizers",
                    &format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [\"{f}\"]"
                    ),
                ));
            }
        }
        let mut new = self.admit(def, Some(&old), new)?;
        if def.tracks_generation() && spec_changed(&old, &new) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        if new == *old {
            // A no-op write does not bump the resourceVersion, as on the real server.
            return Ok(old);
        }
        if opts.dry_run {
            return Ok(Arc::new(new));
        }
        // A pod still in its grace period stays until the kubelet (the controllers pass)
        // removes it, even once its finalizers are gone.
        let finished = new.pointer("/metadata/deletionTimestamp").is_some()
            && finalizers(&new).is_empty()
            && !self
                .removals
                .contains_key(&(ns.to_string(), name.to_string()));
        let kind = if finished {
            ChangeKind::Deleted
        } else {
            ChangeKind::Modified
        };
        if def.builtin == Some(Builtin::Crd) && !finished {
            self.add_def(resources::from_crd(&new).map_err(|e| {
                Error::invalid(&def.qualified_kind(), name, "spec", &e.to_string())
            })?);
        }
        let change = self.commit(def, ns, name, new, kind);
        self.after_write(def, &change);
        Ok(change.object.clone())
    }

    /// Applies a patch to an object or its status. Server-side apply creates a missing object.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        kind: PatchKind,
        body: &Value,
        part: Part,
        opts: &WriteOpts,
    ) -> Result<Arc<Value>> {
        let ns = Self::scope_ns(def, ns);
        if kind == PatchKind::Apply && opts.field_manager.as_deref().unwrap_or_default().is_empty()
        {
            return Err(Error::invalid(
                "PatchOptions.meta.k8s.io",
                "",
                "fieldManager",
                "Required value: is required for apply patch",
            ));
        }
        if kind == PatchKind::Strategic && def.builtin.is_none() {
            return Err(Error::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
            ));
        }
        let old = match self.get(def, ns, name) {
            Ok(o) => o,
            Err(Error::NotFound { .. }) if kind == PatchKind::Apply && part == Part::Main => {
                let mut obj = body.clone();
                meta_mut(&mut obj).insert("name".into(), json!(name));
                return self.create(def, ns, obj, opts);
            }
            Err(e) => return Err(e),
        };
        let mut new = (*old).clone();
        match kind {
            PatchKind::Merge => patch::merge_patch(&mut new, body),
            PatchKind::Json => patch::json_patch(&mut new, body)?,
            PatchKind::Strategic => {
                patch::strategic_merge_patch(def.builtin.expect("checked above"), &mut new, body)?
            }
            PatchKind::Apply => match def.builtin {
                // Apply is approximated as a merge of the applied configuration: fields the
                // manager stopped applying are not removed, and there are no conflicts.
                Some(b) => patch::strategic_merge_patch(b, &mut new, body)?,
                None => patch::merge_patch(&mut new, body),
            },
        }
        // A resourceVersion in the patch is a precondition, as on the real server.
        let want = meta_str(&new, "resourceVersion");
        if !want.is_empty() && want != meta_str(&old, "resourceVersion") {
            return Err(Error::conflict(
                &def.plural,
                &def.group,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        self.update(def, ns, name, new, part, opts)
    }

    /// Deletes an object: with finalizers it only gets a deletionTimestamp; without, it is removed.
    pub fn delete(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        preconditions: &Value,
        opts: &WriteOpts,
    ) -> Result<(Arc<Value>, bool)> {
        let ns = Self::scope_ns(def, ns);
        let old = self.get(def, ns, name)?;
        if let Some(uid) = preconditions.get("uid").and_then(Value::as_str)
            && uid != meta_str(&old, "uid")
        {
            return Err(Error::conflict(
                &def.plural,
                &def.group,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid")
                ),
            ));
        }
        if let Some(rv) = preconditions.get("resourceVersion").and_then(Value::as_str)
            && rv != meta_str(&old, "resourceVersion")
        {
            return Err(Error::conflict(
                &def.plural,
                &def.group,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion")
                ),
            ));
        }
        if let Some(grace) = self.grace_of(def, &old, opts) {
            return self.delete_gracefully(def, ns, name, old, grace, opts);
        }
        if !finalizers(&old).is_empty() {
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok((old, false));
            }
            let mut new = (*old).clone();
            let m = meta_mut(&mut new);
            m.insert("deletionTimestamp".into(), json!(now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if opts.dry_run {
                return Ok((Arc::new(new), false));
            }
            let change = self.commit(def, ns, name, new, ChangeKind::Modified);
            self.after_write(def, &change);
            return Ok((change.object.clone(), false));
        }
        if opts.dry_run {
            return Ok((old, true));
        }
        let change = self.commit(def, ns, name, (*old).clone(), ChangeKind::Deleted);
        self.after_write(def, &change);
        Ok((change.object.clone(), true))
    }

    /// Side effects of a committed write: registered CRDs, PDB status, orphaned pods.
    pub(crate) fn after_write(&mut self, def: &ResourceDef, change: &Change) {
        match def.builtin {
            Some(Builtin::Crd) if change.kind == ChangeKind::Deleted => {
                if let Ok(d) = resources::from_crd(&change.object) {
                    // The real server deletes every instance when the CRD goes.
                    self.tables.remove(&d.key());
                }
            }
            Some(Builtin::Pod) => {
                if change.kind == ChangeKind::Deleted {
                    let key = (
                        change.namespace.clone(),
                        meta_str(&change.object, "name").into(),
                    );
                    self.removals.remove(&key);
                    self.orphan_since.remove(&key);
                }
                let mut labels = vec![crate::selector::labels_of(&change.object)];
                if let Some(p) = &change.prev {
                    labels.push(crate::selector::labels_of(p));
                }
                self.refresh_pdbs(&change.namespace, Some(&labels));
            }
            Some(Builtin::Pdb) if change.kind != ChangeKind::Deleted => {
                let name = meta_str(&change.object, "name").to_string();
                self.refresh_pdb(&change.namespace, &name);
            }
            Some(Builtin::Node)
                if change.kind == ChangeKind::Deleted
                    && self.gc_orphan_pods
                    && self.pod_gc_delay.is_zero() =>
            {
                let node = meta_str(&change.object, "name").to_string();
                let pods = self.def("", "pods").expect("builtin");
                let orphans: Vec<(String, String)> = self
                    .table(&pods)
                    .objects
                    .iter()
                    .filter(|(_, p)| {
                        p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(&node)
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                for (ns, name) in orphans {
                    // Pod GC force-deletes pods of a node that no longer exists.
                    let _ = self.delete(&pods, &ns, &name, &Value::Null, &force());
                }
            }
            _ => {}
        }
    }

    /// Recomputes the status of the PDBs of a namespace (only those selecting one of `labels`).
    pub fn refresh_pdbs(
        &mut self,
        ns: &str,
        labels: Option<&[std::collections::BTreeMap<String, String>]>,
    ) {
        let pdbs = self.def("policy", "poddisruptionbudgets").expect("builtin");
        let names: Vec<String> = self
            .table(&pdbs)
            .objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
            .filter(|(_, p)| match labels {
                None => true,
                Some(ls) => pdb_selector(p).is_some_and(|s| ls.iter().any(|l| s.matches_labels(l))),
            })
            .map(|((_, name), _)| name.clone())
            .collect();
        for name in names {
            self.refresh_pdb(ns, &name);
        }
    }

    /// Recomputes one PDB's status, as the disruption controller would, and stores it if changed.
    fn refresh_pdb(&mut self, ns: &str, name: &str) {
        let pdbs = self.def("policy", "poddisruptionbudgets").expect("builtin");
        let Ok(pdb) = self.get(&pdbs, ns, name) else {
            return;
        };
        // Evicted pods stay listed until they are gone (or replaced by a new pod of that name).
        let pods = self.def("", "pods").expect("builtin");
        let mut disrupted = Map::new();
        for (pod, at) in pdb
            .pointer("/status/disruptedPods")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let key = (ns.to_string(), pod.clone());
            let live = self.get(&pods, ns, pod).ok();
            if live.is_some_and(|p| {
                Some(meta_str(&p, "uid")) == self.evicted.get(&key).map(String::as_str)
            }) {
                disrupted.insert(pod.clone(), at.clone());
            }
        }
        let mut pdb_now = (*pdb).clone();
        pdb_now["status"]["disruptedPods"] = Value::Object(disrupted.clone());
        let budget = self.pdb_budget(&pdb_now);
        let mut new = (*pdb).clone();
        let allowed = budget.disruptions_allowed();
        let mut status = json!({
            "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            "disruptionsAllowed": allowed,
            "currentHealthy": budget.current_healthy,
            "desiredHealthy": budget.desired_healthy,
            "expectedPods": budget.expected,
            "disruptedPods": disrupted,
            "conditions": [{
                "type": "DisruptionAllowed",
                "status": if allowed > 0 { "True" } else { "False" },
                "reason": if allowed > 0 { "SufficientPods" } else { "InsufficientPods" },
                "message": "",
                "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
                "lastTransitionTime": now(),
            }],
        });
        // Keep the old transition time when the condition did not change, so no-op refreshes stay no-ops.
        if let Some(old_cond) = pdb.pointer("/status/conditions/0")
            && old_cond["status"] == status["conditions"][0]["status"]
        {
            status["conditions"][0]["lastTransitionTime"] = old_cond["lastTransitionTime"].clone();
        }
        if pdb.get("status") == Some(&status) {
            return;
        }
        new["status"] = status;
        self.commit(&pdbs, ns, name, new, ChangeKind::Modified);
    }

    /// The budget arithmetic of a PDB against the current pods.
    pub fn pdb_budget(&self, pdb: &Value) -> Budget {
        let ns = meta_str(pdb, "namespace");
        let pods = self.def("", "pods").expect("builtin");
        let selector = pdb_selector(pdb);
        let disrupted = pdb
            .pointer("/status/disruptedPods")
            .and_then(Value::as_object);
        let mut expected = 0i64;
        let mut healthy = 0i64;
        // Pods whose controller is known count through its desired replicas, once per
        // controller, as the disruption controller does with the scale subresource.
        let mut owners = std::collections::BTreeSet::new();
        for ((_, _), p) in self
            .table(&pods)
            .objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
        {
            if !selector.as_ref().is_some_and(|s| s.matches(p)) {
                continue;
            }
            let phase = p
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if matches!(phase, "Succeeded" | "Failed") {
                continue;
            }
            match self.desired_replicas_of_owner(ns, p) {
                Some((uid, n)) => {
                    if owners.insert(uid) {
                        expected += n;
                    }
                }
                None => expected += 1,
            }
            // An evicted pod stays out of the healthy count until it is gone.
            let name = meta_str(p, "name");
            if pod_healthy(p) && !disrupted.is_some_and(|d| d.contains_key(name)) {
                healthy += 1;
            }
        }
        let scaled = |v: &Value| -> i64 {
            match v {
                Value::Number(n) => n.as_i64().unwrap_or(0),
                Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
                    // Percentages round up, as the disruption controller does.
                    Some(pct) => (pct * expected + 99) / 100,
                    None => s.parse().unwrap_or(0),
                },
                _ => 0,
            }
        };
        let desired = if let Some(mu) = pdb.pointer("/spec/maxUnavailable") {
            (expected - scaled(mu)).max(0)
        } else if let Some(ma) = pdb.pointer("/spec/minAvailable") {
            scaled(ma)
        } else {
            0
        };
        Budget {
            expected,
            current_healthy: healthy,
            desired_healthy: desired,
            always_allow_unhealthy: pdb
                .pointer("/spec/unhealthyPodEvictionPolicy")
                .and_then(Value::as_str)
                == Some("AlwaysAllow"),
        }
    }

    /// The eviction subresource: deletes the pod unless a PodDisruptionBudget forbids it (429).
    pub fn evict(&mut self, ns: &str, name: &str, body: &Value, opts: &WriteOpts) -> Result<()> {
        let pods = self.def("", "pods").expect("builtin");
        let pod = self.get(&pods, ns, name)?;
        let preconditions = body
            .pointer("/deleteOptions/preconditions")
            .cloned()
            .unwrap_or(Value::Null);
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending");
        // Terminal, pending and already-terminating pods are evicted without consulting PDBs.
        let ignore_pdb = matches!(phase, "Succeeded" | "Failed" | "Pending")
            || pod.pointer("/metadata/deletionTimestamp").is_some();
        let mut disrupting = None;
        if !ignore_pdb {
            let pdb_def = self.def("policy", "poddisruptionbudgets").expect("builtin");
            let labels = crate::selector::labels_of(&pod);
            let matching: Vec<Arc<Value>> = self
                .table(&pdb_def)
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .filter(|(_, p)| pdb_selector(p).is_some_and(|s| s.matches_labels(&labels)))
                .map(|(_, p)| p.clone())
                .collect();
            if matching.len() > 1 {
                return Err(Error::Internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
                ));
            }
            if let Some(pdb) = matching.first() {
                let b = self.pdb_budget(pdb);
                let allowed = if pod_healthy(&pod) {
                    b.disruptions_allowed() > 0
                } else {
                    b.always_allow_unhealthy || b.current_healthy >= b.desired_healthy
                };
                if !allowed {
                    self.evictions.1 += 1;
                    let pdb_name = meta_str(pdb, "name");
                    return Err(Error::TooManyRequests {
                        message:
                            "Cannot evict pod as it would violate the pod's disruption budget."
                                .into(),
                        causes: vec![(
                            "DisruptionBudget".into(),
                            format!(
                                "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                                b.desired_healthy, b.current_healthy
                            ),
                        )],
                    });
                }
                if !opts.dry_run && pod_healthy(&pod) {
                    disrupting = Some(pdb.clone());
                }
            }
        }
        let mut opts = opts.clone();
        if let Some(g) = body
            .pointer("/deleteOptions/gracePeriodSeconds")
            .and_then(Value::as_i64)
        {
            opts.grace_period = Some(g);
        }
        let (_, gone) = self.delete(&pods, ns, name, &preconditions, &opts)?;
        self.evictions.0 += 1;
        if let Some(pdb) = disrupting
            && !gone
        {
            self.record_disruption(&pdb, &pod);
        }
        Ok(())
    }

    /// The binding subresource: assigns a pod to a node (what kube-scheduler does).
    pub fn bind(
        &mut self,
        ns: &str,
        name: &str,
        node: &str,
        opts: &WriteOpts,
    ) -> Result<Arc<Value>> {
        let pods = self.def("", "pods").expect("builtin");
        let pod = self.get(&pods, ns, name)?;
        if node.is_empty() {
            return Err(Error::invalid(
                "Binding",
                name,
                "target.name",
                "Required value",
            ));
        }
        if let Some(current) = pod.pointer("/spec/nodeName").and_then(Value::as_str)
            && !current.is_empty()
        {
            return Err(Error::conflict(
                &pods.plural,
                "",
                name,
                &format!("pod {name} is already assigned to node {current:?}"),
            ));
        }
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(Error::conflict(
                &pods.plural,
                "",
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        let mut new = (*pod).clone();
        new["spec"]["nodeName"] = json!(node);
        set_condition(&mut new, "PodScheduled", "True", None, None);
        if opts.dry_run {
            return Ok(Arc::new(new));
        }
        // No re-validation: only nodeName and a well-formed condition changed.
        let change = self.commit(&pods, ns, name, new, ChangeKind::Modified);
        self.after_write(&pods, &change);
        Ok(change.object.clone())
    }

    /// Writes a pod's status directly (for the harness scheduler), skipping no-op writes.
    pub fn write_pod_status(&mut self, ns: &str, name: &str, status: Value) {
        let pods = self.def("", "pods").expect("builtin");
        let Ok(pod) = self.get(&pods, ns, name) else {
            return;
        };
        if pod.get("status") == Some(&status) {
            return;
        }
        let mut new = (*pod).clone();
        new["status"] = status;
        let change = self.commit(&pods, ns, name, new, ChangeKind::Modified);
        self.after_write(&pods, &change);
    }
}

/// A PDB's selector. In policy/v1 an empty selector selects every pod of the namespace and a
/// missing one selects none.
fn pdb_selector(pdb: &Value) -> Option<LabelSelector> {
    pdb.pointer("/spec/selector")
        .filter(|s| !s.is_null())
        .and_then(|s| LabelSelector::from_object(s).ok())
}

/// PDB arithmetic for one budget.
pub(crate) struct Budget {
    pub expected: i64,
    pub current_healthy: i64,
    pub desired_healthy: i64,
    pub always_allow_unhealthy: bool,
}

impl Budget {
    /// `status.disruptionsAllowed`.
    pub fn disruptions_allowed(&self) -> i64 {
        (self.current_healthy - self.desired_healthy).max(0)
    }
}

/// A pod counts as healthy for PDBs when it is Running, Ready and not terminating.
pub(crate) fn pod_healthy(p: &Value) -> bool {
    p.pointer("/metadata/deletionTimestamp").is_none()
        && p.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && p.pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// Sets (or replaces) a condition of `status.conditions`, keeping lastTransitionTime when the
/// status did not change.
pub(crate) fn set_condition(
    obj: &mut Value,
    kind: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
) {
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    if !obj["status"]["conditions"].is_array() {
        obj["status"]["conditions"] = json!([]);
    }
    let conds = obj["status"]["conditions"].as_array_mut().expect("array");
    let mut c =
        json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now()});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    match conds.iter_mut().find(|x| x["type"] == kind) {
        Some(existing) => {
            if existing["status"] == status {
                c["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            *existing = c;
        }
        None => conds.push(c),
    }
}

/// Whether anything besides metadata and status changed (what bumps `metadata.generation`).
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.remove("metadata");
        m.remove("status");
        m
    };
    strip(old) != strip(new)
}

/// Server-side defaults and status resets on create, per kind.
fn prepare_create(def: &ResourceDef, obj: &mut Value) {
    match def.builtin {
        Some(Builtin::Pod) => {
            // The real server resets a created pod's status; kubelet and scheduler fill it.
            obj["status"] = json!({"phase": "Pending"});
            let spec = &mut obj["spec"];
            if !spec.is_object() {
                *spec = json!({});
            }
            for (field, default) in [
                ("schedulerName", json!("default-scheduler")),
                ("restartPolicy", json!("Always")),
                ("priority", json!(0)),
            ] {
                if spec.get(field).is_none() {
                    spec[field] = default;
                }
            }
            // The DefaultTolerationSeconds admission plugin.
            if !spec["tolerations"].is_array() {
                spec["tolerations"] = json!([]);
            }
            let tols = spec["tolerations"].as_array_mut().expect("array");
            for key in [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
            ] {
                let tolerated = tols.iter().any(|t| {
                    (t["key"] == key || (t.get("key").is_none() && t["operator"] == "Exists"))
                        && (t.get("effect").is_none()
                            || t["effect"] == "NoExecute"
                            || t["effect"] == "")
                });
                if !tolerated {
                    tols.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
                }
            }
        }
        Some(Builtin::Namespace) => obj["status"] = json!({"phase": "Active"}),
        Some(Builtin::Crd) => {
            obj["status"] = json!({
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now()},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now()}
                ],
                "acceptedNames": obj["spec"]["names"].clone(),
                "storedVersions": obj["spec"]["versions"].as_array().into_iter().flatten()
                    .filter(|v| v["storage"] == true).map(|v| v["name"].clone()).collect::<Vec<_>>(),
            });
        }
        // Nodes keep the status they register with (kubelet creates them with capacity).
        Some(Builtin::Node) => {}
        _ if def.status => {
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        }
        _ => {}
    }
}

/// Rejects updates of fields the real server treats as immutable (a small, useful subset).
fn check_immutable(
    b: Builtin,
    old: &Value,
    new: &Value,
) -> std::result::Result<(), (String, String)> {
    match b {
        Builtin::Pod => {
            // Fields a pod update may change; everything else in spec is immutable.
            let normalize = |v: &Value| {
                let mut s = v.get("spec").cloned().unwrap_or(json!({}));
                if let Some(o) = s.as_object_mut() {
                    o.remove("activeDeadlineSeconds");
                    o.remove("tolerations");
                    o.remove("terminationGracePeriodSeconds");
                    for list in ["containers", "initContainers"] {
                        if let Some(cs) = o.get_mut(list).and_then(Value::as_array_mut) {
                            for c in cs {
                                if let Some(c) = c.as_object_mut() {
                                    c.remove("image");
                                }
                            }
                        }
                    }
                }
                s
            };
            if normalize(old) != normalize(new) {
                return Err(("spec".into(), "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds`".into()));
            }
        }
        Builtin::Node => {
            let before = old
                .pointer("/spec/providerID")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let after = new
                .pointer("/spec/providerID")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !before.is_empty() && before != after {
                return Err((
                    "spec.providerID".into(),
                    "Forbidden: node updates may not change providerID except from \"\" to valid"
                        .into(),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}
