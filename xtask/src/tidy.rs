//! Repository conventions, checked by `cargo xtask tidy` and by the test
//! below (so `cargo test --workspace` enforces them too).

use std::path::{Path, PathBuf};

// The fences: the map short, no citation outside the repository, short
// functions, imports that run one way.
mod citations;
mod functions;
mod graph;
mod layers;
mod lex;
mod modules;

mod docs;
mod history;
mod purity;

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
    problems.extend(purity_problems(root, &files));
    problems.extend(docs::problems(root));
    problems.extend(history::long_subjects(root));
    problems.extend(history::test_binaries(root));
    problems.extend(citations::map_length(root));
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

/// Breaks of the purity rule ([`purity`]) in `crates/core/src/policy/`
/// and in the leaf modules it may import from, which are held to the same
/// rule.
fn purity_problems(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let src = root.join("crates/core/src");
    let mut checked: Vec<(PathBuf, String)> = files
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(src.join("policy")).ok()?;
            let stem = rel.file_stem()?.to_str()?;
            // A `#[cfg(test)] mod tests;` in a file of its own is exempt, as
            // an inline test module is.
            if stem == "tests" {
                return None;
            }
            let module = match stem {
                "mod" => "crate::policy".to_owned(),
                stem => format!("crate::policy::{stem}"),
            };
            Some((f.clone(), module))
        })
        .collect();
    for leaf in purity::PURE_LEAVES
        .iter()
        .filter(|l| **l != "crate::policy")
    {
        let name = leaf.trim_start_matches("crate::");
        checked.push((src.join(format!("{name}.rs")), (*leaf).to_owned()));
    }
    let mut problems = Vec::new();
    for (file, module) in checked {
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let Ok(text) = std::fs::read_to_string(&file) else {
            problems.push(format!("{shown}: a pure leaf module that cannot be read"));
            continue;
        };
        problems.extend(purity::violations(&module, &text).into_iter().map(|what| {
            format!("{shown}: `policy/` and its leaves are pure, but this file uses {what}")
        }));
    }
    problems
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
