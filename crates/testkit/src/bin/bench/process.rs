//! The measured processes: the real gateway and the relay floors, each a
//! child process pinned like the gateway, read through `/proc`.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::Error;
use super::report::Samples;

pub(crate) struct Gateway {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
}

impl Gateway {
    pub(crate) async fn start(
        bin: &std::path::Path,
        dir: &std::path::Path,
        upstream: SocketAddr,
        cpu: Option<&str>,
    ) -> Result<Self, Error> {
        let config = dir.join("gateway.toml");
        let (client, redis) = match client_settings() {
            Some((toml, _, redis)) => (toml, redis),
            None => (String::new(), None),
        };
        std::fs::write(
            &config,
            format!(
                r#"[server]
# The load generator sends `Host: bench`; an open gateway on loopback
# answers only hosts it knows.
allowed_hosts = ["bench"]
# 5 000 open streams are measured; the default cap (1 024) would keep the
# rest waiting in the accept queue.
max_connections = 10000
{client}

[routing]
default = "fast"
order = ["fast"]

[providers.fast]
kind = "openai"
base_url = "http://{upstream}/fast/v1"
model = "bench-model"

[providers.fail]
kind = "openai"
base_url = "http://{upstream}/fail/v1"
model = "bench-model"

[providers.slow]
kind = "openai"
base_url = "http://{upstream}/slow/v1"
model = "bench-model"

# The same upstream under two more names: a tier of three equivalent
# targets, for the cost of the group choice.
[providers.fast2]
kind = "openai"
base_url = "http://{upstream}/fast/v1"
model = "bench-model"

[providers.fast3]
kind = "openai"
base_url = "http://{upstream}/fast/v1"
model = "bench-model"

[routes]
fallback = ["fail", "fast"]
slowstream = ["slow"]
tier = [{{ group = ["fast", "fast2", "fast3"], weights = [2, 1, 1] }}]
# A named route of one target, and the tier's three targets as a plain
# list: what the group choice costs beyond naming a route and planning
# three targets.
one = ["fast"]
three = ["fast", "fast2", "fast3"]
# A session's route: two targets, opted in to affinity, so each request
# looks its session up; `unpinned` is the same without sessions, to tell
# the two costs apart.
pair = ["fast", "fail"]
unpinned = ["fast", "fail"]

# The tier row measures the group choice alone: its sessions are not
# pinned (a route with a group pins them by default).
[affinity]
routes = ["pair"]
except = ["tier"]

[breaker]
failure_threshold = 0

[timeouts]
stream_idle = 60
request = 120

[cache]
enabled = false

# The first probe round is awaited (`wait_probed`); the next, after the bench.
[probe]
interval = 3600
"#
            ),
        )?;
        let mut env: Vec<(&str, String)> = redis.map(|u| ("REDIS_URL", u)).into_iter().collect();
        // `UNDERSTUDY_BENCH_OTLP=<url>`: spans exported to that collector.
        if let Ok(url) = std::env::var("UNDERSTUDY_BENCH_OTLP") {
            env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", url));
        }
        Self::spawn_probed(bin, &config, cpu, env).await
    }

    /// The gateway with settings `config` and `env`, returned once it is
    /// ready and has probed (see [`wait_probed`]).
    async fn spawn_probed(
        bin: &std::path::Path,
        config: &std::path::Path,
        cpu: Option<&str>,
        mut env: Vec<(&str, String)>,
    ) -> Result<Self, Error> {
        let probing = pass_probe(&mut env);
        let gw =
            Self::spawn_with(bin, &serve_args(config)?, cpu, true, "the gateway", &env).await?;
        wait_probed(gw.addr, probing).await?;
        Ok(gw)
    }

    /// [`Self::spawn_with`] with no more environment.
    pub(crate) async fn spawn(
        program: impl AsRef<std::ffi::OsStr>,
        args: &[std::ffi::OsString],
        cpu: Option<&str>,
        wrapped: bool,
        what: &str,
    ) -> Result<Self, Error> {
        Self::spawn_with(program, args, cpu, wrapped, what, &[]).await
    }

