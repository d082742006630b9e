//! The namespaces a pod (anti-)affinity term looks in, and their resolution against the
//! cluster's Namespaces for selectors on namespace labels.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{PodShape, Snapshot};
use crate::requirements::{Labels, Requirements};

/// The namespaces a pod (anti-)affinity term selects pods in: the union of its `namespaces`
/// list and the namespaces its `namespaceSelector` selects; the pod's own when both are
/// unset or empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TermNamespaces {
    /// The namespace of the pod that has the term.
    #[default]
    Own,
    /// These namespaces.
    Listed(std::collections::BTreeSet<String>),
    /// Every namespace (`namespaceSelector: {}`).
    All,
    /// Every namespace but these (a `namespaceSelector` of `NotIn` on
    /// `kubernetes.io/metadata.name`).
    AllBut(std::collections::BTreeSet<String>),
    /// The `listed` namespaces and those whose labels `selector` matches (a
    /// `namespaceSelector` on namespace labels other than the name). The caller turns it into
    /// [`TermNamespaces::Listed`] with the cluster's namespaces
    /// ([`Snapshot::resolve_namespace_selectors`]) before planning; until then it looks only
    /// in the listed ones.
    Matching {
        /// The term's `namespaces`.
        listed: std::collections::BTreeSet<String>,
        /// Its `namespaceSelector`, over namespace labels.
        selector: Requirements,
    },
}

impl TermNamespaces {
    /// Whether this is [`TermNamespaces::Own`].
    pub fn is_own(&self) -> bool {
        matches!(self, TermNamespaces::Own)
    }

    /// Whether a term of a pod in namespace `own` looks at pods in namespace `ns`.
    pub fn contains(&self, own: &str, ns: &str) -> bool {
        match self {
            TermNamespaces::Own => own == ns,
            TermNamespaces::Listed(names) => names.contains(ns),
            TermNamespaces::All => true,
            TermNamespaces::AllBut(names) => !names.contains(ns),
            TermNamespaces::Matching { listed, .. } => listed.contains(ns),
        }
    }

    /// The namespaces it names once `namespaces` (each namespace's labels) are known: a
    /// [`TermNamespaces::Matching`] becomes the listed ones and those whose labels, with
    /// `kubernetes.io/metadata.name` set to the namespace's name as the API server sets it,
    /// its selector matches; any other is itself.
    pub fn with_namespaces(&self, namespaces: &BTreeMap<String, Labels>) -> TermNamespaces {
        let TermNamespaces::Matching { listed, selector } = self else {
            return self.clone();
        };
        let mut names = listed.clone();
        for (ns, labels) in namespaces {
            let mut labels = labels.clone();
            labels.insert(crate::labels::NAMESPACE_NAME.to_string(), ns.clone());
            if selector.matches(&labels) {
                names.insert(ns.clone());
            }
        }
        TermNamespaces::Listed(names)
    }

    /// The same namespaces with [`TermNamespaces::Own`] written as the list of `own`: two
    /// terms of pods in different namespaces compare equal only when they look at the same
    /// pods.
    pub fn resolved(&self, own: &str) -> TermNamespaces {
        match self {
            TermNamespaces::Own => TermNamespaces::Listed([own.to_string()].into()),
            other => other.clone(),
        }
    }
}

impl PodShape {
    /// Whether a pod (anti-)affinity term of it, required or preferred, waits for the
    /// cluster's namespaces ([`TermNamespaces::Matching`]).
    fn has_namespace_selectors(&self) -> bool {
        let matching =
            |t: &super::PodAffinityTerm| matches!(t.namespaces, TermNamespaces::Matching { .. });
        self.affinity
            .iter()
            .chain(&self.anti_affinity)
            .any(matching)
            || self
                .preferred_affinity
                .iter()
                .chain(&self.preferred_anti_affinity)
                .any(|(_, t)| matching(t))
    }

    /// The shape with every term's namespaces resolved against `namespaces`.
    fn with_namespaces(&self, namespaces: &BTreeMap<String, Labels>) -> PodShape {
        let mut out = self.clone();
        let terms = out
            .affinity
            .iter_mut()
            .chain(out.anti_affinity.iter_mut())
            .chain(
                out.preferred_affinity
                    .iter_mut()
                    .chain(out.preferred_anti_affinity.iter_mut())
                    .map(|(_, t)| t),
            );
        for t in terms {
            t.namespaces = t.namespaces.with_namespaces(namespaces);
        }
        out
    }
}

impl Snapshot {
    /// Resolves every [`TermNamespaces::Matching`] of the pending pods and of the pods on
    /// nodes against `namespaces` ([`resolve_namespace_selectors`]).
    pub fn resolve_namespace_selectors(&mut self, namespaces: &BTreeMap<String, Labels>) {
        let pods = self
            .pending
            .iter_mut()
            .chain(self.nodes.iter_mut().flat_map(|n| n.pods.iter_mut()));
        resolve_namespace_selectors(pods, namespaces);
    }
}

/// Resolves every [`TermNamespaces::Matching`] of `pods` against `namespaces` (each
/// Namespace's labels, by name): afterwards each such term lists the namespaces it selects
/// now. Pods that shared a shape still share one; pods without such a term are untouched. A
/// namespace missing from `namespaces` is selected by none. Resolving again changes nothing.
pub fn resolve_namespace_selectors<'a>(
    pods: impl IntoIterator<Item = &'a mut super::Pod>,
    namespaces: &BTreeMap<String, Labels>,
) {
    let mut resolved: std::collections::HashMap<*const PodShape, Arc<PodShape>> =
        std::collections::HashMap::new();
    for p in pods {
        if !p.shape.has_namespace_selectors() {
            continue;
        }
        let shape = resolved
            .entry(Arc::as_ptr(&p.shape))
            .or_insert_with(|| Arc::new(p.shape.with_namespaces(namespaces)));
        p.shape = shape.clone();
    }
}
