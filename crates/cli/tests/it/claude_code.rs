//! The real Claude Code CLI (the pinned npm package that `cargo xtask
//! provision` installs, its path in `UNDERSTUDY_CLAUDE`) through the real
//! `understudy serve`, against strict simulators that play the model: a
//! scripted agent that reads the conversation it receives, in its own
//! protocol, and with no tool result yet writes `hello.txt` with the
//! `Write` tool, with one reads it back with `Read`, and with two says
//! "Done." (the Anthropic simulator thinks first, with a signed thinking
//! block, when the request has thinking on).
//!
//! Each scenario runs `claude -p … --output-format json` in a fresh scratch
//! folder and asserts that it exits 0 with `is_error: false`, that the file
//! holds what the agent wrote, which simulator served which turn, and that
//! no simulator saw a request its provider would have refused:
//! (a) an Anthropic target only; (b) an Anthropic primary that answers 529
//! on the second turn, an OpenAI-compatible fallback serving it, and the
//! Anthropic primary serving the third turn over a history whose tool-use
//! turn has no thinking block; (c) a Gemini primary that fails (503) on the
//! second turn, with an Anthropic fallback.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use understudy_testkit::{Received, Reply, SimProvider};

use crate::common::{
    Gateway, Run, Scratch, Turns, agent_binary, assert_no_violations, run_agent, scripted_agent,
    write_then_read,
};

/// The client key Claude Code sends (`ANTHROPIC_API_KEY`).
const CLIENT_KEY: &str = "sk-understudy-claude-code-test";

/// The README's route for Claude Code ("Using Understudy with Claude
/// Code"), as written: every Claude model name Claude Code picks, served by
/// Anthropic with that model, then GPT-4.1, then Gemini. Claude Code is
/// given only its base URL and key, as the README says.
const README_ROUTES: &str = r#"[routes]
# Every Claude model Claude Code asks for: Anthropic serves the model it
# named, then GPT-4.1, then Gemini.
"claude-*" = ["claude:*", "openai:gpt-4.1", "gemini:gemini-2.5-pro"]
"#;

/// The task given to Claude Code (the scripted agent does it whatever it says).
const TASK: &str = "Create hello.txt containing the line hello, then read it back.";

/// The output-token limit of the Anthropic simulators: Claude Code asks
/// for 128 000 (`max_tokens`), which the models it targets allow.
const CLAUDE_OUTPUT_LIMIT: u64 = 128_000;

