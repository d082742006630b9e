//! A pass over user-written YAML before the parser sees it, refusing flow collections (`[`, `{`)
//! nested deeper than the parser would accept anyway.
//!
//! The YAML scanner's work per token grows with the nesting depth, and the parser reads a whole
//! document before its own depth limit applies, so 100,000 `[` kept `validate` busy for minutes
//! before it said "recursion limit exceeded". This pass is linear and approximate: it skips
//! comments and quoted scalars, and counts every other bracket, so a file it refuses could only
//! be read by the parser if it held over a hundred unbalanced brackets in plain or block scalars.

use crate::error::NestingError;

/// The deepest flow nesting accepted: the depth at which the YAML parser (serde_norway) gives
/// up, counting block collections too, so no file that parses is refused for its brackets.
pub const MAX_FLOW_DEPTH: usize = 128;

/// Refuses `text` when its flow collections nest deeper than [`MAX_FLOW_DEPTH`].
///
/// # Errors
/// A [`NestingError`] at the line and column (1-based) of the first bracket too deep.
pub fn check_flow_nesting(text: &str) -> Result<(), NestingError> {
    let mut depth = 0usize;
    let mut line = 1usize;
    let mut column = 0usize;
    // The character before the current one, for the rules "a comment starts after a space"
    // and "a quote opens a scalar only where a scalar can start".
    let mut prev = '\n';
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        column += 1;
        match c {
            '\n' => {
                line += 1;
                column = 0;
            }
            '#' if prev.is_whitespace() => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        column = 0;
                        break;
                    }
                }
                prev = '\n';
                continue;
            }
            '"' | '\'' if prev.is_whitespace() || matches!(prev, '[' | '{' | ',' | ':' | '-') => {
                let mut escaped = false;
                for q in chars.by_ref() {
                    column += 1;
                    if q == '\n' {
                        line += 1;
                        column = 0;
                    }
                    if c == '"' && q == '\\' && !escaped {
                        escaped = true;
                        continue;
                    }
                    // `''` inside single quotes is a quote and closes then reopens, which
                    // this loop sees as close and (next char) not reopened: harmless for
                    // counting brackets, as the text between is plain to it.
                    if q == c && !escaped {
                        break;
                    }
                    escaped = false;
                }
                prev = c;
                continue;
            }
            '[' | '{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(NestingError {
                        line,
                        column,
                        limit: MAX_FLOW_DEPTH,
                    });
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        prev = c;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_brackets_are_refused_where_they_get_too_deep() {
        let deep = format!(
            "a: 1\nname: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let e = check_flow_nesting(&deep).unwrap_err();
        assert_eq!((e.line, e.column), (2, 6 + MAX_FLOW_DEPTH + 1));
        assert!(e.to_string().contains("deeper than 128"), "{e}");
        let mixed = "{a: ".repeat(200);
        assert!(check_flow_nesting(&mixed).is_err());
    }

    #[test]
    fn ordinary_yaml_and_brackets_in_comments_and_quotes_pass() {
        let at_limit = format!(
            "{}{}",
            "[".repeat(MAX_FLOW_DEPTH),
            "]".repeat(MAX_FLOW_DEPTH)
        );
        assert_eq!(check_flow_nesting(&at_limit), Ok(()));
        let many = "x: [[1], {a: [2]}]\n".repeat(10_000);
        assert_eq!(check_flow_nesting(&many), Ok(()));
        let hidden = format!(
            "# {}\na: \"{}\"\nb: '{}'\nc: \"esc \\\" {}\"\nd: it's [fine]\n",
            "[".repeat(500),
            "{".repeat(500),
            "[".repeat(500),
            "[".repeat(500)
        );
        assert_eq!(check_flow_nesting(&hidden), Ok(()));
    }
}
