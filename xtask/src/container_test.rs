//! `cargo xtask container-test` (and the last step of `cargo xtask test`):
//! the image built from the real `Containerfile` runs as users run it.
//!
//! It builds the image offline ([`Podman::build_gateway_image`]), checks
//! its size, user and labels, and that it refuses to start without client
//! keys; then runs it with host networking against two simulated providers
//! (`understudy-sim`, real HTTP on loopback) and checks `/healthz`, a
//! request that fails over from the failing one to the other, and that
//! SIGTERM lets an open stream finish before the gateway exits with
//! success. Where Podman cannot run containers it says so in a loud
//! SKIPPED line and succeeds: it never passes silently.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::container::{Container, ImageLabels, Podman};
use crate::{cargo, http, note, project_root};

/// The most the image may weigh.
const MAX_IMAGE_BYTES: u64 = 40_000_000;
/// The client key the gateway is given.
const CLIENT_KEY: &str = "sk-container-test-client-key";
/// The streamed answer's chunks, one every [`STREAM_EVERY_MS`]: long
/// enough that SIGTERM lands while it is open.
const STREAM_CHUNKS: usize = 40;
const STREAM_EVERY_MS: u64 = 200;
/// How long a condition may take to come true before the test fails.
const PATIENCE: Duration = Duration::from_secs(90);

/// Runs the test, building `understudy-sim`; see the module's doc.
pub(crate) fn run() -> Result<(), String> {
    build_sim()?;
    run_with(&built_sim())
}

