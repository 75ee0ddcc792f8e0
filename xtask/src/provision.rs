//! What the test suites need on a fresh machine, found or installed before
//! `cargo xtask test` (and `cargo xtask ci`) run them: `redis-server` on
//! `PATH`, Chromium for the browser test, a private Python venv in
//! `target/test-venv` holding the packages of [`PYTHON_PACKAGES`] (the
//! `openai`, `anthropic`, `openai-agents` and `google-genai` SDKs, and
//! `opentelemetry-proto` and `grpcio` for the OTLP receiver,
//! `cyclonedx-python-lib` for the release test's SBOM check), `objcopy`
//! (binutils) for its embedded dependency list, and the
//! agent CLIs of [`NPM_PACKAGES`] (Claude Code, Codex, Gemini CLI) installed
//! with the machine's npm into `target/test-npm`. For the container test:
//! `podman` and `runc` (as root only), and Podman's settings for it in
//! `target/container/containers.conf`. For the deployment check: `kubectl`
//! and `systemd-analyze` ([`DEPLOY_TOOLS`]) and the venv's
//! `kubernetes-validate`.
//!
//! System packages come from Debian's apt, in one `apt-get install`, and only
//! when running as root; otherwise the error gives the command to run. The
//! venv's packages are installed only when they cannot be imported (or, when
//! pinned, their installed version is another), and the npm packages only when their binary does not print the pinned version, so
//! a second run touches neither apt, PyPI nor npm and works offline.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::note;

/// The Python packages the tests import, installed into the venv. To add
/// one, add a line: the next run installs it. A requirement pinned with
/// `==` is reinstalled when the venv holds another version.
pub(crate) const PYTHON_PACKAGES: &[PythonPackage] = &[
    PythonPackage {
        requirement: "openai",
        import: "openai",
    },
    PythonPackage {
        requirement: "anthropic",
        import: "anthropic",
    },
    PythonPackage {
        requirement: "openai-agents",
        import: "agents",
    },
    // Pinned: the Gemini front end's tests check the exact requests this
    // version sends (`v1` paths, snake_case `parameters_json_schema`).
    PythonPackage {
        requirement: "google-genai==3.6.1",
        import: "google.genai",
    },
    // The OpenTelemetry project's own protobuf messages: the traces tests'
    // OTLP receiver decodes what the gateway exports with them.
    PythonPackage {
        requirement: "opentelemetry-proto==1.45.2",
        import: "opentelemetry.proto",
    },
    // gRPC for the receiver's OTLP/gRPC side (the traces tests' gRPC
    // export), with the service opentelemetry-proto generates for it.
    PythonPackage {
        requirement: "grpcio==1.76.0",
        import: "grpc",
    },
    // The release test validates the SBOM against the CycloneDX JSON
    // schemas this package ships (offline), with its `jsonschema` extra.
    PythonPackage {
        requirement: "cyclonedx-python-lib[json-validation]==11.12.0",
        import: "cyclonedx.validation.json, jsonschema",
    },
    // The Kubernetes schemas, offline: the deployment check validates the
    // rendered manifests with it (pinned: its newest schemas are part of
    // what is checked).
    PythonPackage {
        requirement: "kubernetes-validate==1.37.0",
        import: "kubernetes_validate",
    },
];

/// The npm packages the tests run (agent CLIs, driven against the real
/// gateway), pinned, installed into `target/test-npm`. To add one, add a
/// line: the next run installs it.
pub(crate) const NPM_PACKAGES: &[NpmPackage] = &[
    // Claude Code declares node >= 22 but runs a native binary (from its
    // optional dependency `@anthropic-ai/claude-code-linux-x64`, copied
    // into `bin/claude.exe` by its postinstall), so npm on Node 20 warns
    // (EBADENGINE) and the install works.
    NpmPackage {
        name: "@anthropic-ai/claude-code",
        version: "2.1.328",
        bin: "node_modules/@anthropic-ai/claude-code/bin/claude.exe",
        env: "UNDERSTUDY_CLAUDE",
    },
    // Codex's `bin/codex.js` (linked as `.bin/codex`) starts the native
    // binary of its optional dependency `@openai/codex-linux-x64`.
    NpmPackage {
        name: "@openai/codex",
        version: "0.169.0",
        bin: "node_modules/.bin/codex",
        env: "UNDERSTUDY_CODEX",
    },
    // The Gemini CLI is one bundled script (`bundle/gemini.js`, linked as
    // `.bin/gemini`) for node >= 20, with no native dependency.
    NpmPackage {
        name: "@google/gemini-cli",
        version: "0.61.0",
        bin: "node_modules/.bin/gemini",
        env: "UNDERSTUDY_GEMINI",
    },
];

/// The binaries the deployment check runs, each with the Debian package
/// that installs it.
const DEPLOY_TOOLS: &[(&str, &str)] = &[
    ("kubectl", "kubernetes-client"),
    ("systemd-analyze", "systemd"),
];

