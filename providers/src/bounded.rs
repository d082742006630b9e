//! Reading a user's file with a size bound, for every command that parses one (scenarios,
//! NodePool and catalog files, `validate`'s inputs): the YAML parser holds about 90 bytes of
//! events per byte of a flat list, so an unbounded read of a large file takes gigabytes.

use std::io::{self, Read};

/// The text of `reader`, of at most `limit` bytes; reads at most `limit + 1` bytes.
///
/// # Errors
/// The reader's own error; [`io::ErrorKind::InvalidData`] for text that is not UTF-8;
/// [`io::ErrorKind::FileTooLarge`] above `limit`, with the message "larger than N MiB, the most
/// `what`" (so `what` reads like "a scenario may be").
pub fn read_bounded(reader: impl Read, limit: u64, what: &str) -> io::Result<String> {
    let mut text = String::new();
    reader
        .take(limit.saturating_add(1))
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("larger than {} MiB, the most {what}", limit >> 20),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_up_to_the_limit_is_read_and_one_byte_more_is_refused() {
        let limit = 1 << 20;
        let ok = vec![b'a'; limit as usize];
        assert_eq!(read_bounded(&ok[..], limit, "x").unwrap().len(), ok.len());
        let big = vec![b'a'; limit as usize + 1];
        let e = read_bounded(&big[..], limit, "a test reads").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(e.to_string(), "larger than 1 MiB, the most a test reads");
        let e = read_bounded(&[0xff, 0xfe][..], limit, "x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
