//! The engine stays the engine: core's non-test lines are at most
//! [`CORE_MAX`]. What grows past it is an area that changes on its own
//! (the way the record of a generation and the fleet's shared state
//! did), and it moves whole into a crate whose name says what it is.
//!
//! Counted are the `.rs` files under `crates/core/src` whose names do not
//! contain `tests`, less every `#[cfg(test)]` module written inline (the
//! attribute, the `mod name {` line and everything to its closing brace).

use std::collections::BTreeMap;
use std::path::Path;

/// Core's source, and its most non-test lines.
const CORE: &str = "crates/core/src";
const CORE_MAX: usize = 13_000;

/// How many of the largest folders the message names.
const SHOWN: usize = 5;

/// Core's size, if it is over [`CORE_MAX`].
pub(crate) fn problem(root: &Path) -> Option<String> {
    check(&root.join(CORE), CORE_MAX)
}

fn check(src: &Path, max: usize) -> Option<String> {
    let per = lines_per_area(src);
    let total: usize = per.values().sum();
    if total <= max {
        return None;
    }
    let mut largest: Vec<(&String, &usize)> = per.iter().collect();
    largest.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let largest: Vec<String> = largest
        .iter()
        .take(SHOWN)
        .map(|(area, n)| format!("{area} {n}"))
        .collect();
    Some(format!(
        "{CORE}: {total} non-test lines (at most {max}: move an area that changes on its own \
         into a crate named for it; the largest: {})",
        largest.join(", ")
    ))
}

/// Non-test lines per top-level folder (or file) of `src`.
fn lines_per_area(src: &Path) -> BTreeMap<String, usize> {
    let mut files = Vec::new();
    super::collect(src, &mut files);
    let mut per = BTreeMap::new();
    for file in files {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_none_or(|n| n.contains("tests")) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let rel = file.strip_prefix(src).unwrap_or(&file);
        let area = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        *per.entry(area).or_insert(0) += non_test_lines(&text);
    }
    per
}

/// The lines of `text` outside its inline `#[cfg(test)]` modules.
fn non_test_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.split('\n').collect();
    // A final newline ends the last line; it does not start another.
    let len = lines.len() - usize::from(lines.last() == Some(&""));
    let mut count = 0;
    let mut i = 0;
    while i < len {
        if lines[i].trim() == "#[cfg(test)]" && i + 1 < len && opens_module(lines[i + 1]) {
            i = end_of_block(&lines[..len], i + 1) + 1;
            continue;
        }
        count += 1;
        i += 1;
    }
    count
}

/// Whether `line` opens an inline module: `mod name {`, optionally `pub`
/// or `pub(crate)`.
fn opens_module(line: &str) -> bool {
    let line = line.trim_start();
    let line = line
        .strip_prefix("pub(crate) ")
        .or_else(|| line.strip_prefix("pub "))
        .unwrap_or(line);
    let Some(rest) = line.strip_prefix("mod ") else {
        return false;
    };
    let name_len = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    name_len > 0 && rest[name_len..].starts_with(" {")
}

/// The line whose closing brace ends the block opened at `start` (the
/// last line when it never closes).
fn end_of_block(lines: &[&str], start: usize) -> usize {
    let mut depth: isize = 0;
    let mut opened = false;
    for (j, line) in lines.iter().enumerate().skip(start) {
        let opens = line.matches('{').count();
        depth += opens as isize - line.matches('}').count() as isize;
        opened |= opens > 0;
        if depth == 0 && opened {
            return j;
        }
    }
    lines.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_modules_and_files_are_not_counted() {
        let text = "//! A file.\nfn a() {}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    \
                    fn t() {\n        let _ = 1;\n    }\n}\n#[cfg(test)]\n#[path = \"x_tests.rs\"]\n\
                    mod x;\n";
        // The inline module goes; an out-of-line one's two lines stay.
        assert_eq!(non_test_lines(text), 6);
        assert!(opens_module("    pub(crate) mod inner {"));
        assert!(!opens_module("mod tests;"));
        assert!(!opens_module("let module = 1; {"));
    }

    #[test]
    fn a_core_over_its_size_is_reported_with_its_largest_areas() {
        let root = std::env::temp_dir().join(format!("xtask-core-size-{}", std::process::id()));
        let _ = std::fs::create_dir_all(root.join("run"));
        let body = |n: usize| "fn f() {}\n".repeat(n);
        let _ = std::fs::write(root.join("lib.rs"), body(3));
        let _ = std::fs::write(root.join("run/mod.rs"), body(6));
        let _ = std::fs::write(root.join("run/walk.rs"), body(4));
        let _ = std::fs::write(root.join("run/walk_tests.rs"), body(50));
        let _ = std::fs::write(root.join("event.rs"), body(2));
        let within = check(&root, 15);
        let over = check(&root, 14);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(within, None);
        let over = over.unwrap_or_default();
        assert!(
            over.starts_with("crates/core/src: 15 non-test lines (at most 14"),
            "{over}"
        );
        assert!(
            over.ends_with("the largest: run 10, lib.rs 3, event.rs 2)"),
            "{over}"
        );
    }
}
