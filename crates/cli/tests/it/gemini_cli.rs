//! The real Gemini CLI (the pinned npm package `@google/gemini-cli`, its
//! path in `UNDERSTUDY_GEMINI` when `cargo xtask` provisions it) through the
//! real `understudy serve`, set up as the README says: `GOOGLE_GEMINI_BASE_URL`
//! at the gateway, `GEMINI_API_KEY` a client key the gateway checks, and the
//! README's `~/.gemini/settings.json` (API-key auth, the model a route,
//! updates and usage statistics off). Strict simulators play the model: a
//! scripted agent that reads the conversation it receives, in its own
//! protocol, and with no function result yet writes `hello.txt` with the
//! CLI's `write_file`, with one reads it back with `read_file`, and with
//! two says "Done.".
//!
//! Each scenario runs `gemini -p … --yolo --output-format json` in a fresh
//! scratch folder (its own `HOME`) and asserts that it exits 0 with the
//! agent's last words as its response, that the file holds what the agent
//! wrote, which simulator served which turn, and that no simulator saw a
//! request its provider would have refused: (a) a Gemini target that
//! thinks (it signs its calls and wants the signatures back, as Gemini 3
//! does); (b) an Anthropic target; (c) a Gemini primary that fails (503)
//! the second turn, an OpenAI-compatible fallback serving it, and the
//! primary serving the third over a history the fallback made.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use understudy_testkit::{Received, Reply, SimProvider, SimToolCall};

use crate::common::{Gateway, Run, Scratch, Turns, assert_no_violations, has_tool, run_agent};

/// The client key the Gemini CLI sends (`GEMINI_API_KEY`, as
/// `x-goog-api-key`).
const CLIENT_KEY: &str = "sk-understudy-gemini-cli-test";

/// The README's `~/.gemini/settings.json` ("Using Understudy with the
/// Gemini CLI"), as written. `selectedType` is needed: with
/// `GOOGLE_GEMINI_BASE_URL` set and no auth type chosen, the CLI picks
/// its `gateway` auth, which `-p` refuses ("Invalid auth method
/// selected.").
const README_SETTINGS: &str = r#"{
  "model": { "name": "default" },
  "security": { "auth": { "selectedType": "gemini-api-key" } },
  "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false },
  "privacy": { "usageStatisticsEnabled": false },
  "telemetry": { "enabled": false }
}
"#;

/// The task given to the CLI (the scripted agent does it whatever it says).
const TASK: &str = "Create hello.txt containing the line hello, then read it back.";

// === the scenarios ===

