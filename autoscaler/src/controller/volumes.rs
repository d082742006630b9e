//! Volume topology: where a pod's PersistentVolumeClaims let it run, read as Karpenter reads
//! them (`pkg/controllers/provisioning/scheduling/volumetopology.go`).
//!
//! A claim bound to a PersistentVolume ties the pod to the volume's node affinity (its
//! `nodeSelectorTerms` are alternatives) and to its zone and region labels, which
//! kube-scheduler's `VolumeZone` filter enforces though Karpenter does not read them; an
//! unbound claim whose StorageClass binds on first use (`WaitForFirstConsumer`) ties it to the
//! class's `allowedTopologies` (alternatives too).
//! A pod's volumes combine as every compatible pairing of their alternatives, and the planner
//! ANDs the result into the pod's node selection while its topology spreads still count by
//! the pod's own ([`autoscaler_core::model::PodShape::require_any`]), as Karpenter adds volume
//! requirements to the node's requirements and not to the pod's affinity. Keys such as
//! `topology.ebs.csi.aws.com/zone` are read as the zone ([`autoscaler_core::labels::normalized`]).
//!
//! A pending pod whose claims cannot be provisioned for waits, with the reason, as Karpenter
//! leaves such pods alone (`ValidatePersistentVolumeClaims`): a claim not found, being
//! deleted or `Lost`; a claim naming a volume that is missing or being deleted, or that the
//! PV controller has not finished binding (no `pv.kubernetes.io/bind-completed`); an unbound
//! claim without a StorageClass, with one not found, or with one that binds `Immediate`ly
//! (the volume is created before the pod is scheduled, so the pod waits for it).
//!
//! Volume limits (`pkg/scheduling/volumeusage.go`): each node's CSINode says how many
//! volumes a driver may attach there ([`VolumeIndex::node_limits`]), and each pod's claims
//! are counted by driver ([`VolumeIndex::attachments`]); the planner keeps a node's distinct
//! claims of a driver within its count (`autoscaler_core::model::Node::volume_limits`).
//!
//! A running pod's generic ephemeral volumes do not tie it for disruption
//! ([`PodClaims::persistent`]): their claims go with the pod, as Karpenter reads them.
//!
//! The hostname term of a `local` or `hostPath` volume is dropped for a pending pod, as
//! Karpenter drops it (the pod is to be placed afresh); for a pod already running, which
//! disruption might move, it is kept, so a pod whose data lives on its node's disk is never
//! planned away from it (Karpenter ignores it there too; semantics.md lists the difference).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use autoscaler_core::labels;
use autoscaler_core::model::AttachedVolume;
use autoscaler_core::requirements::{Operator, Requirements};
use k8s_openapi::api::core::v1::{NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

/// The annotation the PersistentVolume controller sets on a claim once it finished binding;
/// kube-scheduler takes a claim naming a volume without it as not bound yet.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// In-tree volume plugins and the CSI drivers that serve their volumes since CSI migration
/// (kube-scheduler's `NodeVolumeLimits` counts a migrated volume against the CSI driver's
/// limit; Karpenter does not translate, and leaves such volumes uncounted).
pub const MIGRATED_PLUGINS: [(&str, &str); 7] = [
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

/// The CSI driver a StorageClass provisioner stands for: the migrated driver of an in-tree
/// plugin, else the provisioner itself.
pub fn csi_driver(provisioner: &str) -> &str {
    MIGRATED_PLUGINS
        .iter()
        .find(|(plugin, _)| *plugin == provisioner)
        .map_or(provisioner, |(_, driver)| driver)
}

/// The CSI driver serving a PersistentVolume: `spec.csi.driver`, or for an in-tree source the
/// driver it migrated to.
fn volume_driver(spec: &k8s_openapi::api::core::v1::PersistentVolumeSpec) -> Option<String> {
    if let Some(c) = &spec.csi {
        return Some(c.driver.clone()).filter(|d| !d.is_empty());
    }
    let plugin = if spec.aws_elastic_block_store.is_some() {
        "kubernetes.io/aws-ebs"
    } else if spec.gce_persistent_disk.is_some() {
        "kubernetes.io/gce-pd"
    } else if spec.azure_disk.is_some() {
        "kubernetes.io/azure-disk"
    } else if spec.azure_file.is_some() {
        "kubernetes.io/azure-file"
    } else if spec.cinder.is_some() {
        "kubernetes.io/cinder"
    } else if spec.vsphere_volume.is_some() {
        "kubernetes.io/vsphere-volume"
    } else if spec.portworx_volume.is_some() {
        "kubernetes.io/portworx-volume"
    } else {
        return None;
    };
    Some(csi_driver(plugin).to_string())
}

/// The most alternatives a pod's volumes combine into; past it the first are kept. Each
/// volume usually has one; the cap keeps a pod with many multi-term volumes from making a
/// cross product the size of the powers of its terms.
pub const MAX_ALTERNATIVES: usize = 64;

/// The claims a pod's volumes use: each `persistentVolumeClaim.claimName`, then for each
/// generic ephemeral volume the claim Kubernetes creates for it, `<pod name>-<volume name>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodClaims {
    names: Vec<String>,
    /// How many of `names`, from the first, are `persistentVolumeClaim` volumes.
    persistent: usize,
}

impl PodClaims {
    /// Every claim, the pod's own first.
    pub fn all(&self) -> &[String] {
        &self.names
    }

    /// The claims that outlive the pod (`persistentVolumeClaim`): a generic ephemeral
    /// volume's claim is deleted with its pod, and a pod moved elsewhere gets a new one.
    pub fn persistent(&self) -> &[String] {
        &self.names[..self.persistent]
    }

    /// Whether the pod uses no claim.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// The claims `p`'s volumes use ([`PodClaims`]).
pub fn claim_names(p: &Pod) -> PodClaims {
    let pod_name = p.metadata.name.as_deref().unwrap_or_default();
    let volumes = || p.spec.iter().flat_map(|s| s.volumes.iter().flatten());
    let mut names: Vec<String> = volumes()
        .filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.clone()))
        .collect();
    let persistent = names.len();
    names.extend(
        volumes()
            .filter(|v| v.persistent_volume_claim.is_none() && v.ephemeral.is_some())
            .map(|v| format!("{pod_name}-{}", v.name)),
    );
    PodClaims { names, persistent }
}

