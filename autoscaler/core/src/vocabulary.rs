//! Names users write, and the name they probably meant: the closest known field or label value
//! to a misspelled one, and the one mapping between the names a GPU model goes by.
//!
//! A GPU model has one *model name*, the catalog's (`H100`, `A100-80GB`), which is also what
//! NodePool `gpuLimits` and the `model` label of the GPU metrics use. Nodes carry it under
//! other spellings, each fixed by whoever sets the label: the project's provider-neutral
//! `gpu-autoscaler.dev/instance-gpu-name` is the lower-case family name (`h100`, `a100` for
//! both A100 sizes), GPU Feature Discovery's `nvidia.com/gpu.product` is NVIDIA's product
//! string (`NVIDIA-H100-80GB-HBM3`), GKE's `cloud.google.com/gke-accelerator` the accelerator
//! type (`nvidia-h100-80gb`). [`GpuNames`] holds one model's spellings as the catalog gives
//! them, and [`Vocabulary::suggest`] turns any of them into the one a given place expects.

use std::collections::{BTreeMap, BTreeSet};

use crate::instance::InstanceType;
use crate::labels;
use crate::model::Pool;
use crate::requirements::{Labels, Requirements, ValueSet};

/// The pseudo label key under which [`Vocabulary`] knows catalog model names (`H100`), the
/// names `gpuLimits` and the metrics use.
pub const MODEL_KEY: &str = "<gpu model>";

/// The label keys that name a GPU model, each in its own spelling.
pub const GPU_KEYS: [&str; 3] = [
    labels::GPU_NAME,
    labels::NVIDIA_PRODUCT,
    labels::GKE_ACCELERATOR,
];

/// Levenshtein distance between `a` and `b`, counted in characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    // One row of the table at a time: `row[j]` is the distance between the prefix of `a` read
    // so far and `b[..j]`.
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// The candidate `word` most probably misspells: one equal to it but for case, else the
/// nearest by [`edit_distance`] if that is at most a third of the word's length (and at
/// least 1, at most 4), the first in order on ties. `None` when nothing is that close or
/// `word` is itself a candidate.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 4);
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c == word {
            return None;
        }
        let d = if c.eq_ignore_ascii_case(word) {
            0
        } else {
            edit_distance(word, c)
        };
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// One GPU model under every name the catalog gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuNames {
    /// The catalog's model name (`H100`): `gpuLimits` keys and the metrics' `model` label.
    pub model: String,
    /// Spelling per label key of [`GPU_KEYS`], where instance types of the model carry it.
    pub labels: BTreeMap<String, String>,
}

impl GpuNames {
    /// The model's name under `key` ([`MODEL_KEY`] or one of [`GPU_KEYS`]).
    pub fn spelling(&self, key: &str) -> Option<&str> {
        if key == MODEL_KEY {
            Some(&self.model)
        } else {
            self.labels.get(key).map(String::as_str)
        }
    }

    /// Whether `name` is one of the model's spellings, ignoring case.
    pub fn is_named(&self, name: &str) -> bool {
        self.model.eq_ignore_ascii_case(name)
            || self.labels.values().any(|v| v.eq_ignore_ascii_case(name))
    }
}

/// What node labels can say: the values each label key takes on the nodes that can exist
/// (instance types with their zones and capacity types, pool labels), and the GPU models.
/// Built once per question; lookups do not allocate beyond their answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vocabulary {
    values: BTreeMap<String, BTreeSet<String>>,
    gpus: BTreeMap<String, GpuNames>,
    /// Labels a NodePool gives its nodes without listing their values (`Exists`, `NotIn`):
    /// any value may be right, so none is questioned.
    open: BTreeSet<String>,
}

