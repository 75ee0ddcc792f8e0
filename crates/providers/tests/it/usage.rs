//! Each protocol's answer id and token details over real HTTP: the
//! simulators, told to report cached and reasoning tokens
//! (`SimProvider::with_usage_detail`), send them in their providers'
//! shapes, and they arrive in the `Completion` (`response_id`, `usage`),
//! from `EventStream::response_id` and in the stream's `Finish` usage.
//! Cached tokens stay part of `input_tokens` and reasoning tokens part of
//! `output_tokens`, whichever way the protocol counts them.

use std::sync::Arc;
use std::time::Duration;

use understudy_core::{Adapter, AdapterFactory};
use understudy_providers::Providers;
use understudy_testkit::{BedrockSim, Reply, SimProvider, TestGateway, UsageDetail};
use understudy_types::{ChatRequest, StreamEvent, Usage};

const PATIENCE: Duration = Duration::from_secs(5);

/// What every simulator here is told to report.
const DETAIL: UsageDetail = UsageDetail {
    cache_read: 1024,
    cache_write: 256,
    reasoning: 64,
};

/// The question's words: each simulator counts words as prompt tokens.
const QUESTION: &str = "What is the capital of France?";
const QUESTION_WORDS: u64 = 6;
/// The answer's words, counted as output tokens.
const ANSWER: &str = "Paris is the capital.";
const ANSWER_WORDS: u64 = 4;

/// How a protocol reports `DETAIL`, as the neutral usage reads it.
struct Reports {
    /// It counts cache writes (Anthropic's, Bedrock's).
    cache_write: bool,
    /// It breaks reasoning out of the output (all but Converse).
    reasoning: bool,
}

impl Reports {
    fn usage(&self) -> Usage {
        let write = if self.cache_write {
            DETAIL.cache_write
        } else {
            0
        };
        Usage {
            input_tokens: QUESTION_WORDS + DETAIL.cache_read + write,
            // Reasoning is output whether or not it is broken out.
            output_tokens: ANSWER_WORDS + DETAIL.reasoning,
            cache_read_input_tokens: DETAIL.cache_read,
            cache_write_input_tokens: write,
            reasoning_output_tokens: if self.reasoning { DETAIL.reasoning } else { 0 },
        }
    }
}

/// The adapter for provider `name` of the settings `builder` describes.
fn adapter(builder: &understudy_testkit::TestGatewayBuilder, name: &str) -> Arc<dyn Adapter> {
    let settings = builder.settings().unwrap();
    Providers.build(&settings.providers[name]).unwrap()
}