/// The storage objects of one planning round.
#[derive(Clone, Debug, Default)]
pub struct VolumeObjects {
    /// Every PersistentVolumeClaim.
    pub claims: Vec<Arc<PersistentVolumeClaim>>,
    /// Every PersistentVolume.
    pub volumes: Vec<Arc<PersistentVolume>>,
    /// Every StorageClass.
    pub classes: Vec<Arc<StorageClass>>,
    /// Every CSINode: how many volumes each driver may attach to its node.
    pub csi_nodes: Vec<Arc<CSINode>>,
}

/// A claim as the index keeps it.
#[derive(Debug)]
struct Claim {
    volume: Option<String>,
    class: Option<String>,
    deleting: bool,
    lost: bool,
    bind_completed: bool,
}

/// A volume as the index keeps it: its node affinity's alternatives, or why they do not read.
#[derive(Debug)]
struct Volume {
    deleting: bool,
    /// `local` or `hostPath`: its hostname term is dropped for a pending pod.
    on_node_disk: bool,
    /// The CSI driver that serves it (`spec.csi.driver`, or an in-tree source's migrated
    /// driver).
    driver: Option<String>,
    alternatives: Result<Vec<Requirements>, String>,
}

/// A StorageClass as the index keeps it.
#[derive(Debug)]
struct Class {
    immediate: bool,
    /// The CSI driver of the volumes it creates: its `provisioner`, an in-tree plugin's
    /// migrated to its CSI driver.
    provisioner: String,
    alternatives: Result<Vec<Requirements>, String>,
}

/// The storage objects of one round, read once, looked up per pod.
#[derive(Debug, Default)]
pub struct VolumeIndex {
    claims: HashMap<(String, String), Claim>,
    volumes: HashMap<String, Volume>,
    classes: HashMap<String, Class>,
    /// Per node name, the drivers with an attach limit (`spec.drivers[].allocatable.count`).
    limits: HashMap<String, BTreeMap<String, u32>>,
}

