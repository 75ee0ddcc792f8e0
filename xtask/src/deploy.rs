//! The deployment files' checks, run by `cargo xtask test` after the
//! workspace's tests:
//!
//! - `kubectl kustomize` renders `deploy/kubernetes` and each overlay
//!   ([`KUSTOMIZATIONS`]) into `target/deploy/`;
//! - `tests/deploy/validate.py` validates every rendered object offline
//!   against the Kubernetes schemas (`kubernetes-validate`, in the venv),
//!   the ServiceMonitor structurally, and holds the gateway's Deployment
//!   to its rules; it writes the base's objects as JSON for the fleet test;
//! - `systemd-analyze verify` checks `deploy/systemd/understudy.service`
//!   (rendered with `ExecStart` on the binary the tests built, as verify
//!   wants an executable there), and `systemd-analyze security` holds its
//!   exposure to at most [`MAX_EXPOSURE`].
//!
//! The fleet test that plays the rendered objects under Podman is
//! [`crate::fleet`].

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::note;

/// The kustomizations rendered, each to `target/deploy/<name>.yaml`: the
/// base first (its objects are what the fleet test plays).
pub(crate) const KUSTOMIZATIONS: &[(&str, &str)] = &[
    ("kubernetes", "deploy/kubernetes"),
    (
        "prometheus-operator",
        "deploy/kubernetes/overlays/prometheus-operator",
    ),
    ("managed-redis", "deploy/kubernetes/overlays/managed-redis"),
];

/// The highest exposure `systemd-analyze security` may give the unit, on
/// its scale of 0 to 100 (it prints a tenth of it: 2.0 is "OK").
const MAX_EXPOSURE: &str = "20";

/// The unit file, and the binary path its `ExecStart` names.
const UNIT: &str = "deploy/systemd/understudy.service";
const UNIT_BINARY: &str = "/usr/local/bin/understudy";

/// Where the rendered files go, and the base's objects as JSON.
pub(crate) fn out_dir(root: &Path) -> PathBuf {
    root.join("target").join("deploy")
}

/// The base's rendered objects, as `validate.py` writes them.
pub(crate) fn objects_json(root: &Path) -> PathBuf {
    out_dir(root).join("kubernetes.json")
}

/// Renders, validates and verifies; `python` is the venv's interpreter,
/// `binary` the `understudy` the unit is verified with.
pub(crate) fn check(root: &Path, python: &Path, binary: &Path) -> Result<(), String> {
    let out = out_dir(root);
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut rendered = Vec::new();
    for (name, dir) in KUSTOMIZATIONS {
        rendered.push(render(root, dir, &out.join(format!("{name}.yaml")))?);
    }
    note("validating the rendered manifests offline (kubernetes-validate)");
    run_checked(
        Command::new(python)
            .arg(root.join("tests").join("deploy").join("validate.py"))
            .arg(objects_json(root))
            .args(&rendered),
    )?;
    verify_unit(root, &out, binary)
}

/// `kubectl kustomize DIR` into `to`; its path.
fn render(root: &Path, dir: &str, to: &Path) -> Result<PathBuf, String> {
    note(&format!("kubectl kustomize {dir}"));
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(root.join(dir))
        .output()
        .map_err(|e| format!("cannot run kubectl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`kubectl kustomize {dir}` failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(to, &out.stdout).map_err(|e| format!("cannot write {}: {e}", to.display()))?;
    Ok(to.to_owned())
}

/// `systemd-analyze verify` and `security` on the unit, its `ExecStart`
/// pointed at `binary`: both must pass, and verify must print nothing (it
/// warns of an unknown setting and still exits 0).
fn verify_unit(root: &Path, out: &Path, binary: &Path) -> Result<(), String> {
    note(&format!("systemd-analyze verify {UNIT}"));
    let text =
        std::fs::read_to_string(root.join(UNIT)).map_err(|e| format!("cannot read {UNIT}: {e}"))?;
    if !text.contains(&format!("ExecStart={UNIT_BINARY} ")) {
        return Err(format!("{UNIT}: ExecStart no longer runs {UNIT_BINARY}"));
    }
    let binary = binary
        .canonicalize()
        .map_err(|e| format!("the binary {} is missing: {e}", binary.display()))?;
    let unit = out.join("understudy.service");
    let text = text.replace(
        &format!("ExecStart={UNIT_BINARY} "),
        &format!("ExecStart={} ", binary.display()),
    );
    std::fs::write(&unit, text).map_err(|e| format!("cannot write {}: {e}", unit.display()))?;
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .map_err(|e| format!("cannot run systemd-analyze: {e}"))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    if !verify.status.success() || !said.trim().is_empty() {
        return Err(format!(
            "`systemd-analyze verify` on {UNIT} ({}):\n{said}",
            verify.status
        ));
    }
    run_checked(
        Command::new("systemd-analyze")
            .args(["security", "--offline=true"])
            .arg(format!("--threshold={MAX_EXPOSURE}"))
            .arg(&unit),
    )
}

/// Runs `cmd`, its output shown; an error when it fails.
fn run_checked(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        for line in said
            .lines()
            .filter(|l| l.starts_with("validated ") || l.contains("Overall exposure level"))
        {
            note(line.trim_start_matches("→ "));
        }
        return Ok(());
    }
    Err(format!("{shown} failed ({}):\n{said}", out.status))
}
