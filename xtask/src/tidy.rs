//! Repository conventions, checked by `cargo xtask tidy` and by the test
//! below (so `cargo test --workspace` enforces them too).

use std::path::{Path, PathBuf};

/// Returns every convention broken under `root`.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "fuzz"] {
        collect(&root.join(dir), &mut files);
    }
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let shown = file.strip_prefix(root).unwrap_or(file).display();
        if !text.starts_with("//!") {
            problems.push(format!(
                "{shown}: does not open with a `//!` comment saying what it is"
            ));
        }
        // Built from pieces so that this file does not trip its own check.
        for banned in [concat!("#[should", "_panic"), concat!("#[", "ignore")] {
            if text.contains(banned) {
                problems.push(format!("{shown}: uses {banned}]"));
            }
        }
    }
    let policy = root.join("crates/core/src/policy");
    for file in files.iter().filter(|f| f.starts_with(&policy)) {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let shown = file.strip_prefix(root).unwrap_or(file).display();
        problems.extend(
            impure(&text)
                .into_iter()
                .map(|what| format!("{shown}: `policy/` is pure, but this file uses {what}")),
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// What `crates/core/src/policy/` may not use outside its tests: the
/// crate's modules that do I/O or hold shared state, and anything that
/// reads the clock, sleeps, spawns or draws random numbers (time and jitter
/// are inputs to the decision logic).
const IMPURE: [&str; 20] = [
    "crate::actor",
    "crate::adapter",
    "crate::breakers",
    "crate::cache",
    "crate::engine",
    "crate::redis_link",
    "crate::run",
    "crate::shared",
    "crate::sink",
    "crate::spend",
    "Instant::now",
    "SystemTime",
    "tokio::spawn",
    "tokio::time::sleep",
    "tokio::net",
    "tokio::fs",
    "std::fs",
    "std::net",
    "fastrand",
    "redis::",
];

/// The impure names `text` uses before its `#[cfg(test)]` module.
fn impure(text: &str) -> Vec<&'static str> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    IMPURE
        .into_iter()
        .filter(|name| {
            code.lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| l.contains(name))
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_purity_check_catches_io_in_policy() {
        let io =
            "use crate::shared::SharedState;\nfn f() { let _ = tokio::time::Instant::now(); }\n";
        assert_eq!(super::impure(io), ["crate::shared", "Instant::now"]);
        let pure = "use crate::failure::FailureCode;\n// crate::shared in a comment\n#[cfg(test)]\nmod tests { fn t() { let _ = Instant::now(); } }\n";
        assert!(super::impure(pure).is_empty());
    }

    #[test]
    fn tidy() {
        if let Err(problems) = super::check(&crate::project_root()) {
            panic!("tidy found problems:\n{}", problems.join("\n"));
        }
    }
}
