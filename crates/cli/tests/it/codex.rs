//! The real Codex CLI (the pinned npm package `@openai/codex`, its path in
//! `UNDERSTUDY_CODEX` when `cargo xtask` provisions it) through the real
//! `understudy serve`, configured with the README's provider block as
//! written (`wire_api = "responses"`, `supports_websockets = false`), against
//! strict simulators that play the model: a scripted agent that reads the
//! conversation it receives, in its own protocol, and with no tool result
//! yet runs `exec_command` to write `hello.txt`, and with one says "Done.".
//!
//! Each scenario runs `codex exec` in a fresh scratch folder (its own
//! `HOME`) and asserts that it exits 0, that the file holds what the agent
//! wrote, which simulator served which turn, and that no simulator saw a
//! request its provider would have refused: (a) an OpenAI-compatible
//! target; (b) an Anthropic target; (c) an Anthropic primary that answers
//! 529 on the second turn, an OpenAI-compatible fallback serving it; (d) a
//! Gemini target (Codex's tool schemas in Gemini's subset).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use understudy_testkit::{Received, Reply, SimProvider, SimToolCall};

use crate::common::{Gateway, Run, Scratch, Turns, assert_no_violations, has_tool, run_agent};

/// The client key Codex sends (from the provider block's `env_key`).
const CLIENT_KEY: &str = "sk-understudy-codex-test";

/// The README's `~/.codex/config.toml` ("Using Understudy with Codex"), as
/// written; the test only puts the gateway's real address in place of
/// `127.0.0.1:8080`.
const README_CODEX_CONFIG: &str = r#"model = "default"
model_provider = "understudy"

[model_providers.understudy]
name = "Understudy"
base_url = "http://127.0.0.1:8080/v1"
env_key = "UNDERSTUDY_API_KEY"
wire_api = "responses"
supports_websockets = false
"#;

/// The task given to Codex (the scripted agent does it whatever it says).
const TASK: &str = "Create hello.txt containing the line hello.";

// === the scenarios ===

