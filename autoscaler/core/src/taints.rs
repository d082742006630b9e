//! Taints and tolerations with Kubernetes matching semantics.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// What a taint does to pods that do not tolerate it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Effect {
    /// New pods are not scheduled.
    NoSchedule,
    /// The scheduler avoids the node but may still use it.
    PreferNoSchedule,
    /// New pods are not scheduled and running ones are evicted.
    NoExecute,
}

impl Effect {
    /// Parses the effect as spelled in the API.
    ///
    /// # Errors
    /// [`CoreError::InvalidTaint`] for any other spelling.
    pub fn parse(s: &str) -> Result<Self, CoreError> {
        match s {
            "NoSchedule" => Ok(Effect::NoSchedule),
            "PreferNoSchedule" => Ok(Effect::PreferNoSchedule),
            "NoExecute" => Ok(Effect::NoExecute),
            other => Err(CoreError::InvalidTaint {
                what: "effect",
                why: format!("{other:?} is not NoSchedule, PreferNoSchedule or NoExecute"),
            }),
        }
    }

    /// Whether a pod that does not tolerate a taint with this effect can never be placed.
    pub fn blocks_scheduling(self) -> bool {
        matches!(self, Effect::NoSchedule | Effect::NoExecute)
    }
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    pub value: String,
    /// Effect.
    pub effect: Effect,
}

impl Taint {
    /// A taint `key=value:effect`.
    pub fn new(key: &str, value: &str, effect: Effect) -> Self {
        Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect,
        }
    }

    /// The taint a node being disrupted or terminated gets,
    /// `gpu-autoscaler.dev/disrupted:NoSchedule` ([`crate::keys::DISRUPTION_TAINT`]).
    pub fn disruption() -> Self {
        Taint::new(crate::keys::DISRUPTION_TAINT, "", Effect::NoSchedule)
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{:?}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{:?}", self.key, self.value, self.effect)
        }
    }
}

/// How a toleration compares values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum TolerationOperator {
    /// Key and value must be equal.
    #[default]
    Equal,
    /// Only the key must match (any value); an empty key matches every key.
    Exists,
}

/// A pod toleration.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Toleration {
    /// Key; empty with `Exists` tolerates everything.
    pub key: String,
    /// Operator.
    pub operator: TolerationOperator,
    /// Value, for `Equal`.
    pub value: String,
    /// Effect; `None` matches all effects.
    pub effect: Option<Effect>,
}

impl Toleration {
    /// `key=value` with `Equal`, any effect.
    pub fn equal(key: &str, value: &str) -> Self {
        Toleration {
            key: key.to_string(),
            operator: TolerationOperator::Equal,
            value: value.to_string(),
            effect: None,
        }
    }

    /// `key` with `Exists`, any effect.
    pub fn exists(key: &str) -> Self {
        Toleration {
            key: key.to_string(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        }
    }

    /// Builds a toleration from API strings.
    ///
    /// # Errors
    /// [`CoreError::InvalidTaint`] for an unknown operator or effect, a value with `Exists`, or
    /// an empty key with `Equal`.
    pub fn parse(key: &str, operator: &str, value: &str, effect: &str) -> Result<Self, CoreError> {
        let operator = match operator {
            "" | "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            other => {
                return Err(CoreError::InvalidTaint {
                    what: "toleration operator",
                    why: format!("{other:?} is not Equal or Exists"),
                });
            }
        };
        if operator == TolerationOperator::Exists && !value.is_empty() {
            return Err(CoreError::InvalidTaint {
                what: "toleration value",
                why: "must be empty when operator is Exists".into(),
            });
        }
        if operator == TolerationOperator::Equal && key.is_empty() {
            return Err(CoreError::InvalidTaint {
                what: "toleration key",
                why: "an empty key needs operator Exists".into(),
            });
        }
        let effect = if effect.is_empty() {
            None
        } else {
            Some(Effect::parse(effect)?)
        };
        Ok(Toleration {
            key: key.to_string(),
            operator,
            value: value.to_string(),
            effect,
        })
    }

    /// Whether this toleration tolerates `taint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => self.key.is_empty() || self.key == taint.key,
            TolerationOperator::Equal => self.key == taint.key && self.value == taint.value,
        }
    }
}

