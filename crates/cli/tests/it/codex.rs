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

use crate::common::{
    Gateway, Run, Scratch, Turns, agent_binary, assert_no_violations, providers, run_agent,
    scripted_agent,
};

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
    openai.respond_with(agent(&openai, &scratch.work, &turns, &[]));
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
    claude.respond_with(agent(&claude, &scratch.work, &turns, &[]));
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
    claude.respond_with(agent(&claude, &scratch.work, &claude_turns, &[1]));
    openai.respond_with(agent(&openai, &scratch.work, &openai_turns, &[]));
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
    gemini.respond_with(agent(&gemini, &scratch.work, &turns, &[]));
    let gateway = gateway(&scratch, &providers(&[("gemini", "gemini", &gemini)]));
    let run = codex(&gateway, &scratch).await;
    run.assert_codex_done(&scratch, &gateway);
    assert_eq!(turns.stages(), [0, 1], "{}", gateway.log());
    assert_no_violations(&[("gemini", &gemini)], &gateway);
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

// === the scripted agent ===

/// The scripted agent behind `sim`, in its protocol: writes
/// `hello.txt` with Codex's `exec_command`, then says "Done."; down at the
/// stages in `down_at`.
fn agent(
    sim: &SimProvider,
    work: &Path,
    turns: &Turns,
    down_at: &'static [usize],
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let file = work.join("hello.txt").display().to_string();
    scripted_agent(
        sim.protocol(),
        "exec_command",
        turns,
        down_at,
        move |stage, _| match stage {
            0 => Reply::ToolCalls(vec![SimToolCall::new(
                "exec_command",
                json!({"cmd": format!("printf 'hello\\n' > '{file}'")}),
            )]),
            _ => Reply::text("Done."),
        },
    )
}

// === the scratch folder, the gateway, Codex ===

/// Codex's binary (see [`agent_binary`]).
fn codex_binary() -> PathBuf {
    agent_binary("UNDERSTUDY_CODEX", ".bin/codex", "the Codex CLI")
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
