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
//! second turn, with an Anthropic fallback; (d) the same Claude on three
//! clouds, one model name mapped to each: the Anthropic API overloaded
//! from the second turn, Bedrock serving it, throttled for the third,
//! which Vertex serves.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use understudy_testkit::{Protocol, Received, Reply, SimProvider};

use crate::common::{
    Gateway, Run, Scratch, Turns, agent_binary, assert_no_violations, run_agent, scripted_agent,
    scripted_agent_failing, write_then_read,
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

/// Claude Code's model on every cloud: the name it asks for (set with
/// `ANTHROPIC_MODEL`), and Bedrock's and Vertex's ids for it.
const TWIN: &str = "claude-sonnet-4-5";
const TWIN_ON_BEDROCK: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const TWIN_ON_VERTEX: &str = "claude-sonnet-4-5@20250929";

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_crosses_from_anthropic_to_bedrock_to_vertex() {
    let claude = SimProvider::anthropic().await.unwrap();
    claude.with_max_output_tokens(CLAUDE_OUTPUT_LIMIT);
    let aws = understudy_testkit::BedrockSim::new(
        "us-west-2",
        "AKIDCLAUDECODEBEDROCK",
        "claude-code-bedrock-secret",
        None,
    );
    let bedrock = SimProvider::bedrock(&aws).await.unwrap();
    bedrock.with_max_output_tokens(CLAUDE_OUTPUT_LIMIT);
    let gcp = understudy_testkit::VertexSim::new("claude-code-sim", "global");
    let vertex = SimProvider::vertex(Protocol::Messages, &gcp).await.unwrap();
    vertex.with_max_output_tokens(CLAUDE_OUTPUT_LIMIT);
    let key_file = gcp.key_file(&format!("{}/token", vertex.base_url()));
    let scratch = scratch("anthropic-bedrock-vertex");
    let turns = (Turns::default(), Turns::default(), Turns::default());
    // The Anthropic API serves the first turn and is overloaded (529) for
    // the second and third. Bedrock serves the second with the same model,
    // thinking first (its own signature), and is throttled for the third,
    // which Vertex serves over a history holding Bedrock's thinking block,
    // which Vertex would refuse.
    claude.respond_with(agent(&claude, &scratch.work, &turns.0, &[1, 2]));
    bedrock.respond_with(scripted_agent_failing(
        Protocol::Messages,
        "Write",
        &turns.1,
        &[2],
        Reply::status(429),
        agent_reply(&scratch.work),
    ));
    vertex.respond_with(agent(&vertex, &scratch.work, &turns.2, &[]));
    let gateway = gateway(
        &scratch,
        &format!(
            "[routing]\ndefault = \"claude\"\norder = [\"claude\", \"bedrock\", \"vertex\"]\n\n\
             [providers.claude]\nbase_url = \"{}\"\napi_key = \"sk-ant-sim\"\n\n\
             [providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-west-2\"\nbase_url = \"{}\"\n\
             model = \"{TWIN_ON_BEDROCK}\"\nmodels = {{ \"{TWIN}\" = \"{TWIN_ON_BEDROCK}\" }}\n\
             aws_access_key_id = \"AKIDCLAUDECODEBEDROCK\"\naws_secret_access_key = \"claude-code-bedrock-secret\"\n\n\
             [providers.vertex]\nkind = \"vertex\"\nproject = \"claude-code-sim\"\nregion = \"global\"\n\
             base_url = \"{}\"\ncredentials_file = {:?}\nmodel = \"{TWIN_ON_VERTEX}\"\n\
             models = {{ \"{TWIN}\" = \"{TWIN_ON_VERTEX}\" }}\n\n\
             [routes]\n\"claude-*\" = [\"claude:*\", \"bedrock:*\", \"vertex:*\"]\n",
            claude.base_url(),
            bedrock.base_url(),
            vertex.base_url(),
            key_file.display().to_string(),
        ),
    );

    let run = claude_code_as(&gateway, &scratch, &[("ANTHROPIC_MODEL", TWIN)]).await;

    run.assert_claude_code_done(&scratch, &gateway);
    assert_eq!(turns.0.stages(), [0, 1, 2], "{}", gateway.log());
    // Bedrock's throttled turn went twice: once more after the wait.
    assert_eq!(turns.1.stages(), [1, 2, 2], "{}", gateway.log());
    assert_eq!(turns.2.stages(), [2], "{}", gateway.log());
    assert_no_violations(
        &[
            ("claude", &claude),
            ("bedrock", &bedrock),
            ("vertex", &vertex),
        ],
        &gateway,
    );
    // Each cloud got Claude Code's body for it, under its own id: Bedrock
    // signed (SigV4), Vertex with a token its endpoint issued; neither saw
    // the other's signature.
    let model_requests = |sim: &SimProvider| -> Vec<Received> {
        sim.received()
            .into_iter()
            .filter(|r| r.path.contains("/model"))
            .collect()
    };
    let to_bedrock = model_requests(&bedrock);
    assert!(!to_bedrock.is_empty());
    for r in &to_bedrock {
        assert!(
            r.header("authorization")
                .is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256"))
        );
        assert!(
            r.path.contains(&format!("/model/{TWIN_ON_BEDROCK}/")),
            "{}",
            r.path
        );
    }
    let to_vertex = model_requests(&vertex);
    assert!(!to_vertex.is_empty());
    for r in &to_vertex {
        assert!(
            r.header("authorization")
                .is_some_and(|a| a.starts_with("Bearer ya29.sim-"))
        );
        assert!(
            r.path.contains(&format!(
                "/locations/global/publishers/anthropic/models/{TWIN_ON_VERTEX}:"
            )),
            "{}",
            r.path
        );
        assert!(!String::from_utf8_lossy(&r.body).contains("bedrock:"));
    }
    assert!(to_claude_all_named(&claude, TWIN));
}

/// Every turn of the agent's task reached the Anthropic API by `model`.
fn to_claude_all_named(claude: &SimProvider, model: &str) -> bool {
    claude
        .received()
        .iter()
        .map(Received::json)
        .filter(|b| b["tools"].is_array())
        .all(|b| b["model"] == model)
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
    scripted_agent(sim.protocol(), "Write", turns, down_at, agent_reply(work))
}

/// The agent's answer at `stage`: [`write_then_read`], thinking first
/// when the request has thinking on.
fn agent_reply(work: &Path) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
    let work = work.to_owned();
    move |stage, body| {
        let reply = write_then_read(&work, stage, "Write", "Read");
        match body["thinking"]["type"].as_str() {
            Some("enabled" | "adaptive") => reply.thinking_first("The user wants hello.txt."),
            _ => reply,
        }
    }
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
    claude_code_as(gateway, scratch, &[]).await
}

/// [`claude_code`] with `env` set too (`ANTHROPIC_MODEL`, say).
async fn claude_code_as(gateway: &Gateway, scratch: &Scratch, env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(claude_binary());
    cmd.env_clear()
        .envs(env.iter().copied())
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