impl VolumeIndex {
    /// Reads the objects.
    pub fn new(objects: &VolumeObjects) -> VolumeIndex {
        let mut ix = VolumeIndex::default();
        for c in &objects.claims {
            let (Some(ns), Some(name)) = (&c.metadata.namespace, &c.metadata.name) else {
                continue;
            };
            let spec = c.spec.as_ref();
            ix.claims.insert(
                (ns.clone(), name.clone()),
                Claim {
                    volume: spec
                        .and_then(|s| s.volume_name.clone())
                        .filter(|v| !v.is_empty()),
                    class: spec
                        .and_then(|s| s.storage_class_name.clone())
                        .filter(|v| !v.is_empty()),
                    deleting: c.metadata.deletion_timestamp.is_some(),
                    lost: c
                        .status
                        .as_ref()
                        .and_then(|s| s.phase.as_deref())
                        .is_some_and(|p| p == "Lost"),
                    bind_completed: c
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(BIND_COMPLETED)),
                },
            );
        }
        for v in &objects.volumes {
            let Some(name) = &v.metadata.name else {
                continue;
            };
            let spec = v.spec.as_ref();
            let terms = spec
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.as_ref())
                .map(|r| r.node_selector_terms.as_slice())
                .unwrap_or_default();
            let labelled = label_requirements(v.metadata.labels.as_ref());
            ix.volumes.insert(
                name.clone(),
                Volume {
                    deleting: v.metadata.deletion_timestamp.is_some(),
                    on_node_disk: spec.is_some_and(|s| s.local.is_some() || s.host_path.is_some()),
                    driver: spec.and_then(volume_driver),
                    alternatives: volume_alternatives(name, terms)
                        .map(|alts| with_labels(alts, labelled)),
                },
            );
        }
        for c in &objects.classes {
            let Some(name) = &c.metadata.name else {
                continue;
            };
            ix.classes.insert(
                name.clone(),
                Class {
                    immediate: c.volume_binding_mode.as_deref() == Some("Immediate"),
                    provisioner: csi_driver(&c.provisioner).to_string(),
                    alternatives: class_alternatives(name, c),
                },
            );
        }
        for n in &objects.csi_nodes {
            let Some(name) = &n.metadata.name else {
                continue;
            };
            // A driver published without a count is unbounded, as both kube-scheduler and
            // Karpenter read it; a negative count (the API refuses one) is taken as none.
            let limits: BTreeMap<String, u32> = n
                .spec
                .drivers
                .iter()
                .filter_map(|d| {
                    let count = d.allocatable.as_ref()?.count?;
                    Some((d.name.clone(), u32::try_from(count).unwrap_or(0)))
                })
                .collect();
            if !limits.is_empty() {
                ix.limits.insert(name.clone(), limits);
            }
        }
        ix
    }

    /// The attach limits of node `name`'s CSI drivers (none without a CSINode).
    pub fn node_limits(&self, name: &str) -> BTreeMap<String, u32> {
        self.limits.get(name).cloned().unwrap_or_default()
    }

    /// The volumes a pod in `namespace` using `claims` attaches to its node, as Karpenter
    /// counts them (`volumeusage.go`): one per claim, identified as `namespace/claim`, by
    /// the driver of the volume it is bound to (`spec.csi.driver`), else, for a claim not
    /// bound or bound to a volume not found, by its StorageClass's provisioner; an in-tree
    /// plugin counts as the CSI driver it migrated to ([`MIGRATED_PLUGINS`]), as
    /// kube-scheduler counts it. A claim bound to a volume of no CSI driver (NFS, a local
    /// volume) counts for none, as both ignore it, and so does a claim whose driver cannot be
    /// read (not found, no class).
    pub fn attachments(&self, namespace: &str, claims: &[String]) -> Vec<AttachedVolume> {
        claims
            .iter()
            .filter_map(|name| {
                let claim = self.claims.get(&(namespace.to_string(), name.clone()))?;
                let driver = match claim.volume.as_ref().and_then(|v| self.volumes.get(v)) {
                    Some(bound) => bound.driver.clone()?,
                    None => {
                        let class = self.classes.get(claim.class.as_ref()?)?;
                        Some(class.provisioner.clone()).filter(|p| !p.is_empty())?
                    }
                };
                Some(AttachedVolume {
                    driver,
                    id: format!("{namespace}/{name}"),
                })
            })
            .collect()
    }

    /// Whether any node has an attach limit (else no pod's volumes need counting).
    pub fn any_limits(&self) -> bool {
        !self.limits.is_empty()
    }

    /// Whether the index holds no claim (no pod can be tied by a volume).
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    /// Where a pending pod in `namespace` using `claims` may run: alternatives to AND into its
    /// node selection (none: anywhere), or why the pod waits (see the module documentation).
    ///
    /// # Errors
    /// The first claim the pod cannot be provisioned for, named, with the reason.
    pub fn for_pending(
        &self,
        namespace: &str,
        claims: &[String],
    ) -> Result<Vec<Requirements>, String> {
        let mut per_volume = Vec::new();
        for name in claims {
            // Named only when something is wrong: most rounds find every claim well.
            let at = || format!("PersistentVolumeClaim {namespace}/{name}");
            let claim = self
                .claims
                .get(&(namespace.to_string(), name.clone()))
                .ok_or_else(|| format!("{} not found", at()))?;
            if claim.deleting {
                return Err(format!("{} is being deleted", at()));
            }
            if claim.lost {
                return Err(format!(
                    "{} is Lost (its PersistentVolume no longer exists)",
                    at()
                ));
            }
            if let Some(v) = &claim.volume {
                let volume = self
                    .volumes
                    .get(v)
                    .ok_or_else(|| format!("{}: its PersistentVolume {v} not found", at()))?;
                if volume.deleting {
                    return Err(format!(
                        "{}: its PersistentVolume {v} is being deleted",
                        at()
                    ));
                }
                if !claim.bind_completed {
                    return Err(format!(
                        "{} names PersistentVolume {v} but is not bound yet (no {BIND_COMPLETED})",
                        at()
                    ));
                }
                let mut alts = volume.alternatives.clone()?;
                if volume.on_node_disk {
                    alts = without_hostname(alts);
                }
                per_volume.push(alts);
                continue;
            }
            let class_name = claim
                .class
                .as_ref()
                .ok_or_else(|| format!("{} is unbound and names no StorageClass", at()))?;
            let class = self
                .classes
                .get(class_name)
                .ok_or_else(|| format!("{}: its StorageClass {class_name} not found", at()))?;
            if class.immediate {
                return Err(format!(
                    "{} is unbound and StorageClass {class_name} binds Immediate: the pod waits for its volume",
                    at()
                ));
            }
            per_volume.push(class.alternatives.clone()?);
        }
        Ok(combine(&per_volume))
    }

    /// Where a running pod in `namespace` using `claims` (its persistent ones,
    /// [`PodClaims::persistent`]) may be moved: the alternatives its bound volumes allow,
    /// hostname terms kept. A claim or volume that cannot be read adds
    /// nothing (the pod runs; its volume is attached where it is).
    pub fn for_bound(&self, namespace: &str, claims: &[String]) -> Vec<Requirements> {
        let per_volume: Vec<Vec<Requirements>> = claims
            .iter()
            .filter_map(|name| {
                let claim = self.claims.get(&(namespace.to_string(), name.clone()))?;
                let volume = self.volumes.get(claim.volume.as_ref()?)?;
                volume.alternatives.clone().ok()
            })
            .collect();
        combine(&per_volume)
    }
}

