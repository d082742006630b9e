//! The CustomResourceDefinitions of this API, as objects and as the YAML in `deploy/crds/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::error::Error;
use crate::v1alpha1::{CapacityQuota, NodeClaim, NodeOverlay, NodePool};

/// The first line of every generated CRD file.
pub const HEADER: &str = "# Generated from the `nodepools` crate; do not edit. Regenerate with\n\
# `UPDATE_CRDS=1 cargo test -p nodepools` or `gpu-autoscaler crds --dir deploy/crds`.\n";

/// Every CRD of the API, NodePool first.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        NodePool::crd(),
        NodeClaim::crd(),
        CapacityQuota::crd(),
        NodeOverlay::crd(),
    ]
}

/// One CRD as a YAML document (without the `---` separator).
///
/// # Errors
/// [`Error::RenderCrd`] if the serializer fails.
pub fn render(crd: &CustomResourceDefinition) -> Result<String, Error> {
    serde_norway::to_string(crd).map_err(|source| Error::RenderCrd {
        name: crd.metadata.name.clone().unwrap_or_default(),
        source,
    })
}

/// Every CRD as one multi-document YAML stream, each document introduced by `---`.
///
/// # Errors
/// [`Error::RenderCrd`] if the serializer fails.
pub fn to_yaml() -> Result<String, Error> {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&render(&crd)?);
    }
    Ok(out)
}

/// A generated file under `deploy/crds/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrdFile {
    /// File name, `<group>_<plural>.yaml`.
    pub file_name: String,
    /// Full content: [`HEADER`], then the CRD as YAML.
    pub content: String,
}

/// The files `deploy/crds/` must hold, one per CRD.
///
/// # Errors
/// [`Error::RenderCrd`] if the serializer fails.
pub fn files() -> Result<Vec<CrdFile>, Error> {
    all()
        .iter()
        .map(|crd| {
            Ok(CrdFile {
                file_name: format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural),
                content: format!("{HEADER}{}", render(crd)?),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_scope() {
        let crds = all();
        let names: Vec<_> = crds
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "nodepools.gpu-autoscaler.dev",
                "nodeclaims.gpu-autoscaler.dev",
                "capacityquotas.gpu-autoscaler.dev",
                "nodeoverlays.gpu-autoscaler.dev"
            ]
        );
        for c in &crds {
            assert_eq!(c.spec.scope, "Cluster");
            assert_eq!(c.spec.versions.len(), 1);
            assert_eq!(c.spec.versions[0].name, "v1alpha1");
        }
        let files = files().unwrap();
        assert_eq!(files[0].file_name, "gpu-autoscaler.dev_nodepools.yaml");
        assert_eq!(files[1].file_name, "gpu-autoscaler.dev_nodeclaims.yaml");
        assert_eq!(files[2].file_name, "gpu-autoscaler.dev_capacityquotas.yaml");
        assert_eq!(files[3].file_name, "gpu-autoscaler.dev_nodeoverlays.yaml");
        assert_eq!(to_yaml().unwrap().matches("---\n").count(), 4);
    }
}