#[test]
fn the_readme_shows_these_settings() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let guide = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/clients.md"
    ));
    for (name, text) in [("README.md", readme), ("docs/clients.md", guide)] {
        assert!(
            text.contains(&format!("```json\n{README_SETTINGS}```")),
            "{name}'s Gemini CLI settings differ from the ones tested here"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn gemini_cli_completes_a_task_on_a_gemini_target() {
    let gemini = SimProvider::gemini().await.unwrap();
    gemini.thinking();
    let scratch = scratch("gemini");
    let turns = Turns::default();
    gemini.respond_with(gemini_agent(&scratch.work, &turns, &[]));
    let gateway = gateway(&scratch, &providers(&[("gemini", "gemini", &gemini)]));

    let run = gemini_cli(&gateway, &scratch).await;

    run.assert_gemini_cli_done(&scratch, &gateway);
    assert_eq!(turns.stages(), [0, 1, 2], "{}", gateway.log());
    assert_no_violations(&[("gemini", &gemini)], &gateway);
    // Every turn went as the CLI sends it: streamed, to the route's
    // target model, with the CLI's own call ids answered by its results.
    let received = gemini.received();
    for r in &received {
        assert!(
            r.path
                .ends_with("/models/gemini-sim:streamGenerateContent?alt=sse"),
            "{}",
            r.path
        );
    }
    let last = received.last().expect("a request").json();
    let contents = last["contents"].as_array().expect("contents");
    let ids = |key: &str| -> Vec<String> {
        contents
            .iter()
            .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p[key]["id"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(ids("functionCall").len(), 2, "{last}");
    assert_eq!(ids("functionCall"), ids("functionResponse"), "{last}");
}

#[tokio::test(flavor = "multi_thread")]
async fn gemini_cli_completes_a_task_on_an_anthropic_target() {
    let claude = SimProvider::anthropic().await.unwrap();
    let scratch = scratch("anthropic");
    let turns = Turns::default();
    claude.respond_with(anthropic_agent(&scratch.work, &turns));
    let gateway = gateway(&scratch, &providers(&[("claude", "anthropic", &claude)]));

    let run = gemini_cli(&gateway, &scratch).await;

    run.assert_gemini_cli_done(&scratch, &gateway);
    assert_eq!(turns.stages(), [0, 1, 2], "{}", gateway.log());
    assert_no_violations(&[("claude", &claude)], &gateway);
    // Anthropic got the CLI's functions as tools and its system
    // instruction as the system prompt.
    let first = claude.received()[0].json();
    assert!(
        has_tool(&first["tools"], |t| t["name"] == "read_file"),
        "{first}"
    );
    assert!(
        first["system"].to_string().contains("You are Gemini CLI"),
        "{first}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn gemini_cli_survives_a_gemini_outage_mid_task_on_an_openai_fallback() {
    let gemini = SimProvider::gemini().await.unwrap();
    gemini.thinking();
    let openai = SimProvider::openai().await.unwrap();
    let scratch = scratch("gemini-openai");
    let (gemini_turns, openai_turns) = (Turns::default(), Turns::default());
    // The second turn (one function result in the history) finds Gemini
    // down; the first and third it serves.
    gemini.respond_with(gemini_agent(&scratch.work, &gemini_turns, &[1]));
    openai.respond_with(openai_agent(&scratch.work, &openai_turns));
    let gateway = gateway(
        &scratch,
        &providers(&[("gemini", "gemini", &gemini), ("openai", "openai", &openai)]),
    );

    let run = gemini_cli(&gateway, &scratch).await;

    run.assert_gemini_cli_done(&scratch, &gateway);
    // Gemini saw every turn (the second answered 503), the fallback only
    // the second.
    assert_eq!(gemini_turns.stages(), [0, 1, 2], "{}", gateway.log());
    assert_eq!(openai_turns.stages(), [1], "{}", gateway.log());
    assert_no_violations(&[("gemini", &gemini), ("openai", &openai)], &gateway);
    // No thought signature (Gemini's, or the CLI's dummy) reached OpenAI.
    for r in openai.received() {
        let body = String::from_utf8_lossy(&r.body);
        for word in ["thoughtSignature", "thought_signature", "skip_thought"] {
            assert!(!body.contains(word), "{word} reached openai: {body}");
        }
    }
}

// === the scripted agents ===

/// What the agent does at `stage` (function results so far), or `None`
/// for the final answer: the CLI's `write_file` and `read_file` take a
/// `file_path`.
fn next_call(work: &Path, stage: usize) -> Option<SimToolCall> {
    let file = work.join("hello.txt").display().to_string();
    match stage {
        0 => Some(SimToolCall::new(
            "write_file",
            json!({"file_path": file, "content": "hello\n"}),
        )),
        1 => Some(SimToolCall::new("read_file", json!({"file_path": file}))),
        _ => None,
    }
}

/// The scripted agent's reply at `stage`.
fn agent_reply(work: &Path, stage: usize) -> Reply {
    match next_call(work, stage) {
        Some(call) => Reply::ToolCalls(vec![call]),
        None => Reply::text("Done."),
    }
}

/// The Gemini agent: counts `functionResponse` parts; answers 503 at the
/// stages in `down_at`. A request without the CLI's tools (a side task)
/// gets a short text.
fn gemini_agent(
    work: &Path,
    turns: &Turns,
    down_at: &'static [usize],
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let (work, turns) = (work.to_owned(), turns.clone());
    move |req| {
        let body = req.json();
        let declares_write = body["tools"].as_array().is_some_and(|tools| {
            tools
                .iter()
                .any(|t| has_tool(&t["functionDeclarations"], |d| d["name"] == "write_file"))
        });
        if !declares_write {
            return Reply::text("OK");
        }
        let stage = count_parts(&body["contents"], "functionResponse");
        turns.push(stage);
        if down_at.contains(&stage) {
            return Reply::status(503);
        }
        agent_reply(&work, stage)
    }
}

/// The Anthropic agent: counts `tool_result` blocks.
fn anthropic_agent(
    work: &Path,
    turns: &Turns,
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let (work, turns) = (work.to_owned(), turns.clone());
    move |req| {
        let body = req.json();
        if !has_tool(&body["tools"], |t| t["name"] == "write_file") {
            return Reply::text("OK");
        }
        let stage = body["messages"].as_array().map_or(0, |ms| {
            ms.iter()
                .flat_map(|m| m["content"].as_array().into_iter().flatten())
                .filter(|b| b["type"] == "tool_result")
                .count()
        });
        turns.push(stage);
        agent_reply(&work, stage)
    }
}

/// The OpenAI-compatible agent: counts `tool` messages.
fn openai_agent(work: &Path, turns: &Turns) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let (work, turns) = (work.to_owned(), turns.clone());
    move |req| {
        let body = req.json();
        if !has_tool(&body["tools"], |t| t["function"]["name"] == "write_file") {
            return Reply::text("OK");
        }
        let stage = body["messages"]
            .as_array()
            .map_or(0, |ms| ms.iter().filter(|m| m["role"] == "tool").count());
        turns.push(stage);
        agent_reply(&work, stage)
    }
}

/// How many parts of `kind` the contents hold.
fn count_parts(contents: &Value, kind: &str) -> usize {
    contents.as_array().map_or(0, |cs| {
        cs.iter()
            .flat_map(|c| c["parts"].as_array().into_iter().flatten())
            .filter(|p| p.get(kind).is_some())
            .count()
    })
}

// === the scratch folder, the gateway, the Gemini CLI ===

/// The gateway's configuration: the default route over `list` (name, kind,
/// simulator) in order, each provider's model `<name>-sim`.
fn providers(list: &[(&str, &str, &SimProvider)]) -> String {
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

/// A scratch folder for `name`'s scenario, with the README's settings in
/// its home.
fn scratch(name: &str) -> Scratch {
    let s = Scratch::new("gemini-cli", name);
    let dir = s.home.join(".gemini");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("settings.json"), README_SETTINGS).unwrap();
    s
}

/// The real gateway with `toml`, this agent's client key its one key.
fn gateway(scratch: &Scratch, toml: &str) -> Gateway {
    Gateway::start(scratch, toml, CLIENT_KEY)
}

/// The Gemini CLI's binary: `$UNDERSTUDY_GEMINI` (`cargo xtask test` sets
/// it), else where `cargo xtask provision` installs it; fails the test with
/// how to get it when neither runs.
fn gemini_binary() -> PathBuf {
    let bin = std::env::var_os("UNDERSTUDY_GEMINI").map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../target/test-npm/node_modules/.bin/gemini"
            ))
        },
        PathBuf::from,
    );
    let probe = Command::new(&bin).arg("--version").output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "this test runs the Gemini CLI, and {} does not run: run `cargo xtask provision` \
         (or `cargo xtask test`), which installs it in target/test-npm, or set \
         UNDERSTUDY_GEMINI to a gemini binary — {probe:?}",
        bin.display()
    );
    bin
}