/// A volume's node affinity terms as alternatives: each term's `matchExpressions` (Karpenter
/// reads no `matchFields` here); a term without expressions adds no alternative.
fn volume_alternatives(
    name: &str,
    terms: &[NodeSelectorTerm],
) -> Result<Vec<Requirements>, String> {
    let mut out = Vec::new();
    for (i, t) in terms.iter().enumerate() {
        if t.match_expressions.as_ref().is_none_or(Vec::is_empty) {
            continue;
        }
        let expressions_only = NodeSelectorTerm {
            match_expressions: t.match_expressions.clone(),
            match_fields: None,
        };
        let path =
            format!("PersistentVolume {name} spec.nodeAffinity.required.nodeSelectorTerms[{i}]");
        let r = super::translate::node_selector_term(&expressions_only, &path)
            .map_err(|e| e.to_string())?;
        out.push(r);
    }
    Ok(out)
}

/// The PersistentVolume labels kube-scheduler's `VolumeZone` filter reads, as in
/// `pkg/scheduler/framework/plugins/volumezone/volume_zone.go`: a volume labelled with a zone
/// or a region (older in-tree and statically made volumes carry these instead of node
/// affinity) is used only on nodes whose label is one of the label's values.
pub const ZONE_LABELS: [&str; 4] = [
    labels::ZONE,
    labels::REGION,
    labels::ZONE_BETA,
    labels::REGION_BETA,
];

