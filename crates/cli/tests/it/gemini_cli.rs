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

use serde_json::Value;
use understudy_testkit::{Received, Reply, SimProvider};

use crate::common::{
    Gateway, Run, Scratch, Turns, agent_binary, assert_no_violations, has_tool, providers,
    run_agent, scripted_agent, write_then_read,
};

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
    gemini.respond_with(agent(&gemini, &scratch.work, &turns, &[]));
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
    claude.respond_with(agent(&claude, &scratch.work, &turns, &[]));
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
    gemini.respond_with(agent(&gemini, &scratch.work, &gemini_turns, &[1]));
    openai.respond_with(agent(&openai, &scratch.work, &openai_turns, &[]));
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

// === the scripted agent ===

/// The scripted agent behind `sim`, in its protocol: writes
/// `hello.txt` with the CLI's `write_file`, reads it with `read_file`
/// (both take a `file_path`), then says "Done."; down at the stages in
/// `down_at`.
fn agent(
    sim: &SimProvider,
    work: &Path,
    turns: &Turns,
    down_at: &'static [usize],
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let work = work.to_owned();
    scripted_agent(
        sim.protocol(),
        "write_file",
        turns,
        down_at,
        move |stage, _| write_then_read(&work, stage, "write_file", "read_file"),
    )
}

// === the scratch folder, the gateway, the Gemini CLI ===

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

/// The Gemini CLI's binary (see [`agent_binary`]).
fn gemini_binary() -> PathBuf {
    agent_binary("UNDERSTUDY_GEMINI", ".bin/gemini", "the Gemini CLI")
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