/// Asks `adapter` for `model` once whole and once streamed (`sim` answers
/// both with the same text) and checks each answer's id (`id_ok`, or none
/// at all) and usage.
async fn check(
    sim: &SimProvider,
    adapter: &Arc<dyn Adapter>,
    model: &str,
    id_ok: Option<fn(&str) -> bool>,
    reports: &Reports,
) {
    sim.push_n(2, Reply::text(ANSWER));
    let request = ChatRequest::user(QUESTION);
    let c = adapter
        .complete(
            model,
            &request,
            &understudy_core::CallOptions::connect(PATIENCE),
        )
        .await
        .unwrap();
    assert_eq!(c.text, ANSWER);
    assert_eq!(c.usage, Some(reports.usage()), "the whole answer's usage");

    let mut stream = adapter
        .stream(
            model,
            &request,
            &understudy_core::CallOptions::connect(PATIENCE),
        )
        .await
        .unwrap();
    let mut last = None;
    while let Some(event) = tokio::time::timeout(PATIENCE, stream.next()).await.unwrap() {
        last = Some(event.unwrap());
    }
    let Some(StreamEvent::Finish { usage, .. }) = last else {
        panic!("the stream ended with {last:?}");
    };
    assert_eq!(usage, Some(reports.usage()), "the streamed answer's usage");
    let streamed = stream.response_id();

    match id_ok {
        Some(ok) => {
            let (whole, streamed) = (c.response_id.unwrap(), streamed.unwrap());
            assert!(ok(&whole), "{whole}");
            assert!(ok(&streamed), "{streamed}");
            assert_ne!(whole, streamed, "each answer has an id of its own");
        }
        None => assert_eq!((c.response_id, streamed), (None, None)),
    }
    assert_eq!(sim.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn chat_completions_report_ids_cache_reads_and_reasoning() {
    let sim = SimProvider::openai().await.unwrap();
    sim.with_usage_detail(DETAIL);
    let builder = TestGateway::builder().provider("p", &sim);
    let reports = Reports {
        cache_write: false,
        reasoning: true,
    };
    let id_ok: fn(&str) -> bool = |id| id.starts_with("chatcmpl-") && id.len() == 38;
    check(
        &sim,
        &adapter(&builder, "p"),
        "p-model",
        Some(id_ok),
        &reports,
    )
    .await;
}

#[tokio::test]
async fn the_responses_api_reports_ids_cache_reads_and_reasoning() {
    let sim = SimProvider::openai_responses().await.unwrap();
    sim.with_usage_detail(DETAIL);
    let builder = TestGateway::builder().provider("p", &sim);
    let reports = Reports {
        cache_write: false,
        reasoning: true,
    };
    let id_ok: fn(&str) -> bool = |id| id.starts_with("resp_");
    check(
        &sim,
        &adapter(&builder, "p"),
        "p-model",
        Some(id_ok),
        &reports,
    )
    .await;
}

#[tokio::test]
async fn gemini_reports_ids_cached_content_and_thoughts() {
    let sim = SimProvider::gemini().await.unwrap();
    sim.with_usage_detail(DETAIL);
    let builder = TestGateway::builder().provider("p", &sim);
    let reports = Reports {
        cache_write: false,
        reasoning: true,
    };
    let id_ok: fn(&str) -> bool = |id| {
        id.len() == 22
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    check(
        &sim,
        &adapter(&builder, "p"),
        "p-model",
        Some(id_ok),
        &reports,
    )
    .await;
}

#[tokio::test]
async fn anthropic_reports_ids_cache_reads_writes_and_thinking() {
    let sim = SimProvider::anthropic().await.unwrap();
    sim.with_usage_detail(DETAIL);
    let builder = TestGateway::builder().provider("p", &sim);
    let reports = Reports {
        cache_write: true,
        reasoning: true,
    };
    let id_ok: fn(&str) -> bool = |id| id.starts_with("msg_01") && id.len() == 28;
    check(
        &sim,
        &adapter(&builder, "p"),
        "p-model",
        Some(id_ok),
        &reports,
    )
    .await;
}

/// Bedrock, signed with SigV4: Claude through InvokeModel (Anthropic's
/// bodies and ids) and another model through Converse (no id; the cache
/// counted apart; no reasoning broken out).
#[tokio::test]
async fn bedrock_reports_cache_counts_through_both_apis() {
    const KEY_ID: &str = "AKIDSIMULATEDUSAGE";
    const SECRET: &str = "simulated/Secret+Key/for-the-usage-test";
    let account = BedrockSim::new("us-east-1", KEY_ID, SECRET, None);
    let sim = SimProvider::bedrock(&account).await.unwrap();
    sim.with_usage_detail(DETAIL);
    let builder = TestGateway::builder().toml(&format!(
        "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\nmodel = \"meta.llama3-1-70b-instruct-v1:0\"\naws_access_key_id = {KEY_ID:?}\naws_secret_access_key = {SECRET:?}\n",
        sim.base_url()
    ));
    let bedrock = adapter(&builder, "bedrock");
    let converse = Reports {
        cache_write: true,
        reasoning: false,
    };
    check(
        &sim,
        &bedrock,
        "meta.llama3-1-70b-instruct-v1:0",
        None,
        &converse,
    )
    .await;
    let messages = Reports {
        cache_write: true,
        reasoning: true,
    };
    let id_ok: fn(&str) -> bool = |id| id.starts_with("msg_");
    check(
        &sim,
        &bedrock,
        "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        Some(id_ok),
        &messages,
    )
    .await;
}

/// Without a detail to report, a simulator's usage has none, and neither
/// has the neutral usage: the totals are the words alone.
#[tokio::test]
async fn without_details_the_counts_are_zero() {
    let sim = SimProvider::anthropic().await.unwrap();
    sim.push(Reply::text(ANSWER));
    let builder = TestGateway::builder().provider("p", &sim);
    let c = adapter(&builder, "p")
        .complete(
            "p-model",
            &ChatRequest::user(QUESTION),
            &understudy_core::CallOptions::connect(PATIENCE),
        )
        .await
        .unwrap();
    assert_eq!(
        c.usage,
        Some(Usage {
            input_tokens: QUESTION_WORDS,
            output_tokens: ANSWER_WORDS,
            ..Usage::default()
        })
    );
}