/// A volume's [`ZONE_LABELS`] as one requirement, or `None` without any. A value lists its
/// zones separated by `__` (`LabelZonesToSet`); a value with an empty entry is ignored, as the
/// scheduler ignores a label it cannot parse. Beta keys are read as the GA ones
/// ([`labels::normalized`]), as the filter falls back from a node's beta label to its GA one.
fn label_requirements(
    volume_labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<Requirements> {
    let mut r = Requirements::new();
    for (key, value) in volume_labels
        .into_iter()
        .flatten()
        .filter(|(k, _)| ZONE_LABELS.contains(&k.as_str()))
    {
        let zones: Vec<String> = value.split("__").map(|z| z.trim().to_string()).collect();
        // `In` with values always parses; were it refused, the label would be skipped as an
        // unparsable one is.
        if !zones.iter().any(String::is_empty) {
            let _ = r.add(labels::normalized(key), Operator::In, &zones);
        }
    }
    (!r.is_empty()).then_some(r)
}

/// `alternatives` each ANDed with the volume's label requirement; the requirement alone when
/// the volume has no node affinity.
fn with_labels(
    alternatives: Vec<Requirements>,
    labelled: Option<Requirements>,
) -> Vec<Requirements> {
    match labelled {
        None => alternatives,
        Some(l) if alternatives.is_empty() => vec![l],
        Some(l) => alternatives.iter().map(|a| a.intersect(&l)).collect(),
    }
}

/// A StorageClass's `allowedTopologies` as alternatives: each term's label expressions as
/// `In` requirements; a term without expressions adds no alternative.
fn class_alternatives(name: &str, c: &StorageClass) -> Result<Vec<Requirements>, String> {
    let mut out = Vec::new();
    for (i, t) in c.allowed_topologies.iter().flatten().enumerate() {
        let mut r = Requirements::new();
        for (j, e) in t.match_label_expressions.iter().flatten().enumerate() {
            r.add(&e.key, Operator::In, &e.values).map_err(|err| {
                format!(
                    "StorageClass {name} allowedTopologies[{i}].matchLabelExpressions[{j}]: {err}"
                )
            })?;
        }
        if !r.is_empty() {
            out.push(r);
        }
    }
    Ok(out)
}

/// `alts` without their hostname constraints; an alternative that had only one allows any
/// node (one such is enough).
fn without_hostname(alts: Vec<Requirements>) -> Vec<Requirements> {
    let mut out: Vec<Requirements> = Vec::new();
    for mut a in alts {
        a.remove(labels::HOSTNAME);
        if a.is_empty() {
            return Vec::new();
        }
        out.push(a);
    }
    out
}

/// Every compatible pairing of the volumes' alternatives (all pairings where none is
/// compatible, so the pod matches no node rather than any), at most [`MAX_ALTERNATIVES`];
/// empty when no volume constrains the pod.
fn combine(per_volume: &[Vec<Requirements>]) -> Vec<Requirements> {
    let mut alts: Vec<Requirements> = Vec::new();
    for vol in per_volume.iter().filter(|v| !v.is_empty()) {
        if alts.is_empty() {
            alts = vol.clone();
            alts.dedup();
            alts.truncate(MAX_ALTERNATIVES);
            continue;
        }
        let mut met = Vec::new();
        let mut all = Vec::new();
        for a in &alts {
            for v in vol {
                let both = a.intersect(v);
                if both.satisfiable() && !met.contains(&both) {
                    met.push(both.clone());
                }
                if !all.contains(&both) {
                    all.push(both);
                }
            }
        }
        alts = if met.is_empty() { all } else { met };
        alts.truncate(MAX_ALTERNATIVES);
    }
    alts
}

#[cfg(test)]
mod tests;
