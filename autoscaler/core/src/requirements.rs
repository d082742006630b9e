//! Label requirements: node selectors, node affinity and label selectors as a set algebra.
//!
//! A [`Requirements`] is an AND of per-key [`Constraint`]s; a [`NodeSelector`] is an OR of
//! `Requirements` (the terms of required node affinity, each ANDed with the pod's
//! `nodeSelector`). Each constraint is closed under intersection, so a pod's requirements can be
//! intersected with a NodePool's and an instance type's labels and checked for satisfiability
//! without enumerating label values.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// Label map of a node, an instance type or a pod.
pub type Labels = BTreeMap<String, String>;

/// A Kubernetes selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum Operator {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label is present and its integer value is greater than the single value.
    Gt,
    /// The label is present and its integer value is less than the single value.
    Lt,
}

impl Operator {
    /// Parses the operator as spelled in the Kubernetes API.
    ///
    /// # Errors
    /// [`CoreError::UnknownOperator`] for any other spelling.
    pub fn parse(s: &str) -> Result<Self, CoreError> {
        Ok(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            other => return Err(CoreError::UnknownOperator(other.to_string())),
        })
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The set of label values (including "absent") one key may take.
///
/// Invariant: when `values` is `In`, every listed value already satisfies `gt`/`lt`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Constraint {
    /// Whether a node without this label satisfies the constraint.
    pub allow_absent: bool,
    /// Allowed values when the label is present.
    pub values: ValueSet,
    /// Exclusive lower integer bound for present values.
    pub gt: Option<i64>,
    /// Exclusive upper integer bound for present values.
    pub lt: Option<i64>,
}

/// Present values allowed by a [`Constraint`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ValueSet {
    /// Exactly these values.
    In(BTreeSet<String>),
    /// Any value but these.
    NotIn(BTreeSet<String>),
}

impl Constraint {
    /// Any value, or absent: the identity of intersection.
    pub fn any() -> Self {
        Constraint {
            allow_absent: true,
            values: ValueSet::NotIn(BTreeSet::new()),
            gt: None,
            lt: None,
        }
    }

