//! Development tasks, run as `cargo xtask <task>`:
//!
//! - `ci`: what CI runs: `cargo fmt --check`, clippy with `-D warnings`, the tests.
//! - `tidy`: repository conventions (every Rust file opens with `//!`, no
//!   `should_panic`, no ignored tests); also a `#[test]`.
//! - `bench`: builds in release mode and runs `understudy-bench` with the
//!   gateway pinned to core 0 and the load generator and upstream on core 1;
//!   prints a table and writes `target/bench/latest.json`.

mod tidy;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    let result = match task.as_deref() {
        Some("ci") => ci(),
        Some("tidy") => tidy::check(&project_root()).map_err(|problems| problems.join("\n")),
        Some("bench") => bench(),
        _ => Err("usage: cargo xtask <ci|tidy|bench>".to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("xtask: {message}\n").as_bytes(),
            );
            ExitCode::FAILURE
        }
    }
}

/// The workspace root, from this crate's manifest directory.
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn ci() -> Result<(), String> {
    cargo(&["fmt", "--all", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    cargo(&["test", "--workspace"])
}

fn bench() -> Result<(), String> {
    cargo(&[
        "build",
        "--release",
        "--quiet",
        "-p",
        "understudy-cli",
        "-p",
        "understudy-testkit",
        "--bin",
        "understudy",
        "--bin",
        "understudy-bench",
    ])?;
    let root = project_root();
    let release = root.join("target").join("release");
    let out = root.join("target").join("bench");
    let pinned = Command::new("taskset")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let mut cmd = if pinned {
        let mut c = Command::new("taskset");
        c.args(["-c", "1"]).arg(release.join("understudy-bench"));
        c
    } else {
        Command::new(release.join("understudy-bench"))
    };
    cmd.arg(release.join("understudy")).arg(&out);
    if pinned {
        cmd.arg("0");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run the bench: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the bench failed ({status})"))
    }
}

fn cargo(args: &[&str]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .args(args)
        .current_dir(project_root())
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}