/// Runs `gemini -p` on the task in the scratch folder, through `gateway`,
/// with nothing from this environment but `PATH`. The scratch folder is
/// the test's own, so it is trusted (`GEMINI_CLI_TRUST_WORKSPACE`: an
/// untrusted folder turns `--yolo` back to asking); the CLI runs in its
/// own process (`GEMINI_CLI_NO_RELAUNCH`: no child node to outlive a
/// kill past the run's limit); telemetry is off in the environment too;
/// its temporary files (error reports) stay in the scratch folder.
async fn gemini_cli(gateway: &Gateway, scratch: &Scratch) -> Run {
    let mut cmd = Command::new(gemini_binary());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &scratch.home)
        .env("GOOGLE_GEMINI_BASE_URL", &gateway.url)
        .env("GEMINI_API_KEY", CLIENT_KEY)
        .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
        .env("GEMINI_CLI_NO_RELAUNCH", "true")
        .env("GEMINI_TELEMETRY_ENABLED", "false")
        .env("TMPDIR", &scratch.root)
        .args(["-p", TASK, "--yolo", "--output-format", "json"])
        .current_dir(&scratch.work);
    run_agent(cmd, "Gemini CLI", gateway).await
}

impl Run {
    /// The Gemini CLI finished without error, said the agent's last words,
    /// and the file holds what the agent wrote.
    /// (Named for the agent: `claude_code` and `codex` add their own checks
    /// to the same type.)
    fn assert_gemini_cli_done(&self, scratch: &Scratch, gateway: &Gateway) {
        let shown = format!(
            "exit {}\nstdout: {}\nstderr: {}\ngateway log:\n{}",
            self.status,
            self.stdout,
            self.stderr,
            gateway.log()
        );
        assert!(self.status.success(), "{shown}");
        let result: Value = serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("the Gemini CLI's JSON result ({e}): {shown}"));
        assert_eq!(result["response"], "Done.", "{shown}");
        assert!(result.get("error").is_none(), "{shown}");
        let written = std::fs::read_to_string(scratch.work.join("hello.txt"))
            .unwrap_or_else(|e| panic!("hello.txt ({e}): {shown}"));
        assert_eq!(written, "hello\n", "{shown}");
    }
}
