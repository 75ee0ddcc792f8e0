//! No function over [`FUNCTION_MAX`] lines outside tests: past that a
//! function is several ideas, each of which wants a name.
//!
//! A function runs from its `fn` line to its closing brace, both counted;
//! a function inside another counts in both. Comments and literals are
//! blanked first, so a brace in a string or a comment never counts. Tests
//! are left out: files named `tests.rs` or `*_tests.rs`, files under a
//! `tests/` folder, and `#[cfg(test)] mod … { … }` blocks.

use std::path::{Path, PathBuf};

use super::lex;

/// The longest function outside tests, in lines.
pub(crate) const FUNCTION_MAX: usize = 100;

/// Every function over [`FUNCTION_MAX`] lines in `files`.
pub(crate) fn problems(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files.iter().filter(|f| !is_test_file(root, f)) {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let shown = file.strip_prefix(root).unwrap_or(file).display();
        for (name, line, lines) in long_functions(&text) {
            problems.push(format!(
                "{shown}:{line}: `fn {name}` has {lines} lines (at most {FUNCTION_MAX}: \
                 split it into functions named after what each part does)"
            ));
        }
    }
    problems
}

/// Whether `file` holds only tests.
pub(crate) fn is_test_file(root: &Path, file: &Path) -> bool {
    let rel = file.strip_prefix(root).unwrap_or(file);
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// The functions of `text` over [`FUNCTION_MAX`] lines: (name, line of
/// `fn`, lines).
pub(crate) fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = lex::without_test_modules(&lex::blank(text));
    let b = code.as_bytes();
    let mut out = Vec::new();
    for at in lex::keyword_at(&code, "fn") {
        let name_start = at + 2 + code[at + 2..].len() - code[at + 2..].trim_start().len();
        let name_len = b[name_start..]
            .iter()
            .take_while(|&&c| lex::is_ident(c))
            .count();
        // `fn(u8) -> u8` is a type, not a function.
        if name_len == 0 {
            continue;
        }
        let Some(open) = body_start(&code, name_start + name_len) else {
            continue;
        };
        let Some(close) = lex::matching_brace(&code, open) else {
            continue;
        };
        let line = lex::line_of(&code, at);
        let lines = lex::line_of(&code, close) - line + 1;
        if lines > FUNCTION_MAX {
            let name = code[name_start..name_start + name_len].to_owned();
            out.push((name, line, lines));
        }
    }
    out
}

/// The `{` opening the body of a function whose signature starts at
/// `from`; none for a declaration without a body (`fn f();` in a trait).
fn body_start(code: &str, from: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code.bytes().enumerate().skip(from) {
        match c {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'{' if depth == 0 => return Some(i),
            b';' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(lines: usize) -> String {
        "    let x = 1;\n".repeat(lines)
    }

    #[test]
    fn a_long_function_is_named_with_its_line() {
        let text = format!(
            "//! A file.\n\nfn short() {{\n{}}}\n\nfn long(a: u8) -> Result<(), ()> {{\n{}}}\n",
            body(98),
            body(99)
        );
        assert_eq!(long_functions(&text), [("long".to_owned(), 104, 101)]);
    }

    #[test]
    fn braces_in_strings_comments_and_tests_do_not_count() {
        let text = format!(
            "fn f() {{\n    let s = r#\"}}\"#; // }}\n    let c = '}}';\n{}}}\n\
             #[cfg(test)]\nmod tests {{\n    fn t() {{\n{}    }}\n}}\n\
             trait T {{ fn g(&self); }}\nfn h(f: fn(u8) -> u8) {{}}\n",
            body(90),
            body(200)
        );
        assert!(
            long_functions(&text).is_empty(),
            "{:?}",
            long_functions(&text)
        );
        let nested = format!("fn outer() {{\n    fn inner() {{\n{}    }}\n}}\n", body(99));
        let found: Vec<String> = long_functions(&nested).into_iter().map(|f| f.0).collect();
        assert_eq!(found, ["outer", "inner"]);
    }

    #[test]
    fn test_files_are_left_out() {
        let root = Path::new("/r");
        for (path, test) in [
            ("/r/crates/a/src/lib.rs", false),
            ("/r/crates/a/src/run/tests.rs", true),
            ("/r/crates/a/src/sigv4_tests.rs", true),
            ("/r/crates/a/tests/it/main.rs", true),
        ] {
            assert_eq!(is_test_file(root, Path::new(path)), test, "{path}");
        }
    }

    #[test]
    fn a_planted_long_function_is_reported_in_a_tree() {
        let root = std::env::temp_dir().join(format!("xtask-functions-{}", std::process::id()));
        let src = root.join("crates/a/src");
        let _ = std::fs::create_dir_all(&src);
        let _ = std::fs::write(
            src.join("lib.rs"),
            format!("fn big() {{\n{}}}\n", body(100)),
        );
        let _ = std::fs::write(
            src.join("ok.rs"),
            format!("fn small() {{\n{}}}\n", body(98)),
        );
        let files = vec![src.join("lib.rs"), src.join("ok.rs")];
        let found = problems(&root, &files);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("crates/a/src/lib.rs:1: `fn big` has 102 lines"));
    }
}
