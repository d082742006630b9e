//! Resource types the server knows: the built-in table and definitions registered from CRDs.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// Built-in resource types that get kind-specific behaviour (typed decoding, defaulting,
/// strategic-merge-patch list keys, subresources).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Builtin {
    Pod,
    Node,
    Namespace,
    Event,
    EventV1,
    DaemonSet,
    ReplicaSet,
    Deployment,
    StatefulSet,
    Pdb,
    Lease,
    PodTemplate,
    ConfigMap,
    LimitRange,
    Crd,
    ResourceClaim,
    ResourceClaimTemplate,
    DeviceClass,
    ResourceSlice,
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
    CSINode,
    VolumeAttachment,
}

/// One served version of a resource.
pub(crate) struct VersionDef {
    pub name: String,
    /// The CRD's `openAPIV3Schema`, if any (built-ins are checked by typed decoding instead).
    pub schema: Option<Value>,
    /// Compiled `x-kubernetes-validations`, when the schema has any.
    pub cel: Option<Arc<kube::core::cel::CompiledSchema>>,
}

/// A resource type: what the discovery documents describe and what the store keys on.
pub(crate) struct ResourceDef {
    pub group: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    /// Whether the type has a `/status` subresource (splits spec and status writes).
    pub status: bool,
    /// Served versions; objects are stored once, in `storage_version`.
    pub versions: Vec<VersionDef>,
    pub storage_version: String,
    pub builtin: Option<Builtin>,
    /// Field paths (without the leading dot) that field selectors may use, besides metadata.
    pub selectable: Vec<String>,
    /// Extra subresources named in discovery (`eviction`, `binding`).
    pub extra_subresources: Vec<&'static str>,
}

impl ResourceDef {
    /// The store key: `plural` for the core group, `plural.group` otherwise.
    pub fn key(&self) -> String {
        key_of(&self.group, &self.plural)
    }

    /// `apiVersion` for a version of this resource.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// The version definition for a served version name.
    pub fn version(&self, name: &str) -> Option<&VersionDef> {
        self.versions.iter().find(|v| v.name == name)
    }

    /// The `Kind.group` wording the real server uses in validation messages.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Whether writes bump `metadata.generation` (spec changes of types with a spec/status split).
    pub fn tracks_generation(&self) -> bool {
        self.status || self.builtin.is_none()
    }
}

/// The store key of a group and plural.
pub(crate) fn key_of(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

// One positional row per built-in type reads best as the table below.
#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    status: bool,
    builtin: Builtin,
    selectable: &[&str],
) -> ResourceDef {
    ResourceDef {
        group: group.to_string(),
        kind: kind.to_string(),
        list_kind: format!("{kind}List"),
        plural: plural.to_string(),
        singular: kind.to_lowercase(),
        short_names: Vec::new(),
        namespaced,
        status,
        versions: vec![VersionDef {
            name: version.to_string(),
            schema: None,
            cel: None,
        }],
        storage_version: version.to_string(),
        builtin: Some(builtin),
        selectable: selectable.iter().map(|s| s.to_string()).collect(),
        extra_subresources: Vec::new(),
    }
}

