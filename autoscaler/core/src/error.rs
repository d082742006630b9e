//! The core's one error enum: the only fallible operations here parse user-written values.

use thiserror::Error;

/// A quantity that could not be parsed; `why` says what was wrong with `input`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid quantity {input:?}: {why}")]
pub struct QuantityError {
    /// The text that was rejected.
    pub input: String,
    /// A short reason.
    pub why: &'static str,
}

/// A duration that could not be parsed (see [`crate::duration`]); `why` says what was wrong
/// with `input`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid duration {input:?}: {why}")]
pub struct DurationError {
    /// The text (or number) that was rejected.
    pub input: String,
    /// What was wrong.
    pub why: DurationProblem,
}

/// A cron schedule that could not be parsed (see [`crate::cron`]); `why` names the field and
/// what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid schedule {input:?}: {why}")]
pub struct CronError {
    /// The schedule as written.
    pub input: String,
    /// What was wrong, e.g. `hour field "25": 25 is outside 0..=23`.
    pub why: String,
}

/// User-written YAML whose flow collections nest deeper than the parser accepts (see
/// [`crate::nesting`]); refused before the parser spends minutes on it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line} column {column}: brackets nested deeper than {limit} levels")]
pub struct NestingError {
    /// 1-based line of the first bracket too deep.
    pub line: usize,
    /// 1-based column of that bracket, in characters.
    pub column: usize,
    /// The deepest nesting accepted.
    pub limit: usize,
}

/// What was wrong with a duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationProblem {
    /// Nothing was given.
    Empty,
    /// A minus sign.
    Negative,
    /// Not the grammar.
    Syntax,
    /// Longer than ten years.
    TooLong,
}

impl std::fmt::Display for DurationProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DurationProblem::Empty => "empty duration",
            DurationProblem::Negative => "negative duration",
            DurationProblem::Syntax => {
                "expected a number with a unit, e.g. 90s, 1h30m or 1.5h (units ms, s, m, h, d)"
            }
            DurationProblem::TooLong => "longer than 10 years",
        })
    }
}

/// Errors from turning user-written values into core vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CoreError {
    /// A resource quantity did not parse.
    #[error("parsing resource {resource}: {source}")]
    ParseQuantity {
        /// The resource name the quantity was given for.
        resource: String,
        /// What was wrong.
        source: QuantityError,
    },
    /// A resource quantity that must be whole (devices, pods, bytes of memory are rounded) was
    /// fractional or negative.
    #[error("resource {resource}: {why}")]
    InvalidResource {
        /// The resource name.
        resource: String,
        /// What was wrong.
        why: String,
    },
    /// A label-selector or node-affinity operator was not one Kubernetes knows.
    #[error("unknown operator {0:?} (expected In, NotIn, Exists, DoesNotExist, Gt or Lt)")]
    UnknownOperator(String),
    /// An operator was given values it cannot take.
    #[error("operator {operator} on key {key:?}: {why}")]
    InvalidRequirement {
        /// The label key.
        key: String,
        /// The operator.
        operator: String,
        /// What was wrong.
        why: String,
    },
    /// A taint or toleration field had a value Kubernetes rejects.
    #[error("invalid {what}: {why}")]
    InvalidTaint {
        /// Which field.
        what: &'static str,
        /// What was wrong.
        why: String,
    },
    /// A MIG configuration name is not known for the GPU model.
    #[error("unknown MIG configuration {config:?} for GPU model {model:?}")]
    UnknownMigConfig {
        /// The configuration name, e.g. `all-1g.10gb`.
        config: String,
        /// The GPU model.
        model: String,
    },
    /// GPU sharing the instance type's GPU cannot do: MIG on a GPU without MIG, a MIG layout the
    /// strategy cannot express, time-slicing of a non-NVIDIA device.
    #[error("GPU sharing on GPU model {model:?}: {why}")]
    InvalidGpuSharing {
        /// The GPU model as the catalog names it.
        model: String,
        /// What cannot be done and what would work instead.
        why: String,
    },
    /// A container port's `hostPort` is outside 1..=65535 or its protocol is unknown.
    #[error("invalid host port: {0}")]
    InvalidHostPort(String),
}
