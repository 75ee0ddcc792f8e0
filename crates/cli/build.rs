//! Names the commit the binary was built from, for `understudy --version`:
//! `git rev-parse` when building from a git checkout (a clone, `cargo
//! install --path`), `unknown` otherwise (a source archive). A checkout
//! with uncommitted changes says so (`-dirty`).

use std::process::Command;

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    // A new commit or checkout changes HEAD or the ref it points to.
    println!("cargo:rerun-if-changed={root}/.git/HEAD");
    println!("cargo:rerun-if-changed={root}/.git/refs/heads");
    println!("cargo:rerun-if-changed={root}/.git/index");
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
    let own_git = std::path::Path::new(root).join(".git").exists();
    let hash = if own_git {
        git(&["rev-parse", "--short=12", "HEAD"])
    } else {
        None
    };
    let commit = match hash {
        Some(hash) if !hash.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{hash}-dirty") } else { hash }
        }
        _ => "unknown".to_owned(),
    };
    println!("cargo:rustc-env=UNDERSTUDY_COMMIT={commit}");
}
