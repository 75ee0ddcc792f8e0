//! What the real-agent tests (`claude_code`, `codex`, `gemini_cli`) share: a
//! scratch folder per scenario, the real `understudy serve` on a free
//! loopback port with its log kept, the record of which agent-loop stage
//! each simulator served, and the check that no simulator refused a
//! request the gateway sent.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use understudy_testkit::SimProvider;

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
}

impl Gateway {
    /// Starts the real binary with `toml` as its configuration and
    /// `client_key` as its one client key, and waits for it to say where it
    /// listens.
    pub fn start(scratch: &Scratch, toml: &str, client_key: &str) -> Self {
        let config = scratch.root.join("understudy.toml");
        std::fs::write(&config, toml).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_understudy"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("UNDERSTUDY_API_KEYS", client_key)
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
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Self { child, url, log }
    }

    /// What the gateway logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
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
