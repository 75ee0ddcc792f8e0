//! Development tasks, run as `cargo xtask <task>`:
//!
//! - `test`: the README's test command. Provisions what the suites need
//!   (`redis-server`, Chromium, a Python venv in `target/test-venv` with the
//!   `openai`, `anthropic`, `openai-agents` and `google-genai` SDKs, Claude
//!   Code, Codex and the Gemini CLI from npm in `target/test-npm`; see
//!   `provision.rs`; meanwhile a release build compiles the dependencies
//!   in the background, stopped when provisioning ends: `warmup.rs`), then
//!   runs `cargo test --workspace` with `UNDERSTUDY_PYTHON` set to the
//!   venv's Python and `UNDERSTUDY_CLAUDE`, `UNDERSTUDY_CODEX`,
//!   `UNDERSTUDY_GEMINI` to the agents' binaries, then `dist-test`, then
//!   `browser-test`, then `container-test`, then the deployment check
//!   (`deploy.rs`: the Kubernetes manifests rendered and validated
//!   offline, the systemd unit verified), then `fleet-test`.
//! - `provision`: only the provisioning of `test`, after which plain
//!   `cargo test --workspace` works too.
//! - `ci`: what a reviewer runs: `cargo fmt --check`, clippy with
//!   `-D warnings`, then the tests as `test` runs them (without the browser).
//! - `tidy`: repository conventions (every Rust file opens with `//!`, no
//!   `should_panic`, no ignored tests, the docs name every setting and
//!   metric, commit subjects of at most 72 characters, at most two
//!   integration-test binaries per crate) and the fences: the map
//!   `docs/architecture.md` at most 300 lines, no doc or comment citing an
//!   issue or a note outside the repository, no function over 100 lines
//!   outside tests, no import circle between a crate's files, at most 3
//!   imports running up between core's modules, no crate depending on a
//!   crate above it; also a `#[test]`, so `test` and `ci` run it.
//! - `browser-test`: runs `understudy demo --serve` and checks its status page
//!   in headless Chromium (Debian's `chromium`, driven by playwright-core from
//!   `tests/browser`); screenshots go to `target/browser/`.
//! - `image`: builds the container image from the `Containerfile` with
//!   Podman (else Docker) and prints its tag and size; `--offline` builds
//!   it on a builder base made from this machine's toolchain, `--tag TAG`
//!   names it (`container/`).
//! - `container-test`: builds the image offline and runs it with Podman
//!   against simulated providers: `/healthz`, failover, SIGTERM's drain
//!   (`container_test.rs`); a loud SKIPPED line where Podman cannot run
//!   containers.
//! - `dist`: the release archive, its CycloneDX SBOM and `SHA256SUMS` in
//!   `target/dist/`, the binary carrying its dependency list (`dist.rs`).
//! - `dist-test`: `dist`, then the release's checks (`dist/verify.rs`);
//!   `test` and `ci` run it after the workspace's tests.
//! - `deploy-check`: only the deployment check of `test` (after `provision`,
//!   or with `UNDERSTUDY_PYTHON` set to a Python that has
//!   `kubernetes-validate`), on the debug binary it builds.
//! - `fleet-test`: the rendered manifests played under Podman, two gateway
//!   replicas and Redis (`fleet.rs`; after `deploy-check`).
//! - `bench`: builds in release mode and runs `understudy-bench` with the
//!   gateway pinned to core 0 and the load generator and upstream on core 1;
//!   prints a table and writes `target/bench/latest.json`; then the
//!   own-work fence (`own_work.rs`) where valgrind is installed.
//!   `bench own-work [--write]`: only the fence, callgrind's count of the
//!   gateway's own instructions per request against `bench/own-work.toml`.
//!   `bench routing-cost [--runs N]`: callgrind's count of what the group
//!   choice and a session lookup cost a request, in the functions that do
//!   them and as the difference of two routes' totals, median of N runs
//!   (`routing_cost.rs`), also run after the fence by `bench`.

