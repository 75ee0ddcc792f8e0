//! `cargo xtask dist`: the release a security team can check, written to
//! `target/dist/` (replaced on each run):
//!
//! - `understudy-<version>-<target>.tar.gz`: one top directory holding the
//!   release binary, `README.md`, the licence files at the repository's
//!   root, `understudy.example.toml` and the systemd unit
//!   `understudy.service`. Entries sorted, every mtime the source's date
//!   (`SOURCE_DATE_EPOCH`, else the commit's time), owner and group 0,
//!   modes 0755/0644, gzip without a name or time: the same files give
//!   the same bytes.
//! - `understudy-<version>-<target>.cdx.json`: the CycloneDX SBOM of the
//!   binary's crates (`sbom.rs`).
//! - `SHA256SUMS`: `sha256sum`'s lines for the two.
//!
//! The binary is built by `cargo auditable build`, which embeds its
//! dependency list (zlib-compressed JSON in the `.dep-v0` linker section)
//! for `cargo audit bin`, syft and trivy. `cargo-auditable`, pinned, is
//! installed into `target/dist-tools` when missing.
//!
//! # Layout
//! - `json`: the JSON reader and writer the tasks use.
//! - `graph`: the binary's crates from `cargo metadata` and `Cargo.lock`.
//! - `sbom`: the CycloneDX document.
//! - `verify`: the test step that checks all of it (`cargo xtask test`).

mod graph;
mod json;
mod sbom;
pub(crate) mod verify;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::note;
use graph::{Graph, NameVersion};
use json::Json;

/// The pinned `cargo-auditable`: the next run installs another version.
const AUDITABLE_VERSION: &str = "0.7.7";
/// The package and binary released.
const PACKAGE: &str = "understudy-cli";
const BINARY: &str = "understudy";
/// Files copied into the archive besides the binary and the licences:
/// (path in the repository, name in the archive). One the repository
/// lacks is left out with a note (and [`Release::missing`] names it).
const FILES: &[(&str, &str)] = &[
    ("README.md", "README.md"),
    ("deploy/understudy.example.toml", "understudy.example.toml"),
    ("deploy/systemd/understudy.service", "understudy.service"),
];

/// What one run of [`dist`] wrote.
#[derive(Debug)]
pub(crate) struct Release {
    /// `target/dist`.
    pub(crate) dir: PathBuf,
    pub(crate) archive: PathBuf,
    pub(crate) sbom: PathBuf,
    /// The archive's top directory, `understudy-<version>-<target>`.
    pub(crate) top: String,
    /// Files the archive should hold but the repository does not have.
    pub(crate) missing: Vec<String>,
    /// The staged top directory the archive was made from.
    pub(crate) stage: PathBuf,
    pub(crate) target: String,
    pub(crate) version: String,
    pub(crate) epoch: u64,
    pub(crate) graph: Graph,
    /// Crates `cargo metadata` resolves for the binary but cargo builds it
    /// without (a feature only a test turns on): left out of the SBOM,
    /// named by the embedded list.
    pub(crate) metadata_only: Vec<NameVersion>,
    pub(crate) target_dir: PathBuf,
}

