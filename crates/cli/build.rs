//! Names the commit the binary was built from, for `understudy --version`:
//! `UNDERSTUDY_COMMIT` when the build sets it (a container build, whose
//! context has no `.git`), else `git rev-parse` when building from a git
//! checkout (a clone, a worktree, `cargo install --path`), `unknown`
//! otherwise (a source archive). A checkout with uncommitted changes says
//! so (`-dirty`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    println!("cargo:rerun-if-env-changed=UNDERSTUDY_COMMIT");
    // Without any path to watch, cargo would run this on every build.
    println!("cargo:rerun-if-changed=build.rs");
    let commit = match std::env::var("UNDERSTUDY_COMMIT") {
        Ok(given) if !given.trim().is_empty() => given.trim().to_owned(),
        _ => from_git(root).unwrap_or_else(|| "unknown".to_owned()),
    };
    println!("cargo:rustc-env=UNDERSTUDY_COMMIT={commit}");
}

/// The checkout's commit, watching what moves when it changes.
fn from_git(root: &str) -> Option<String> {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(["-C", root])
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
    };
    // Only this checkout's own git: a source archive unpacked inside some
    // other repository (a home directory kept in git) must not take its
    // commit. `.git` is a folder in a clone, a file in a worktree.
    if !Path::new(root).join(".git").exists() {
        return None;
    }
    // A new commit or checkout changes HEAD, the ref it points to or the
    // index; in a worktree HEAD and the index are its own, the refs shared.
    let dir = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from);
    let common = git(&["rev-parse", "--git-common-dir"]).map(|c| Path::new(root).join(c));
    let watched = [
        dir.as_ref().map(|d| d.join("HEAD")),
        dir.as_ref().map(|d| d.join("index")),
        common.as_ref().map(|c| c.join("refs/heads")),
        common.as_ref().map(|c| c.join("packed-refs")),
    ];
    for path in watched.into_iter().flatten().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let hash = git(&["rev-parse", "--short=12", "HEAD"]).filter(|h| !h.is_empty())?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}