    /// Builds the constraint of one `key operator values` expression.
    ///
    /// # Errors
    /// [`CoreError::InvalidRequirement`] when In/NotIn have no values, Exists/DoesNotExist have
    /// values, or Gt/Lt do not have exactly one integer value.
    pub fn from_operator(key: &str, op: Operator, values: &[String]) -> Result<Self, CoreError> {
        let invalid = |why: &str| CoreError::InvalidRequirement {
            key: key.to_string(),
            operator: op.to_string(),
            why: why.to_string(),
        };
        let set: BTreeSet<String> = values.iter().cloned().collect();
        Ok(match op {
            Operator::In | Operator::NotIn if set.is_empty() => {
                return Err(invalid("needs at least one value"));
            }
            Operator::In => Constraint {
                allow_absent: false,
                values: ValueSet::In(set),
                gt: None,
                lt: None,
            },
            Operator::NotIn => Constraint {
                allow_absent: true,
                values: ValueSet::NotIn(set),
                gt: None,
                lt: None,
            },
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(invalid("takes no values"));
            }
            Operator::Exists => Constraint {
                allow_absent: false,
                ..Constraint::any()
            },
            Operator::DoesNotExist => Constraint {
                allow_absent: true,
                values: ValueSet::In(BTreeSet::new()),
                gt: None,
                lt: None,
            },
            Operator::Gt | Operator::Lt => {
                let [v] = values else {
                    return Err(invalid("needs exactly one value"));
                };
                let n: i64 = v.parse().map_err(|_| invalid("value must be an integer"))?;
                Constraint {
                    allow_absent: false,
                    values: ValueSet::NotIn(BTreeSet::new()),
                    gt: (op == Operator::Gt).then_some(n),
                    lt: (op == Operator::Lt).then_some(n),
                }
            }
        })
    }

    fn in_bounds(&self, value: &str) -> bool {
        if self.gt.is_none() && self.lt.is_none() {
            return true;
        }
        let Ok(n) = value.parse::<i64>() else {
            return false;
        };
        self.gt.is_none_or(|g| n > g) && self.lt.is_none_or(|l| n < l)
    }

    /// Whether a label value (`None` = absent) satisfies the constraint.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match value {
            None => self.allow_absent,
            Some(v) => {
                let listed = match &self.values {
                    ValueSet::In(s) => s.contains(v),
                    ValueSet::NotIn(s) => !s.contains(v),
                };
                listed && self.in_bounds(v)
            }
        }
    }

    /// The constraint satisfied exactly by values satisfying both.
    pub fn intersect(&self, other: &Constraint) -> Constraint {
        let gt = match (self.gt, other.gt) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let lt = match (self.lt, other.lt) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let values = match (&self.values, &other.values) {
            (ValueSet::In(a), ValueSet::In(b)) => {
                ValueSet::In(a.intersection(b).cloned().collect())
            }
            (ValueSet::In(a), ValueSet::NotIn(b)) | (ValueSet::NotIn(b), ValueSet::In(a)) => {
                ValueSet::In(a.difference(b).cloned().collect())
            }
            (ValueSet::NotIn(a), ValueSet::NotIn(b)) => {
                ValueSet::NotIn(a.union(b).cloned().collect())
            }
        };
        let mut c = Constraint {
            allow_absent: self.allow_absent && other.allow_absent,
            values,
            gt,
            lt,
        };
        if let ValueSet::In(s) = &c.values {
            let kept: BTreeSet<String> = s.iter().filter(|v| c.in_bounds(v)).cloned().collect();
            c.values = ValueSet::In(kept);
        }
        c
    }

    /// Whether some present value satisfies the constraint.
    pub fn any_value(&self) -> bool {
        match &self.values {
            ValueSet::In(s) => !s.is_empty(),
            ValueSet::NotIn(_) => match (self.gt, self.lt) {
                // Bounded integer ranges: at most a handful of excluded strings could empty them,
                // so count the integers in range against the exclusions.
                (Some(g), Some(l)) => {
                    let span = (l as i128) - (g as i128) - 1;
                    span > 0 && {
                        let ValueSet::NotIn(ex) = &self.values else {
                            unreachable!()
                        };
                        let excluded = ex.iter().filter(|v| self.in_bounds(v)).count() as i128;
                        span > excluded
                    }
                }
                _ => true,
            },
        }
    }

    /// Whether some node (labelled or not) can satisfy the constraint.
    pub fn satisfiable(&self) -> bool {
        self.allow_absent || self.any_value()
    }

    /// A present value satisfying the constraint, chosen deterministically (the least listed
    /// value, or the least integer in range, or the least of "1", "2", ... not excluded), for a
    /// label a NodePool gives its nodes itself; `None` when no present value satisfies it.
    pub fn some_value(&self) -> Option<String> {
        match &self.values {
            ValueSet::In(s) => s.iter().find(|v| self.in_bounds(v)).cloned(),
            ValueSet::NotIn(ex) => {
                let from = match (self.gt, self.lt) {
                    (Some(g), _) => i128::from(g) + 1,
                    (None, Some(l)) => i128::from(l) - 1 - ex.len() as i128,
                    (None, None) => 1,
                };
                // At most `ex.len()` values are skipped, so the search is short.
                (from..=from + ex.len() as i128)
                    .map(|n| n.to_string())
                    .find(|v| !ex.contains(v) && self.in_bounds(v))
            }
        }
    }

    /// The single allowed value, when the constraint pins one.
    pub fn single_value(&self) -> Option<&str> {
        match &self.values {
            ValueSet::In(s) if s.len() == 1 && !self.allow_absent => {
                s.iter().next().map(String::as_str)
            }
            _ => None,
        }
    }
}

/// An AND of per-key constraints. Keys without a constraint allow anything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Requirements {
    keys: BTreeMap<String, Constraint>,
}