// === the scenarios ===

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_completes_a_task_on_an_anthropic_target() {
    let claude = SimProvider::anthropic().await.unwrap();
    claude.with_max_output_tokens(CLAUDE_OUTPUT_LIMIT);
    let scratch = scratch("anthropic");
    let claude_turns = Turns::default();
    claude.respond_with(agent(&claude, &scratch.work, &claude_turns, &[]));
    let gateway = gateway(
        &scratch,
        &format!(
            "[routing]\ndefault = \"claude\"\norder = [\"claude\"]\n\n\
             [providers.claude]\nbase_url = \"{}\"\napi_key = \"sk-ant-sim\"\n\n{README_ROUTES}",
            claude.base_url()
        ),
    );

    let run = claude_code(&gateway, &scratch).await;

    run.assert_claude_code_done(&scratch, &gateway);
    assert_eq!(claude_turns.stages(), [0, 1, 2], "{}", gateway.log());
    assert_no_violations(&[("claude", &claude)], &gateway);
    // `claude:*` served the model Claude Code picked itself, with its
    // `?beta=true`.
    for r in claude.received() {
        let model = r.json()["model"].as_str().unwrap_or_default().to_owned();
        assert!(model.starts_with("claude-"), "{model}");
        assert!(r.path.ends_with("?beta=true"), "{}", r.path);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_survives_an_anthropic_outage_on_an_openai_fallback() {
    let claude = SimProvider::anthropic().await.unwrap();
    claude.with_max_output_tokens(CLAUDE_OUTPUT_LIMIT);
    let openai = SimProvider::openai().await.unwrap();
    // GPT-4.1 takes 32 768 output tokens.
    openai.with_max_output_tokens(32_768);
    let scratch = scratch("anthropic-openai");
    let (claude_turns, openai_turns) = (Turns::default(), Turns::default());
    // The second turn (one tool result in the history) finds Anthropic
    // overloaded; the first and third it serves.
    claude.respond_with(agent(&claude, &scratch.work, &claude_turns, &[1]));
    openai.respond_with(agent(&openai, &scratch.work, &openai_turns, &[]));
    let gateway = gateway(
        &scratch,
        &format!(
            "[routing]\ndefault = \"claude\"\norder = [\"claude\", \"openai\"]\n\n\
             [providers.claude]\nbase_url = \"{}\"\napi_key = \"sk-ant-sim\"\n\n\
             [providers.openai]\nbase_url = \"{}\"\napi_key = \"sk-openai-sim\"\n\n{README_ROUTES}",
            claude.base_url(),
            openai.base_url()
        ),
    );

    let run = claude_code(&gateway, &scratch).await;

    run.assert_claude_code_done(&scratch, &gateway);
    // Anthropic saw every turn (the second answered 529), the fallback
    // only the second.
    assert_eq!(claude_turns.stages(), [0, 1, 2], "{}", gateway.log());
    assert_eq!(openai_turns.stages(), [1], "{}", gateway.log());
    assert_no_violations(&[("claude", &claude), ("openai", &openai)], &gateway);
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_survives_a_gemini_outage_on_an_anthropic_fallback() {
    let gemini = SimProvider::gemini().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    claude.with_max_output_tokens(CLAUDE_OUTPUT_LIMIT);
    let scratch = scratch("gemini-anthropic");
    let (gemini_turns, claude_turns) = (Turns::default(), Turns::default());
    // Gemini serves the first and third turns; the second finds it down
    // and Anthropic serves it, over a history Gemini made.
    gemini.respond_with(agent(&gemini, &scratch.work, &gemini_turns, &[1]));
    claude.respond_with(agent(&claude, &scratch.work, &claude_turns, &[]));
    let gateway = gateway(
        &scratch,
        &format!(
            "[routing]\ndefault = \"gemini\"\norder = [\"gemini\", \"claude\"]\n\n\
             [providers.gemini]\nbase_url = \"{}\"\napi_key = \"gemini-sim-key\"\nmodel = \"gemini-sim\"\n\n\
             [providers.claude]\nbase_url = \"{}\"\napi_key = \"sk-ant-sim\"\n\n\
             [routes]\n\"claude-*\" = [\"gemini:gemini-sim\", \"claude:*\"]\n",
            gemini.base_url(),
            claude.base_url()
        ),
    );

    let run = claude_code(&gateway, &scratch).await;

    run.assert_claude_code_done(&scratch, &gateway);
    assert_eq!(gemini_turns.stages(), [0, 1, 2], "{}", gateway.log());
    assert_eq!(claude_turns.stages(), [1], "{}", gateway.log());
    assert_no_violations(&[("gemini", &gemini), ("claude", &claude)], &gateway);
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_survives_an_anthropic_outage_on_bedrock() {
    let claude = SimProvider::anthropic().await.unwrap();
    claude.with_max_output_tokens(CLAUDE_OUTPUT_LIMIT);
    let account = understudy_testkit::BedrockSim::new(
        "us-west-2",
        "AKIDCLAUDECODEBEDROCK",
        "claude-code-bedrock-secret",
        None,
    );
    let bedrock = SimProvider::bedrock(&account).await.unwrap();
    bedrock.with_max_output_tokens(CLAUDE_OUTPUT_LIMIT);
    let scratch = scratch("anthropic-bedrock");
    let (claude_turns, bedrock_turns) = (Turns::default(), Turns::default());
    // The second turn finds the Anthropic API overloaded: Bedrock serves
    // it with the same model, thinking first (its own signature). The
    // third goes back to Anthropic, over a history holding Bedrock's
    // thinking block, which Anthropic would refuse.
    claude.respond_with(agent(&claude, &scratch.work, &claude_turns, &[1]));
    bedrock.respond_with(agent(&bedrock, &scratch.work, &bedrock_turns, &[]));
    let gateway = gateway(
        &scratch,
        &format!(
            "[routing]\ndefault = \"claude\"\norder = [\"claude\", \"bedrock\"]\n\n\
             [providers.claude]\nbase_url = \"{}\"\napi_key = \"sk-ant-sim\"\n\n\
             [providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-west-2\"\nbase_url = \"{}\"\n\
             model = \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\"\n\
             aws_access_key_id = \"AKIDCLAUDECODEBEDROCK\"\naws_secret_access_key = \"claude-code-bedrock-secret\"\n\n\
             [routes]\n\"claude-*\" = [\"claude:*\", \"bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0\"]\n",
            claude.base_url(),
            bedrock.base_url()
        ),
    );

    let run = claude_code(&gateway, &scratch).await;

    run.assert_claude_code_done(&scratch, &gateway);
    assert_eq!(claude_turns.stages(), [0, 1, 2], "{}", gateway.log());
    assert_eq!(bedrock_turns.stages(), [1], "{}", gateway.log());
    assert_no_violations(&[("claude", &claude), ("bedrock", &bedrock)], &gateway);
    // Bedrock got Claude Code's body for Bedrock: signed, its version in
    // the body, no model, no stream, only betas Bedrock takes.
    let to_bedrock: Vec<Received> = bedrock
        .received()
        .into_iter()
        .filter(|r| r.path.contains("/model/"))
        .collect();
    assert!(!to_bedrock.is_empty());
    for r in &to_bedrock {
        assert!(
            r.header("authorization")
                .is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256"))
        );
        assert!(
            r.path
                .contains("/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/"),
            "{}",
            r.path
        );
    }
}

/// A scratch folder for `name`'s scenario.
fn scratch(name: &str) -> Scratch {
    Scratch::new("claude-code", name)
}

/// The real gateway with `toml`, this agent's client key its one key.
fn gateway(scratch: &Scratch, toml: &str) -> Gateway {
    Gateway::start(scratch, toml, CLIENT_KEY)
}

// === the scripted agent ===

/// The scripted agent behind `sim`, in its protocol: writes
/// `hello.txt` with `Write`, reads it with `Read`, then says "Done.";
/// thinks first (a signed block) when an Anthropic request has thinking
/// on; down at the stages in `down_at`.
fn agent(
    sim: &SimProvider,
    work: &Path,
    turns: &Turns,
    down_at: &'static [usize],
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let work = work.to_owned();
    scripted_agent(
        sim.protocol(),
        "Write",
        turns,
        down_at,
        move |stage, body| {
            let reply = write_then_read(&work, stage, "Write", "Read");
            match body["thinking"]["type"].as_str() {
                Some("enabled" | "adaptive") => reply.thinking_first("The user wants hello.txt."),
                _ => reply,
            }
        },
    )
}

// === the scratch folder, the gateway, Claude Code ===

/// Claude Code's binary (see [`agent_binary`]).
fn claude_binary() -> PathBuf {
    agent_binary(
        "UNDERSTUDY_CLAUDE",
        "@anthropic-ai/claude-code/bin/claude.exe",
        "the Claude Code CLI",
    )
}

/// Runs `claude -p` on the task in the scratch folder, through `gateway`,
/// with nothing from this environment but `PATH`.
async fn claude_code(gateway: &Gateway, scratch: &Scratch) -> Run {
    let mut cmd = Command::new(claude_binary());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &scratch.home)
        .env("ANTHROPIC_BASE_URL", &gateway.url)
        .env("ANTHROPIC_API_KEY", CLIENT_KEY)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .args([
            "-p",
            TASK,
            "--output-format",
            "json",
            "--allowedTools",
            "Write,Read,Bash,Edit",
        ])
        .current_dir(&scratch.work);
    run_agent(cmd, "Claude Code", gateway).await
}

impl Run {
    /// Claude Code finished without error, said the agent's last words, and
    /// the file holds what the agent wrote.
    /// (Named for the agent: `codex` adds its own check to the same type.)
    fn assert_claude_code_done(&self, scratch: &Scratch, gateway: &Gateway) {
        let shown = format!(
            "exit {}\nstdout: {}\nstderr: {}\ngateway log:\n{}",
            self.status,
            self.stdout,
            self.stderr,
            gateway.log()
        );
        assert!(self.status.success(), "{shown}");
        let result: Value = serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("Claude Code's JSON result ({e}): {shown}"));
        assert_eq!(result["is_error"], false, "{shown}");
        assert_eq!(result["result"], "Done.", "{shown}");
        let written = std::fs::read_to_string(scratch.work.join("hello.txt"))
            .unwrap_or_else(|e| panic!("hello.txt ({e}): {shown}"));
        assert_eq!(written, "hello\n", "{shown}");
    }
}