/// The built-in resource types the controller talks to.
pub(crate) fn builtins() -> Vec<ResourceDef> {
    let event_fields = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "type",
    ];
    let mut pods = builtin(
        "",
        "v1",
        "Pod",
        "pods",
        true,
        true,
        Builtin::Pod,
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
    );
    pods.short_names = vec!["po".into()];
    pods.extra_subresources = vec!["eviction", "binding"];
    let mut nodes = builtin(
        "",
        "v1",
        "Node",
        "nodes",
        false,
        true,
        Builtin::Node,
        &["spec.unschedulable"],
    );
    nodes.short_names = vec!["no".into()];
    let mut pdbs = builtin(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        true,
        Builtin::Pdb,
        &[],
    );
    pdbs.short_names = vec!["pdb".into()];
    let mut crds = builtin(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        true,
        Builtin::Crd,
        &[],
    );
    crds.short_names = vec!["crd".into(), "crds".into()];
    vec![
        pods,
        nodes,
        builtin(
            "",
            "v1",
            "Namespace",
            "namespaces",
            false,
            true,
            Builtin::Namespace,
            &["status.phase"],
        ),
        builtin(
            "",
            "v1",
            "Event",
            "events",
            true,
            false,
            Builtin::Event,
            &event_fields,
        ),
        builtin(
            "",
            "v1",
            "PodTemplate",
            "podtemplates",
            true,
            false,
            Builtin::PodTemplate,
            &[],
        ),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
            false,
            Builtin::ConfigMap,
            &[],
        ),
        builtin(
            "",
            "v1",
            "LimitRange",
            "limitranges",
            true,
            false,
            Builtin::LimitRange,
            &[],
        ),
        builtin(
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            true,
            true,
            Builtin::DaemonSet,
            &[],
        ),
        builtin(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            true,
            true,
            Builtin::ReplicaSet,
            &[],
        ),
        builtin(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
            true,
            Builtin::Deployment,
            &[],
        ),
        builtin(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            true,
            true,
            Builtin::StatefulSet,
            &[],
        ),
        pdbs,
        builtin(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            true,
            Builtin::PersistentVolumeClaim,
            &[],
        ),
        builtin(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            false,
            true,
            Builtin::PersistentVolume,
            &[],
        ),
        builtin(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
            false,
            Builtin::StorageClass,
            &[],
        ),
        builtin(
            "storage.k8s.io",
            "v1",
            "CSINode",
            "csinodes",
            false,
            false,
            Builtin::CSINode,
            &[],
        ),
        builtin(
            "storage.k8s.io",
            "v1",
            "VolumeAttachment",
            "volumeattachments",
            false,
            true,
            Builtin::VolumeAttachment,
            &[],
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            false,
            Builtin::Lease,
            &[],
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            false,
            Builtin::EventV1,
            &[
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "reason",
                "reportingController",
                "type",
            ],
        ),
        crds,
        builtin(
            "resource.k8s.io",
            "v1",
            "ResourceClaim",
            "resourceclaims",
            true,
            true,
            Builtin::ResourceClaim,
            &[],
        ),
        builtin(
            "resource.k8s.io",
            "v1",
            "ResourceClaimTemplate",
            "resourceclaimtemplates",
            true,
            false,
            Builtin::ResourceClaimTemplate,
            &[],
        ),
        builtin(
            "resource.k8s.io",
            "v1",
            "DeviceClass",
            "deviceclasses",
            false,
            false,
            Builtin::DeviceClass,
            &[],
        ),
        // The real server's field selectors on slices: a kubelet plugin lists its own node's.
        builtin(
            "resource.k8s.io",
            "v1",
            "ResourceSlice",
            "resourceslices",
            false,
            false,
            Builtin::ResourceSlice,
            &["spec.nodeName", "spec.driver"],
        ),
    ]
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

/// Builds a resource definition from a `CustomResourceDefinition` object (apiextensions/v1).
pub(crate) fn from_crd(crd: &Value) -> Result<ResourceDef> {
    let bad = |m: &str| Error::Crd(m.to_string());
    let spec = crd.get("spec").ok_or_else(|| bad("spec is required"))?;
    let group = str_at(spec, &["group"]).ok_or_else(|| bad("spec.group is required"))?;
    let kind =
        str_at(spec, &["names", "kind"]).ok_or_else(|| bad("spec.names.kind is required"))?;
    let plural =
        str_at(spec, &["names", "plural"]).ok_or_else(|| bad("spec.names.plural is required"))?;
    let name = str_at(crd, &["metadata", "name"]).unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(bad(&format!(
            "metadata.name must be spec.names.plural+\".\"+spec.group ({plural}.{group}), got {name:?}"
        )));
    }
    let singular = str_at(spec, &["names", "singular"])
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = str_at(spec, &["names", "listKind"])
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    let short_names = spec["names"]["shortNames"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let namespaced = match str_at(spec, &["scope"]) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            return Err(bad(&format!(
                "spec.scope must be Namespaced or Cluster, got {other:?}"
            )));
        }
    };
    let mut versions = Vec::new();
    let mut storage = None;
    let mut status = false;
    let mut selectable = Vec::new();
    for v in spec["versions"].as_array().into_iter().flatten() {
        let vname = v["name"]
            .as_str()
            .ok_or_else(|| bad("spec.versions[].name is required"))?;
        if v["storage"].as_bool() == Some(true) {
            storage = Some(vname.to_string());
        }
        if v["served"].as_bool() == Some(false) {
            continue;
        }
        // One status flag for the whole type: CRDs in practice enable it on all versions.
        if v.pointer("/subresources/status").is_some() {
            status = true;
        }
        for f in v["selectableFields"].as_array().into_iter().flatten() {
            if let Some(path) = f["jsonPath"].as_str() {
                selectable.push(path.trim_start_matches('.').to_string());
            }
        }
        let schema = v.pointer("/schema/openAPIV3Schema").cloned();
        let cel = schema.as_ref().and_then(|s| {
            // Compiling is only worth it when the schema carries CEL rules at all.
            s.to_string()
                .contains("x-kubernetes-validations")
                .then(|| Arc::new(kube::core::cel::compile_schema(s)))
        });
        versions.push(VersionDef {
            name: vname.to_string(),
            schema,
            cel,
        });
    }
    let storage_version =
        storage.ok_or_else(|| bad("exactly one version must be the storage version"))?;
    if versions.is_empty() {
        return Err(bad("spec.versions must serve at least one version"));
    }
    Ok(ResourceDef {
        group: group.to_string(),
        kind: kind.to_string(),
        list_kind,
        plural: plural.to_string(),
        singular,
        short_names,
        namespaced,
        status,
        versions,
        storage_version,
        builtin: None,
        selectable,
        extra_subresources: Vec::new(),
    })
}