impl Requirements {
    /// No constraint at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds requirements from a label map (`nodeSelector`, `matchLabels`): each key `In [value]`.
    pub fn from_labels(labels: &Labels) -> Self {
        let mut r = Requirements::new();
        for (k, v) in labels {
            r.add(k, Operator::In, std::slice::from_ref(v))
                .expect("In with one value is always valid");
        }
        r
    }

    /// ANDs one `key operator values` expression into the requirements.
    ///
    /// # Errors
    /// As [`Constraint::from_operator`].
    pub fn add(&mut self, key: &str, op: Operator, values: &[String]) -> Result<(), CoreError> {
        let c = Constraint::from_operator(key, op, values)?;
        self.add_constraint(key, c);
        Ok(())
    }

    /// Builder form of [`Self::add`] for tests and fixtures: panics on invalid input, so use it
    /// only with literals.
    pub fn with(mut self, key: &str, op: Operator, values: &[&str]) -> Self {
        let vals: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        self.add(key, op, &vals)
            .expect("literal requirement is valid");
        self
    }

    /// ANDs a constraint on `key`, read as its stable key where `key` is a deprecated or
    /// driver-specific name of one ([`crate::labels::normalized`]).
    pub fn add_constraint(&mut self, key: &str, c: Constraint) {
        let key = crate::labels::normalized(key);
        match self.keys.get_mut(key) {
            Some(cur) => *cur = cur.intersect(&c),
            None => {
                self.keys.insert(key.to_string(), c);
            }
        }
    }

    /// Takes the constraint on `key` out, if any.
    pub fn remove(&mut self, key: &str) -> Option<Constraint> {
        self.keys.remove(key)
    }

    /// The constraint on `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Constraint> {
        self.keys.get(key)
    }

    /// Every constrained key with its constraint, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Constraint)> {
        self.keys.iter().map(|(k, c)| (k.as_str(), c))
    }

    /// Whether nothing is constrained.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The requirements satisfied exactly by label sets satisfying both.
    pub fn intersect(&self, other: &Requirements) -> Requirements {
        let mut r = self.clone();
        for (k, c) in &other.keys {
            r.add_constraint(k, c.clone());
        }
        r
    }

    /// Whether some label set satisfies every constraint.
    pub fn satisfiable(&self) -> bool {
        self.keys.values().all(Constraint::satisfiable)
    }

    /// The first key whose constraint cannot be satisfied.
    pub fn conflict(&self) -> Option<&str> {
        self.keys
            .iter()
            .find(|(_, c)| !c.satisfiable())
            .map(|(k, _)| k.as_str())
    }

    /// Whether both can hold at once.
    pub fn compatible(&self, other: &Requirements) -> bool {
        self.conflict_with(other).is_none()
    }

    /// The first key on which the two cannot both hold.
    pub fn conflict_with(&self, other: &Requirements) -> Option<String> {
        for (k, c) in &other.keys {
            let ok = match self.keys.get(k) {
                Some(mine) => mine.intersect(c).satisfiable(),
                None => c.satisfiable(),
            };
            if !ok {
                return Some(k.clone());
            }
        }
        self.conflict().map(str::to_string)
    }

    /// Whether a concrete label set satisfies every constraint.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.first_mismatch(labels).is_none()
    }

    /// The first key whose constraint the labels violate.
    pub fn first_mismatch(&self, labels: &Labels) -> Option<&str> {
        self.keys
            .iter()
            .find(|(k, c)| !c.matches(labels.get(k.as_str()).map(String::as_str)))
            .map(|(k, _)| k.as_str())
    }
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, c) in &self.keys {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            match (&c.values, c.allow_absent) {
                (ValueSet::In(s), false) => write!(f, "{k} In [{}]", join(s))?,
                (ValueSet::In(s), true) if s.is_empty() => write!(f, "{k} DoesNotExist")?,
                (ValueSet::In(s), true) => write!(f, "{k} In-or-absent [{}]", join(s))?,
                (ValueSet::NotIn(s), true) => write!(f, "{k} NotIn [{}]", join(s))?,
                (ValueSet::NotIn(s), false) if s.is_empty() => write!(f, "{k} Exists")?,
                (ValueSet::NotIn(s), false) => write!(f, "{k} Exists NotIn [{}]", join(s))?,
            }
            if let Some(g) = c.gt {
                write!(f, " >{g}")?;
            }
            if let Some(l) = c.lt {
                write!(f, " <{l}")?;
            }
        }
        Ok(())
    }
}