    /// `program args <a free address>` (it listens there), pinned to `cpu`,
    /// its environment cleared but for `PATH` and `RUST_LOG=warn`, under
    /// `UNDERSTUDY_BENCH_WRAP` (a profiler; the process's RSS and CPU
    /// figures are then the wrapper's) when `wrapped` and that is set;
    /// returned once it accepts connections. Every process the bench
    /// measures — gateways and relays — starts here.
    pub(crate) async fn spawn_with(
        program: impl AsRef<std::ffi::OsStr>,
        args: &[std::ffi::OsString],
        cpu: Option<&str>,
        wrapped: bool,
        what: &str,
        env: &[(&str, String)],
    ) -> Result<Self, Error> {
        let addr = free_addr()?;
        let wrap = std::env::var("UNDERSTUDY_BENCH_WRAP")
            .ok()
            .filter(|_| wrapped);
        let mut cmd = match &wrap {
            Some(w) => {
                let mut c = pinned(cpu, w);
                c.arg(program);
                c
            }
            None => pinned(cpu, program),
        };
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            // `UNDERSTUDY_BENCH_LOG`: the log level (`warn` by default).
            .env(
                "RUST_LOG",
                std::env::var("UNDERSTUDY_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(args)
            .arg(addr.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn()?;
        wait_listening(addr, what).await?;
        Ok(Self { child, addr })
    }

    pub(crate) fn status_kib(&self, field: &str) -> u64 {
        let pid = gateway_pid(&self.child);
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(field))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0)
    }

    pub(crate) fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    pub(crate) fn hwm_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// User + system CPU seconds so far.
    pub(crate) fn cpu_seconds(&self) -> f64 {
        let (user, sys) = self.cpu_split();
        user + sys
    }

    /// User and system CPU seconds so far.
    pub(crate) fn cpu_split(&self) -> (f64, f64) {
        let pid = gateway_pid(&self.child);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = after.split_whitespace().collect();
        let field = |i: usize| f.get(i).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0);
        (field(11) / 100.0, field(12) / 100.0)
    }
}

/// What `UNDERSTUDY_BENCH_CLIENT` asks the gateway's clients to be: `plain`
/// (a key of `server.api_keys`), `record` (a client record with every
/// limit set, far above the load, so each is counted), `redis=<url>` (that
/// record, its counters in that Redis). Returns the settings' TOML (at the
/// end of `[server]`), the key the load sends, and the Redis URL. Unset: an open
/// gateway, as before.
pub(crate) fn client_settings() -> Option<(String, String, Option<String>)> {
    let asked = std::env::var("UNDERSTUDY_BENCH_CLIENT").ok()?;
    let record = |key: &str| {
        format!(
            "[[server.clients]]\nname = \"bench\"\nkey = \"{key}\"\nrpm = 1000000000\n\
             tpm = 1000000000000\nbudget_usd = 1000000.0\nwindow = \"day\"\n"
        )
    };
    match asked.as_str() {
        "plain" => {
            let key = "bench-plain-key-0123456789";
            Some((format!("api_keys = [\"{key}\"]\n"), key.into(), None))
        }
        "record" => {
            let key = "bench-record-key-0123456789";
            Some((record(key), key.into(), None))
        }
        redis if redis.starts_with("redis=") => {
            let key = "bench-record-key-0123456789";
            Some((
                record(key),
                key.into(),
                Some(redis["redis=".len()..].to_owned()),
            ))
        }
        _ => None,
    }
}

/// The gateway's pid (taskset execs it, so the child's pid is the gateway's).
pub(crate) fn gateway_pid(child: &Child) -> u32 {
    child.id()
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// === the floor: a do-nothing relay ===

/// A relay floor as a child process (this binary with `--relay` or
/// `--stack-relay`), pinned like the gateway; measured through the same
/// handle.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Relay {
    /// hyper's server and client, one upstream connection per client
    /// connection, nothing parsed: what any proxy process pays.
    Hyper,
    /// The gateway's stack doing nothing: hyper's server, an axum router, a
    /// pooled reqwest client (`stack.rs`).
    Stack,
    /// [`Relay::Stack`] reading both bodies as JSON and writing them again.
    Parsing,
}

impl Relay {
    pub(crate) const ALL: [Relay; 3] = [Relay::Hyper, Relay::Stack, Relay::Parsing];

