//! Conventions about the shape of the repository rather than any one file:
//! commit subjects short enough to read in `git log --oneline`, and few
//! integration-test binaries per crate (each one links tokio, axum,
//! reqwest, ractor and redis again, which is what a 2-core build waits on).

use std::path::Path;
use std::process::Command;

/// The longest commit subject, in characters.
const SUBJECT_MAX: usize = 72;

/// The last commit before subjects were held to [`SUBJECT_MAX`]: older
/// history is what it is.
const SUBJECTS_CHECKED_AFTER: &str = "d928146";

/// How many integration-test binaries (`tests/*.rs`, `tests/*/main.rs`) a
/// crate may have.
const TEST_BINARIES_MAX: usize = 2;

/// Commit subjects after [`SUBJECTS_CHECKED_AFTER`] that are too long.
/// Nothing is reported where git or that commit is not there (a tarball,
/// a shallow clone).
pub(crate) fn long_subjects(root: &Path) -> Vec<String> {
    let range = format!("{SUBJECTS_CHECKED_AFTER}..HEAD");
    let Ok(out) = Command::new("git")
        .args(["log", "--format=%h %s", &range])
        .current_dir(root)
        .output()
    else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let (hash, subject) = line.split_once(' ')?;
            let len = subject.chars().count();
            (len > SUBJECT_MAX).then(|| {
                format!(
                    "commit {hash}: its subject has {len} characters (at most {SUBJECT_MAX}; \
                     the why goes in the body)"
                )
            })
        })
        .collect()
}

/// Crates under `crates/` with more than [`TEST_BINARIES_MAX`]
/// integration-test binaries.
pub(crate) fn test_binaries(root: &Path) -> Vec<String> {
    let Ok(crates) = std::fs::read_dir(root.join("crates")) else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    for krate in crates.flatten() {
        let Ok(entries) = std::fs::read_dir(krate.path().join("tests")) else {
            continue;
        };
        let binaries: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                let path = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                let binary = if path.is_dir() {
                    path.join("main.rs").exists()
                } else {
                    path.extension().is_some_and(|x| x == "rs")
                };
                binary.then_some(name)
            })
            .collect();
        if binaries.len() > TEST_BINARIES_MAX {
            problems.push(format!(
                "crates/{}/tests: {} integration-test binaries ({}); at most \
                 {TEST_BINARIES_MAX}: add a module to tests/it/ instead",
                krate.file_name().to_string_lossy(),
                binaries.len(),
                binaries.join(", ")
            ));
        }
    }
    problems
}