fn join(s: &BTreeSet<String>) -> String {
    s.iter().cloned().collect::<Vec<_>>().join(",")
}

/// An OR of [`Requirements`]: required node affinity (each term already ANDed with the pod's
/// nodeSelector). An empty list of terms means "no constraint".
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeSelector {
    /// The alternatives; any one satisfied is enough.
    pub terms: Vec<Requirements>,
}

impl NodeSelector {
    /// The selector of a pod with a `nodeSelector` map and the given affinity terms.
    pub fn new(node_selector: &Labels, affinity_terms: Vec<Requirements>) -> Self {
        let base = Requirements::from_labels(node_selector);
        if affinity_terms.is_empty() {
            if base.is_empty() {
                return NodeSelector::default();
            }
            return NodeSelector { terms: vec![base] };
        }
        NodeSelector {
            terms: affinity_terms
                .into_iter()
                .map(|t| t.intersect(&base))
                .collect(),
        }
    }

    /// A selector with the one term.
    pub fn single(term: Requirements) -> Self {
        NodeSelector { terms: vec![term] }
    }

    /// Whether the labels satisfy some term (or there are no terms).
    pub fn matches(&self, labels: &Labels) -> bool {
        self.terms.is_empty() || self.terms.iter().any(|t| t.matches(labels))
    }

    /// This selector ANDed with one of `alternatives` (an OR of requirement sets, as the
    /// terms of a volume's node affinity): every pairing of a term with an alternative that
    /// can be met. When none can, every pairing is kept, matching no node, so the result never
    /// becomes the empty selector (which would mean no constraint). No alternatives leaves the
    /// selector as it is.
    pub fn and_any(&self, alternatives: &[Requirements]) -> NodeSelector {
        if alternatives.is_empty() {
            return self.clone();
        }
        let met: Vec<Requirements> = alternatives
            .iter()
            .flat_map(|a| self.compatible_terms(a))
            .collect();
        if !met.is_empty() {
            return NodeSelector { terms: met };
        }
        let all = |a: &Requirements| -> Vec<Requirements> {
            if self.terms.is_empty() {
                vec![a.clone()]
            } else {
                self.terms.iter().map(|t| t.intersect(a)).collect()
            }
        };
        NodeSelector {
            terms: alternatives.iter().flat_map(all).collect(),
        }
    }

