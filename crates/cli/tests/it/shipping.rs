//! The binary a user ships (`cargo install --locked --path crates/cli`, the
//! same build as `cargo build --release -p understudy-cli`): no test-only
//! code, and a release profile that leaves out what a deployment does not
//! need. Cheap checks of the manifests, through cargo itself: nothing is
//! built.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..")
}

/// `understudy-* vX (path) [feature,feature]` for every workspace crate in
/// the binary's build, as cargo resolves features for it: normal and build
/// dependencies only (dev-dependencies' features are not unified into a
/// build of the binary alone, and `cargo install` never builds them).
fn shipped_workspace_crates() -> Vec<(String, Vec<String>)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(&cargo)
        .current_dir(workspace_root())
        .args(["tree", "--locked", "-p", "understudy-cli"])
        .args(["--edges", "normal,build", "--prefix", "none"])
        .args(["--format", "{p} [{f}]"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "`{cargo} tree` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut crates: Vec<(String, Vec<String>)> = stdout
        .lines()
        .filter(|l| l.starts_with("understudy-"))
        .map(|l| {
            let name = l.split(' ').next().unwrap().to_owned();
            let features = l
                .rsplit_once('[')
                .and_then(|(_, f)| f.split_once(']'))
                .map(|(f, _)| f)
                .unwrap_or_default();
            let features = features
                .split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_owned)
                .collect();
            (name, features)
        })
        .collect();
    crates.sort();
    crates.dedup();
    crates
}

#[test]
fn the_shipped_binary_carries_no_test_only_code() {
    let crates = shipped_workspace_crates();
    let features = |name: &str| {
        crates
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("{name} is not in the binary's build: {crates:?}"))
    };
    // The demo's simulators, and nothing else of the testkit: its features
    // (`test-support`, `fault-injection`, `tls`) are all for tests.
    assert_eq!(
        features("understudy-testkit"),
        Vec::<String>::new(),
        "the binary's testkit must be built without features (enable them from \
         [dev-dependencies] only)"
    );
    assert!(
        !features("understudy-core").contains(&"fault-injection".to_owned()),
        "core's fault-injection (a message that crashes a provider actor) is in the binary"
    );
}

#[test]
fn the_release_profile_strips_symbols_and_debug_info() {
    let path = workspace_root().join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let manifest: toml::Table = text.parse().unwrap();
    let release = manifest
        .get("profile")
        .and_then(|p| p.get("release"))
        .and_then(toml::Value::as_table)
        .unwrap_or_else(|| panic!("{} has no [profile.release]", path.display()));
    let strip = release.get("strip");
    assert!(
        matches!(
            strip,
            Some(toml::Value::String(s)) if s == "symbols"
        ) || matches!(strip, Some(toml::Value::Boolean(true))),
        "[profile.release] strip = {strip:?}: the shipped binary keeps its symbols \
         (use the `profiling` profile for those)"
    );
    let debug = release.get("debug");
    assert!(
        match debug {
            None => true,
            Some(toml::Value::Boolean(b)) => !b,
            Some(toml::Value::Integer(n)) => *n == 0,
            Some(toml::Value::String(s)) => s == "none",
            Some(_) => false,
        },
        "[profile.release] debug = {debug:?}: the shipped binary carries debug info \
         (use the `profiling` profile for that)"
    );
}
