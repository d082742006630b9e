//! The write paths (create, update, patch, delete) with the generic registry's semantics:
//! names and labels validated, admission, immutable fields, generation and finalizers.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::patch;
use crate::resources::{self, Builtin, ResourceDef};
use crate::schema;

use super::{ChangeKind, Part, PatchKind, State, WriteOpts, finalizers, meta_mut, meta_str, now};

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

impl State {
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
        if def.builtin == Some(Builtin::Pod) {
            self.apply_limit_ranges(ns, &mut obj);
        }
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
}
