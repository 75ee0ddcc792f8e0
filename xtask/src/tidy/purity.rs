//! The purity rule of `crates/core/src/policy/`: no I/O, no clock reads,
//! no randomness, no threads, no environment, and no way around that
//! through another module.
//!
//! How it holds: a policy file may reach into the crate only through
//! [`PURE_LEAVES`] (modules checked by this same rule, so nothing impure
//! can hide behind them) and the listed plain items of
//! [`ALLOWED_ITEMS`] (types and pure functions of modules that are not
//! pure as a whole: `settings` loads files and reads the environment,
//! `generation` mints random request ids). No path, imported (`use`,
//! grouped and nested trees expanded) or written inline, may start with
//! one of [`IMPURE_PATHS`] or hold one of [`IMPURE_NAMES`].
//!
//! The file is read as the compiler would: comments and string literals
//! are blanked first, and only a `#[cfg(test)] mod …` block is exempt (not
//! everything after the first `#[cfg(test)]`).

/// Modules a pure module may import anything from; each is checked by
/// this rule too (`crate::policy` is every file under `policy/`).
pub(crate) const PURE_LEAVES: [&str; 10] = [
    "crate::policy",
    "crate::protocol",
    "crate::ratelimit",
    "crate::failure",
    "crate::attempt",
    "crate::target",
    "crate::chat",
    "crate::error",
    "crate::limits",
    "crate::passthrough",
];

/// Items a pure module may take from modules that are not pure as a
/// whole: plain types and pure functions only.
const ALLOWED_ITEMS: [&str; 12] = [
    "crate::settings::Settings",
    "crate::settings::ProviderSettings",
    "crate::settings::Capabilities",
    "crate::settings::CapabilityOverrides",
    "crate::settings::Timeouts",
    "crate::settings::TimeoutOverrides",
    "crate::settings::BudgetWindow",
    "crate::settings::StreamCommit",
    "crate::settings::RouteOptions",
    "crate::generation::RouteSelector",
    // Formats a time it is given.
    "crate::event::rfc3339",
    "crate::Error",
];

/// Paths that do I/O, read the clock, draw random numbers, spawn, sleep,
/// read the environment or share state between threads.
const IMPURE_PATHS: [&str; 30] = [
    "std::env",
    "std::thread",
    "std::fs",
    "std::net",
    "std::process",
    "std::io",
    "std::time::SystemTime",
    "std::sync::Mutex",
    "std::sync::RwLock",
    "std::sync::atomic",
    "std::sync::mpsc",
    "tokio::spawn",
    "tokio::task",
    "tokio::time::sleep",
    "tokio::time::interval",
    "tokio::time::timeout",
    "tokio::net",
    "tokio::fs",
    "tokio::io",
    "tokio::process",
    "tokio::signal",
    "tokio::sync",
    "fastrand",
    "rand",
    "getrandom",
    "redis",
    "reqwest",
    "hyper",
    "ractor",
    "prometheus_client",
];

/// Names that are impure wherever they appear in a path (a clock read
/// through an imported type, a loader or minter reached through an allowed
/// type).
const IMPURE_NAMES: [&str; 6] = [
    "Instant::now",
    "SystemTime",
    "from_env",
    "from_toml_str",
    "new_request_id",
    "Settings::load",
];

/// The first segments of the paths worth resolving (the crate, its
/// relatives, and the crates that can do I/O).
const ROOTS: [&str; 16] = [
    "crate",
    "super",
    "self",
    "std",
    "core",
    "alloc",
    "tokio",
    "fastrand",
    "rand",
    "getrandom",
    "redis",
    "reqwest",
    "hyper",
    "ractor",
    "prometheus_client",
    "Self",
];

