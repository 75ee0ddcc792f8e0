//! Development tasks, run as `cargo xtask <task>`:
//!
//! - `ci`: what CI runs: `cargo fmt --check`, clippy with `-D warnings`, the tests.
//! - `tidy`: repository conventions (every Rust file opens with `//!`, no
//!   `should_panic`, no ignored tests); also a `#[test]`.

mod tidy;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    let result = match task.as_deref() {
        Some("ci") => ci(),
        Some("tidy") => tidy::check(&project_root()).map_err(|problems| problems.join("\n")),
        _ => Err("usage: cargo xtask <ci|tidy>".to_owned()),
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