/// The first taint among `taints` that blocks scheduling and that no toleration tolerates.
pub fn untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect.blocks_scheduling())
        .find(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// The first duplicate (same key and effect) in a list of taints, which the API server rejects.
pub fn duplicate(taints: &[Taint]) -> Option<&Taint> {
    taints
        .iter()
        .enumerate()
        .find(|(i, t)| {
            taints[..*i]
                .iter()
                .any(|o| o.key == t.key && o.effect == t.effect)
        })
        .map(|(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matching_rules() {
        let gpu = Taint::new("nvidia.com/gpu", "present", Effect::NoSchedule);
        assert!(Toleration::equal("nvidia.com/gpu", "present").tolerates(&gpu));
        assert!(!Toleration::equal("nvidia.com/gpu", "other").tolerates(&gpu));
        assert!(Toleration::exists("nvidia.com/gpu").tolerates(&gpu));
        assert!(Toleration::exists("").tolerates(&gpu));
        let mut t = Toleration::exists("nvidia.com/gpu");
        t.effect = Some(Effect::NoExecute);
        assert!(!t.tolerates(&gpu));
        let soft = Taint::new("x", "", Effect::PreferNoSchedule);
        assert_eq!(untolerated(&[], std::slice::from_ref(&soft)), None);
        assert_eq!(untolerated(&[], &[soft, gpu.clone()]), Some(&gpu));
        assert_eq!(gpu.to_string(), "nvidia.com/gpu=present:NoSchedule");
    }

    #[test]
    fn parse_errors_name_the_field() {
        assert_eq!(
            Toleration::parse("k", "Like", "", "")
                .unwrap_err()
                .to_string(),
            "invalid toleration operator: \"Like\" is not Equal or Exists"
        );
        assert_eq!(
            Toleration::parse("k", "Exists", "v", "")
                .unwrap_err()
                .to_string(),
            "invalid toleration value: must be empty when operator is Exists"
        );
        assert!(Toleration::parse("", "Exists", "", "NoSchedule").is_ok());
        assert!(Toleration::parse("k", "Equal", "v", "Sometimes").is_err());
        let d = [
            Taint::new("a", "1", Effect::NoSchedule),
            Taint::new("a", "2", Effect::NoSchedule),
        ];
        assert_eq!(duplicate(&d), Some(&d[1]));
    }

    fn arb_effect() -> impl Strategy<Value = Effect> {
        prop_oneof![
            Just(Effect::NoSchedule),
            Just(Effect::PreferNoSchedule),
            Just(Effect::NoExecute)
        ]
    }
    fn arb_taint() -> impl Strategy<Value = Taint> {
        (
            prop_oneof!["a", "b", "c"],
            prop_oneof!["", "x", "y"],
            arb_effect(),
        )
            .prop_map(|(k, v, e)| Taint::new(&k, &v, e))
    }
    fn arb_toleration() -> impl Strategy<Value = Toleration> {
        (
            prop_oneof!["", "a", "b"],
            any::<bool>(),
            prop_oneof!["", "x", "y"],
            proptest::option::of(arb_effect()),
        )
            .prop_map(|(k, exists, v, effect)| Toleration {
                key: k.to_string(),
                operator: if exists {
                    TolerationOperator::Exists
                } else {
                    TolerationOperator::Equal
                },
                value: if exists { String::new() } else { v.to_string() },
                effect,
            })
    }

    proptest! {
        #[test]
        fn wildcard_tolerates_everything(t in arb_taint()) {
            prop_assert!(Toleration::exists("").tolerates(&t));
        }

        #[test]
        fn adding_tolerations_never_adds_blockers(taints in proptest::collection::vec(arb_taint(), 0..4),
                                                   tols in proptest::collection::vec(arb_toleration(), 0..3),
                                                   extra in arb_toleration()) {
            let before = untolerated(&tols, &taints).is_none();
            let mut more = tols.clone();
            more.push(extra);
            if before {
                prop_assert!(untolerated(&more, &taints).is_none());
            }
        }

        #[test]
        fn exists_is_weaker_than_equal(t in arb_taint(), tol in arb_toleration()) {
            if tol.operator == TolerationOperator::Equal && tol.tolerates(&t) {
                let mut e = tol.clone();
                e.operator = TolerationOperator::Exists;
                e.value.clear();
                prop_assert!(e.tolerates(&t));
            }
        }

        #[test]
        fn prefer_no_schedule_never_blocks(t in arb_taint()) {
            if t.effect == Effect::PreferNoSchedule {
                prop_assert!(untolerated(&[], std::slice::from_ref(&t)).is_none());
            }
        }
    }
}