/// Runs the test with the simulators' binary `sim` (after the workspace's
/// tests, which build it; built here if they did not).
pub(crate) fn run_with(sim: &Path) -> Result<(), String> {
    if !sim.exists() {
        build_sim()?;
    }
    let podman = match Podman::detect() {
        Ok(podman) => podman,
        Err(skip) => {
            skip.announce("the container test");
            return Ok(());
        }
    };
    note("container test");
    let started = Instant::now();
    let image = podman.build_gateway_image()?;
    note(&format!(
        "image {image} built in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    check_image(&podman, &image)?;
    refuses_without_keys(&podman, &image)?;
    redis_image_answers(&podman)?;
    let sims = Sims::start(sim)?;
    let gateway = Gateway::start(&podman, &image, &sims)?;
    let result = gateway
        .healthz()
        .and_then(|()| gateway.fails_over(&sims))
        .and_then(|()| gateway.drains_on_sigterm());
    if let Err(e) = &result {
        let logs = gateway.container.logs().unwrap_or_default();
        return Err(format!("{e}\nthe gateway's output:\n{logs}"));
    }
    note(&format!(
        "container test passed in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The image's size, user, entry point and labels.
fn check_image(podman: &Podman, image: &str) -> Result<(), String> {
    let size = podman.image_size(image)?;
    note(&format!(
        "image size: {:.1} MB ({size} bytes)",
        size as f64 / 1e6
    ));
    if size >= MAX_IMAGE_BYTES {
        return Err(format!(
            "the image weighs {size} bytes, over {MAX_IMAGE_BYTES}"
        ));
    }
    let inspect = |format: &str| podman.run(&["image", "inspect", "--format", format, image]);
    let checks = [
        ("{{.Config.User}}", "65532:65532"),
        (
            "{{json .Config.Entrypoint}}",
            r#"["/usr/local/bin/understudy"]"#,
        ),
        ("{{json .Config.Cmd}}", r#"["serve"]"#),
        ("{{.Config.StopSignal}}", "SIGTERM"),
        (
            r#"{{index .Config.Labels "org.opencontainers.image.version"}}"#,
            env!("CARGO_PKG_VERSION"),
        ),
    ];
    for (format, expected) in checks {
        let got = inspect(format)?;
        if got != expected {
            return Err(format!(
                "image {image}: {format} is {got:?}, not {expected:?}"
            ));
        }
    }
    let revision = inspect(r#"{{index .Config.Labels "org.opencontainers.image.revision"}}"#)?;
    let expected = ImageLabels::of_checkout(&project_root()).revision;
    if revision != expected {
        return Err(format!(
            "image {image}: the revision label is {revision:?}, not {expected:?}"
        ));
    }
    Ok(())
}

/// Without client keys, on its default non-loopback address, the image
/// exits at once with the reason.
fn refuses_without_keys(podman: &Podman, image: &str) -> Result<(), String> {
    let out = podman
        .command()
        .args(["run", "--rm", "--network", "host", "--env"])
        .arg(format!("UNDERSTUDY_LISTEN=0.0.0.0:{}", free_port()?))
        .arg(image)
        .output()
        .map_err(|e| format!("cannot run podman: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || !stderr.contains("without client keys") {
        return Err(format!(
            "the image without client keys did not refuse to start ({}):\n{stderr}",
            out.status
        ));
    }
    note("without client keys the image refuses to start");
    Ok(())
}

/// The Redis image the fleet tests run ([`Podman::make_redis_image`])
/// starts and answers `PING`.
fn redis_image_answers(podman: &Podman) -> Result<(), String> {
    use std::io::{Read, Write};
    let image = podman.make_redis_image()?;
    let port = free_port()?.to_string();
    let redis = podman.start(&["--network", "host", &image, "--port", &port, "--save", ""])?;
    let addr = format!("127.0.0.1:{port}");
    eventually("the Redis image answers PING", || {
        if !redis.running() {
            return Err(format!("the Redis image exited:\n{}", redis.logs()?));
        }
        let Ok(mut conn) = std::net::TcpStream::connect(&addr) else {
            return Ok(None);
        };
        let mut answer = [0; 7];
        conn.set_read_timeout(Some(http::READ_TIMEOUT))
            .and_then(|()| conn.write_all(b"PING\r\n"))
            .and_then(|()| conn.read_exact(&mut answer))
            .map_err(|e| format!("cannot talk to the Redis image: {e}"))?;
        Ok((&answer == b"+PONG\r\n").then_some(()))
    })?;
    note(&format!("the Redis image {image} answers PING"));
    Ok(())
}

/// The simulated providers, a process of their own: `primary` fails every
/// call with 503, `backup` answers (streams paced).
struct Sims {
    child: Child,
    /// Held open: the simulators run until it closes.
    _stdin: ChildStdin,
    /// Each simulator's base URL, by name.
    urls: Vec<(String, String)>,
    /// The calls they received, as `NAME METHOD PATH` lines.
    calls: Arc<Mutex<Vec<String>>>,
}

// === impl Sims ===

impl Sims {
    fn start(bin: &Path) -> Result<Self, String> {
        let mut child = Command::new(bin)
            .arg("primary=fail:503")
            .arg(format!("backup=stream:{STREAM_CHUNKS}x{STREAM_EVERY_MS}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin for the simulators")?;
        let stdout = child.stdout.take().ok_or("no stdout from the simulators")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut urls = Vec::new();
        for line in lines.by_ref() {
            let line = line.map_err(|e| format!("cannot read the simulators' output: {e}"))?;
            if line == "ready" {
                break;
            }
            if let Some((name, url)) = line.split_once(' ') {
                urls.push((name.to_owned(), url.to_owned()));
            }
        }
        if urls.len() != 2 {
            let _ = child.kill();
            return Err(format!("the simulators started {urls:?}"));
        }
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&calls);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                seen.lock().map(|mut s| s.push(line)).ok();
            }
        });
        Ok(Self {
            child,
            _stdin: stdin,
            urls,
            calls,
        })
    }

    fn url(&self, name: &str) -> &str {
        self.urls
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, url)| url.as_str())
    }

    /// How many calls `name` received.
    fn calls_to(&self, name: &str) -> usize {
        let prefix = format!("{name} ");
        self.calls
            .lock()
            .map(|calls| calls.iter().filter(|c| c.starts_with(&prefix)).count())
            .unwrap_or(0)
    }
}

impl Drop for Sims {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The image running with the test's configuration.
struct Gateway {
    container: Container,
    /// `127.0.0.1:PORT`: where it listens (on `0.0.0.0`, host networking).
    addr: String,
}

// === impl Gateway ===

impl Gateway {
    /// Writes the configuration (two OpenAI-compatible providers on the
    /// simulators, a route `failover` over them, the prober off so the
    /// failing one is tried) and starts the image on it, its root
    /// read-only as in Kubernetes.
    fn start(podman: &Podman, image: &str, sims: &Sims) -> Result<Self, String> {
        let dir = podman.dir().join("test");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let config = dir.join("understudy.toml");
        let text = format!(
            "[probe]\nenabled = false\n\n\
             [providers.primary]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"sim-model\"\n\n\
             [providers.backup]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"sim-model\"\n\n\
             [routes]\nfailover = [\"primary:sim-model\", \"backup:sim-model\"]\n",
            sims.url("primary"),
            sims.url("backup"),
        );
        std::fs::write(&config, text)
            .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        let port = free_port()?;
        let container = podman.start(&[
            "--read-only",
            "--network",
            "host",
            "--env",
            &format!("UNDERSTUDY_LISTEN=0.0.0.0:{port}"),
            "--env",
            &format!("UNDERSTUDY_API_KEYS={CLIENT_KEY}"),
            "--volume",
            &format!("{}:/etc/understudy/understudy.toml:ro", config.display()),
            image,
        ])?;
        Ok(Self {
            container,
            addr: format!("127.0.0.1:{port}"),
        })
    }

    /// `/healthz` answers 200 once the gateway is up.
    fn healthz(&self) -> Result<(), String> {
        eventually("/healthz answers 200", || {
            if !self.container.running() {
                return Err("the gateway exited".to_owned());
            }
            Ok(http::get(&self.addr, "/healthz")
                .ok()
                .filter(|(status, _)| *status == 200))
        })?;
        note("/healthz: 200");
        Ok(())
    }

    /// A request on the route `failover` is served by `backup` after
    /// `primary` failed it.
    fn fails_over(&self, sims: &Sims) -> Result<(), String> {
        let mut response = self.chat(false)?;
        let body = response.text()?;
        let provider = response.header("x-understudy-provider").unwrap_or("");
        let fell_back = response.header("x-understudy-fell-back").unwrap_or("");
        if response.status != 200 || provider != "backup" || fell_back != "true" {
            return Err(format!(
                "the failover request got {} from {provider:?} (fell back: {fell_back:?}): {body}",
                response.status
            ));
        }
        eventually("the primary was called", || {
            Ok((sims.calls_to("primary") >= 1).then_some(()))
        })?;
        note("failover: primary failed, backup answered");
        Ok(())
    }

    /// A stream open when SIGTERM arrives runs to its end, then the
    /// gateway exits with success.
    fn drains_on_sigterm(&self) -> Result<(), String> {
        let mut stream = self.chat(true)?;
        if stream.status != 200 {
            let status = stream.status;
            return Err(format!("the stream got {status}: {}", stream.text()?));
        }
        let mut received = String::new();
        while !received.contains("w1 ") {
            let piece = stream
                .next_piece()?
                .ok_or("the stream ended before its first word")?;
            received.push_str(&String::from_utf8_lossy(&piece));
        }
        // The rest is read as it arrives, each piece timed, while the
        // signal is sent and its effect watched for.
        let reader = std::thread::spawn(move || {
            let mut pieces = Vec::new();
            while let Some(piece) = stream.next_piece()? {
                pieces.push((Instant::now(), piece));
            }
            Ok::<_, String>(pieces)
        });
        self.container.signal("TERM")?;
        let shut_down = eventually("the gateway logs its shutdown", || {
            let logs = self.container.logs()?.to_ascii_lowercase();
            let heard = ["shutting down", "drain", "sigterm"]
                .iter()
                .any(|said| logs.contains(said));
            Ok(heard.then(Instant::now))
        })?;
        let pieces = reader
            .join()
            .map_err(|_| "the stream's reader panicked".to_owned())??;
        let last_piece = pieces.last().map(|(at, _)| *at);
        for (_, piece) in &pieces {
            received.push_str(&String::from_utf8_lossy(piece));
        }
        let last_word = format!("w{STREAM_CHUNKS} ");
        if !received.contains(&last_word) || !received.contains("[DONE]") {
            return Err(format!("the stream open at SIGTERM was cut:\n{received}"));
        }
        if last_piece.is_none_or(|at| at < shut_down) {
            return Err(
                "the stream ended before the gateway logged its shutdown, so it \
                        proves nothing: lengthen it (STREAM_CHUNKS)"
                    .to_owned(),
            );
        }
        eventually("the gateway exits", || {
            Ok((!self.container.running()).then_some(()))
        })?;
        match self.container.wait()? {
            0 => {
                note("SIGTERM: the open stream finished, then the gateway exited 0");
                Ok(())
            }
            code => Err(format!("the gateway exited {code} after SIGTERM")),
        }
    }

    /// A chat request on the route `failover`.
    fn chat(&self, stream: bool) -> Result<http::Response, String> {
        let body = format!(
            r#"{{"model":"failover","stream":{stream},"messages":[{{"role":"user","content":"Say hello."}}]}}"#
        );
        http::request(
            &self.addr,
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &format!("Bearer {CLIENT_KEY}")),
                ("content-type", "application/json"),
            ],
            &body,
        )
    }
}

/// Polls `check` until it gives a value, for at most [`PATIENCE`].
fn eventually<T>(
    what: &str,
    mut check: impl FnMut() -> Result<Option<T>, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check()? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting until {what}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A loopback port free right now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// `cargo build` of the simulators' binary.
fn build_sim() -> Result<(), String> {
    cargo(&[
        "build",
        "--quiet",
        "-p",
        "understudy-testkit",
        "--bin",
        "understudy-sim",
    ])
}

/// The simulators' binary a workspace test run leaves behind.
pub(crate) fn built_sim() -> PathBuf {
    project_root().join("target/debug/understudy-sim")
}