    /// Terms that stay satisfiable together with `other`, each intersected with it. Empty when
    /// no term is compatible; a selector without terms yields `[other]`.
    pub fn compatible_terms(&self, other: &Requirements) -> Vec<Requirements> {
        if self.terms.is_empty() {
            return if other.satisfiable() {
                vec![other.clone()]
            } else {
                vec![]
            };
        }
        self.terms
            .iter()
            .map(|t| t.intersect(other))
            .filter(Requirements::satisfiable)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn deprecated_and_csi_zone_keys_are_read_as_the_stable_keys() {
        let r = Requirements::new()
            .with(
                "failure-domain.beta.kubernetes.io/zone",
                Operator::In,
                &["a", "b"],
            )
            .with("topology.ebs.csi.aws.com/zone", Operator::In, &["b", "c"])
            .with("beta.kubernetes.io/arch", Operator::In, &["arm64"]);
        assert_eq!(r.iter().count(), 2);
        assert!(r.matches(&labels(&[
            ("topology.kubernetes.io/zone", "b"),
            ("kubernetes.io/arch", "arm64")
        ])));
        assert!(!r.matches(&labels(&[
            ("topology.kubernetes.io/zone", "a"),
            ("kubernetes.io/arch", "arm64")
        ])));
        let from_map =
            Requirements::from_labels(&labels(&[("beta.kubernetes.io/instance-type", "m5.large")]));
        assert!(from_map.get("node.kubernetes.io/instance-type").is_some());
        assert_eq!(
            crate::labels::normalized("example.com/zone"),
            "example.com/zone"
        );
    }

    #[test]
    fn and_any_pairs_terms_with_alternatives_and_keeps_only_those_that_can_be_met() {
        let zone = |v: &[&str]| Requirements::new().with("zone", Operator::In, v);
        let arch = |v: &str| Requirements::new().with("arch", Operator::In, &[v]);
        // No terms: the alternatives themselves.
        let free = NodeSelector::default().and_any(&[zone(&["a"]), zone(&["b"])]);
        assert_eq!(free.terms, vec![zone(&["a"]), zone(&["b"])]);
        // Terms over zones a|b (amd64) or c (arm64), a volume in b or c: the pairings that can
        // be met, in order, and none that cannot.
        let pod = NodeSelector {
            terms: vec![
                zone(&["a", "b"]).intersect(&arch("amd64")),
                zone(&["c"]).intersect(&arch("arm64")),
            ],
        };
        let both = pod.and_any(&[zone(&["b"]), zone(&["c"])]);
        assert_eq!(both.terms.len(), 2);
        assert!(both.matches(&labels(&[("zone", "b"), ("arch", "amd64")])));
        assert!(both.matches(&labels(&[("zone", "c"), ("arch", "arm64")])));
        assert!(!both.matches(&labels(&[("zone", "a"), ("arch", "amd64")])));
        // None can be met: every pairing is kept, so nothing matches (never "no constraint").
        let none = pod.and_any(&[zone(&["d"])]);
        assert_eq!(none.terms.len(), 2);
        assert!(!none.matches(&labels(&[("zone", "d"), ("arch", "amd64")])));
        assert_eq!(pod.and_any(&[]), pod);
    }

    #[test]
    fn operators_follow_kubernetes_semantics() {
        let l = labels(&[("zone", "a"), ("gpus", "4")]);
        let r = |op, v: &[&str]| Requirements::new().with("zone", op, v);
        assert!(r(Operator::In, &["a", "b"]).matches(&l));
        assert!(!r(Operator::NotIn, &["a"]).matches(&l));
        assert!(
            Requirements::new()
                .with("missing", Operator::NotIn, &["a"])
                .matches(&l)
        );
        assert!(
            !Requirements::new()
                .with("missing", Operator::Exists, &[])
                .matches(&l)
        );
        assert!(
            Requirements::new()
                .with("missing", Operator::DoesNotExist, &[])
                .matches(&l)
        );
        assert!(
            Requirements::new()
                .with("gpus", Operator::Gt, &["2"])
                .matches(&l)
        );
        assert!(
            !Requirements::new()
                .with("gpus", Operator::Lt, &["4"])
                .matches(&l)
        );
        assert!(
            !Requirements::new()
                .with("zone", Operator::Gt, &["1"])
                .matches(&l)
        );
    }

    #[test]
    fn invalid_expressions_are_rejected_with_reason() {
        let e = Requirements::new().add("k", Operator::In, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "operator In on key \"k\": needs at least one value"
        );
        let e = Requirements::new()
            .add("k", Operator::Gt, &["x".into()])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "operator Gt on key \"k\": value must be an integer"
        );
        let e = Requirements::new()
            .add("k", Operator::Exists, &["x".into()])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "operator Exists on key \"k\": takes no values"
        );
        assert_eq!(
            Operator::parse("Equals").unwrap_err().to_string(),
            "unknown operator \"Equals\" (expected In, NotIn, Exists, DoesNotExist, Gt or Lt)"
        );
    }

    #[test]
    fn intersection_detects_conflicts() {
        let a = Requirements::new().with("zone", Operator::In, &["a", "b"]);
        let b = Requirements::new().with("zone", Operator::NotIn, &["a", "b"]);
        assert_eq!(a.conflict_with(&b).as_deref(), Some("zone"));
        let c = Requirements::new().with("zone", Operator::DoesNotExist, &[]);
        assert!(!a.compatible(&c));
        assert!(b.compatible(&c));
        let g = Requirements::new()
            .with("n", Operator::Gt, &["3"])
            .with("n", Operator::Lt, &["5"]);
        assert!(g.satisfiable());
        let g2 = g.clone().with("n", Operator::NotIn, &["4"]);
        assert!(!g2.satisfiable());
        assert_eq!(g.to_string(), "n Exists >3 <5");
    }

    #[test]
    fn node_selector_ors_terms_and_ands_node_selector() {
        let sel = NodeSelector::new(
            &labels(&[("arch", "amd64")]),
            vec![
                Requirements::new().with("zone", Operator::In, &["a"]),
                Requirements::new().with("zone", Operator::In, &["b"]),
            ],
        );
        assert!(sel.matches(&labels(&[("arch", "amd64"), ("zone", "b")])));
        assert!(!sel.matches(&labels(&[("arch", "arm64"), ("zone", "b")])));
        assert!(!sel.matches(&labels(&[("arch", "amd64"), ("zone", "c")])));
        assert!(NodeSelector::default().matches(&labels(&[])));
    }

    fn arb_constraint() -> impl Strategy<Value = (Operator, Vec<String>)> {
        let vals = proptest::collection::vec(prop_oneof!["a", "b", "c", "1", "2", "3", "7"], 1..3);
        prop_oneof![
            vals.clone().prop_map(|v| (Operator::In, v)),
            vals.prop_map(|v| (Operator::NotIn, v)),
            Just((Operator::Exists, vec![])),
            Just((Operator::DoesNotExist, vec![])),
            (0i64..8).prop_map(|n| (Operator::Gt, vec![n.to_string()])),
            (0i64..8).prop_map(|n| (Operator::Lt, vec![n.to_string()])),
        ]
    }

    fn arb_requirements() -> impl Strategy<Value = Requirements> {
        proptest::collection::vec((prop_oneof!["x", "y"], arb_constraint()), 0..4).prop_map(|v| {
            let mut r = Requirements::new();
            for (k, (op, vals)) in v {
                r.add(&k, op, &vals).unwrap();
            }
            r
        })
    }

    fn arb_labels() -> impl Strategy<Value = Labels> {
        proptest::collection::btree_map(
            prop_oneof![Just("x".to_string()), Just("y".to_string())],
            prop_oneof!["a", "b", "c", "1", "2", "3", "7", "9"],
            0..3,
        )
    }

    proptest! {
        #[test]
        fn intersection_matches_exactly_the_conjunction(a in arb_requirements(), b in arb_requirements(), l in arb_labels()) {
            prop_assert_eq!(a.intersect(&b).matches(&l), a.matches(&l) && b.matches(&l));
        }

        #[test]
        fn intersection_is_commutative(a in arb_requirements(), b in arb_requirements(), l in arb_labels()) {
            prop_assert_eq!(a.intersect(&b).matches(&l), b.intersect(&a).matches(&l));
            prop_assert_eq!(a.compatible(&b), b.compatible(&a));
        }

        #[test]
        fn anything_matched_is_satisfiable(a in arb_requirements(), l in arb_labels()) {
            if a.matches(&l) {
                prop_assert!(a.satisfiable());
            }
        }

        #[test]
        fn compatible_iff_intersection_satisfiable(a in arb_requirements(), b in arb_requirements()) {
            prop_assert_eq!(a.compatible(&b), a.intersect(&b).satisfiable());
        }
    }
}
