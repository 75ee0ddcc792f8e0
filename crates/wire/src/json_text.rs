//! JSON written by hand into one buffer, for the answers every plain
//! request writes: the member names go in as literal bytes, and only the
//! values a request brings (its id, model, text) are escaped, each in one
//! pass. serde's derived writer escapes every name too, member by member
//! (about 5 000 instructions of a Chat Completions answer in the profile).
//!
//! The output is byte for byte what `serde_json::to_vec` writes for the
//! same value (the tests of each writer check it), so a client sees no
//! difference.

/// Appends `s` as a JSON string (quoted and escaped as serde_json escapes).
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().any(needs_escape) {
        // Rare: text with quotes, backslashes or control characters is
        // escaped by serde_json itself (writing to a `Vec` cannot fail).
        let _ = serde_json::to_writer(&mut *out, s);
        return;
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// Appends `s` as a JSON string, or `null`.
pub(crate) fn push_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => push_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// Appends `n` in decimal.
pub(crate) fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Whether serde_json writes byte `b` of a string escaped: a quote, a
/// backslash or a control character.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_numbers_as_serde_json_writes_them() {
        for s in [
            "",
            "plain",
            "quote \" and \\ backslash",
            "line\nbreak\ttab\u{1}\u{1f}",
            "unicode é ✓ 🦀 \u{7f}",
            "</script>",
        ] {
            let mut out = Vec::new();
            push_str(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).unwrap_or_default(), "{s:?}");
        }
        for n in [0, 7, 10, 1_733_000_000, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, serde_json::to_vec(&n).unwrap_or_default(), "{n}");
        }
        let mut out = Vec::new();
        push_opt_str(&mut out, None);
        assert_eq!(out, b"null");
    }
}