#[tokio::test(flavor = "multi_thread")]
async fn codex_completes_a_task_on_an_openai_compatible_target() {
    let openai = SimProvider::openai().await.unwrap();
    let scratch = scratch("openai");
    let turns = Turns::default();
    openai.respond_with(openai_agent(&scratch.work, &turns, &[]));
    let gateway = gateway(&scratch, &providers(&[("openai", "openai", &openai)]));
    let run = codex(&gateway, &scratch).await;
    run.assert_codex_done(&scratch, &gateway);
    assert_eq!(turns.stages(), [0, 1], "{}", gateway.log());
    assert_no_violations(&[("openai", &openai)], &gateway);
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_completes_a_task_on_an_anthropic_target() {
    let claude = SimProvider::anthropic().await.unwrap();
    let scratch = scratch("anthropic");
    let turns = Turns::default();
    claude.respond_with(anthropic_agent(&scratch.work, &turns, &[]));
    let gateway = gateway(&scratch, &providers(&[("claude", "anthropic", &claude)]));
    let run = codex(&gateway, &scratch).await;
    run.assert_codex_done(&scratch, &gateway);
    assert_eq!(turns.stages(), [0, 1], "{}", gateway.log());
    assert_no_violations(&[("claude", &claude)], &gateway);
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_survives_a_primary_failing_mid_task() {
    let claude = SimProvider::anthropic().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let scratch = scratch("anthropic-openai");
    let (claude_turns, openai_turns) = (Turns::default(), Turns::default());
    // The second turn (the tool's result in the history) finds Anthropic
    // overloaded; the OpenAI-compatible fallback serves it.
    claude.respond_with(anthropic_agent(&scratch.work, &claude_turns, &[1]));
    openai.respond_with(openai_agent(&scratch.work, &openai_turns, &[]));
    let gateway = gateway(
        &scratch,
        &providers(&[
            ("claude", "anthropic", &claude),
            ("openai", "openai", &openai),
        ]),
    );
    let run = codex(&gateway, &scratch).await;
    run.assert_codex_done(&scratch, &gateway);
    assert_eq!(claude_turns.stages(), [0, 1], "{}", gateway.log());
    assert_eq!(openai_turns.stages(), [1], "{}", gateway.log());
    assert_no_violations(&[("claude", &claude), ("openai", &openai)], &gateway);
}

#[test]
fn the_readme_shows_this_configuration() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let guide = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/clients.md"
    ));
    for (name, text) in [("README.md", readme), ("docs/clients.md", guide)] {
        assert!(
            text.contains(&format!("```toml\n{README_CODEX_CONFIG}```")),
            "{name}'s Codex block differs from the one tested here"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_completes_a_task_on_a_gemini_target() {
    let gemini = SimProvider::gemini().await.unwrap();
    let scratch = scratch("gemini");
    let turns = Turns::default();
    gemini.respond_with(gemini_agent(&scratch.work, &turns));
    let gateway = gateway(&scratch, &providers(&[("gemini", "gemini", &gemini)]));
    let run = codex(&gateway, &scratch).await;
    run.assert_codex_done(&scratch, &gateway);
    assert_eq!(turns.stages(), [0, 1], "{}", gateway.log());
    assert_no_violations(&[("gemini", &gemini)], &gateway);
}

/// The Gemini agent: counts `functionResponse` parts.
fn gemini_agent(work: &Path, turns: &Turns) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let (work, turns) = (work.to_owned(), turns.clone());
    move |req| {
        let body = req.json();
        let declares = body["tools"].as_array().is_some_and(|tools| {
            tools
                .iter()
                .any(|t| has_tool(&t["functionDeclarations"], |d| d["name"] == "exec_command"))
        });
        if !declares {
            return Reply::text("OK");
        }
        let stage = body["contents"].as_array().map_or(0, |cs| {
            cs.iter()
                .flat_map(|c| c["parts"].as_array().into_iter().flatten())
                .filter(|p| p.get("functionResponse").is_some())
                .count()
        });
        turns.push(stage);
        agent_reply(&work, stage)
    }
}

/// The gateway's configuration: these providers (name, kind, simulator),
/// the first the primary.
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

/// A scratch folder for `name`'s scenario.
fn scratch(name: &str) -> Scratch {
    let s = Scratch::new("codex", name);
    std::fs::create_dir_all(s.home.join(".codex")).unwrap();
    s
}

/// The real gateway with `toml`, this agent's client key its one key.
fn gateway(scratch: &Scratch, toml: &str) -> Gateway {
    Gateway::start(scratch, toml, CLIENT_KEY)
}

// === the scripted agents ===

/// The scripted agent's reply at `stage` (tool results so far).
fn agent_reply(work: &Path, stage: usize) -> Reply {
    let file = work.join("hello.txt").display().to_string();
    match stage {
        0 => Reply::ToolCalls(vec![SimToolCall::new(
            "exec_command",
            json!({"cmd": format!("printf 'hello\\n' > '{file}'")}),
        )]),
        _ => Reply::text("Done."),
    }
}

/// The OpenAI-compatible agent: counts `tool` messages; a request without
/// Codex's `exec_command` tool (a side task) gets a short text.
fn openai_agent(
    work: &Path,
    turns: &Turns,
    down_at: &'static [usize],
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let (work, turns) = (work.to_owned(), turns.clone());
    move |req| {
        let body = req.json();
        if !has_tool(&body["tools"], |t| t["function"]["name"] == "exec_command") {
            return Reply::text("OK");
        }
        let stage = body["messages"]
            .as_array()
            .map_or(0, |ms| ms.iter().filter(|m| m["role"] == "tool").count());
        turns.push(stage);
        if down_at.contains(&stage) {
            return Reply::status(503);
        }
        agent_reply(&work, stage)
    }
}

/// The Anthropic agent: counts `tool_result` blocks; answers 529 at the
/// stages in `overloaded_at`.
fn anthropic_agent(
    work: &Path,
    turns: &Turns,
    overloaded_at: &'static [usize],
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let (work, turns) = (work.to_owned(), turns.clone());
    move |req| {
        let body = req.json();
        if !has_tool(&body["tools"], |t| t["name"] == "exec_command") {
            return Reply::text("OK");
        }
        let stage = body["messages"].as_array().map_or(0, |ms| {
            ms.iter()
                .flat_map(|m| m["content"].as_array().into_iter().flatten())
                .filter(|b| b["type"] == "tool_result")
                .count()
        });
        turns.push(stage);
        if overloaded_at.contains(&stage) {
            return Reply::status(529);
        }
        agent_reply(&work, stage)
    }
}

// === the scratch folder, the gateway, Codex ===

/// Codex's binary: `$UNDERSTUDY_CODEX` (`cargo xtask test` sets it), else
/// where `cargo xtask provision` installs it; fails the test with how to
/// get it when neither runs.
fn codex_binary() -> PathBuf {
    let bin = std::env::var_os("UNDERSTUDY_CODEX").map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../target/test-npm/node_modules/.bin/codex"
            ))
        },
        PathBuf::from,
    );
    let probe = Command::new(&bin).arg("--version").output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "this test runs the Codex CLI, and {} does not run: run `cargo xtask provision` \
         (or `cargo xtask test`), which installs it in target/test-npm, or set \
         UNDERSTUDY_CODEX to a codex binary — {probe:?}",
        bin.display()
    );
    bin
}

/// Runs `codex exec` on the task in the scratch folder, through `gateway`
/// (the README's config with its address), with nothing from this
/// environment but `PATH`. The sandbox is off: the scratch folder is the
/// test's own, and containers often lack what Codex's sandbox needs.
async fn codex(gateway: &Gateway, scratch: &Scratch) -> Run {
    let config = README_CODEX_CONFIG.replace("http://127.0.0.1:8080", &gateway.url);
    std::fs::write(scratch.home.join(".codex/config.toml"), config).unwrap();
    let mut cmd = Command::new(codex_binary());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &scratch.home)
        .env("UNDERSTUDY_API_KEY", CLIENT_KEY)
        .args([
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            TASK,
        ])
        .current_dir(&scratch.work);
    run_agent(cmd, "Codex", gateway).await
}

impl Run {
    /// Codex finished without error, said the agent's last words, and the
    /// file holds what the agent wrote.
    /// (Named for the agent: `claude_code` adds its own check to the same
    /// type.)
    fn assert_codex_done(&self, scratch: &Scratch, gateway: &Gateway) {
        let shown = format!(
            "exit {}\nstdout: {}\nstderr: {}\ngateway log:\n{}",
            self.status,
            self.stdout,
            self.stderr,
            gateway.log()
        );
        assert!(self.status.success(), "{shown}");
        assert!(self.stdout.contains("Done."), "{shown}");
        let written = std::fs::read_to_string(scratch.work.join("hello.txt"))
            .unwrap_or_else(|e| panic!("hello.txt ({e}): {shown}"));
        assert_eq!(written, "hello\n", "{shown}");
    }
}