impl Vocabulary {
    /// The labels, zones, capacity types and GPU models of `types`.
    pub fn of_instance_types<'a>(types: impl IntoIterator<Item = &'a InstanceType>) -> Self {
        let mut v = Vocabulary::default();
        for t in types {
            v.add_instance_type(t);
        }
        v
    }

    /// What the nodes of `pools` can carry: their instance types and the pools' own labels.
    pub fn of_pools(pools: &[Pool]) -> Self {
        let mut v = Vocabulary::default();
        for p in pools {
            v.add_labels(&p.labels);
            for t in p.instance_types.iter() {
                v.add_instance_type(t);
            }
            // A label the pool's requirements define (the `capacity-spread` of a spot and an
            // on-demand pool): its nodes carry one of the allowed values.
            for (k, c) in crate::provision::pool_defined_labels(p).iter() {
                match &c.values {
                    ValueSet::In(values) => {
                        for value in values {
                            v.add_value(k, value);
                        }
                    }
                    ValueSet::NotIn(_) => {
                        v.open.insert(k.to_string());
                    }
                }
            }
        }
        v
    }

    /// Adds one instance type: its labels, its offerings' zones and capacity types, its GPU.
    pub fn add_instance_type(&mut self, t: &InstanceType) {
        self.add_labels(&t.labels);
        for o in &t.offerings {
            self.add_value(labels::ZONE, &o.zone);
            self.add_value(labels::CAPACITY_TYPE, o.capacity_type.as_str());
        }
        if let Some(g) = &t.gpu {
            let names = self
                .gpus
                .entry(g.model.clone())
                .or_insert_with(|| GpuNames {
                    model: g.model.clone(),
                    labels: BTreeMap::new(),
                });
            for key in GPU_KEYS {
                if let Some(v) = t.labels.get(key) {
                    names.labels.entry(key.to_string()).or_insert(v.clone());
                }
            }
            self.add_value(MODEL_KEY, &g.model);
        }
    }

    /// Adds every `key=value` of `labels` (pool labels, a shape's node labels).
    pub fn add_labels(&mut self, labels: &Labels) {
        for (k, v) in labels {
            self.add_value(k, v);
        }
    }

    /// Adds one value of one key.
    pub fn add_value(&mut self, key: &str, value: &str) {
        if let Some(set) = self.values.get_mut(key) {
            if !set.contains(value) {
                set.insert(value.to_string());
            }
        } else {
            self.values
                .insert(key.to_string(), BTreeSet::from([value.to_string()]));
        }
    }

    /// Whether any node can carry label `key`.
    pub fn has_key(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// Whether any node can carry `key=value`.
    pub fn has_value(&self, key: &str, value: &str) -> bool {
        self.values.get(key).is_some_and(|s| s.contains(value))
    }

    /// The values of `key` any node can carry, sorted.
    pub fn values(&self, key: &str) -> impl Iterator<Item = &str> {
        self.values
            .get(key)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    /// Every label key, sorted ([`MODEL_KEY`] excluded).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values
            .keys()
            .map(String::as_str)
            .filter(|k| *k != MODEL_KEY)
    }

    /// The GPU models, by catalog model name.
    pub fn gpus(&self) -> impl Iterator<Item = &GpuNames> {
        self.gpus.values()
    }

    /// What `value` of `key` was probably meant to be, when it is not a known value: for a
    /// GPU key (or [`MODEL_KEY`]), the spelling under `key` of every model `value` names in
    /// any spelling (`H100` under `instance-gpu-name` is `h100`; `a100` as a model is
    /// `A100-40GB` or `A100-80GB`); otherwise, or when no model matches, the closest known
    /// value. Empty when `value` is known or nothing is close.
    pub fn suggest(&self, key: &str, value: &str) -> Vec<String> {
        if self.has_value(key, value) {
            return Vec::new();
        }
        if key == MODEL_KEY || GPU_KEYS.contains(&key) {
            let mut out: Vec<String> = Vec::new();
            for g in self.gpus.values().filter(|g| g.is_named(value)) {
                if let Some(s) = g.spelling(key)
                    && !out.iter().any(|o| o == s)
                {
                    out.push(s.to_string());
                }
            }
            if !out.is_empty() {
                return out;
            }
        }
        closest(value, self.values(key))
            .map(|s| vec![s.to_string()])
            .unwrap_or_default()
    }

    /// For each `In` value of `reqs` no node can carry, a sentence saying so with what was
    /// probably meant, e.g. `no instance type has gpu-autoscaler.dev/instance-gpu-name="H100"
    /// (did you mean "h100"? GPU names in labels are lower case)`. Keys no node carries at all
    /// get the closest known key instead. Zone and capacity type count as labels.
    pub fn unknown_values(&self, reqs: &Requirements) -> Vec<String> {
        let mut out = Vec::new();
        for (key, c) in reqs.iter() {
            let ValueSet::In(values) = &c.values else {
                continue;
            };
            if c.allow_absent || key == labels::HOSTNAME || self.open.contains(key) {
                continue;
            }
            if !self.has_key(key) {
                if let Some(k) = closest(key, self.keys()) {
                    out.push(format!(
                        "no instance type has the label {key} (did you mean {k}?)"
                    ));
                }
                continue;
            }
            if values.iter().any(|v| self.has_value(key, v)) {
                continue;
            }
            for v in values {
                let s = self.suggest(key, v);
                if !s.is_empty() {
                    out.push(format!(
                        "no instance type has {key}={v:?} ({})",
                        did_you_mean(key, v, &s)
                    ));
                }
            }
        }
        out
    }

    /// [`Self::unknown_values`] of the first of `terms` that has any, as a clause to append to
    /// a pod's reason (`"; no instance type has ..."`), or an empty string.
    pub fn hint(&self, terms: &[Requirements]) -> String {
        terms
            .iter()
            .map(|t| self.unknown_values(t))
            .find(|u| !u.is_empty())
            .map(|u| format!("; {}", u.join("; ")))
            .unwrap_or_default()
    }
}