/// Every break of the rule in `text`, the source of module `module`
/// (`crate::policy::decide`; `crate::policy` for `policy/mod.rs`).
pub(crate) fn violations(module: &str, text: &str) -> Vec<String> {
    let code = without_test_modules(&blank_comments_and_strings(text));
    let mut problems = Vec::new();
    let (uses, rest) = split_uses(&code);
    let mut paths: Vec<String> = Vec::new();
    for tree in &uses {
        expand(tree, "", &mut paths);
    }
    paths.extend(inline_paths(&rest));
    for raw in paths {
        let path = resolve(module, &raw);
        if let Some(why) = judge(&path) {
            problems.push(format!("`{raw}` ({why})"));
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

/// Why `path` (resolved) is not allowed, if it is not.
fn judge(path: &str) -> Option<&'static str> {
    let under = |p: &str, prefix: &str| {
        p == prefix || p.strip_prefix(prefix).is_some_and(|r| r.starts_with("::"))
    };
    let segments: Vec<&str> = path.split("::").collect();
    let named = IMPURE_NAMES.iter().any(|n| {
        let wanted: Vec<&str> = n.split("::").collect();
        segments
            .windows(wanted.len())
            .any(|w| w == wanted.as_slice())
    });
    if named {
        return Some("reads the clock, the environment or a random source");
    }
    if IMPURE_PATHS.iter().any(|p| under(path, p)) {
        return Some("I/O, clock, randomness, threads, environment or shared state");
    }
    if path == "crate" || under(path, "crate") {
        let allowed = PURE_LEAVES.iter().any(|l| under(path, l))
            || ALLOWED_ITEMS.iter().any(|i| under(path, i));
        if !allowed {
            return Some("a module that is not a checked pure leaf");
        }
    }
    None
}

/// `path` with `self::` and `super::` made absolute (`crate::…`).
fn resolve(module: &str, path: &str) -> String {
    let mut base: Vec<&str> = module.split("::").collect();
    let mut rest = path;
    let mut relative = false;
    loop {
        if let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
            relative = true;
        } else if let Some(r) = rest.strip_prefix("self::") {
            rest = r;
            relative = true;
        } else {
            break;
        }
    }
    if relative {
        format!("{}::{rest}", base.join("::"))
    } else {
        rest.to_owned()
    }
}

/// `text` with comments, string and character literals replaced by
/// spaces (newlines kept), so that nothing in them counts as code.
pub(crate) fn blank_comments_and_strings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
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
                blank(&mut out, i, j);
                i = j;
            }
            b'r' | b'b' if raw_string_at(b, i).is_some() => {
                let end = raw_string_at(b, i).unwrap_or(b.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i, j + 1);
                i = j + 1;
            }
            b'\'' => {
                // A character literal ('a', '\n', '\u{1F600}'), not a
                // lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map(|p| i + 2 + p + 1)
                } else {
                    let len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end);
                        i = end;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a raw (or byte) string starting at `i` ends: `r"…"`, `r#"…"#`,
