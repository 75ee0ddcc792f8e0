//! Repository conventions, checked by `cargo xtask tidy` and by the test
//! below (so `cargo test --workspace` enforces them too).

use std::path::{Path, PathBuf};

// The fences: the map short, no citation outside the repository, short
// functions, imports that run one way, core no bigger than the engine.
mod citations;
mod core_size;
mod functions;
mod graph;
mod layers;
mod lex;
mod modules;

mod docs;
mod history;
mod pure_crates;

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
    problems.extend(pure_crates::problems(root));
    problems.extend(docs::problems(root));
    problems.extend(history::long_subjects(root));
    problems.extend(history::test_binaries(root));
    problems.extend(citations::map_length(root));
    problems.extend(core_size::problem(root));
    problems.extend(citations::problems(root, &files));
    problems.extend(functions::problems(root, &files));
    problems.extend(graph::problems(root));
    problems.extend(layers::problems(root));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
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
    fn tidy() {
        if let Err(problems) = super::check(&crate::project_root()) {
            panic!("tidy found problems:\n{}", problems.join("\n"));
        }
    }
}
