//! The release's test step (`cargo xtask test`, or alone as `cargo xtask
//! dist-test`): runs [`dist`](super::dist), then checks what a security
//! team would:
//!
//! - the archive lists the expected files, sorted, owned by 0/0, all dated
//!   the source's date, with their modes; making it again from the same
//!   files gives the same bytes;
//! - `sha256sum -c SHA256SUMS` passes;
//! - the unpacked binary prints its version and commit, and loads the
//!   example configuration (and refuses a broken one);
//! - the SBOM validates against the official CycloneDX 1.6 JSON schema
//!   (the copy `cyclonedx-python-lib` ships, offline), names the binary
//!   with its SHA-256, and holds exactly the crates `cargo tree` resolves
//!   for the binary;
//! - the dependency list embedded in the binary, read back with `objcopy`
//!   and zlib (nothing of `cargo auditable`'s), names the SBOM's crates
//!   and only those `cargo metadata` adds through a test's features.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use super::graph::NameVersion;
use super::json::Json;
use super::{BINARY, FILES, PACKAGE, Release, capture, cargo_tree, licence_files, sha256};
use crate::note;

/// Validates the SBOM file `argv[1]` against the CycloneDX schema of its
/// spec version; prints the first error and exits 1 when invalid.
const VALIDATE_SBOM: &str = "\
import sys
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
text = open(sys.argv[1], encoding='utf-8').read()
error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
if error is not None:
    print(error, file=sys.stderr)
    sys.exit(1)
";

/// Writes the zlib-decompressed bytes of file `argv[1]` to standard output.
const INFLATE: &str = "\
import sys, zlib
sys.stdout.buffer.write(zlib.decompress(open(sys.argv[1], 'rb').read()))
";

/// Runs `cargo xtask dist` and checks its output; `python` has
/// `cyclonedx-python-lib` with its JSON validation.
pub(crate) fn test(root: &Path, python: &Path) -> Result<(), String> {
    note("release test: cargo xtask dist");
    let release = super::dist(root)?;
    check_listing(root, &release)?;
    check_reproducible(&release)?;
    capture(
        Command::new("sha256sum")
            .args(["--check", "--strict", "SHA256SUMS"])
            .current_dir(&release.dir),
    )?;
    let unpacked = release.target_dir.join("dist-check");
    if unpacked.exists() {
        std::fs::remove_dir_all(&unpacked)
            .map_err(|e| format!("cannot clear {}: {e}", unpacked.display()))?;
    }
    std::fs::create_dir_all(&unpacked)
        .map_err(|e| format!("cannot create {}: {e}", unpacked.display()))?;
    capture(
        Command::new("tar")
            .args(["--extract", "--gzip", "--file"])
            .arg(&release.archive)
            .arg("--directory")
            .arg(&unpacked),
    )?;
    let top = unpacked.join(&release.top);
    check_binary(&top, &release)?;
    let resolved = cargo_tree(root, &release.target)?;
    let sbom_crates = check_sbom(python, &release, &top.join(BINARY))?;
    compare("the SBOM", &sbom_crates, "cargo tree", &resolved)?;
    // `cargo auditable` lists what `cargo metadata` resolves: the SBOM's
    // crates and those only a test's features add.
    let embedded = embedded_crates(python, &top.join(BINARY), &unpacked)?;
    let mut expected = sbom_crates.clone();
    expected.extend(release.metadata_only.iter().cloned());
    compare(
        "the embedded list",
        &embedded,
        "the SBOM and the metadata-only crates",
        &expected,
    )?;
    note(&format!(
        "release test passed: {} crates in the SBOM, as cargo tree resolves them; \
         the embedded list adds {} that only a test's features bring in",
        sbom_crates.len(),
        release.metadata_only.len()
    ));
    Ok(())
}

/// The archive's listing: the expected names in order, 0/0, one date, modes.
fn check_listing(root: &Path, release: &Release) -> Result<(), String> {
    let listing = capture(
        Command::new("tar")
            .args(["--list", "--verbose", "--numeric-owner", "--gzip", "--file"])
            .arg(&release.archive)
            .env("TZ", "UTC"),
    )?;
    let mut expected = vec![(format!("{}/", release.top), "drwxr-xr-x")];
    // What the repository has, not what `dist` says it staged.
    let mut files: Vec<(String, &str)> = FILES
        .iter()
        .filter(|(from, _)| root.join(from).exists())
        .map(|(_, to)| ((*to).to_owned(), "-rw-r--r--"))
        .chain(licence_files(root).into_iter().map(|n| (n, "-rw-r--r--")))
        .chain([(BINARY.to_owned(), "-rwxr-xr-x")])
        .collect();
    files.sort();
    expected.extend(
        files
            .into_iter()
            .map(|(n, m)| (format!("{}/{n}", release.top), m)),
    );
    if !release.missing.is_empty() {
        return Err(format!("the release lacks {}", release.missing.join(", ")));
    }
    let date = super::sbom::rfc3339(release.epoch).replace('T', " ");
    let date = &date[..16];
    let lines: Vec<&str> = listing.lines().collect();
    if lines.len() != expected.len() {
        return Err(format!("the archive lists\n{listing}expected {expected:?}"));
    }
    for (line, (name, mode)) in lines.iter().zip(&expected) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let ok = fields.len() == 6
            && fields[0] == *mode
            && fields[1] == "0/0"
            && format!("{} {}", fields[3], fields[4]) == date
            && fields[5] == name;
        if !ok {
            return Err(format!(
                "archive entry `{line}`: expected {mode} 0/0 {date} {name}"
            ));
        }
    }
    Ok(())
}

