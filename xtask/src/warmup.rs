//! The release build's dependencies, compiled while `cargo xtask test`
//! provisions: installing the Debian packages, the venv and the npm CLIs
//! waits on the network and leaves the CPU idle for minutes on a fresh
//! machine, and the release test (`cargo xtask dist`) later compiles every
//! crates.io dependency in release mode. A release build started first, in
//! its own process group, uses that time; it is interrupted once
//! provisioning ends, so that it never competes with the test suites, and
//! what it finished stays in `target/release` for the release test (cargo
//! keeps a dependency's artefacts whichever wrapper builds the workspace's
//! crates: `cargo auditable` reuses them).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::note;

/// A release build running in the background; interrupted when dropped.
pub(crate) struct Warmup {
    child: Option<Child>,
    started: Instant,
}

/// Starts `cargo build --release` of the binary in `root`, its output in
/// `target/release-warmup.log`. A failure to start is only noted: the
/// release test builds what it needs either way.
pub(crate) fn start(root: &Path) -> Warmup {
    let started = Instant::now();
    let log = root.join("target").join("release-warmup.log");
    let child = spawn(root, &log);
    match &child {
        Ok(_) => note(&format!(
            "compiling the release build's dependencies while provisioning (log: {})",
            log.display()
        )),
        Err(e) => note(&format!("no release warm-up: {e}")),
    }
    Warmup {
        child: child.ok(),
        started,
    }
}

/// The build, its output in `log`, in a process group of its own (so that
/// an interrupt reaches the compilers too).
fn spawn(root: &Path, log: &Path) -> std::io::Result<Child> {
    std::fs::create_dir_all(root.join("target"))?;
    let out = std::fs::File::create(log)?;
    let err = out.try_clone()?;
    crate::without_package_env(&mut Command::new(crate::dist::cargo_path()))
        .args(["build", "--release", "--locked", "-p", "understudy-cli"])
        .args(["--bin", "understudy"])
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
}

impl Warmup {
    /// Interrupts the build (cargo and its compilers) unless it is over,
    /// and waits for it.
    pub(crate) fn stop(mut self) {
        self.interrupt(true);
    }

    fn interrupt(&mut self, say: bool) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let finished = matches!(child.try_wait(), Ok(Some(_)));
        if !finished {
            let group = format!("-{}", child.id());
            let interrupted = Command::new("kill")
                .args(["-INT", "--", &group])
                .status()
                .is_ok_and(|s| s.success());
            if !interrupted {
                let _ = child.kill();
            }
        }
        let _ = child.wait();
        if say {
            let what = if finished { "finished" } else { "stopped" };
            note(&format!(
                "release warm-up {what} after {:.0?}",
                self.started.elapsed()
            ));
        }
    }
}

impl Drop for Warmup {
    fn drop(&mut self) {
        self.interrupt(false);
    }
}