    /// The `UNDERSTUDY_BENCH_ONLY` prefix (`<mode>-closed:<c>`, `<mode>-streams`).
    pub(crate) fn mode(self) -> &'static str {
        match self {
            Relay::Hyper => "relay",
            Relay::Stack => "stack",
            Relay::Parsing => "parsing",
        }
    }

    /// The relay, under `UNDERSTUDY_BENCH_WRAP` when `wrapped` (for
    /// `<mode>-closed:<c>`).
    pub(crate) async fn start(
        self,
        upstream: SocketAddr,
        cpu: Option<&str>,
        wrapped: bool,
    ) -> Result<Gateway, Error> {
        let mut args: Vec<std::ffi::OsString> = match self {
            Relay::Hyper => vec!["--relay".into()],
            Relay::Stack => vec!["--stack-relay".into()],
            Relay::Parsing => vec!["--stack-relay".into(), "--parse".into()],
        };
        args.push(upstream.to_string().into());
        let what = format!("the {} relay", self.mode());
        Gateway::spawn(std::env::current_exe()?, &args, cpu, wrapped, &what).await
    }
}

/// `understudy --config <config> serve --listen` (the address follows, from
/// [`Gateway::spawn`]).
pub(crate) fn serve_args(config: &std::path::Path) -> Result<Vec<std::ffi::OsString>, Error> {
    Ok(vec![
        "--config".into(),
        config.as_os_str().to_owned(),
        "serve".into(),
        "--listen".into(),
    ])
}

/// `program`, pinned to `cpu` with `taskset` when one is given.
pub(crate) fn pinned(cpu: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpu]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// A loopback address with a port that was free a moment ago.
pub(crate) fn free_addr() -> Result<SocketAddr, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

/// Waits (at most 30 s: a profiler starts slowly) until `addr` accepts connections.
pub(crate) async fn wait_listening(addr: SocketAddr, what: &str) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).await.is_err() {
        if Instant::now() > deadline {
            return Err(format!("{what} did not start listening").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// `UNDERSTUDY_PROBE` (`off`: the gateway's readiness prober off) passed
/// on to the gateway; whether it probes.
fn pass_probe(env: &mut Vec<(&str, String)>) -> bool {
    let probe = std::env::var("UNDERSTUDY_PROBE").ok();
    let probing = !matches!(probe.as_deref().map(str::trim), Some("0" | "false" | "off"));
    env.extend(probe.map(|p| ("UNDERSTUDY_PROBE", p)));
    probing
}

/// Waits (at most 120 s: a profiler starts slowly) until the gateway at
/// `addr` says it is ready (`/readyz` 200) and, when `probing`, every
/// target in `/v1/status`'s `readiness` has been checked: the prober's
/// first round done. That round opens a connection to each probed target;
/// racing the first request for `fast`'s, it left one row's pools holding
/// more idle connections than another's, and hyper's pool costs more per
/// checkout then, so rows measured after it differ by what the pools held.
async fn wait_probed(addr: SocketAddr, probing: bool) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = get_json(addr, "/readyz")
            .await
            .ok()
            .is_some_and(|(ok, _)| ok);
        let probed = !probing
            || get_json(addr, "/v1/status")
                .await
                .ok()
                .is_some_and(|(ok, status)| {
                    ok && status["readiness"]
                        .as_array()
                        .is_some_and(|targets| targets.iter().all(|t| t["checked_at"].is_u64()))
                });
        if ready && probed {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the gateway was not ready (ready: {ready}, first probe round done: {probed}) \
                 within 120 s; a wrapper that sets UNDERSTUDY_PROBE=off must leave it to the \
                 bench's environment"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET path` on a connection of its own: whether it answered 2xx, and its
/// body as JSON (`null` when it is not).
async fn get_json(addr: SocketAddr, path: &str) -> Result<(bool, serde_json::Value), Error> {
    use http_body_util::BodyExt;
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<
        _,
        http_body_util::Full<bytes::Bytes>,
    >(hyper_util::rt::TokioIo::new(stream))
    .await?;
    tokio::spawn(conn);
    sender.ready().await?;
    let mut req = hyper::Request::get(path).header("host", "bench");
    if let Some((_, key, _)) = client_settings() {
        req = req.header("authorization", format!("Bearer {key}"));
    }
    let resp = sender
        .send_request(req.body(http_body_util::Full::new(bytes::Bytes::new()))?)
        .await?;
    let ok = resp.status().is_success();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((ok, serde_json::from_slice(&body).unwrap_or_default()))
}

/// `load`'s samples and the CPU time (user + system) `gw` spent per
/// request meanwhile, in µs.
pub(crate) async fn with_cpu(
    gw: &Gateway,
    load: impl std::future::Future<Output = Result<Samples, Error>>,
) -> Result<(Samples, f64), Error> {
    let before = gw.cpu_seconds();
    let s = load.await?;
    let cpu = (gw.cpu_seconds() - before) * 1e6 / s.micros.len().max(1) as f64;
    Ok((s, cpu))
}
