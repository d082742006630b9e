//! Loaders of public cluster traces into typed records.
//!
//! Each loader reads one file, checks every field it keeps, and reports the first problem with
//! the file, line and column to blame (see [`crate::SimError`]). They never panic on bad input.

mod table;

pub mod dlrm;
pub mod openb;
