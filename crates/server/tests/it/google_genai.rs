//! The official `google-genai` Python SDK (pinned, `tests/google_genai.py`)
//! against the real server's Gemini API, its `http_options.base_url` the
//! only change: `generate_content`, `generate_content_stream`, a two-round
//! function-calling loop with automatic function calling off, structured
//! output parsed into a Pydantic model, an inline image over two turns,
//! `count_tokens` and `models.list` / `models.get`, in three set-ups:
//! (i) a Gemini target alone; (ii) a Gemini primary that fails (503) the
//! loop's second round, the stream, the structured output and the image's
//! second turn, with an OpenAI-compatible fallback serving those; (iii) an
//! Anthropic primary failing the same requests (529), with a Gemini
//! fallback.
//!
//! The SDK cannot see `x-understudy-provider`, so who served is read from
//! the simulators: each plays a scripted model that tells the request's
//! step by its prompt (each mode has its own) and logs it, in order across
//! simulators. Every Gemini simulator thinks (signs its calls and wants the
//! signatures back, as Gemini 3 does), and no simulator may see a request
//! its provider would refuse. The Python is found as in `openai_sdk.rs`
//! (`common::python_with`).

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use understudy_testkit::{Received, Reply, SimProvider, SimToolCall, TestGateway};

use crate::common::{self, TestServer};

/// The client key the script sends (`x-goog-api-key`).
const CLIENT_KEY: &str = "sk-understudy-sdk-test";

/// The recipe the scripted model answers the structured-output request
/// with (it fits the script's Pydantic model).
fn recipe() -> Value {
    json!({"name": "Pancakes", "minutes": 15, "ingredients": ["flour", "milk", "eggs"]})
}