/// `did you mean "h100"?`, or `did you mean "A100-40GB" or "A100-80GB"?`, followed by why the
/// spelling differs when only case does (`GPU names in labels are lower case`).
pub fn did_you_mean(key: &str, value: &str, suggestions: &[String]) -> String {
    let quoted: Vec<String> = suggestions.iter().map(|s| format!("{s:?}")).collect();
    let mut out = format!("did you mean {}?", quoted.join(" or "));
    let case_only = suggestions.iter().any(|s| s.eq_ignore_ascii_case(value));
    out.push_str(match key {
        labels::GPU_NAME if case_only => " GPU names in labels are lower case",
        labels::GPU_NAME if value.chars().any(|c| c.is_ascii_uppercase()) => {
            " the label holds the lower-case GPU name"
        }
        MODEL_KEY => " GPU models are named as in the catalog",
        _ if case_only => " values are case-sensitive",
        _ => "",
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::itype;
    use crate::requirements::Operator;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(
            edit_distance("gpuUtilisationThreshold", "gpuUtilizationThreshold"),
            1
        );
    }

    #[test]
    fn closest_prefers_case_then_distance() {
        let c = [
            "utilizationThreshold",
            "gpuUtilizationThreshold",
            "unneededTime",
        ];
        assert_eq!(
            closest("gpuUtilisationThreshold", c),
            Some("gpuUtilizationThreshold")
        );
        assert_eq!(closest("UnneededTime", c), Some("unneededTime"));
        assert_eq!(closest("budgets", c), None);
        assert_eq!(closest("unneededTime", c), None, "a known word");
    }

    fn h100_type() -> InstanceType {
        let mut t = itype("p5.48xlarge").gpus(8, "H100", 80).build();
        t.labels.insert(
            labels::NVIDIA_PRODUCT.into(),
            "NVIDIA-H100-80GB-HBM3".into(),
        );
        t
    }

    #[test]
    fn gpu_spellings_map_to_each_other() {
        let mut a40 = itype("p4d.24xlarge").gpus(8, "A100-40GB", 40).build();
        a40.labels.insert(labels::GPU_NAME.into(), "a100".into());
        let mut a80 = itype("p4de.24xlarge").gpus(8, "A100-80GB", 80).build();
        a80.labels.insert(labels::GPU_NAME.into(), "a100".into());
        let v = Vocabulary::of_instance_types([&h100_type(), &a40, &a80]);
        assert_eq!(v.suggest(labels::GPU_NAME, "H100"), ["h100"]);
        assert_eq!(
            v.suggest(labels::GPU_NAME, "NVIDIA-H100-80GB-HBM3"),
            ["h100"]
        );
        assert_eq!(v.suggest(MODEL_KEY, "h100"), ["H100"]);
        assert_eq!(v.suggest(MODEL_KEY, "a100"), ["A100-40GB", "A100-80GB"]);
        assert_eq!(
            v.suggest(labels::NVIDIA_PRODUCT, "h100"),
            ["NVIDIA-H100-80GB-HBM3"]
        );
        assert_eq!(v.suggest(labels::GPU_NAME, "h100"), Vec::<String>::new());
        assert_eq!(
            v.suggest(labels::INSTANCE_TYPE, "p5.48xlarg"),
            ["p5.48xlarge"]
        );
    }

    #[test]
    fn hint_names_the_lower_case_label() {
        let v = Vocabulary::of_instance_types([&h100_type()]);
        let pod = Requirements::new().with(labels::GPU_NAME, Operator::In, &["H100"]);
        assert_eq!(
            v.hint(&[pod]),
            "; no instance type has gpu-autoscaler.dev/instance-gpu-name=\"H100\" (did you mean \"h100\"? GPU names in labels are lower case)"
        );
        let fine = Requirements::new().with(labels::GPU_NAME, Operator::In, &["h100", "x"]);
        assert_eq!(v.hint(&[fine]), "");
        let key = Requirements::new().with(
            "gpu-autoscaler.dev/instance-gpu-nam",
            Operator::In,
            &["h100"],
        );
        assert!(
            v.hint(&[key])
                .contains("did you mean gpu-autoscaler.dev/instance-gpu-name?"),
            "{}",
            v.hint(&[Requirements::new()])
        );
    }

    #[test]
    fn labels_a_nodepool_defines_are_known_values() {
        // `team` is a label only the pool's requirements give its nodes: its listed values are
        // known (a typo in one is questioned), and a label defined with `Exists` takes any.
        let p = crate::builders::pool("p", vec![h100_type()])
            .require("team", Operator::In, &["ml", "web"])
            .require("rack", Operator::Exists, &[])
            .build();
        let v = Vocabulary::of_pools(&[p]);
        let ok = Requirements::new().with("team", Operator::In, &["ml"]);
        assert_eq!(v.hint(&[ok]), "");
        let typo = Requirements::new().with("team", Operator::In, &["m1"]);
        assert!(v.hint(&[typo]).contains(r#"did you mean "ml"?"#));
        let any = Requirements::new().with("rack", Operator::In, &["r7"]);
        assert_eq!(v.hint(&[any]), "");
    }
}