mod container;
mod container_test;
mod deploy;
mod dist;
mod fleet;
mod http;
mod own_work;
mod provision;
mod routing_cost;
mod tidy;
mod warmup;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    let result = match task.as_deref() {
        Some("test") => test(),
        Some("provision") => {
            provision::provision(&project_root(), provision::Suites::WorkspaceAndBrowser)
                .map(|_| ())
        }
        Some("ci") => ci(),
        Some("tidy") => tidy::check(&project_root()).map_err(|problems| problems.join("\n")),
        Some("bench") => match std::env::args().nth(2).as_deref() {
            Some("own-work") => own_work::run(
                &project_root(),
                &std::env::args().skip(3).collect::<Vec<_>>(),
            ),
            Some("routing-cost") => routing_cost::run(
                &project_root(),
                &std::env::args().skip(3).collect::<Vec<_>>(),
            ),
            Some(other) => Err(format!(
                "usage: cargo xtask bench [own-work [--write] | routing-cost [--runs N]] \
                 (not `{other}`)"
            )),
            None => bench(),
        },
        Some("deploy-check") => deploy_check_alone(),
        Some("browser-test") => browser_test(&provision::chromium_path()),
        Some("image") => container::build_with(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("container-test") => container_test::run(),
        Some("dist") => dist::dist(&project_root()).map(|_| ()),
        Some("dist-test") => provision::provision(&project_root(), provision::Suites::Workspace)
            .and_then(|p| dist::verify::test(&project_root(), &p.python)),
        Some("fleet-test") => fleet::run(&project_root()),
        _ => Err(
            "usage: cargo xtask <test|provision|ci|tidy|bench|browser-test|image|container-test|\
             dist|dist-test|deploy-check|fleet-test>"
                .to_owned(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            note(&message);
            ExitCode::FAILURE
        }
    }
}

/// Writes one line of progress (or the final error) to stderr.
pub(crate) fn note(message: &str) {
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("xtask: {message}\n").as_bytes(),
    );
}

/// The workspace root, from this crate's manifest directory.
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn test() -> Result<(), String> {
    let warmup = warmup::start(&project_root());
    let provisioned =
        provision::provision(&project_root(), provision::Suites::WorkspaceAndBrowser)?;
    warmup.stop();
    workspace_tests(&provisioned)?;
    dist::verify::test(&project_root(), &provisioned.python)?;
    let chromium = provisioned
        .chromium
        .clone()
        .unwrap_or_else(provision::chromium_path);
    browser_test(&chromium)?;
    // The workspace's tests built the simulators' binary.
    container_test::run_with(&container_test::built_sim())?;
    deploy_check(&provisioned)?;
    fleet::run(&project_root())
}

/// The deployment files' checks (see `deploy.rs`), with the binary the
/// workspace's tests built.
fn deploy_check(provisioned: &provision::Provisioned) -> Result<(), String> {
    let root = project_root();
    let binary = root.join("target").join("debug").join("understudy");
    deploy::check(&root, &provisioned.python, &binary)
}

/// `cargo xtask deploy-check`: the deployment check alone, with the venv's
/// Python (or `$UNDERSTUDY_PYTHON`).
fn deploy_check_alone() -> Result<(), String> {
    let root = project_root();
    cargo(&["build", "--quiet", "-p", "understudy-cli"])?;
    let python = std::env::var_os("UNDERSTUDY_PYTHON").map_or_else(
        || {
            root.join("target")
                .join("test-venv")
                .join("bin")
                .join("python")
        },
        PathBuf::from,
    );
    let binary = root.join("target").join("debug").join("understudy");
    deploy::check(&root, &python, &binary)
}

fn ci() -> Result<(), String> {
    cargo(&["fmt", "--all", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        // The fleet test is behind a feature so that a plain `cargo test`
        // cannot pass it silently; it is linted all the same.
        "--features",
        "understudy-cli/container-tests",
        "--",
        "-D",
        "warnings",
    ])?;
    let provisioned = provision::provision(&project_root(), provision::Suites::Workspace)?;
    workspace_tests(&provisioned)?;
    dist::verify::test(&project_root(), &provisioned.python)
}

/// `cargo test --workspace`, with the venv's Python for the SDK tests and
/// the agent CLIs' binaries for the agent tests.
fn workspace_tests(provisioned: &provision::Provisioned) -> Result<(), String> {
    note("cargo test --workspace");
    let threads = test_threads();
    let mut env = vec![
        ("UNDERSTUDY_PYTHON", provisioned.python.as_os_str()),
        ("RUST_TEST_THREADS", threads.as_os_str()),
    ];
    env.extend(
        provisioned
            .npm_bins
            .iter()
            .map(|(name, bin)| (*name, bin.as_os_str())),
    );
    cargo_with_env(&["test", "--workspace"], &env)
}