// === the scenarios ===

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_works_against_a_gemini_target() {
    let gemini = SimProvider::gemini().await.unwrap();
    gemini.thinking();
    let log = Log::default();
    gemini.respond_with(model("gemini", &log, &[], 503));
    let gw = gateway(&[("gemini", &gemini)]).await;

    let v = sdk(&gw.url, "all").await;

    saw_every_answer(&v);
    assert_eq!(
        log.served(),
        [
            ("gemini", Step::Text),
            ("gemini", Step::Stream),
            ("gemini", Step::Tools(0)),
            ("gemini", Step::Tools(1)),
            ("gemini", Step::Tools(2)),
            ("gemini", Step::Structured),
            ("gemini", Step::Image(0)),
            ("gemini", Step::Image(1)),
        ],
        "{v}"
    );
    assert_eq!(log.failed(), [], "{v}");
    model_versions(&v, &["gemini"; 8]);
    no_violations(&[("gemini", &gemini)]);

    // Native first: the Gemini target got the SDK's body as sent, only the
    // model changed (it is in the path).
    let text = gemini.received_at(Step::Text);
    assert!(
        text.path
            .ends_with("/v1beta/models/gemini-model:generateContent"),
        "{}",
        text.path
    );
    assert_eq!(
        text.json(),
        json!({
            "contents": [{"parts": [{"text": "Tell me a joke about gateways."}], "role": "user"}],
            "systemInstruction": {"parts": [{"text": "Be brief."}], "role": "user"},
            "generationConfig": {"temperature": 0.5, "maxOutputTokens": 256}
        })
    );
    let stream = gemini.received_at(Step::Stream);
    assert!(
        stream.path.contains(":streamGenerateContent") && stream.path.contains("alt=sse"),
        "{}",
        stream.path
    );
    // The SDK's declaration spelling and its structured-output schema
    // arrive as it sent them.
    let tools = gemini.received_at(Step::Tools(0)).json();
    assert_eq!(
        tools["tools"][0]["functionDeclarations"][0]["parameters_json_schema"]["required"],
        json!(["city"]),
        "{tools}"
    );
    let structured = gemini.received_at(Step::Structured).json();
    assert_eq!(
        structured["generationConfig"]["responseMimeType"],
        "application/json"
    );
    assert_eq!(
        structured["generationConfig"]["responseSchema"]["type"],
        "OBJECT"
    );
    // The client key never reaches the provider.
    for r in gemini.received() {
        assert!(
            !String::from_utf8_lossy(&r.body).contains(CLIENT_KEY)
                && r.headers.iter().all(|(_, v)| !v.contains(CLIENT_KEY))
                && !r.path.contains(CLIENT_KEY),
            "{r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gemini_primary_failing_mid_loop_falls_back_to_openai() {
    let gemini = SimProvider::gemini().await.unwrap();
    gemini.thinking();
    let openai = SimProvider::openai().await.unwrap();
    let log = Log::default();
    gemini.respond_with(model("gemini", &log, FAILING, 503));
    openai.respond_with(model("openai", &log, &[], 503));
    let gw = gateway(&[("gemini", &gemini), ("openai", &openai)]).await;

    let v = sdk(&gw.url, "all").await;

    saw_every_answer(&v);
    assert_eq!(
        log.served(),
        served_with_fallback("gemini", "openai"),
        "{v}"
    );
    assert_eq!(log.failed(), failed_on("gemini"), "{v}");
    model_versions(
        &v,
        &[
            "gemini", "openai", "gemini", "openai", "gemini", "openai", "gemini", "openai",
        ],
    );
    no_violations(&[("gemini", &gemini), ("openai", &openai)]);
    // What only Gemini can read stays with Gemini: no thought signature
    // (the first round's, replayed by the SDK) reaches the fallback.
    for r in openai.received() {
        let body = String::from_utf8_lossy(&r.body);
        for word in ["thoughtSignature", "thought_signature", "skip_thought"] {
            assert!(!body.contains(word), "{word} reached openai: {body}");
        }
    }
    // The fallback got the loop so far: the first round's call and result.
    let round = openai.received_at(Step::Tools(1)).json();
    let messages = round["messages"].as_array().expect("chat messages");
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{round}");
    assert_eq!(
        messages[1]["tool_calls"][0]["id"], messages[2]["tool_call_id"],
        "{round}"
    );
    // And the image went to the fallback as an image.
    let image = openai.received_at(Step::Image(1)).json();
    assert!(
        image.to_string().contains("data:image/png;base64,"),
        "{image}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_anthropic_primary_failing_falls_back_to_gemini() {
    let claude = SimProvider::anthropic().await.unwrap();
    let gemini = SimProvider::gemini().await.unwrap();
    gemini.thinking();
    let log = Log::default();
    claude.respond_with(model("claude", &log, FAILING, 529));
    gemini.respond_with(model("gemini", &log, &[], 503));
    let gw = gateway(&[("claude", &claude), ("gemini", &gemini)]).await;

    let v = sdk(&gw.url, "all").await;

    saw_every_answer(&v);
    assert_eq!(
        log.served(),
        served_with_fallback("claude", "gemini"),
        "{v}"
    );
    assert_eq!(log.failed(), failed_on("claude"), "{v}");
    model_versions(
        &v,
        &[
            "claude", "gemini", "claude", "gemini", "claude", "gemini", "claude", "gemini",
        ],
    );
    no_violations(&[("claude", &claude), ("gemini", &gemini)]);
    // Anthropic's third round holds both earlier rounds, each tool_use
    // answered by a tool_result with its id, although the SDK sends no ids.
    let third = claude.received_at(Step::Tools(2)).json();
    let blocks = |kind: &str, key: &str| -> Vec<String> {
        third["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == kind)
            .map(|b| b[key].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let uses = blocks("tool_use", "id");
    assert_eq!(uses.len(), 2, "{third}");
    assert_ne!(uses[0], uses[1], "{third}");
    assert_eq!(blocks("tool_result", "tool_use_id"), uses, "{third}");
}

// === the scripted model ===

/// The requests the Gemini-primary and Anthropic-primary scenarios fail.
const FAILING: &[Step] = &[
    Step::Stream,
    Step::Tools(1),
    Step::Structured,
    Step::Image(1),
];

/// What a request is, told by the prompt of the script's mode (each mode
/// has its own, and the history keeps it whatever the protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Text,
    Stream,
    /// A round of the function-calling loop: how many results it holds.
    Tools(usize),
    Structured,
    /// A turn of the image conversation: 0 the first, 1 the follow-up.
    Image(usize),
    Count,
    /// Anything else (no prompt of the script's).
    Other,
}

impl Step {
    fn of(r: &Received) -> Self {
        let body = String::from_utf8_lossy(&r.body);
        if body.contains("Count the tokens of this.") {
            Self::Count
        } else if body.contains("Stream a joke about gateways.") {
            Self::Stream
        } else if body.contains("Tell me a joke about gateways.") {
            Self::Text
        } else if body.contains("What is the weather in Oslo, then in Paris?") {
            // Each function result holds `celsius`, in every protocol.
            Self::Tools(body.matches("celsius").count())
        } else if body.contains("A quick pancake recipe.") {
            Self::Structured
        } else if body.contains("What is in this picture?") {
            Self::Image(usize::from(body.contains("And what colour is it?")))
        } else {
            Self::Other
        }
    }

    /// The scripted model's answer.
    fn reply(self) -> Reply {
        let weather = |city: &str| {
            Reply::ToolCalls(vec![SimToolCall::new("get_weather", json!({"city": city}))])
        };
        match self {
            Self::Text => Reply::text("A gateway walks into a bar."),
            Self::Stream => Reply::text("The bar was down, so it fell back."),
            Self::Tools(0) => weather("Oslo"),
            Self::Tools(1) => weather("Paris"),
            Self::Tools(_) => Reply::text("Oslo and Paris are both 21 degrees."),
            Self::Structured => Reply::text(recipe().to_string()),
            Self::Image(0) => Reply::text("A single pixel."),
            Self::Image(_) => Reply::text("It is red."),
            Self::Count | Self::Other => Reply::text("Fine."),
        }
    }
}

/// One request a scripted model took: who, which step, and whether it
/// failed it.
type Entry = (&'static str, Step, bool);

/// Every request a scripted model took, in order across simulators.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Entry>>>);

impl Log {
    fn push(&self, entry: Entry) {
        self.0.lock().unwrap().push(entry);
    }

    fn entries(&self) -> Vec<Entry> {
        self.0.lock().unwrap().clone()
    }

    /// Who served each generation (token counts left out: a target may
    /// count or the gateway estimate), in order.
    fn served(&self) -> Vec<(&'static str, Step)> {
        self.entries()
            .into_iter()
            .filter(|(_, step, failed)| !failed && *step != Step::Count)
            .map(|(who, step, _)| (who, step))
            .collect()
    }

    /// The requests a scripted model failed, in order.
    fn failed(&self) -> Vec<(&'static str, Step)> {
        self.entries()
            .into_iter()
            .filter(|(_, _, failed)| *failed)
            .map(|(who, step, _)| (who, step))
            .collect()
    }
}

/// A scripted model named `name` that answers each step, failing those in
/// `fail` with `status`.
fn model(
    name: &'static str,
    log: &Log,
    fail: &'static [Step],
    status: u16,
) -> impl Fn(&Received) -> Reply + Send + Sync + 'static {
    let log = log.clone();
    move |r| {
        let step = Step::of(r);
        let failed = fail.contains(&step);
        log.push((name, step, failed));
        if failed {
            Reply::status(status)
        } else {
            step.reply()
        }
    }
}

/// Who serves each generation when `primary` fails [`FAILING`] and
/// `fallback` serves those.
fn served_with_fallback(
    primary: &'static str,
    fallback: &'static str,
) -> Vec<(&'static str, Step)> {
    vec![
        (primary, Step::Text),
        (fallback, Step::Stream),
        (primary, Step::Tools(0)),
        (fallback, Step::Tools(1)),
        (primary, Step::Tools(2)),
        (fallback, Step::Structured),
        (primary, Step::Image(0)),
        (fallback, Step::Image(1)),
    ]
}

/// The requests `primary` failed: each of [`FAILING`], once.
fn failed_on(primary: &'static str) -> Vec<(&'static str, Step)> {
    FAILING.iter().map(|step| (primary, *step)).collect()
}

trait ReceivedAt {
    /// The one request this simulator took for `step`.
    fn received_at(&self, step: Step) -> Received;
}

impl ReceivedAt for SimProvider {
    fn received_at(&self, step: Step) -> Received {
        let all: Vec<Received> = self
            .received()
            .into_iter()
            .filter(|r| Step::of(r) == step)
            .collect();
        assert_eq!(all.len(), 1, "{step:?}: {all:?}");
        all.into_iter().next().expect("one request")
    }
}

// === the gateway, the SDK, the checks ===

/// The server over `sims` (the first the default route's primary, the
/// others its fallbacks in order), with the script's client key.
async fn gateway(sims: &[(&str, &SimProvider)]) -> TestServer {
    let mut builder = TestGateway::builder().env("UNDERSTUDY_API_KEYS", CLIENT_KEY);
    for (name, sim) in sims {
        builder = builder.provider(name, sim);
    }
    let gw = builder.build().await.unwrap();
    TestServer::start(gw.engine).await
}

async fn sdk(url: &str, mode: &str) -> Value {
    common::run_sdk("google.genai", "google_genai.py", url, mode).await
}

/// The SDK saw every scripted answer, whoever served it (the script has
/// asserted the shapes: finish reasons, usage, the calls' names and
/// arguments, the parsed model).
fn saw_every_answer(v: &Value) {
    assert_eq!(v["text"]["text"], "A gateway walks into a bar.", "{v}");
    assert_eq!(
        v["stream"]["text"], "The bar was down, so it fell back.",
        "{v}"
    );
    assert!(
        v["stream"]["pieces"].as_array().unwrap().len() >= 2,
        "the stream came in one piece: {v}"
    );
    let rounds = v["tools"]["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3, "{v}");
    for (round, city) in rounds.iter().zip(["Oslo", "Paris"]) {
        let calls = round["function_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{round}");
        assert_eq!(calls[0]["name"], "get_weather");
        assert_eq!(calls[0]["args"], json!({"city": city}));
    }
    assert_eq!(rounds[2]["text"], "Oslo and Paris are both 21 degrees.");
    assert_eq!(v["structured"]["parsed"], recipe(), "{v}");
    let image = v["image"]["turns"].as_array().unwrap();
    assert_eq!(image[0]["text"], "A single pixel.", "{v}");
    assert_eq!(image[1]["text"], "It is red.", "{v}");
    assert!(v["count"]["total_tokens"].as_u64().unwrap() > 0, "{v}");
    let names: Vec<&str> = v["models"]["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(names.contains(&"models/default"), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("models/")), "{names:?}");
    assert_eq!(v["models"]["get"], names[0]);
}

/// Each answer's `modelVersion` names who served it (its `<name>-model`):
/// `served` lists them in the script's order, text, stream, the three tool
/// rounds, structured output and the two image turns.
fn model_versions(v: &Value, served: &[&str; 8]) {
    let rounds = &v["tools"]["rounds"];
    let answers = [
        &v["text"],
        &v["stream"],
        &rounds[0],
        &rounds[1],
        &rounds[2],
        &v["structured"],
        &v["image"]["turns"][0],
        &v["image"]["turns"][1],
    ];
    for (answer, who) in answers.iter().zip(served) {
        let version = answer["model_version"].as_str().unwrap_or_default();
        assert!(
            version.contains(&format!("{who}-model")),
            "{who} served, the answer says {version:?}: {answer}"
        );
    }
}

fn no_violations(sims: &[(&str, &SimProvider)]) {
    for (name, sim) in sims {
        assert_eq!(
            sim.violations(),
            Vec::<String>::new(),
            "{name} refused requests the gateway sent"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_key_gets_googles_error_shape() {
    let gemini = SimProvider::gemini().await.unwrap();
    let gw = gateway(&[("gemini", &gemini)]).await;
    let v = sdk(&gw.url, "wrong_key").await;
    assert_eq!(v, json!({"code": 401, "status": "UNAUTHENTICATED"}));
    assert_eq!(gemini.request_count(), 0);
}