fn roundtrip<T: DeserializeOwned + Serialize>(v: Value) -> Result<Value, serde_json::Error> {
    let typed: T = serde_json::from_value(v)?;
    serde_json::to_value(typed)
}

/// Decodes a built-in object into its k8s-openapi type and back.
///
/// Why: the real server rejects bodies that do not decode into the Go type (400) and drops
/// unknown fields; a round trip through the Rust type gives both, and guarantees the controller
/// can decode whatever the fake stores.
pub(crate) fn typed_roundtrip(b: Builtin, v: Value) -> Result<Value, serde_json::Error> {
    use k8s_openapi::api;
    match b {
        Builtin::Pod => {
            // `spec.schedulingGroup` (the GenericWorkload gang field) is newer than the API
            // types this fake is built on; a server that has it keeps it, so the fake does too.
            let group = v
                .pointer("/spec/schedulingGroup")
                .filter(|g| g.is_object())
                .cloned();
            let mut out = roundtrip::<api::core::v1::Pod>(v)?;
            if let (Some(g), Some(spec)) = (group, out.get_mut("spec").and_then(Value::as_object_mut))
            {
                spec.insert("schedulingGroup".into(), g);
            }
            Ok(out)
        }
        Builtin::Node => roundtrip::<api::core::v1::Node>(v),
        Builtin::Namespace => roundtrip::<api::core::v1::Namespace>(v),
        Builtin::Event => roundtrip::<api::core::v1::Event>(v),
        Builtin::EventV1 => roundtrip::<api::events::v1::Event>(v),
        Builtin::DaemonSet => roundtrip::<api::apps::v1::DaemonSet>(v),
        Builtin::ReplicaSet => roundtrip::<api::apps::v1::ReplicaSet>(v),
        Builtin::Deployment => roundtrip::<api::apps::v1::Deployment>(v),
        Builtin::StatefulSet => roundtrip::<api::apps::v1::StatefulSet>(v),
        Builtin::Pdb => roundtrip::<api::policy::v1::PodDisruptionBudget>(v),
        Builtin::Lease => roundtrip::<api::coordination::v1::Lease>(v),
        Builtin::PodTemplate => roundtrip::<api::core::v1::PodTemplate>(v),
        Builtin::ConfigMap => roundtrip::<api::core::v1::ConfigMap>(v),
        Builtin::LimitRange => roundtrip::<api::core::v1::LimitRange>(v),
        Builtin::Crd => roundtrip::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(v),
        Builtin::ResourceClaim => roundtrip::<api::resource::v1::ResourceClaim>(v),
        Builtin::ResourceClaimTemplate => {
            roundtrip::<api::resource::v1::ResourceClaimTemplate>(v)
        }
        Builtin::DeviceClass => roundtrip::<api::resource::v1::DeviceClass>(v),
        Builtin::ResourceSlice => roundtrip::<api::resource::v1::ResourceSlice>(v),
        Builtin::PersistentVolumeClaim => roundtrip::<api::core::v1::PersistentVolumeClaim>(v),
        Builtin::PersistentVolume => roundtrip::<api::core::v1::PersistentVolume>(v),
        Builtin::StorageClass => roundtrip::<api::storage::v1::StorageClass>(v),
        Builtin::CSINode => roundtrip::<api::storage::v1::CSINode>(v),
        Builtin::VolumeAttachment => roundtrip::<api::storage::v1::VolumeAttachment>(v),
    }
}

/// The APIResource entries of one group/version, for `/api/v1` and `/apis/{group}/{version}`.
pub(crate) fn api_resource_list(defs: &[&ResourceDef], group_version: &str) -> Value {
    let mut resources = Vec::new();
    let verbs = json!([
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch"
    ]);
    for d in defs {
        resources.push(json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": verbs,
            "shortNames": d.short_names,
        }));
        if d.status {
            resources.push(json!({
                "name": format!("{}/status", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": d.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        for sub in &d.extra_subresources {
            let kind = match *sub {
                "eviction" => "Eviction",
                _ => "Binding",
            };
            resources.push(json!({
                "name": format!("{}/{}", d.plural, sub),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": kind,
                "verbs": ["create"],
            }));
        }
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}