/// Builds the binary and writes the archive, the SBOM and `SHA256SUMS`.
pub(crate) fn dist(root: &Path) -> Result<Release, String> {
    let target = host_target()?;
    let metadata = Json::parse(&capture(
        Command::new(cargo_path())
            .args(["metadata", "--format-version", "1", "--locked"])
            .args(["--filter-platform", &target])
            .current_dir(root),
    )?)?;
    let target_dir = PathBuf::from(metadata.str_at("target_directory")?);
    let lock = std::fs::read_to_string(root.join("Cargo.lock"))
        .map_err(|e| format!("cannot read Cargo.lock: {e}"))?;
    let mut graph = graph::graph(&metadata, PACKAGE, &lock)?;
    let metadata_only = graph.retain(&cargo_tree(root, &target)?);
    if !metadata_only.is_empty() {
        note(&format!(
            "{} crates that only a test's features bring in are left out of the SBOM \
             (the embedded list names them)",
            metadata_only.len()
        ));
    }
    let version = graph.crates[graph.root].version.clone();
    let tools = install_auditable(&target_dir)?;
    build(root, &tools)?;

    let epoch = source_date_epoch(root);
    let top = format!("{BINARY}-{version}-{target}");
    let dir = target_dir.join("dist");
    let stage = target_dir.join("dist-stage").join(&top);
    for fresh in [&dir, &stage] {
        if fresh.exists() {
            std::fs::remove_dir_all(fresh)
                .map_err(|e| format!("cannot clear {}: {e}", fresh.display()))?;
        }
        mkdir(fresh)?;
    }
    let binary = target_dir.join("release").join(BINARY);
    let missing = stage_files(root, &binary, &stage)?;
    let archive = dir.join(format!("{top}.tar.gz"));
    write_archive(&stage, &archive, epoch)?;

    let binary_sha256 = sha256(&stage.join(BINARY))?;
    let archive_sha256 = sha256(&archive)?;
    let release = sbom::Release {
        name: BINARY,
        version: &version,
        target: &target,
        binary_sha256: &binary_sha256,
        archive_sha256: &archive_sha256,
        epoch,
    };
    let sbom_path = dir.join(format!("{top}.cdx.json"));
    write(&sbom_path, &sbom::sbom(&graph, &release).pretty())?;
    let sums = capture(
        Command::new("sha256sum")
            .arg(file_name(&archive))
            .arg(file_name(&sbom_path))
            .current_dir(&dir),
    )?;
    write(&dir.join("SHA256SUMS"), &sums)?;
    note(&format!("wrote {}", dir.display()));
    Ok(Release {
        dir,
        archive,
        sbom: sbom_path,
        top,
        missing,
        stage,
        target,
        version,
        epoch,
        graph,
        metadata_only,
        target_dir,
    })
}

/// Installs the pinned `cargo-auditable` into `<target>/dist-tools` unless
/// that version is there; returns its `bin` directory.
fn install_auditable(target_dir: &Path) -> Result<PathBuf, String> {
    let tools = target_dir.join("dist-tools");
    let record = std::fs::read_to_string(tools.join(".crates.toml")).unwrap_or_default();
    let installed = format!("\"cargo-auditable {AUDITABLE_VERSION} ");
    if !record.contains(&installed) || !tools.join("bin").join("cargo-auditable").exists() {
        note(&format!(
            "installing cargo-auditable {AUDITABLE_VERSION} into {}",
            tools.display()
        ));
        let started = std::time::Instant::now();
        let status = Command::new(cargo_path())
            .args(["install", "--locked", "--quiet", "cargo-auditable"])
            .args(["--version", AUDITABLE_VERSION, "--root"])
            .arg(&tools)
            .status()
            .map_err(|e| format!("cannot run cargo install: {e}"))?;
        if !status.success() {
            return Err(format!("installing cargo-auditable failed ({status})"));
        }
        note(&format!(
            "installed cargo-auditable in {:.0?}",
            started.elapsed()
        ));
    }
    Ok(tools.join("bin"))
}

/// `cargo auditable build --release` of the binary, with `tools` first on
/// `PATH` so that cargo finds the subcommand.
fn build(root: &Path, tools: &Path) -> Result<(), String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(tools.to_path_buf()).chain(std::env::split_paths(&path)),
    )
    .map_err(|e| format!("cannot extend PATH: {e}"))?;
    note("cargo auditable build --release");
    let started = std::time::Instant::now();
    let status = crate::without_package_env(&mut Command::new(cargo_path()))
        .args(["auditable", "build", "--release", "--locked"])
        .args(["-p", PACKAGE, "--bin", BINARY])
        .env("PATH", path)
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo auditable: {e}"))?;
    if !status.success() {
        return Err(format!("`cargo auditable build` failed ({status})"));
    }
    note(&format!(
        "built the release binary in {:.0?}",
        started.elapsed()
    ));
    Ok(())
}

/// Copies the binary and the release's files into `stage`; returns the
/// repository files that are missing.
fn stage_files(root: &Path, binary: &Path, stage: &Path) -> Result<Vec<String>, String> {
    let mut copies = vec![(binary.to_path_buf(), BINARY.to_owned(), 0o755)];
    let mut missing = Vec::new();
    for (from, to) in FILES {
        if root.join(from).exists() {
            copies.push((root.join(from), (*to).to_owned(), 0o644));
        } else {
            missing.push((*from).to_owned());
        }
    }
    let licences = licence_files(root);
    if licences.is_empty() {
        missing.push("a licence file (LICENSE*, LICENCE*, COPYING*)".to_owned());
    }
    for name in licences {
        copies.push((root.join(&name), name, 0o644));
    }
    for (from, to, mode) in &copies {
        let dest = stage.join(to);
        std::fs::copy(from, &dest)
            .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), dest.display()))?;
        set_mode(&dest, *mode)?;
    }
    set_mode(stage, 0o755)?;
    for gap in &missing {
        note(&format!(
            "NOTE: the release lacks {gap}: it is not in the repository"
        ));
    }
    Ok(missing)
}