fn browser_test(chromium: &Path) -> Result<(), String> {
    use std::io::{BufRead, BufReader};
    let root = project_root();
    if !chromium.exists() {
        return Err(format!(
            "{} not found: install Debian's chromium (apt-get install chromium), set CHROMIUM, \
             or run `cargo xtask test`, which installs it as root",
            chromium.display()
        ));
    }
    note("browser test");
    let dir = root.join("tests").join("browser");
    if !dir.join("node_modules").join("playwright-core").exists() {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .map_err(|e| format!("cannot run npm (Node.js is needed): {e}"))?;
        if !status.success() {
            return Err("npm install failed in tests/browser".to_owned());
        }
    }
    cargo(&["build", "--quiet", "-p", "understudy-cli"])?;
    let bin = root.join("target").join("debug").join("understudy");
    let mut demo = Command::new(&bin)
        .args([
            "demo",
            "--serve",
            "--no-color",
            "--listen",
            "127.0.0.1:0",
            "--requests",
            "200",
            "--duration",
            "40",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the demo: {e}"))?;
    let stdout = demo.stdout.take().ok_or("no demo output")?;
    let mut lines = BufReader::new(stdout).lines();
    let base = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(url) = line.strip_prefix("Status page: ") {
                    break url.trim_end_matches('/').to_owned();
                }
            }
            _ => {
                let _ = demo.kill();
                return Err("the demo ended before printing its URL".to_owned());
            }
        }
    };
    // Keep draining the demo's output so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let out = root.join("target").join("browser");
    let result = Command::new("node")
        .arg(dir.join("status.mjs"))
        .arg(&base)
        .arg(&out)
        .env("CHROMIUM", chromium)
        .status()
        .map_err(|e| format!("cannot run node: {e}"));
    let _ = demo.kill();
    let _ = demo.wait();
    match result? {
        s if s.success() => Ok(()),
        s => Err(format!("the browser test failed ({s})")),
    }
}

fn bench() -> Result<(), String> {
    build_bench("release")?;
    let root = project_root();
    let release = root.join("target").join("release");
    let out = root.join("target").join("bench");
    let pinned = bench_pinned();
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
    if !status.success() {
        return Err(format!("the bench failed ({status})"));
    }
    let fence = own_work::run(&root, &[]);
    if let Err(e) = &fence
        && e.starts_with("valgrind is missing")
    {
        // The timing table stands without it; say so loudly.
        note(&format!("OWN WORK NOT MEASURED: {e}"));
        return Ok(());
    }
    // The routing rows are reported even when the fence failed, then the
    // fence's failure is the bench's.
    routing_cost::run(&root, &[]).and(fence)
}

/// The gateway and the bench binary in `profile` (`release` for the timing
/// table, `profiling` for callgrind: the same code with symbols).
pub(crate) fn build_bench(profile: &str) -> Result<(), String> {
    cargo(&[
        "build",
        "--profile",
        profile,
        "--quiet",
        "-p",
        "understudy-cli",
        "-p",
        "understudy-testkit",
        // The bench's TLS phase uses the testkit's TLS simulator.
        "--features",
        "understudy-testkit/tls",
        "--bin",
        "understudy",
        "--bin",
        "understudy-bench",
    ])
}

/// Whether the bench's processes can be pinned (`taskset` and two cores).
pub(crate) fn bench_pinned() -> bool {
    Command::new("taskset")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

pub(crate) fn cargo(args: &[&str]) -> Result<(), String> {
    cargo_with_env(args, &[])
}

/// Takes off `command` the variables `cargo run` set for this program
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`…), so that a cargo it starts
/// builds as one started from a shell. A build script may depend on them
/// (ring's does): inherited, they made a release build's artefacts stale
/// for every other build of the same target directory (the image's).
pub(crate) fn without_package_env(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || matches!(
                name,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            )
        {
            command.env_remove(name);
        }
    }
    command
}

/// How many tests a suite runs at once: the caller's `RUST_TEST_THREADS`,
/// else twice the cores. Most of a suite's time is waiting (simulated
/// providers answering after a delay, SDK and agent processes starting,
/// load held for a fixed wall-clock time), so libtest's default of one
/// thread a core leaves a third of the CPU idle: on 2 cores, four threads
/// ran the server's integration suite in 335 s instead of 390 s.
fn test_threads() -> std::ffi::OsString {
    std::env::var_os("RUST_TEST_THREADS").unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        (2 * cores).to_string().into()
    })
}

/// Runs `$CARGO` (or `cargo`) in the workspace root with extra environment variables.
pub(crate) fn cargo_with_env(args: &[&str], env: &[(&str, &OsStr)]) -> Result<(), String> {
    let cargo = dist::cargo_path();
    let status = without_package_env(&mut Command::new(&cargo))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(project_root())
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}
