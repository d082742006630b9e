//! A minimal reader of comma-separated tables: a header line naming the columns, then one
//! record per line.
//!
//! The traces we read are plain (no field spans lines), so this covers what they use and a
//! little more (double-quoted fields with `""` escapes, CRLF endings, a UTF-8 byte-order mark)
//! without a dependency. Anything it does not understand is an error naming the line.

use std::path::{Path, PathBuf};

use crate::error::SimError;

/// A parsed table: the header's column names and the records with their line numbers.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) path: PathBuf,
    header_line: usize,
    columns: Vec<String>,
    pub(crate) rows: Vec<Row>,
}

/// One record and the 1-based line it came from.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) line: usize,
    pub(crate) fields: Vec<String>,
}

impl Table {
    /// Reads and parses `path`.
    pub(crate) fn read(path: &Path) -> Result<Table, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Table::parse(path, &text)
    }

    /// Parses `text` as the contents of `path` (which is only used in errors).
    pub(crate) fn parse(path: &Path, text: &str) -> Result<Table, SimError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut lines = text
            .split('\n')
            .enumerate()
            .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((header_line, header)) = lines.next() else {
            return Err(SimError::Empty {
                path: path.to_path_buf(),
            });
        };
        let columns = split(path, header_line, header)?;
        let mut rows = Vec::new();
        for (line, l) in lines {
            let fields = split(path, line, l)?;
            if fields.len() != columns.len() {
                return Err(SimError::BadRow {
                    path: path.to_path_buf(),
                    line,
                    why: format!(
                        "{} fields, but the header on line {header_line} names {}",
                        fields.len(),
                        columns.len()
                    ),
                });
            }
            rows.push(Row { line, fields });
        }
        Ok(Table {
            path: path.to_path_buf(),
            header_line,
            columns,
            rows,
        })
    }

    /// The index of column `name`, or the error naming it.
    pub(crate) fn column(&self, name: &str) -> Result<usize, SimError> {
        self.columns
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| SimError::MissingColumn {
                path: self.path.clone(),
                line: self.header_line,
                column: name.to_string(),
            })
    }
}

/// Splits one line into fields, unquoting double-quoted ones and trimming unquoted ones.
fn split(path: &Path, line: usize, text: &str) -> Result<Vec<String>, SimError> {
    let mut fields = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let mut field = String::new();
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => {
                        return Err(SimError::BadRow {
                            path: path.to_path_buf(),
                            line,
                            why: format!("unterminated quote in field {}", fields.len() + 1),
                        });
                    }
                }
            }
            while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
                chars.next();
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(c) => {
                    return Err(SimError::BadRow {
                        path: path.to_path_buf(),
                        line,
                        why: format!(
                            "unexpected {c:?} after the closing quote of field {}",
                            fields.len() + 1
                        ),
                    });
                }
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field.trim_end().to_string());
                        return Ok(fields);
                    }
                    Some(',') => {
                        fields.push(field.trim_end().to_string());
                        break;
                    }
                    Some(c) => field.push(c),
                }
            }
        }
    }
}

/// One field of one row, with what an error about it must name.
pub(crate) struct Field<'a> {
    pub(crate) path: &'a Path,
    pub(crate) line: usize,
    pub(crate) name: &'a str,
    pub(crate) text: &'a str,
}

impl Field<'_> {
    /// The field as a non-negative integer no larger than `max`; empty is an error.
    pub(crate) fn uint(&self, max: u64) -> Result<u64, SimError> {
        self.opt_uint(max)?.ok_or_else(|| SimError::EmptyField {
            path: self.path.to_path_buf(),
            line: self.line,
            field: self.name.to_string(),
        })
    }

    /// The field as a non-negative integer no larger than `max`, or `None` when empty.
    pub(crate) fn opt_uint(&self, max: u64) -> Result<Option<u64>, SimError> {
        let t = self.text.trim();
        if t.is_empty() {
            return Ok(None);
        }
        let v: i64 = t.parse().map_err(|_| SimError::BadNumber {
            path: self.path.to_path_buf(),
            line: self.line,
            field: self.name.to_string(),
            value: t.to_string(),
        })?;
        if v < 0 {
            return Err(SimError::Negative {
                path: self.path.to_path_buf(),
                line: self.line,
                field: self.name.to_string(),
                value: v,
            });
        }
        // `v` is non-negative here, so the conversion cannot fail.
        let u = v.unsigned_abs();
        if u > max {
            return Err(self.out_of_range(v, format!("is above the largest accepted, {max}")));
        }
        Ok(Some(u))
    }

    /// An [`SimError::OutOfRange`] about this field.
    pub(crate) fn out_of_range(&self, value: impl ToString, why: impl Into<String>) -> SimError {
        SimError::OutOfRange {
            path: self.path.to_path_buf(),
            line: self.line,
            field: self.name.to_string(),
            value: value.to_string(),
            why: why.into(),
        }
    }

    /// The field's text, trimmed; empty is an error.
    pub(crate) fn text(&self) -> Result<&str, SimError> {
        let t = self.text.trim();
        if t.is_empty() {
            return Err(SimError::EmptyField {
                path: self.path.to_path_buf(),
                line: self.line,
                field: self.name.to_string(),
            });
        }
        Ok(t)
    }
}
