//! The Alibaba GPU trace v2025 (NSDI '25, Prism): `disaggregated_DLRM_trace.csv`, inference
//! instances of disaggregated DLRM serving with their arrival and departure.
//!
//! Columns used (found by name): `instance_sn`, `role` (`HN`: GPU head nodes, `CN`: CPU
//! nodes), `app_name`, `cpu_request` (cores), `gpu_request` (GPUs), `memory_request` (GiB),
//! `creation_time` and `deletion_time` (seconds, may be fractional; empty when the instance
//! existed before the trace started, or outlived it).

use std::path::Path;

use crate::error::SimError;
use crate::traces::openb::{MAX_CPU_MILLI, MAX_MEMORY_MIB, MAX_TIME_S};
use crate::traces::table::{Field, Table};

/// One instance of the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct DlrmRecord {
    /// The 1-based line of the file it was read from.
    pub line: usize,
    /// Instance name.
    pub name: String,
    /// `HN` or `CN`.
    pub role: String,
    /// Application.
    pub app: String,
    /// CPU request in millicores.
    pub cpu_milli: u64,
    /// Whole GPUs.
    pub gpus: u32,
    /// Memory request in MiB.
    pub memory_mib: u64,
    /// Arrival in seconds from the trace start (`None`: present from the start).
    pub creation_s: Option<u64>,
    /// Departure (`None`: never within the trace).
    pub deletion_s: Option<u64>,
}

/// A non-negative decimal number of a field, or an error naming file, line and column.
fn decimal(f: &Field) -> Result<Option<f64>, SimError> {
    let t = f.text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let v: f64 = t.parse().map_err(|_| SimError::BadNumber {
        path: f.path.to_path_buf(),
        line: f.line,
        field: f.name.to_string(),
        value: t.to_string(),
    })?;
    if !v.is_finite() {
        return Err(SimError::BadNumber {
            path: f.path.to_path_buf(),
            line: f.line,
            field: f.name.to_string(),
            value: t.to_string(),
        });
    }
    if v < 0.0 {
        return Err(f.out_of_range(t, "is negative"));
    }
    Ok(Some(v))
}

fn required(f: &Field) -> Result<f64, SimError> {
    decimal(f)?.ok_or_else(|| SimError::EmptyField {
        path: f.path.to_path_buf(),
        line: f.line,
        field: f.name.to_string(),
    })
}

/// A required field times `factor`, rounded, at most `max`: cores to millicores, GiB to MiB.
fn scaled(f: &Field, factor: f64, max: u64) -> Result<u64, SimError> {
    let v = required(f)? * factor;
    // `v` is finite and not negative; the comparison keeps the cast below exact.
    if v.round() > max as f64 {
        return Err(f.out_of_range(
            f.text.trim(),
            format!("is above the largest accepted ({max} after conversion)"),
        ));
    }
    Ok(v.round() as u64)
}

/// An optional time in seconds, rounded, at most ten years.
fn seconds(f: &Field) -> Result<Option<u64>, SimError> {
    let Some(v) = decimal(f)? else {
        return Ok(None);
    };
    if v.round() > MAX_TIME_S as f64 {
        return Err(f.out_of_range(
            f.text.trim(),
            format!("is later than ten years ({MAX_TIME_S} s)"),
        ));
    }
    Ok(Some(v.round() as u64))
}

/// Loads the trace.
///
/// # Errors
/// [`SimError`] naming file, line and column: unreadable file, missing column, malformed row,
/// a value that is not a number, negative, or empty where required.
pub fn load(path: impl AsRef<Path>) -> Result<Vec<DlrmRecord>, SimError> {
    from_table(&Table::read(path.as_ref())?)
}

/// Parses trace text; `path` is only used in errors.
///
/// # Errors
/// As [`load`], reading aside.
pub fn parse(path: impl AsRef<Path>, text: &str) -> Result<Vec<DlrmRecord>, SimError> {
    from_table(&Table::parse(path.as_ref(), text)?)
}

fn from_table(table: &Table) -> Result<Vec<DlrmRecord>, SimError> {
    const NAMES: [&str; 8] = [
        "instance_sn",
        "role",
        "app_name",
        "cpu_request",
        "gpu_request",
        "memory_request",
        "creation_time",
        "deletion_time",
    ];
    let idx: Vec<usize> = NAMES
        .iter()
        .map(|n| table.column(n))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(table.rows.len());
    for row in &table.rows {
        let f = |k: usize| Field {
            path: &table.path,
            line: row.line,
            name: NAMES[k],
            text: row.fields.get(idx[k]).map_or("", String::as_str),
        };
        let gpus = required(&f(4))?;
        if gpus.fract() != 0.0 || gpus > 65_536.0 {
            return Err(f(4).out_of_range(gpus, "is not a whole number of GPUs up to 65536"));
        }
        let creation = seconds(&f(6))?;
        let deletion = seconds(&f(7))?;
        if let (Some(c), Some(d)) = (creation, deletion)
            && d < c
        {
            return Err(f(7).out_of_range(d, "is before creation_time"));
        }
        out.push(DlrmRecord {
            line: row.line,
            name: f(0).text()?.to_string(),
            role: f(1).text.trim().to_string(),
            app: f(2).text.trim().to_string(),
            cpu_milli: scaled(&f(3), 1000.0, MAX_CPU_MILLI)?,
            // Checked above: a whole number in [0, 65536].
            gpus: gpus as u32,
            memory_mib: scaled(&f(5), 1024.0, MAX_MEMORY_MIB)?,
            creation_s: creation,
            deletion_s: deletion,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "instance_sn,role,app_name,cpu_request,gpu_request,memory_request,creation_time,deletion_time\n";

    #[test]
    fn parses_rows_and_empty_times() {
        let text = format!(
            "{HEAD}i0,HN,app_0,12,1,120.0,,\ni1,CN,app_0,64,0,320.0,475.00000000000006,900\n"
        );
        let r = parse("t.csv", &text).unwrap();
        assert_eq!(r[0].gpus, 1);
        assert_eq!(r[0].cpu_milli, 12_000);
        assert_eq!(r[0].memory_mib, 120 * 1024);
        assert_eq!(r[0].creation_s, None);
        assert_eq!(r[1].creation_s, Some(475));
        assert_eq!(r[1].deletion_s, Some(900));
    }

    #[test]
    fn bad_input_names_file_line_and_field() {
        let e = parse("t.csv", "instance_sn,role\ni0,HN\n").unwrap_err();
        assert!(e.to_string().starts_with("t.csv:1: missing column"), "{e}");
        let e = parse("t.csv", &format!("{HEAD}i0,HN,a,12,1,-5,,\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv:2: field memory_request: -5 is negative"
        );
        let e = parse("t.csv", &format!("{HEAD}i0,HN,a,x,1,5,,\n")).unwrap_err();
        assert!(e.to_string().contains("field cpu_request"), "{e}");
        let e = parse("t.csv", &format!("{HEAD}i0,HN,a,1,0.5,5,,\n")).unwrap_err();
        assert!(e.to_string().contains("field gpu_request"), "{e}");
    }
}
