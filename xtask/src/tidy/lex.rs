//! Rust source read just well enough for the fences: where its comments
//! and literals are (so that nothing in them counts as code, and the
//! comments can be read on their own), which `#[cfg(test)] mod` blocks to
//! leave out, and where a brace closes.
//!
//! Every function here keeps byte offsets: a blanked text has the length
//! and the newlines of the original, so an offset found in one is a place
//! in the other, and its line number is the same.

/// What a span of the source is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// `// …` (doc comments too) or `/* … */`.
    Comment,
    /// A string, raw string, byte string or character literal.
    Literal,
}

/// The comments and literals of `text`, as (start, end, kind), in order.
pub(crate) fn spans(text: &str) -> Vec<(usize, usize, Kind)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let found = match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
                Some((end, Kind::Comment))
            }
            b'/' if b.get(i + 1) == Some(&b'*') => Some((block_comment_end(b, i), Kind::Comment)),
            b'r' | b'b' => raw_string_at(b, i).map(|end| (end, Kind::Literal)),
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                Some(((j + 1).min(b.len()), Kind::Literal))
            }
            b'\'' => char_literal_end(text, i).map(|end| (end, Kind::Literal)),
            _ => None,
        };
        match found {
            Some((end, kind)) => {
                out.push((i, end, kind));
                i = end;
            }
            None => i += 1,
        }
    }
    out
}

/// `text` with comments and literals replaced by spaces (newlines kept).
pub(crate) fn blank(text: &str) -> String {
    let mut out = text.as_bytes().to_vec();
    for (from, to, _) in spans(text) {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The comments of `text`, one entry per line they cover: (line number
/// from 1, the comment's text on that line).
pub(crate) fn comments(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    for (from, to, kind) in spans(text) {
        if kind != Kind::Comment {
            continue;
        }
        let first = line_of(text, from);
        for (n, line) in text[from..to].split('\n').enumerate() {
            out.push((first + n, line));
        }
    }
    out
}

/// The line number (from 1) of byte offset `at`.
pub(crate) fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&c| c == b'\n')
        .count()
        + 1
}

fn block_comment_end(b: &[u8], i: usize) -> usize {
    let (mut depth, mut j) = (1, i + 2);
    while j < b.len() && depth > 0 {
        if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
            depth += 1;
            j += 2;
        } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
            depth -= 1;
            j += 2;
        } else {
            j += 1;
        }
    }
    j.min(b.len())
}

/// Where a character literal at `i` ends ('a', '\n', '\u{1F600}'); none
/// for a lifetime ('a).
fn char_literal_end(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(i + 1) == Some(&b'\\') {
        // The escaped character itself may be a quote ('\'').
        return b
            .get(i + 3..)?
            .iter()
            .position(|&c| c == b'\'')
            .map(|p| i + 3 + p + 1);
    }
    let len = text.get(i + 1..)?.chars().next().map_or(1, char::len_utf8);
    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
}

/// Where a raw (or byte) string starting at `i` ends: `r"…"`, `r#"…"#`,
/// `br"…"`, `b"…"`; `None` if none starts there.
fn raw_string_at(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && is_ident(b[i - 1]) {
        return None;
    }
    let mut j = i;
    if b[j] == b'b' {
        j += 1;
        if b.get(j) == Some(&b'"') || b.get(j) == Some(&b'\'') {
            // A byte string or byte: read on from the quote.
            return None;
        }
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let closing: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let body = j + 1;
    let end = b[body..]
        .windows(closing.len())
        .position(|w| w == closing.as_slice())?;
    Some(body + end + closing.len())
}

/// `code` (already blanked) with its `#[cfg(test)] mod name { … }` and
/// `#[cfg(test)] mod name;` items blanked too; any other `#[cfg(test)]`
/// item stays.
pub(crate) fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    let marker = "#[cfg(test)]";
    let mut from = 0;
    while let Some(found) = out[from..].find(marker) {
        let start = from + found;
        let j = after_attributes(&out, start + marker.len());
        let item = &out[j..];
        let is_mod = ["mod ", "pub mod ", "pub(crate) mod ", "pub(super) mod "]
            .iter()
            .any(|p| item.starts_with(p));
        let end = if is_mod {
            match item.find(['{', ';']).map(|p| (p, item.as_bytes()[p])) {
                Some((p, b';')) => Some(j + p + 1),
                Some((p, _)) => matching_brace(&out, j + p).map(|e| e + 1),
                None => None,
            }
        } else {
            None
        };
        match end {
            Some(end) => {
                let blanked: String = out[start..end]
                    .chars()
                    .map(|c| if c == '\n' { '\n' } else { ' ' })
                    .collect();
                out.replace_range(start..end, &blanked);
                from = end;
            }
            None => from = start + marker.len(),
        }
    }
    out
}

/// The offset after the whitespace and further attributes (`#[path = …]`)
/// that follow `j`.
pub(crate) fn after_attributes(code: &str, mut j: usize) -> usize {
    let b = code.as_bytes();
    loop {
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if b.get(j) == Some(&b'#') {
            match code[j..].find(']') {
                Some(p) => j += p + 1,
                None => return j,
            }
        } else {
            return j;
        }
    }
}

/// The index of the `}` closing the `{` at `open`.
pub(crate) fn matching_brace(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code.bytes().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether `c` can be part of an identifier.
pub(crate) fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The offsets where the keyword `word` stands as a word of its own.
pub(crate) fn keyword_at(code: &str, word: &str) -> Vec<usize> {
    let b = code.as_bytes();
    code.match_indices(word)
        .map(|(at, _)| at)
        .filter(|&at| {
            let before = at == 0 || !is_ident(b[at - 1]);
            let after = b.get(at + word.len()).is_none_or(|&c| !is_ident(c));
            before && after
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_literals_are_blanked_in_place() {
        let text = "let s = r#\"{ // \"#; // a { comment\nlet c = '{'; fn f<'a>() {}\n/* { */";
        let quotes = "let q = '\\''; let s = \"\\\"{\"; let n = '\\n'; fn g() {}";
        assert_eq!(
            blank(quotes).matches(['{', '}']).count(),
            2,
            "{}",
            blank(quotes)
        );
        let code = blank(text);
        assert_eq!(code.len(), text.len());
        assert_eq!(code.matches('{').count(), 1, "{code}");
        assert_eq!(comments(text), [(1, "// a { comment"), (3, "/* { */")]);
    }

    #[test]
    fn only_test_modules_are_left_out() {
        let code = "fn a() {}\n#[cfg(test)]\nmod tests { fn t() {} }\n#[cfg(test)]\nfn h() {}";
        let kept = without_test_modules(code);
        assert!(!kept.contains("fn t"));
        assert!(kept.contains("fn h") && kept.contains("fn a"));
    }
}
