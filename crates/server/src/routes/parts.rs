//! The parts of a JSON body, counted before it is parsed: what a parse
//! holds grows with the number of objects, arrays and members, not with the
//! bytes (a 31 MB body of tiny objects can cost forty times its size), so a
//! body past `server.max_parts` is refused before any of it is built.
//!
//! One pass over the bytes, no allocation: each `{`, `[` and `,` outside a
//! string counts one part (an object or array, or one more member of it),
//! and the nesting is followed so that a body deeper than the parser would
//! take is refused with a message that says so. The pass does not validate
//! the JSON: the parse that follows does.

/// The deepest nesting a body may have: serde_json refuses a 128th level
/// (its recursion limit), so nothing it would take is refused here.
pub(crate) const MAX_DEPTH: usize = 127;

/// Why a body was refused before its parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// More than the limit of parts.
    Parts,
    /// Nested deeper than [`MAX_DEPTH`].
    Depth,
}

/// Counts `body`'s parts, stopping at the first past `max_parts` or the
/// first level past [`MAX_DEPTH`]. A string is skipped whole (a `\` escapes
/// the byte after it), so its brackets and commas count nothing.
pub(crate) fn check(body: &[u8], max_parts: usize) -> Result<(), Refused> {
    let mut parts = 0usize;
    let mut depth = 0usize;
    let mut bytes = body.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'"' => skip_string(&mut bytes),
            b'{' | b'[' => {
                parts += 1;
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(Refused::Depth);
                }
                if parts > max_parts {
                    return Err(Refused::Parts);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' => {
                parts += 1;
                if parts > max_parts {
                    return Err(Refused::Parts);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Moves `bytes` past the end of a string whose opening quote was read (to
/// the end of the body when it is never closed: the parse says so).
fn skip_string(bytes: &mut std::slice::Iter<'_, u8>) {
    while let Some(&b) = bytes.next() {
        match b {
            b'"' => return,
            b'\\' => {
                bytes.next();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_DEPTH, Refused, check};

    /// `body` against a limit of `max_parts`: the verdict expected.
    #[track_caller]
    fn verdict(body: &str, max_parts: usize, expected: Result<(), Refused>) {
        assert_eq!(check(body.as_bytes(), max_parts), expected, "{body}");
    }

    #[test]
    fn objects_arrays_and_members_count() {
        // {} [ , , ] , : five parts.
        let body = r#"{"a": [1, 2, 3], "b": 4}"#;
        verdict(body, 5, Ok(()));
        verdict(body, 4, Err(Refused::Parts));
        verdict("{}", 1, Ok(()));
        verdict("{}", 0, Err(Refused::Parts));
        verdict(r#"{"a":{"b":{}}}"#, 3, Ok(()));
        verdict(r#"{"a":{"b":{}}}"#, 2, Err(Refused::Parts));
    }

    #[test]
    fn strings_count_nothing_and_escapes_are_respected() {
        verdict(r#"{"a": "{[,,,]}"}"#, 1, Ok(()));
        // An escaped quote does not end the string; an escaped backslash
        // before the closing quote does not escape it.
        verdict(r#"{"a": "x\"{,}", "b": "\\"}"#, 2, Ok(()));
        verdict(
            r#"{"a": "x\"{,}", "b": "\\", "c": 1}"#,
            2,
            Err(Refused::Parts),
        );
        verdict(r#"{"k,[": "\u007b"}"#, 1, Ok(()));
        // A string never closed hides the rest (the parse refuses it).
        verdict(r#"{"a": "[[[,,,"#, 1, Ok(()));
    }

    #[test]
    fn nesting_past_the_parsers_limit_is_refused() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        verdict(&deep(MAX_DEPTH), usize::MAX, Ok(()));
        verdict(&deep(MAX_DEPTH + 1), usize::MAX, Err(Refused::Depth));
        // Depth is of nesting, not of how many were opened in all.
        let wide = "[[]]".repeat(500);
        verdict(&format!("[{wide}]"), usize::MAX, Ok(()));
    }

    #[test]
    fn the_parsers_own_limit_is_the_bound() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let parses = |s: &str| serde_json::from_str::<serde_json::Value>(s).is_ok();
        assert!(parses(&deep(MAX_DEPTH)));
        assert!(!parses(&deep(MAX_DEPTH + 1)));
    }

    #[test]
    fn counting_stops_at_the_limit() {
        let wide = format!("[{}]", "1,".repeat(1_000_000));
        verdict(&wide, 10, Err(Refused::Parts));
        verdict(&wide, 2_000_000, Ok(()));
    }
}
