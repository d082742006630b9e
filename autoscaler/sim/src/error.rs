//! The simulator crate's one error enum. Every variant names the file it is about, and where a
//! line or field is to blame, those too, so a user can open the file at the right place.

use std::path::PathBuf;

use thiserror::Error;

/// Errors from loading traces and scenarios.
#[derive(Debug, Error)]
pub enum SimError {
    /// The file could not be read.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file has no header line.
    #[error("{}: empty file, expected a header line", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A column the loader needs is not in the header.
    #[error("{}:{line}: missing column {column:?} in the header", path.display())]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The header's line number (1-based).
        line: usize,
        /// The column that is missing.
        column: String,
    },
    /// A row has a different number of fields than the header, or an unterminated quote.
    #[error("{}:{line}: {why}", path.display())]
    BadRow {
        /// The file.
        path: PathBuf,
        /// Line number (1-based).
        line: usize,
        /// What is wrong with the row.
        why: String,
    },
    /// A field that must be a number is not one.
    #[error("{}:{line}: field {field}: {value:?} is not a number", path.display())]
    BadNumber {
        /// The file.
        path: PathBuf,
        /// Line number (1-based).
        line: usize,
        /// Column name.
        field: String,
        /// The text found.
        value: String,
    },
    /// A field that must not be negative is.
    #[error("{}:{line}: field {field}: {value} is negative", path.display())]
    Negative {
        /// The file.
        path: PathBuf,
        /// Line number (1-based).
        line: usize,
        /// Column name.
        field: String,
        /// The value found.
        value: i64,
    },
    /// A field is a number, but not one the field can take.
    #[error("{}:{line}: field {field}: {value} {why}", path.display())]
    OutOfRange {
        /// The file.
        path: PathBuf,
        /// Line number (1-based).
        line: usize,
        /// Column name.
        field: String,
        /// The value found, as written.
        value: String,
        /// Which range it is outside of.
        why: String,
    },
    /// A field that may not be empty is.
    #[error("{}:{line}: field {field} is empty", path.display())]
    EmptyField {
        /// The file.
        path: PathBuf,
        /// Line number (1-based).
        line: usize,
        /// Column name.
        field: String,
    },
    /// A scenario file (or a value derived from it) that the simulator cannot use: YAML that
    /// does not parse, a missing or unknown field, a negative duration, an unknown NodePool or
    /// resource. `line` is 0 when no line can be named.
    #[error("{}{}: field {field}: {why}", path.display(), at_line(*line))]
    Scenario {
        /// The file.
        path: PathBuf,
        /// Line number (1-based).
        line: usize,
        /// The field, as a path from the document root (`workloads[2].pod.cpu`).
        field: String,
        /// What is wrong.
        why: String,
    },
    /// A workload (a scenario generator or a trace) would create more pods than the run allows
    /// (`--max-pods`).
    #[error(
        "{}: workload {workload:?} would take the run past {max} pods (raise --max-pods if you mean it)",
        path.display()
    )]
    TooManyPods {
        /// The scenario or trace file.
        path: PathBuf,
        /// The workload's name (the trace file's name for a trace).
        workload: String,
        /// The limit in force.
        max: usize,
    },
    /// A command-line option of a run that the simulator cannot use (a non-finite or
    /// out-of-range number).
    #[error("option {option}: {why}")]
    BadOption {
        /// The option, as spelled on the command line (`--hours`).
        option: String,
        /// What is wrong.
        why: String,
    },
}

/// `:N` for a 1-based line number, nothing for 0: an option given on the command line has no
/// line in the file it applies to, and `file:0:` would send the reader to a line that does not
/// exist.
fn at_line(line: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(":{line}")
    }
}