/// One package of [`NPM_PACKAGES`].
pub(crate) struct NpmPackage {
    /// The package's name on npm.
    pub(crate) name: &'static str,
    /// The pinned version; `<bin> --version` prints it once installed.
    pub(crate) version: &'static str,
    /// The binary the tests run, relative to `target/test-npm`.
    pub(crate) bin: &'static str,
    /// The environment variable that gives the tests the binary's path.
    pub(crate) env: &'static str,
}

/// One package of [`PYTHON_PACKAGES`].
pub(crate) struct PythonPackage {
    /// What `pip install` is given (a name, or a name pinned with `==`).
    pub(crate) requirement: &'static str,
    /// The module whose import proves it is installed.
    pub(crate) import: &'static str,
}

/// Which suites are about to run, so that only what they use is installed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Suites {
    /// `cargo test --workspace`: redis-server and the venv.
    Workspace,
    /// The workspace's tests, the browser test and the deployment check:
    /// Chromium, kubectl and `systemd-analyze` as well.
    WorkspaceAndBrowser,
}

/// What the suites are given.
pub(crate) struct Provisioned {
    /// The venv's interpreter, passed to the tests as `UNDERSTUDY_PYTHON`.
    pub(crate) python: PathBuf,
    /// Chromium's binary, when the browser test is to run.
    pub(crate) chromium: Option<PathBuf>,
    /// The npm packages' binaries, each with the environment variable
    /// that passes its path to the tests ([`NpmPackage::env`]).
    pub(crate) npm_bins: Vec<(&'static str, PathBuf)>,
}

/// Finds or installs everything `suites` needs under the workspace `root`.
pub(crate) fn provision(root: &Path, suites: Suites) -> Result<Provisioned, String> {
    let venv = root.join("target").join("test-venv");
    let python = venv.join("bin").join("python");
    let venv_ready = succeeds(Command::new(&python).args(["-m", "pip", "--version"]));
    let chromium = (suites == Suites::WorkspaceAndBrowser).then(chromium_path);

    let mut missing = Vec::new();
    if find_on_path("redis-server").is_none() {
        missing.push("redis-server");
    }
    if let Some(chromium) = &chromium {
        if !chromium.exists() {
            if std::env::var_os("CHROMIUM").is_some() {
                return Err(format!(
                    "CHROMIUM is set to {}, which does not exist",
                    chromium.display()
                ));
            }
            missing.push("chromium");
        }
    }
    // The container test's engine (Debian's podman, with runc): installed
    // along with the rest when running as root; otherwise that test says
    // it is SKIPPED rather than failing the run for want of it.
    if suites == Suites::WorkspaceAndBrowser && is_root() {
        for tool in ["podman", "runc"] {
            if find_on_path(tool).is_none() {
                missing.push(tool);
            }
        }
    }
    // The release test reads the binary's embedded dependency list with
    // objcopy (binutils comes with gcc, which cargo needs to link).
    if find_on_path("objcopy").is_none() {
        missing.push("binutils");
    }
    // The deployment check: kubectl renders the kustomizations (Debian's
    // `kubernetes-client`), `systemd-analyze` verifies the unit.
    if suites == Suites::WorkspaceAndBrowser {
        for (binary, package) in DEPLOY_TOOLS {
            if find_on_path(binary).is_none() {
                missing.push(package);
            }
        }
    }
    if !venv_ready && !can_make_venv() {
        // Debian keeps `ensurepip`, which `python3 -m venv` needs, apart.
        missing.push("python3-venv");
    }
    if !missing.is_empty() {
        apt_install(&missing)?;
    }

    let redis = find_on_path("redis-server")
        .ok_or("redis-server is still not on PATH after installing it")?;
    note(&format!("redis-server: {}", redis.display()));
    if let Some(chromium) = &chromium {
        if !chromium.exists() {
            return Err(format!(
                "{} is still missing after installing chromium",
                chromium.display()
            ));
        }
        note(&format!("chromium: {}", chromium.display()));
    }
    if !venv_ready {
        make_venv(&venv)?;
    }
    install_python_packages(&python)?;
    if suites == Suites::WorkspaceAndBrowser {
        let conf = crate::container::write_conf(root)?;
        note(&format!(
            "podman settings: CONTAINERS_CONF={}",
            conf.display()
        ));
    }
    let npm_bins = install_npm_packages(&root.join("target").join("test-npm"))?;
    Ok(Provisioned {
        python,
        chromium,
        npm_bins,
    })
}

/// Chromium's binary: `$CHROMIUM`, else Debian's `/usr/bin/chromium`.
pub(crate) fn chromium_path() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Installs Debian packages with apt-get when running as root; otherwise
/// says which command to run.
fn apt_install(packages: &[&str]) -> Result<(), String> {
    let list = packages.join(" ");
    if !is_root() {
        return Err(format!(
            "the tests need packages that are not installed: {list}\n\
             On Debian or Ubuntu, install them with\n  \
             sudo apt-get update && sudo apt-get install -y {list}\n\
             or run `cargo xtask test` as root, which does. Elsewhere, use the system's \
             package manager (redis-server on PATH; CHROMIUM set to a Chromium binary)"
        ));
    }
    if find_on_path("apt-get").is_none() {
        return Err(format!(
            "the tests need packages that are not installed: {list}\n\
             apt-get is not available to install them: use the system's package manager"
        ));
    }
    note(&format!("installing {list} with apt-get"));
    run_quietly(Command::new("apt-get").args(["update", "-qq"]))?;
    run_quietly(
        Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// Whether this process runs as root (effective uid 0).
fn is_root() -> bool {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(uids) = status.lines().find_map(|l| l.strip_prefix("Uid:")) {
            // Real, effective, saved and filesystem uid: the effective one counts.
            return uids.split_whitespace().nth(1) == Some("0");
        }
    }
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0")
}

/// Whether `python3 -m venv` can create a venv with pip in it.
fn can_make_venv() -> bool {
    succeeds(Command::new("python3").args(["-c", "import venv, ensurepip"]))
}

/// Creates a fresh venv at `venv`, replacing a broken one.
fn make_venv(venv: &Path) -> Result<(), String> {
    if venv.exists() {
        std::fs::remove_dir_all(venv)
            .map_err(|e| format!("cannot remove the broken venv {}: {e}", venv.display()))?;
    }
    if !can_make_venv() {
        return Err(
            "python3 cannot create a venv (its `venv` or `ensurepip` module is missing): \
             on Debian install python3-venv, or put a Python that has them first on PATH"
                .to_owned(),
        );
    }
    note(&format!("creating the Python venv {}", venv.display()));
    run_quietly(Command::new("python3").arg("-m").arg("venv").arg(venv))
}

/// Installs the packages of [`PYTHON_PACKAGES`] that the venv cannot import,
/// or holds in another version than the pinned one.
fn install_python_packages(python: &Path) -> Result<(), String> {
    let missing: Vec<&str> = PYTHON_PACKAGES
        .iter()
        .filter(|p| !succeeds(Command::new(python).args(["-c", &python_check(p)])))
        .map(|p| p.requirement)
        .collect();
    if missing.is_empty() {
        note(&format!("python: {}", python.display()));
        return Ok(());
    }
    note(&format!("installing {} into the venv", missing.join(" ")));
    run_quietly(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(&missing),
    )
}

/// The Python code that exits with success when `package` is installed: it
/// imports the module and, for a requirement pinned with `==`, compares the
/// distribution's version.
fn python_check(package: &PythonPackage) -> String {
    let import = format!("import {}", package.import);
    match package.requirement.split_once("==") {
        Some((name, version)) => {
            // `name[extra]`: the distribution is `name`.
            let name = name.split('[').next().unwrap_or(name);
            format!(
                "{import}\nimport importlib.metadata, sys\n\
             sys.exit(importlib.metadata.version({name:?}) != {version:?})"
            )
        }
        None => import,
    }
}

/// Installs the packages of [`NPM_PACKAGES`] whose binary is missing or
/// prints another version into `dir` (one `npm install`), and returns each
/// binary with its environment variable.
fn install_npm_packages(dir: &Path) -> Result<Vec<(&'static str, PathBuf)>, String> {
    let installed = |p: &NpmPackage| {
        Command::new(dir.join(p.bin))
            .arg("--version")
            .output()
            .is_ok_and(|o| {
                o.status.success() && String::from_utf8_lossy(&o.stdout).contains(p.version)
            })
    };
    let missing: Vec<String> = NPM_PACKAGES
        .iter()
        .filter(|p| !installed(p))
        .map(|p| format!("{}@{}", p.name, p.version))
        .collect();
    if !missing.is_empty() {
        if find_on_path("npm").is_none() {
            return Err(format!(
                "the tests run {} from npm, and npm is not on PATH: install Node.js (with npm)",
                missing.join(" ")
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        note(&format!(
            "installing {} into {}",
            missing.join(" "),
            dir.display()
        ));
        run_quietly(
            Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--save-exact",
                    "--loglevel=error",
                    "--prefix",
                ])
                .arg(dir)
                .args(&missing),
        )?;
    }
    let mut bins = Vec::new();
    for p in NPM_PACKAGES {
        let bin = dir.join(p.bin);
        if !installed(p) {
            return Err(format!(
                "{} does not print version {} after `npm install {}@{}`",
                bin.display(),
                p.version,
                p.name,
                p.version
            ));
        }
        note(&format!("{}: {}", p.name, bin.display()));
        bins.push((p.env, bin));
    }
    Ok(bins)
}

/// The first `name` in a directory of `PATH`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Whether `cmd` runs and exits with success (its output discarded).
fn succeeds(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
}

/// Runs `cmd` with its output captured, and shows that output only when it fails.
fn run_quietly(cmd: &mut Command) -> Result<(), String> {
    crate::container::output(cmd).map(|_| ())
}