/// The licence files at the repository's root, sorted.
fn licence_files(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            let upper = n.to_ascii_uppercase();
            ["LICENSE", "LICENCE", "COPYING"]
                .iter()
                .any(|p| upper.starts_with(p))
        })
        .collect();
    names.sort();
    names
}

/// Archives the directory `stage` (as its own name) into `out`: GNU tar
/// with sorted names, one mtime, numeric owner 0, piped to `gzip -n`.
pub(crate) fn write_archive(stage: &Path, out: &Path, epoch: u64) -> Result<(), String> {
    let parent = stage.parent().ok_or("the stage has no parent")?;
    let file =
        std::fs::File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut tar = Command::new("tar")
        .args(["--create", "--format=ustar", "--sort=name"])
        .arg(format!("--mtime=@{epoch}"))
        .args(["--owner=0", "--group=0", "--numeric-owner"])
        .args(["--mode=go-w", "--file=-", "--directory"])
        .arg(parent)
        .arg(file_name(stage))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run GNU tar: {e}"))?;
    let tar_out = tar.stdout.take().ok_or("tar has no output")?;
    let gzip = Command::new("gzip")
        .args(["-9", "-n"])
        .stdin(tar_out)
        .stdout(file)
        .status()
        .map_err(|e| format!("cannot run gzip: {e}"));
    let tar = tar.wait().map_err(|e| format!("tar: {e}"))?;
    let gzip = gzip?;
    if tar.success() && gzip.success() {
        Ok(())
    } else {
        Err(format!(
            "making {} failed (tar {tar}, gzip {gzip}; GNU tar 1.28 or later is needed)",
            out.display()
        ))
    }
}

/// `SOURCE_DATE_EPOCH`, else the time of the commit checked out, else 0.
fn source_date_epoch(root: &Path) -> u64 {
    if let Some(epoch) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        return epoch;
    }
    let commit = Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok());
    commit.unwrap_or_else(|| {
        note("no SOURCE_DATE_EPOCH and no git commit: the archive's files are dated 1970");
        0
    })
}

/// The host's target triple, from `rustc -vV`.
fn host_target() -> Result<String, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = capture(Command::new(rustc).arg("-vV"))?;
    out.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|t| t.trim().to_owned())
        .ok_or_else(|| "rustc -vV names no host".to_owned())
}

/// The SHA-256 of a file, hex, by `sha256sum`.
pub(crate) fn sha256(path: &Path) -> Result<String, String> {
    let out = capture(Command::new("sha256sum").arg(path))?;
    out.split_whitespace()
        .next()
        .map(str::to_owned)
        .ok_or_else(|| format!("sha256sum printed nothing for {}", path.display()))
}

/// The crates `cargo tree` resolves for the binary on `target` through
/// normal and build dependencies: cargo's own answer, not ours.
pub(crate) fn cargo_tree(root: &Path, target: &str) -> Result<BTreeSet<NameVersion>, String> {
    let out = capture(
        Command::new(cargo_path())
            .args(["tree", "--locked", "-p", PACKAGE, "--edges", "normal,build"])
            .args(["--target", target, "--prefix", "none", "--format", "{p}"])
            .current_dir(root),
    )?;
    let mut crates = BTreeSet::new();
    for line in out.lines() {
        let mut words = line.split_whitespace();
        if let (Some(name), Some(version)) = (words.next(), words.next()) {
            let version = version.strip_prefix('v').unwrap_or(version);
            crates.insert((name.to_owned(), version.to_owned()));
        }
    }
    if crates.is_empty() {
        return Err("cargo tree listed no crate".to_owned());
    }
    Ok(crates)
}

/// `$CARGO`, else `cargo`.
pub(crate) fn cargo_path() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// Runs `cmd` and returns its standard output, or an error with its
/// standard error.
pub(crate) fn capture(cmd: &mut Command) -> Result<String, String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("{shown} printed something not UTF-8"))
}

fn file_name(path: &Path) -> &std::ffi::OsStr {
    path.file_name().unwrap_or(path.as_os_str())
}

fn mkdir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))
}