/// `br"…"`; `None` if none starts there.
fn raw_string_at(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let mut j = i;
    if b[j] == b'b' {
        j += 1;
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

/// `code` (already blanked) without its `#[cfg(test)] mod name { … }` and
/// `#[cfg(test)] mod name;` items; any other `#[cfg(test)]` item stays.
pub(crate) fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    let marker = "#[cfg(test)]";
    let mut from = 0;
    while let Some(found) = out[from..].find(marker) {
        let start = from + found;
        let mut j = start + marker.len();
        let b = out.as_bytes();
        // Further attributes (`#[path = …]`) and whitespace.
        loop {
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            if b.get(j) == Some(&b'#') {
                match out[j..].find(']') {
                    Some(p) => j += p + 1,
                    None => break,
                }
            } else {
                break;
            }
        }
        let item = &out[j..];
        let is_mod = item.starts_with("mod ")
            || item.starts_with("pub mod ")
            || item.starts_with("pub(crate) mod ");
        let end = if is_mod {
            let open = item.find(['{', ';']);
            match open.map(|p| (p, item.as_bytes()[p])) {
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

/// The index of the `}` closing the `{` at `open`.
fn matching_brace(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code.bytes().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The use trees of `code` (the text between `use` and `;`, whitespace
/// removed), and the code without them.
fn split_uses(code: &str) -> (Vec<String>, String) {
    let mut uses = Vec::new();
    let mut rest = code.to_owned();
    let b = code.as_bytes();
    let mut i = 0;
    while let Some(found) = code[i..].find("use") {
        let at = i + found;
        let before_ok = at == 0 || !is_ident(b[at - 1]);
        let after_ok = b.get(at + 3).is_some_and(|c| c.is_ascii_whitespace());
        if !(before_ok && after_ok) {
            i = at + 3;
            continue;
        }
        let Some(end) = code[at..].find(';').map(|p| at + p) else {
            break;
        };
        uses.push(normalize(&code[at + 3..end]));
        rest.replace_range(at..end, &" ".repeat(end - at));
        i = end;
    }
    (uses, rest)
}

/// A use tree with its whitespace collapsed: none around `::`, braces and
/// commas, one space elsewhere (around `as`).
fn normalize(tree: &str) -> String {
    let collapsed = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(collapsed.len());
    let chars: Vec<char> = collapsed.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let joins = |d: Option<&char>| d.is_some_and(|d| matches!(d, ':' | '{' | '}' | ','));
        if c == ' ' && (joins(chars.get(i + 1)) || (i > 0 && joins(chars.get(i - 1)))) {
            continue;
        }
        out.push(c);
    }
    out.trim().to_owned()
}

/// Every path of the use tree `tree` under `prefix`.
fn expand(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let tree = tree.strip_prefix("::").unwrap_or(tree);
    match tree.find('{') {
        Some(open) => {
            let head = &tree[..open];
            let close = matching_brace(tree, open).unwrap_or(tree.len());
            let body = &tree[open + 1..close];
            for part in split_top_level(body) {
                expand(part, &format!("{prefix}{head}"), out);
            }
        }
        None => {
            if tree.is_empty() {
                return;
            }
            let path = tree.split(" as ").next().unwrap_or(tree).trim();
            let full = format!("{prefix}{path}");
            let full = full.strip_suffix("::self").unwrap_or(&full).to_owned();
            out.push(full);
        }
    }
}

/// `body` split at its top-level commas.
fn split_top_level(body: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The paths written in `code` (`a::b::c`, `::std::env`) whose first
/// segment is one of [`ROOTS`], or that hold an impure name.
fn inline_paths(code: &str) -> Vec<String> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = is_ident(b[i]) && !b[i].is_ascii_digit() && (i == 0 || !is_ident(b[i - 1]));
        let after_colons = i >= 2 && &b[i - 2..i] == b"::";
        if !starts || (after_colons && i >= 3 && is_ident(b[i - 3])) {
            i += 1;
            continue;
        }
        // A path: identifiers joined by `::` (whitespace allowed around it).
        let mut segments: Vec<&str> = Vec::new();
        let mut j = i;
        loop {
            let s = j;
            while j < b.len() && is_ident(b[j]) {
                j += 1;
            }
            segments.push(&code[s..j]);
            let mut k = j;
            while k < b.len() && b[k].is_ascii_whitespace() {
                k += 1;
            }
            if code[k..].starts_with("::") {
                k += 2;
                while k < b.len() && b[k].is_ascii_whitespace() {
                    k += 1;
                }
                if k < b.len() && is_ident(b[k]) {
                    j = k;
                    continue;
                }
            }
            break;
        }
        let path = segments.join("::");
        let rooted = ROOTS.contains(&segments[0]) && segments.len() > 1;
        let named = IMPURE_NAMES.iter().any(|n| path.contains(n));
        if rooted || named {
            out.push(path);
        }
        i = j.max(i + 1);
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

#[cfg(test)]
mod tests {
    use super::violations;

    /// (source of `crate::policy::x`, whether it breaks the rule)
    #[test]
    fn the_rule_catches_every_way_around_it() {
        let cases = [
            // Plain pure code.
            (
                "use std::time::Duration;\nuse crate::failure::FailureKind;\nfn f() {}",
                false,
            ),
            (
                "use crate::settings::{ProviderSettings, Timeouts};\nuse super::plan::Plan;",
                false,
            ),
            (
                "fn f(k: crate::protocol::Protocol) -> bool { k == crate::protocol::Protocol::GenerateContent }",
                false,
            ),
            ("use tokio::time::Instant;\nfn f(now: Instant) {}", false),
            // Grouped and nested imports.
            ("use tokio::time::{sleep, Instant};", true),
            ("use tokio::{time::{Instant, sleep as nap}};", true),
            ("use std::{env, time::Duration};", true),
            ("use ::std::thread;", true),
            // The environment, threads, the clock, randomness inline.
            (
                "fn f() -> Option<String> { std::env::var(\"X\").ok() }",
                true,
            ),
            ("fn f() { std::thread::spawn(|| {}); }", true),
            ("fn f() { let _ = tokio::time::Instant::now(); }", true),
            (
                "use tokio::time::Instant;\nfn f() { let _ = Instant :: now(); }",
                true,
            ),
            ("fn f() -> u64 { fastrand::u64(..) }", true),
            ("use std::time::{SystemTime, UNIX_EPOCH};", true),
            // Through other modules: a request-id minter, a loader, a
            // module that is not a checked leaf, a glob.
            (
                "fn f() -> String { crate::generation::new_request_id() }",
                true,
            ),
            ("use crate::generation::new_request_id;", true),
            (
                "fn f() { let _ = crate::settings::Settings::from_env(None); }",
                true,
            ),
            ("use crate::shared::SharedState;", true),
            ("use crate::settings::*;", true),
            ("use super::super::run::Run;", true),
            ("fn f() { super::super::cache::clear(); }", true),
            // After a `#[cfg(test)]` that is not the test module.
            (
                "#[cfg(test)]\nfn helper() {}\nfn f() { let _ = std::time::SystemTime::now(); }",
                true,
            ),
            ("#[cfg(test)]\nconst X: u8 = 1;\nuse std::env;", true),
            // Only the test module is exempt; comments and strings never count.
            (
                "fn f() {}\n#[cfg(test)]\nmod tests { fn t() { let _ = std::time::SystemTime::now(); } }",
                false,
            ),
            (
                "fn f() {}\n#[cfg(test)]\nmod tests { }\nfn g() { std::thread::yield_now(); }",
                true,
            ),
            (
                "// std::env::var in a comment\nfn f() -> &'static str { \"std::thread::spawn\" }",
                false,
            ),
            (
                "/* use std::env; */ fn f<'a>(c: char) -> bool { c == '{' }",
                false,
            ),
            ("fn f() -> &'static str { r#\"use std::env;\"# }", false),
        ];
        for (source, impure) in cases {
            let found = violations("crate::policy::x", source);
            assert_eq!(!found.is_empty(), impure, "{source}\n→ {found:?}");
        }
    }
}
