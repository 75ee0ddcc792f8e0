//! What the real-agent tests (`claude_code`, `codex`, `gemini_cli`) share: a
//! scratch folder per scenario, the real `understudy serve` on a free
//! loopback port with its log kept, the agent's pinned binary, the
//! scripted agent loop a simulator plays in any protocol, the record of
//! which agent-loop stage each simulator served, and the check that no
//! simulator refused a request the gateway sent.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use understudy_testkit::{Protocol, Received, Reply, SimProvider, SimToolCall};

/// The stage of each agent-loop request a simulator received (how many
/// tool results its history held), in order.
#[derive(Clone, Default)]
pub struct Turns(Arc<Mutex<Vec<usize>>>);

impl Turns {
    pub fn push(&self, stage: usize) {
        self.0.lock().unwrap().push(stage);
    }

    pub fn stages(&self) -> Vec<usize> {
        self.0.lock().unwrap().clone()
    }
}

/// Whether `tools` (a JSON array) holds one that `is_it`.
pub fn has_tool(tools: &Value, is_it: impl Fn(&Value) -> bool) -> bool {
    tools.as_array().is_some_and(|ts| ts.iter().any(is_it))
}

/// No simulator refused a request the gateway sent (their rules are the
/// providers' own).
pub fn assert_no_violations(sims: &[(&str, &SimProvider)], gateway: &Gateway) {
    for (name, sim) in sims {
        assert_eq!(
            sim.violations(),
            Vec::<String>::new(),
            "{name} refused requests the gateway sent; gateway log:\n{}",
            gateway.log()
        );
    }
}

/// A fresh folder for one scenario: `home` (the agent's `HOME`), `work`
/// (its working directory) and the gateway's configuration; removed when
/// dropped.
pub struct Scratch {
    pub root: PathBuf,
    pub home: PathBuf,
    pub work: PathBuf,
}

