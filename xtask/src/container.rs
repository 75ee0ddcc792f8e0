//! Podman for the container tests and `cargo xtask image`: finding it,
//! running it with the settings this kind of machine needs, images made
//! locally (no registry is needed), and containers that are removed when
//! their handle drops.
//!
//! Podman runs with `CONTAINERS_CONF` pointing at a file of ours under
//! `target/container/` ([`CONTAINERS_CONF`]): the `runc` runtime, the
//! `cgroupfs` cgroup manager, events to a file and no default ulimits
//! (raising a ulimit is refused inside unprivileged sandboxes and some CI
//! machines). Nothing under `/etc` is touched.
//!
//! The API other tasks use:
//! - [`Podman::detect`]: Podman, or a [`Skip`] saying why containers cannot
//!   run here (announce it with [`Skip::announce`]; never pass silently).
//! - [`Podman::run`]: `podman ARGS`, its stdout; [`Podman::command`] for
//!   more control; [`Podman::start`]: `podman run -d ARGS` as a
//!   [`Container`] (logs, signals, exit code; removed on drop).
//! - [`Podman::make_base`]: an image imported from a root assembled from
//!   host files ([`Base`]), tagged by its content, so a second call with
//!   the same content is free.
//! - [`Podman::build_gateway_image`]: the real `Containerfile`, built
//!   offline on a builder base made from the host's toolchain; returns the
//!   tag.
//! - [`Podman::make_redis_image`]: the host's `redis-server` and its
//!   libraries on an empty root; returns the tag.

mod base;
mod gateway;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) use base::Base;
pub(crate) use gateway::{ImageLabels, build_with};

use crate::{note, project_root};

/// Podman's settings for the tests, written to
/// `target/container/containers.conf` and passed as `CONTAINERS_CONF`.
pub(crate) const CONTAINERS_CONF: &str = "\
# Written by `cargo xtask` for its container tests (see xtask/src/container.rs).
[containers]
# Raising a ulimit is refused in unprivileged sandboxes: set none.
default_ulimits = []

[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
";

/// Why the container tests cannot run on this machine.
#[derive(Debug)]
pub(crate) struct Skip(pub(crate) String);

/// Podman, with the settings of [`CONTAINERS_CONF`].
#[derive(Debug, Clone)]
pub(crate) struct Podman {
    /// The `podman` binary.
    program: PathBuf,
    /// The containers.conf written for it.
    conf: PathBuf,
    /// `target/container`: the bases' roots, the build cache, the conf.
    dir: PathBuf,
}

/// A container started by [`Podman::start`]; `podman rm -f` on drop.
#[derive(Debug)]
pub(crate) struct Container {
    podman: Podman,
    /// The container's id.
    pub(crate) id: String,
}

// === impl Skip ===

impl Skip {
    /// Writes the loud line that says `what` did not run, and why.
    pub(crate) fn announce(&self, what: &str) {
        note(&format!(
            "\n*** SKIPPED: {what}: {} ***\n*** (the test did not run; it did not pass) ***",
            self.0
        ));
    }
}

// === impl Podman ===

impl Podman {
    /// Podman when it can run a container here: `podman` and `runc` on
    /// `PATH`, and a throwaway container (a base with the host's `/usr`
    /// mounted) runs `true`. Otherwise why not.
    pub(crate) fn detect() -> Result<Self, Skip> {
        let program = find_on_path("podman").ok_or_else(|| {
            Skip("podman is not installed (on Debian: apt-get install podman runc)".to_owned())
        })?;
        if find_on_path("runc").is_none() {
            return Err(Skip(
                "runc is not installed (on Debian: apt-get install runc)".to_owned(),
            ));
        }
        let root = project_root();
        let conf = write_conf(&root).map_err(Skip)?;
        let dir = root.join("target").join("container");
        let podman = Self { program, conf, dir };
        let probe = podman
            .make_base(&Base::host_usr("understudy-probe"))
            .map_err(|e| Skip(format!("podman cannot import an image here: {e}")))?;
        podman
            .run(&[
                "run",
                "--rm",
                "--network",
                "none",
                "--volume",
                "/usr:/usr:ro",
                &probe,
                "/usr/bin/true",
            ])
            .map_err(|e| Skip(format!("podman cannot run a container here: {e}")))?;
        Ok(podman)
    }

    /// `podman` with this machine's settings, to add arguments to.
    pub(crate) fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.env("CONTAINERS_CONF", &self.conf);
        cmd
    }

    /// Runs `podman ARGS`; its stdout (trimmed), or an error with its stderr.
    pub(crate) fn run(&self, args: &[&str]) -> Result<String, String> {
        output(self.command().args(args))
    }

    /// `podman run -d ARGS` (ARGS: options, the image, its arguments): the
    /// container, removed when the handle drops.
    pub(crate) fn start(&self, args: &[&str]) -> Result<Container, String> {
        let mut all = vec!["run", "-d"];
        all.extend_from_slice(args);
        let id = self.run(&all)?;
        Ok(Container {
            podman: self.clone(),
            id,
        })
    }

    /// The size of image `tag` in bytes, as `podman image inspect` gives it.
    pub(crate) fn image_size(&self, tag: &str) -> Result<u64, String> {
        let size = self.run(&["image", "inspect", "--format", "{{.Size}}", tag])?;
        size.parse()
            .map_err(|e| format!("podman gave {tag:?} the size {size:?}: {e}"))
    }

    /// `target/container`: where the bases' roots and the build cache live.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

// === impl Container ===

impl Container {
    /// What the container wrote to stdout and stderr so far.
    pub(crate) fn logs(&self) -> Result<String, String> {
        let out = self
            .podman
            .command()
            .args(["logs", &self.id])
            .output()
            .map_err(|e| format!("cannot run podman logs: {e}"))?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok(text)
    }

    /// Sends `signal` (`TERM`, `HUP`, …) to the container's main process.
    pub(crate) fn signal(&self, signal: &str) -> Result<(), String> {
        self.podman
            .run(&["kill", "--signal", signal, &self.id])
            .map(|_| ())
    }

    /// Waits for the container to exit; its exit code.
    pub(crate) fn wait(&self) -> Result<i32, String> {
        let code = self.podman.run(&["wait", &self.id])?;
        code.parse()
            .map_err(|e| format!("podman wait gave {code:?}: {e}"))
    }

    /// Whether the container is still running.
    pub(crate) fn running(&self) -> bool {
        self.podman
            .run(&["inspect", "--format", "{{.State.Running}}", &self.id])
            .is_ok_and(|s| s == "true")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.podman.command().args(["rm", "-f", &self.id]).output();
    }
}

/// Writes [`CONTAINERS_CONF`] to `target/container/containers.conf` under
/// the workspace `root`; its path.
pub(crate) fn write_conf(root: &Path) -> Result<PathBuf, String> {
    let dir = root.join("target").join("container");
    let conf = dir.join("containers.conf");
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&conf, CONTAINERS_CONF))
        .map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
    Ok(conf)
}

/// The first `name` in a directory of `PATH`.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Runs `cmd`: its stdout, trimmed, or an error with what it printed.
pub(crate) fn output(cmd: &mut Command) -> Result<String, String> {
    let shown = format!("{cmd:?}");
    let Output {
        status,
        stdout,
        stderr,
    } = cmd
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        return Ok(String::from_utf8_lossy(&stdout).trim().to_owned());
    }
    Err(format!(
        "{shown} failed ({status}):\n{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    ))
}
