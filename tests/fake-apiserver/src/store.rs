//! The in-memory object store: one global resourceVersion counter (as etcd has), a bounded
//! change history for watches, and the write paths (create, update, patch, delete) with the
//! semantics of the real API server's generic registry.
//!
//! # In detail
//!
//! `store.rs`: objects, the global resourceVersion, history for watches, writes, evictions against
//! PodDisruptionBudgets. A budget's `expectedPods` come from the owner's desired replicas
//! (Deployment through its ReplicaSet, StatefulSet, DaemonSet; ownerless pods count one each);
//! evicted pods stay in `disruptedPods` and out of `currentHealthy` until gone, so `maxUnavailable:
//! 1` of 3 refuses a second eviction (429) until the replacement is ready. `list_as_of` serves
//! `resourceVersion=0` lists from a past revision (`Options::stale_lists`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::error::{Error, Result};
use crate::resources::{self, Builtin, ResourceDef};
use crate::selector::{FieldSelector, LabelSelector};
use crate::workloads::force;

mod audit;
mod pods;
mod writes;

pub(crate) use pods::{pod_healthy, set_condition};

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
    /// The harness scheduler's memory between passes: parsed pod requests by pod uid (pod
    /// specs are immutable, so parsing each pod once keeps a scheduling pass linear in cheap
    /// lookups) and the GPU devices that bound share pods hold.
    pub binder_memory: crate::binder::Memory,
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
    /// The system under test's disruptive calls, as `audit.rs` records them.
    pub audit: Vec<Value>,
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
            binder_memory: Default::default(),
            grace_scale: None,
            pod_gc_delay: std::time::Duration::ZERO,
            removals: Default::default(),
            orphan_since: Default::default(),
            evicted: Default::default(),
            evictions: (0, 0),
            audit: Vec::new(),
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
}