impl Scratch {
    /// A folder named after the agent (`claude-code`, `codex`, `gemini-cli`) and the
    /// scenario.
    pub fn new(agent: &str, name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "understudy-{agent}-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let (home, work) = (root.join("home"), root.join("work"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        Self { root, home, work }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// `understudy serve` on a free loopback port, with a client key; stopped
/// when dropped.
pub struct Gateway {
    child: Child,
    pub url: String,
    log: Arc<Mutex<Vec<String>>>,
    /// The thread reading the log; done once the process's stderr closes.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Gateway {
    /// Starts the real binary with `toml` as its configuration and
    /// `client_key` as its one client key, and waits for it to say where it
    /// listens.
    pub fn start(scratch: &Scratch, toml: &str, client_key: &str) -> Self {
        Self::start_with(scratch, toml, client_key, &[])
    }

    /// [`Self::start`] with more environment variables.
    pub fn start_with(
        scratch: &Scratch,
        toml: &str,
        client_key: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let config = scratch.root.join("understudy.toml");
        std::fs::write(&config, toml).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_understudy"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("UNDERSTUDY_API_KEYS", client_key)
            // No load balancer waits on a test's gateway: SIGTERM stops
            // accepting at once (a test that drains passes its own).
            .env("UNDERSTUDY_DRAIN_GRACE", "0")
            .envs(env.iter().copied())
            .arg("--config")
            .arg(&config)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let url = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                panic!("serve exited before listening:\n{}", seen.join("\n"));
            };
            if let Some(url) = line.split("listening on ").nth(1) {
                break url.trim().to_owned();
            }
            seen.push(line);
        };
        let log = Arc::new(Mutex::new(seen));
        // Keep reading the log, so that the gateway never blocks on a full
        // pipe and a failing test can show it.
        let kept = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            url,
            log,
            reader: Some(reader),
        }
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the gateway logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Stops it as a service manager would (SIGTERM), and waits for it to
    /// exit (bounded, for a loaded machine).
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.read_to_end();
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "serve did not exit after SIGTERM:\n{}",
                self.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

impl Gateway {
    /// Sends it signal `name` (`TERM`, `INT`, …), without waiting.
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name} {pid} failed");
    }

    /// Its exit status, once it has exited (and then its whole log read).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.try_wait().unwrap()?;
        self.read_to_end();
        Some(status)
    }

    /// Waits for the log's reader to read what the exited process wrote
    /// last: it may still be reading when the exit is seen. Bounded, in
    /// case something the process started keeps its stderr open.
    fn read_to_end(&mut self) {
        let Some(reader) = self.reader.take() else {
            return;
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !reader.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if reader.is_finished() {
            let _ = reader.join();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one agent run printed.
pub struct Run {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// How long one agent run may take before the test gives up on it.
pub const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(180);

/// Runs `cmd` (an agent, its environment set) to the end with its output
/// piped, killing it past [`RUN_LIMIT`]; `agent` names it in the failure.
pub async fn run_agent(mut cmd: Command, agent: &str, gateway: &Gateway) -> Run {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id().to_string();
    let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
    let out = match tokio::time::timeout(RUN_LIMIT, waited).await {
        Ok(out) => out.unwrap().unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            panic!(
                "{agent} did not finish within {RUN_LIMIT:?}; gateway log:\n{}",
                gateway.log()
            );
        }
    };
    Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The agent's binary: `$var` (`cargo xtask test` sets it), else
/// `installed` under `target/test-npm/node_modules`, where `cargo xtask
/// provision` puts it; fails the test with how to get it when neither
/// runs. `agent` names it in that message.
pub fn agent_binary(var: &str, installed: &str, agent: &str) -> PathBuf {
    let bin = std::env::var_os(var).map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/test-npm/node_modules")
                .join(installed)
        },
        PathBuf::from,
    );
    let probe = Command::new(&bin).arg("--version").output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "this test runs {agent}, and {} does not run: run `cargo xtask provision` \
         (or `cargo xtask test`), which installs it in target/test-npm, or set \
         {var} to its binary — {probe:?}",
        bin.display()
    );
    bin
}

/// The gateway's configuration: the default route over `list` (name, kind,
/// simulator) in order, each provider's model `<name>-sim`.
pub fn providers(list: &[(&str, &str, &SimProvider)]) -> String {
    let order: Vec<String> = list.iter().map(|(n, _, _)| format!("{n:?}")).collect();
    let mut toml = format!(
        "[routing]\ndefault = {:?}\norder = [{}]\n\n",
        list[0].0,
        order.join(", ")
    );
    for (name, kind, sim) in list {
        toml.push_str(&format!(
            "[providers.{name}]\nkind = {kind:?}\nbase_url = {:?}\napi_key = \"sim-key\"\nmodel = \"{name}-sim\"\n\n",
            sim.base_url()
        ));
    }
    toml
}

// === the scripted agent ===

/// The model's side of an agent loop, played by a simulator speaking
/// `protocol`. A request that declares the agent's tool `tool` is at the
/// stage of how many tool results its history holds (recorded in
/// `turns`): at a stage in `down_at` the provider is down (Anthropic's 529
/// overloaded, the others' 503), else the reply is `reply(stage, body)`.
/// A request without the tool (a side task: a title, a summary) gets a
/// short text.
pub fn scripted_agent(
    protocol: Protocol,
    tool: &'static str,
    turns: &Turns,
    down_at: &'static [usize],
    reply: impl Fn(usize, &Value) -> Reply + Send + Sync + 'static,
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let down = Reply::status(if protocol == Protocol::Messages {
        529
    } else {
        503
    });
    scripted_agent_failing(protocol, tool, turns, down_at, down, reply)
}

/// [`scripted_agent`], answering `down` at the stages in `down_at` (a
/// throttle, say, rather than an outage).
pub fn scripted_agent_failing(
    protocol: Protocol,
    tool: &'static str,
    turns: &Turns,
    down_at: &'static [usize],
    down: Reply,
    reply: impl Fn(usize, &Value) -> Reply + Send + Sync + 'static,
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let turns = turns.clone();
    move |req| {
        let body = req.json();
        if !declares(protocol, &body, tool) {
            return Reply::text("OK");
        }
        let stage = tool_results(protocol, &body);
        turns.push(stage);
        if down_at.contains(&stage) {
            return down.clone();
        }
        reply(stage, &body)
    }
}

/// The two-step task: at stage 0 write `hello.txt` with `write`, at 1 read
/// it back with `read` (both take a `file_path`), then say "Done.".
pub fn write_then_read(work: &Path, stage: usize, write: &str, read: &str) -> Reply {
    let file = work.join("hello.txt").display().to_string();
    match stage {
        0 => Reply::ToolCalls(vec![SimToolCall::new(
            write,
            json!({"file_path": file, "content": "hello\n"}),
        )]),
        1 => Reply::ToolCalls(vec![SimToolCall::new(read, json!({"file_path": file}))]),
        _ => Reply::text("Done."),
    }
}

/// Whether `body`, in `protocol`, declares a function tool named `tool`.
fn declares(protocol: Protocol, body: &Value, tool: &str) -> bool {
    let tools = &body["tools"];
    match protocol {
        Protocol::ChatCompletions => has_tool(tools, |t| t["function"]["name"] == tool),
        Protocol::GenerateContent => tools.as_array().is_some_and(|ts| {
            ts.iter()
                .any(|t| has_tool(&t["functionDeclarations"], |d| d["name"] == tool))
        }),
        // Responses, Messages and every other protocol (a Converse
        // simulator hands on the Messages body it means).
        _ => has_tool(tools, |t| t["name"] == tool),
    }
}

/// How many tool results `body`'s history holds, in `protocol`'s shape:
/// `tool` messages, `function_call_output` items, `tool_result` blocks or
/// `functionResponse` parts.
fn tool_results(protocol: Protocol, body: &Value) -> usize {
    match protocol {
        Protocol::ChatCompletions => list(&body["messages"])
            .iter()
            .filter(|m| m["role"] == "tool")
            .count(),
        Protocol::Responses => list(&body["input"])
            .iter()
            .filter(|i| i["type"] == "function_call_output")
            .count(),
        Protocol::GenerateContent => list(&body["contents"])
            .iter()
            .flat_map(|c| list(&c["parts"]))
            .filter(|p| p.get("functionResponse").is_some())
            .count(),
        // Messages and every other protocol (a Converse simulator hands on
        // the Messages body it means).
        _ => list(&body["messages"])
            .iter()
            .flat_map(|m| list(&m["content"]))
            .filter(|b| b["type"] == "tool_result")
            .count(),
    }
}

/// `v`'s elements, or none when it is not an array.
fn list(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// `text` without its terminal colours (a gateway's log read as text).
pub fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('\u{1b}') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        rest = rest.find('m').map_or("", |end| &rest[end + 1..]);
    }
    out.push_str(rest);
    out
}

/// A chat request for `model` with `key`: its status, the provider that
/// served it, and its body. Each asks something new, so that no answer
/// comes from the response cache (which a reload keeps).
pub async fn ask(gateway: &Gateway, key: &str, model: &str) -> (u16, Option<String>, String) {
    static ASKED: AtomicUsize = AtomicUsize::new(0);
    let prompt = format!("question {}", ASKED.fetch_add(1, Ordering::Relaxed));
    let resp = understudy_testkit::http_client()
        .post(format!("{}/v1/chat/completions", gateway.url))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(
            json!({"model": model, "messages": [{"role": "user", "content": prompt}]}).to_string(),
        )
        .send()
        .await
        .unwrap();
    let provider = resp
        .headers()
        .get("x-understudy-provider")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (resp.status().as_u16(), provider, resp.text().await.unwrap())
}