/// The archive made again from the same staged files is the same bytes.
fn check_reproducible(release: &Release) -> Result<(), String> {
    let again = release.target_dir.join("dist-stage").join("again.tar.gz");
    super::write_archive(&release.stage, &again, release.epoch)?;
    let (first, second) = (sha256(&release.archive)?, sha256(&again)?);
    let _ = std::fs::remove_file(&again);
    if first == second {
        Ok(())
    } else {
        Err(format!(
            "the archive is not reproducible: {first} then {second} from the same files"
        ))
    }
}

/// The unpacked binary names its version and commit and loads the example
/// configuration; a configuration with an unknown key is refused, so the
/// load is known to have read the file.
fn check_binary(top: &Path, release: &Release) -> Result<(), String> {
    let binary = top.join(BINARY);
    let version = capture(Command::new(&binary).arg("--version"))?;
    if !version.contains(&release.version) || !version.contains("commit") {
        return Err(format!("`{BINARY} --version` printed {version:?}"));
    }
    let load = |config: &Path| {
        Command::new(&binary)
            .arg("--config")
            .arg(config)
            .args(["providers", "--json"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", binary.display()))
    };
    let example = top.join("understudy.example.toml");
    if example.exists() {
        let out = load(&example)?;
        if !out.status.success() {
            return Err(format!(
                "the example configuration does not load: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let broken = top.join("broken.toml");
        std::fs::write(&broken, "[routing]\nno_such_setting = 1\n")
            .map_err(|e| format!("cannot write {}: {e}", broken.display()))?;
        if load(&broken)?.status.success() {
            return Err(
                "a configuration with an unknown key loaded: the check proves nothing".into(),
            );
        }
    }
    Ok(())
}

/// Validates the SBOM and checks that its root is the binary; returns its
/// crates (the root included).
fn check_sbom(
    python: &Path,
    release: &Release,
    binary: &Path,
) -> Result<BTreeSet<NameVersion>, String> {
    capture(
        Command::new(python)
            .args(["-c", VALIDATE_SBOM])
            .arg(&release.sbom),
    )
    .map_err(|e| format!("the SBOM does not validate against the CycloneDX schema: {e}"))?;
    let text = std::fs::read_to_string(&release.sbom)
        .map_err(|e| format!("cannot read {}: {e}", release.sbom.display()))?;
    let sbom = Json::parse(&text)?;
    let root = sbom
        .get("metadata")
        .and_then(|m| m.get("component"))
        .ok_or("the SBOM has no metadata.component")?;
    let hash = root
        .get("hashes")
        .map(Json::items)
        .and_then(|h| h.first())
        .map(|h| h.str_at("content"))
        .transpose()?;
    if root.str_at("name")? != BINARY || hash != Some(sha256(binary)?.as_str()) {
        return Err(format!(
            "the SBOM's metadata.component is not the binary: {root:?}"
        ));
    }
    let root_crate = &release.graph.crates[release.graph.root];
    let mut crates = BTreeSet::from([(root_crate.name.clone(), root_crate.version.clone())]);
    for component in sbom.get("components").map(Json::items).unwrap_or_default() {
        crates.insert((
            component.str_at("name")?.to_owned(),
            component.str_at("version")?.to_owned(),
        ));
    }
    Ok(crates)
}

/// The crates of the list embedded in `binary`: its `.dep-v0` section
/// dumped by `objcopy`, inflated by Python's zlib, read as JSON.
fn embedded_crates(
    python: &Path,
    binary: &Path,
    scratch: &Path,
) -> Result<BTreeSet<NameVersion>, String> {
    let section = scratch.join("dep-v0.zlib");
    capture(
        Command::new("objcopy")
            .arg(format!("--dump-section=.dep-v0={}", section.display()))
            .arg(binary)
            .arg(scratch.join("objcopy-out")),
    )
    .map_err(|e| format!("the binary has no readable .dep-v0 section: {e}"))?;
    let json = capture(Command::new(python).args(["-c", INFLATE]).arg(&section))?;
    let list = Json::parse(&json)?;
    let packages = list.get("packages").map(Json::items).unwrap_or_default();
    let roots: Vec<&str> = packages
        .iter()
        .filter(|p| p.get("root") == Some(&Json::Bool(true)))
        .filter_map(|p| p.get("name").and_then(Json::as_str))
        .collect();
    if roots != [PACKAGE] {
        return Err(format!(
            "the embedded list's root is {roots:?}, not {PACKAGE}"
        ));
    }
    let mut crates = BTreeSet::new();
    for package in packages {
        for dep in package
            .get("dependencies")
            .map(Json::items)
            .unwrap_or_default()
        {
            let in_range = matches!(dep, Json::Number(n) if n.parse::<usize>().is_ok_and(|i| i < packages.len()));
            if !in_range {
                return Err(format!(
                    "the embedded list has a bad dependency index {dep:?}"
                ));
            }
        }
        crates.insert((
            package.str_at("name")?.to_owned(),
            package.str_at("version")?.to_owned(),
        ));
    }
    Ok(crates)
}

fn compare(
    a_name: &str,
    a: &BTreeSet<NameVersion>,
    b_name: &str,
    b: &BTreeSet<NameVersion>,
) -> Result<(), String> {
    if a == b {
        return Ok(());
    }
    Err(format!(
        "{a_name} and {b_name} differ: only in {a_name}: {:?}; only in {b_name}: {:?}",
        a.difference(b).collect::<Vec<_>>(),
        b.difference(a).collect::<Vec<_>>()
    ))
}
