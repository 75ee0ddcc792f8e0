//! The gateway's image from the real `Containerfile`: `cargo xtask image`
//! (Podman, else Docker, with the file's own base images) and
//! [`Podman::build_gateway_image`] (offline, on a builder base made from
//! the host's Rust toolchain).
//!
//! The offline builder base is an empty root with the host's `/usr`, the
//! toolchain (`rustc --print sysroot`) and the cargo home (its registry:
//! no network) mounted into the build, and `CARGO_TARGET_DIR` pointing at
//! `target/container/cargo-target`, which outlives the build: a second
//! build compiles only what changed.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Base, Podman, find_on_path, output};
use crate::{note, project_root};

/// Where the offline build's target directory is mounted in the builder.
const BUILD_TARGET: &str = "/cache/target";

/// The values of the image's OCI labels, passed as build arguments.
#[derive(Debug, Clone)]
pub(crate) struct ImageLabels {
    /// `org.opencontainers.image.version`: the workspace's version.
    pub(crate) version: String,
    /// `…revision`: the commit (with `-dirty` when files differ from it).
    pub(crate) revision: String,
    /// `…source`: the `origin` remote, without credentials.
    pub(crate) source: String,
    /// `…created`: the commit's time, so one commit builds one image.
    pub(crate) created: String,
}

// === impl ImageLabels ===

impl ImageLabels {
    /// The labels of the checkout at `root`; `unknown` where git cannot say.
    pub(crate) fn of_checkout(root: &Path) -> Self {
        let git = |args: &[&str]| {
            output(Command::new("git").arg("-C").arg(root).args(args))
                .ok()
                .filter(|s| !s.is_empty())
        };
        let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
        let revision = git(&["rev-parse", "HEAD"]).map_or_else(
            || "unknown".to_owned(),
            |rev| if dirty { format!("{rev}-dirty") } else { rev },
        );
        Self {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            revision,
            source: git(&["remote", "get-url", "origin"])
                .map_or_else(|| "unknown".to_owned(), |url| without_credentials(&url)),
            created: git(&["log", "-1", "--format=%cI"]).unwrap_or_else(|| "unknown".to_owned()),
        }
    }

    /// As arguments of `podman build` or `docker build`: the build
    /// arguments the `Containerfile`'s labels read, and the labels
    /// themselves (Podman 4's layer cache reuses a `LABEL` step whose
    /// build arguments changed; `--label` is applied to the image as built).
    fn build_args(&self) -> Vec<String> {
        let values = [
            ("VERSION", "version", &self.version),
            ("REVISION", "revision", &self.revision),
            ("SOURCE", "source", &self.source),
            ("CREATED", "created", &self.created),
        ];
        let mut args = Vec::new();
        for (arg, label, value) in values {
            args.push("--build-arg".to_owned());
            args.push(format!("{arg}={value}"));
            args.push("--label".to_owned());
            args.push(format!("org.opencontainers.image.{label}={value}"));
        }
        args
    }
}

// === impl Podman ===

impl Podman {
    /// Builds the real `Containerfile` offline (see the module's doc) as
    /// `localhost/understudy:<version>-local`; the tag.
    pub(crate) fn build_gateway_image(&self) -> Result<String, String> {
        let labels = ImageLabels::of_checkout(&project_root());
        let tag = format!("localhost/understudy:{}-local", labels.version);
        self.build_offline(&tag, &labels)?;
        Ok(tag)
    }

    /// `podman build` of the `Containerfile` on the local builder base.
    fn build_offline(&self, tag: &str, labels: &ImageLabels) -> Result<(), String> {
        let root = project_root();
        let toolchain = sysroot()?;
        let cargo_home = cargo_home()?;
        let cache = self.dir().join("cargo-target");
        std::fs::create_dir_all(&cache)
            .map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
        let mut base = Base::host_usr("understudy-builder");
        base.changes = vec![
            format!(
                "ENV PATH={}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
                toolchain.display()
            ),
            format!("ENV CARGO_HOME={}", cargo_home.display()),
            format!("ENV CARGO_TARGET_DIR={BUILD_TARGET}"),
            "ENV CARGO_NET_OFFLINE=true".to_owned(),
            "ENV HOME=/root".to_owned(),
        ];
        let builder = self.make_base(&base)?;
        let mut volumes = vec![
            "/usr:/usr:ro".to_owned(),
            format!("{}:{}", cargo_home.display(), cargo_home.display()),
            format!("{}:{BUILD_TARGET}", cache.display()),
        ];
        if !toolchain.starts_with("/usr") {
            volumes.push(format!(
                "{}:{}:ro",
                toolchain.display(),
                toolchain.display()
            ));
        }
        note(&format!("podman build {tag} (offline, builder {builder})"));
        let mut build = self.command();
        build.args(["build", "--network", "none", "--tag", tag]);
        for volume in &volumes {
            build.arg("--volume").arg(volume);
        }
        build
            .arg("--build-arg")
            .arg(format!("RUST_IMAGE={builder}"));
        build.args(labels.build_args());
        build
            .arg("--file")
            .arg(root.join("Containerfile"))
            .arg(&root);
        run_shown(&mut build)
    }
}

/// `cargo xtask image [--offline] [--tag TAG]`: builds the image with
/// Podman (else Docker) and prints its tag and size. `--offline` (Podman
/// only) builds on the local builder base instead of the file's own.
pub(crate) fn build_with(args: &[String]) -> Result<(), String> {
    let offline = args.iter().any(|a| a == "--offline");
    let labels = ImageLabels::of_checkout(&project_root());
    let tag = args
        .iter()
        .position(|a| a == "--tag")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| format!("localhost/understudy:{}", labels.version));
    if let Some(bad) = args
        .iter()
        .find(|a| a.starts_with("--") && *a != "--offline" && *a != "--tag")
    {
        return Err(format!(
            "cargo xtask image: unknown option {bad} (use --offline, --tag TAG)"
        ));
    }
    let size = if find_on_path("podman").is_some() {
        let podman = Podman::detect().map_err(|skip| skip.0)?;
        if offline {
            podman.build_offline(&tag, &labels)?;
        } else {
            run_shown(&mut default_build(podman.command(), &tag, &labels)).map_err(|e| {
                format!(
                    "{e}\nwithout a registry, `cargo xtask image --offline` builds on this \
                     machine's toolchain"
                )
            })?;
        }
        podman.image_size(&tag)?
    } else if find_on_path("docker").is_some() {
        if offline {
            return Err("--offline needs podman (docker build cannot mount volumes)".to_owned());
        }
        run_shown(&mut default_build(Command::new("docker"), &tag, &labels))?;
        let size = output(Command::new("docker").args([
            "image",
            "inspect",
            "--format",
            "{{.Size}}",
            &tag,
        ]))?;
        size.parse()
            .map_err(|e| format!("docker gave the size {size:?}: {e}"))?
    } else {
        return Err("neither podman nor docker is installed".to_owned());
    };
    let line = format!("{tag}\n{:.1} MB ({size} bytes)\n", size as f64 / 1e6);
    std::io::Write::write_all(&mut std::io::stdout(), line.as_bytes())
        .map_err(|e| format!("cannot write to stdout: {e}"))
}

/// `ENGINE build` of the `Containerfile` with its own base images.
fn default_build(mut engine: Command, tag: &str, labels: &ImageLabels) -> Command {
    let root = project_root();
    engine.args(["build", "--tag", tag]);
    engine.args(labels.build_args());
    engine
        .arg("--file")
        .arg(root.join("Containerfile"))
        .arg(&root);
    engine
}

/// Runs `cmd` with its output shown (a build's progress).
fn run_shown(cmd: &mut Command) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

/// The Rust toolchain's root (`bin/cargo`, `bin/rustc`): the one that
/// runs this task.
fn sysroot() -> Result<PathBuf, String> {
    let rustc = std::env::var_os("CARGO")
        .map(|cargo| PathBuf::from(cargo).with_file_name("rustc"))
        .filter(|rustc| rustc.is_file())
        .unwrap_or_else(|| PathBuf::from("rustc"));
    output(Command::new(rustc).args(["--print", "sysroot"])).map(PathBuf::from)
}

/// The cargo home: `CARGO_HOME`, else `~/.cargo`.
fn cargo_home() -> Result<PathBuf, String> {
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        return Ok(PathBuf::from(home));
    }
    std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cargo"))
        .ok_or_else(|| "neither CARGO_HOME nor HOME is set".to_owned())
}

/// `url` without a `user:password@` part in its authority.
fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn podman_and_docker_ignore_the_same_files() {
        let read = |name: &str| std::fs::read_to_string(crate::project_root().join(name));
        let (podman, docker) = (read(".containerignore"), read(".dockerignore"));
        assert!(podman.is_ok(), ".containerignore: {podman:?}");
        assert_eq!(
            podman.ok(),
            docker.ok(),
            ".dockerignore differs from .containerignore"
        );
    }

    #[test]
    fn remotes_lose_their_credentials() {
        let check = |url: &str, expected: &str| {
            assert_eq!(super::without_credentials(url), expected, "{url}");
        };
        check(
            "https://user:token@github.com/o/r.git",
            "https://github.com/o/r.git",
        );
        check("https://github.com/o/r.git", "https://github.com/o/r.git");
        check("https://github.com/o/r@v1", "https://github.com/o/r@v1");
        check("git@github.com:o/r.git", "git@github.com:o/r.git");
        check("ssh://git@host:22/o/r", "ssh://host:22/o/r");
    }
}
