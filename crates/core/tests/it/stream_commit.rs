//! Progress is not commitment: a thinking target is working,
//! not failing; `stream_commit = "complete"` holds the answer until a
//! target finishes; `continue_after_cut` continues a cut answer on a target
//! that accepts an assistant prefill. The three stream faults of the public
//! Failover Bench, reproduced with the testkit, and the client-visible text
//! checked exactly.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use understudy_core::{
    Adapter, AdapterFactory, BoxEventStream, BoxFuture, Engine, EventStream, GenerateRequest,
};
use understudy_settings::Settings;
use understudy_testkit::{Reply, SimProvider, StreamEnd, StreamSpec, TestGateway};
use understudy_types::{
    ChatRequest, Completion, Failure, FailureKind, Protocol, StreamEvent, StreamItem,
};

/// `w1 w2 … wN` as chunks (`"w1"`, `" w2"`, …), from word `from` (1-based).
fn words(prefix: &str, from: usize, to: usize) -> Vec<String> {
    (from..=to)
        .map(|i| {
            if i == 1 {
                format!("{prefix}1")
            } else {
                format!(" {prefix}{i}")
            }
        })
        .collect()
}

fn spec(chunks: &[String]) -> StreamSpec {
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    StreamSpec::new(&chunks).every(Duration::from_millis(2))
}

/// The bench's faults.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// 40 of 60 words, then the socket closes with no terminator.
    Cut,
    /// 20 words, then silence.
    Stall,
    /// As `Cut`, and the fallback refuses any assistant prefill with a 400.
    CutAndNoPrefill,
}

/// The three modes a client can ask for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Defaults,
    Complete,
    Continue,
}

/// A primary (OpenAI-compatible) that fails as `fault` says and an
/// Anthropic fallback whose own answer is `v1 … v60`, and which continues
/// a prefilled `w…` answer with the words that follow it.
async fn bench(fault: Fault) -> (SimProvider, SimProvider, TestGateway) {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let all = words("w", 1, 60);
    let primary = match fault {
        Fault::Cut | Fault::CutAndNoPrefill => spec(&all[..40]).ending(StreamEnd::EndWithoutMarker),
        Fault::Stall => spec(&all[..20]).ending(StreamEnd::Stall),
    };
    groq.push(primary.reply());
    claude.respond_with(move |req| {
        let body = req.json();
        let last = &body["messages"].as_array().unwrap().last().unwrap().clone();
        if last["role"] != "assistant" {
            return spec(&words("v", 1, 60)).reply();
        }
        if fault == Fault::CutAndNoPrefill {
            return Reply::status(400);
        }
        // The prefill is the text so far: continue after its last word.
        let prefill = match &last["content"] {
            serde_json::Value::String(s) => s.clone(),
            blocks => blocks[0]["text"].as_str().unwrap_or_default().to_owned(),
        };
        let n = prefill.split_whitespace().count();
        spec(&words("w", n + 1, 60)).reply()
    });
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .toml("[timeouts]\nfirst_token = 2\nstream_idle = 0.5")
        .build()
        .await
        .unwrap();
    (groq, claude, gw)
}

/// The text the client received, and the final item.
async fn run(gw: &TestGateway, mode: Mode) -> (String, StreamItem) {
    let mut request = GenerateRequest::new(ChatRequest::user("sixty words, please"));
    match mode {
        Mode::Defaults => {}
        Mode::Complete => {
            request.stream_commit = Some(understudy_settings::StreamCommit::Complete);
        }
        Mode::Continue => request.continue_after_cut = Some(true),
    }
    let mut s = gw.engine.generate_stream(request).await.unwrap();
    let mut text = String::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("the stream stalled")
        {
            Some(StreamItem::Delta(t)) => text.push_str(&t),
            Some(StreamItem::Reasoning(_) | StreamItem::ToolCall(_) | StreamItem::Native(_)) => {}
            Some(end) => {
                assert!(s.next().await.is_none(), "items after the end");
                return (text, end);
            }
            None => panic!("the stream ended without Done or Error"),
        }
    }
}

fn joined(prefix: &str, from: usize, to: usize) -> String {
    words(prefix, from, to).concat()
}

#[tokio::test]
async fn the_failover_bench_stream_faults() {
    let full_w = joined("w", 1, 60);
    let full_v = joined("v", 1, 60);
    for fault in [Fault::Cut, Fault::Stall, Fault::CutAndNoPrefill] {
        let sent = joined("w", 1, if fault == Fault::Stall { 20 } else { 40 });
        for mode in [Mode::Defaults, Mode::Complete, Mode::Continue] {
            let (_groq, claude, gw) = bench(fault).await;
            let (text, end) = run(&gw, mode).await;
            let at = format!("{fault:?} {mode:?}");
            match (mode, fault) {
                // Today's rule: the client keeps what it saw, and an error.
                (Mode::Defaults, _) => {
                    assert_eq!(text, sent, "{at}");
                    let StreamItem::Error(e) = end else {
                        panic!("{at}: {end:?}")
                    };
                    assert_eq!(e.code.as_str(), "stream_interrupted", "{at}");
                    assert_eq!(claude.request_count(), 0, "{at}");
                }
                // Held until complete: the fallback's whole answer, alone.
                (Mode::Complete, _) => {
                    assert_eq!(text, full_v, "{at}");
                    let StreamItem::Done(d) = end else {
                        panic!("{at}: {end:?}")
                    };
                    assert_eq!(d.provider, "claude", "{at}");
                    assert!(d.fell_back, "{at}");
                    assert_eq!(d.continued_by, None, "{at}");
                }
                // Continued: one seamless answer…
                (Mode::Continue, Fault::Cut | Fault::Stall) => {
                    assert_eq!(text, full_w, "{at}");
                    let StreamItem::Done(d) = end else {
                        panic!("{at}: {end:?}")
                    };
                    assert_eq!(d.provider, "groq", "{at}: who began it");
                    assert_eq!(d.continued_by.as_deref(), Some("claude"), "{at}");
                    let kinds: Vec<String> = d
                        .attempts
                        .iter()
                        .map(|a| format!("{}/{}/{}", a.provider, a.kind.as_str(), a.outcome))
                        .collect();
                    assert_eq!(
                        kinds,
                        ["groq/primary/stream_interrupted", "claude/continuation/ok"],
                        "{at}"
                    );
                    let body = claude.received()[0].json();
                    let prefill = body["messages"].as_array().unwrap().last().unwrap().clone();
                    assert_eq!(prefill["role"], "assistant", "{at}");
                }
                // …unless the target refuses the prefill: never hidden.
                (Mode::Continue, Fault::CutAndNoPrefill) => {
                    assert_eq!(text, sent, "{at}");
                    let StreamItem::Error(e) = end else {
                        panic!("{at}: {end:?}")
                    };
                    assert_eq!(e.code.as_str(), "stream_interrupted", "{at}");
                    assert!(
                        e.message.contains("could not continue"),
                        "{at}: {}",
                        e.message
                    );
                    assert_eq!(e.provider, "groq", "{at}");
                }
            }
        }
    }
}

#[tokio::test]
async fn a_route_sets_its_streams_commit_and_continuation() {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .toml(
            "[timeouts]\nfirst_token = 2\nstream_idle = 0.5\n\
             [routes.held]\ntargets = [\"groq\", \"claude\"]\nstream_commit = \"complete\"\n\
             [routes.mended]\ntargets = [\"groq\", \"claude\"]\ncontinue_after_cut = true",
        )
        .build()
        .await
        .unwrap();
    let all = words("w", 1, 60);
    for (route, expected) in [("held", joined("v", 1, 60)), ("mended", joined("w", 1, 60))] {
        groq.push(spec(&all[..40]).ending(StreamEnd::EndWithoutMarker).reply());
        let rest = words("w", 41, 60);
        claude.respond_with(move |req| {
            let body = req.json();
            if body["messages"].as_array().unwrap().last().unwrap()["role"] == "assistant" {
                spec(&rest).reply()
            } else {
                spec(&words("v", 1, 60)).reply()
            }
        });
        let request = GenerateRequest::new(ChatRequest::user("sixty words"))
            .route(understudy_types::RouteSelector::Named(route.into()));
        let mut s = gw.engine.generate_stream(request).await.unwrap();
        let mut text = String::new();
        let end = loop {
            match s.next().await {
                Some(StreamItem::Delta(t)) => text.push_str(&t),
                Some(end) => break end,
                None => panic!("no end"),
            }
        };
        assert_eq!(text, expected, "{route}");
        assert!(matches!(end, StreamItem::Done(_)), "{route}: {end:?}");
    }
    // A commit mode that does not exist names its setting.
    let bad = TestGateway::builder()
        .provider("groq", &groq)
        .toml("[routes.x]\ntargets = [\"groq\"]\nstream_commit = \"sometimes\"")
        .settings();
    assert!(
        bad.is_err_and(|e| e.contains("routes.x.stream_commit")),
        "the setting is named"
    );
}

#[tokio::test]
async fn a_held_stream_that_no_target_completes_ends_in_an_in_band_error() {
    let (groq, claude, gw) = bench(Fault::Cut).await;
    claude.respond_with(|_| Reply::status(503));
    let _ = &groq;
    let (text, end) = run(&gw, Mode::Complete).await;
    assert_eq!(text, "", "nothing held is ever sent");
    let StreamItem::Error(e) = end else {
        panic!("{end:?}")
    };
    assert_eq!(e.code.as_str(), "unavailable");
    assert_eq!(e.attempts.len(), 2);
}

// === a thinking target, in paused time ===

/// A target that thinks (a reasoning delta every 5 s) for `think`, then
/// answers; or, with `silent`, sends nothing while it thinks.
#[derive(Debug, Clone)]
struct Thinker {
    think: Duration,
    silent: bool,
    opened: Arc<AtomicUsize>,
}

struct ThinkerStream {
    left: Vec<StreamEvent>,
    think: Duration,
    silent: bool,
}

impl EventStream for ThinkerStream {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<StreamEvent, Failure>>> {
        Box::pin(async move {
            if self.silent {
                tokio::time::sleep(self.think).await;
                self.silent = false;
            }
            let event = self.left.pop()?;
            if matches!(event, StreamEvent::Reasoning(_)) {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Some(Ok(event))
        })
    }
}

impl Adapter for Thinker {
    fn complete<'a>(
        &'a self,
        _: &'a str,
        _: &'a ChatRequest,
        _: &'a understudy_core::CallOptions,
    ) -> BoxFuture<'a, Result<Completion, Failure>> {
        Box::pin(async { Err(Failure::new(FailureKind::BadRequest, "streams only")) })
    }

    fn stream<'a>(
        &'a self,
        _: &'a str,
        _: &'a ChatRequest,
        _: &'a understudy_core::CallOptions,
    ) -> BoxFuture<'a, Result<BoxEventStream, Failure>> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        let thoughts = (self.think.as_secs() / 5) as usize;
        let mut left: Vec<StreamEvent> = Vec::new();
        left.push(StreamEvent::Finish {
            finish_reason: understudy_types::FinishReason::Stop,
            usage: None,
            model: None,
        });
        left.push(StreamEvent::Delta("The answer.".into()));
        if !self.silent {
            left.extend(
                (0..thoughts)
                    .rev()
                    .map(|i| StreamEvent::Reasoning(format!("thought {i}. "))),
            );
        }
        let s = ThinkerStream {
            left,
            think: self.think,
            silent: self.silent,
        };
        Box::pin(async move { Ok(Box::new(s) as BoxEventStream) })
    }
}

/// `thinker` is the primary; `quick` answers at once.
#[derive(Debug)]
struct Factory(Thinker);

impl AdapterFactory for Factory {
    fn supports(&self, _: Protocol) -> bool {
        true
    }

    fn build(&self, p: &understudy_settings::ProviderSettings) -> Result<Arc<dyn Adapter>, String> {
        let mut t = self.0.clone();
        if p.name == "quick" {
            t.think = Duration::ZERO;
            t.silent = false;
        }
        Ok(Arc::new(t))
    }
}

async fn thinking_engine(silent: bool) -> (Engine, Arc<AtomicUsize>) {
    let opened = Arc::new(AtomicUsize::new(0));
    let settings = Settings::from_toml_str(
        "[providers.thinker]\napi_key = \"k\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\nmodel = \"t\"\n\
         [providers.quick]\napi_key = \"k\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\nmodel = \"q\"\n\
         [routing]\ndefault = \"thinker\"\norder = [\"thinker\", \"quick\"]\n[timeouts]\nfirst_token = 10\nstream_idle = 8",
        |_| None,
    )
    .unwrap();
    let thinker = Thinker {
        think: Duration::from_secs(30),
        silent,
        opened: Arc::clone(&opened),
    };
    let engine = Engine::start(settings, Arc::new(Factory(thinker)))
        .await
        .unwrap();
    (engine, opened)
}

async fn drain(engine: &Engine) -> (String, String, StreamItem) {
    let mut s = engine
        .generate_stream(GenerateRequest::new(ChatRequest::user("think hard")))
        .await
        .unwrap();
    let (mut text, mut reasoning) = (String::new(), String::new());
    loop {
        match s.next().await {
            Some(StreamItem::Delta(t)) => text.push_str(&t),
            Some(StreamItem::Reasoning(t)) => reasoning.push_str(&t),
            Some(end) => return (text, reasoning, end),
            None => panic!("no end"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_target_that_thinks_for_30_s_is_served_by_it_not_failed_over() {
    let (engine, opened) = thinking_engine(false).await;
    let started = tokio::time::Instant::now();
    let (text, reasoning, end) = drain(&engine).await;
    let StreamItem::Done(done) = end else {
        panic!("{end:?}")
    };
    assert_eq!(done.provider, "thinker", "{:?}", done.attempts);
    assert!(!done.fell_back);
    assert_eq!(text, "The answer.");
    // Held until the commit, then passed on in order.
    assert_eq!(
        reasoning,
        (0..6).map(|i| format!("thought {i}. ")).collect::<String>()
    );
    assert!(started.elapsed() >= Duration::from_secs(30));
    assert_eq!(
        opened.load(Ordering::SeqCst),
        1,
        "no other target was asked"
    );
}

#[tokio::test(start_paused = true)]
async fn a_target_that_sends_nothing_is_still_timed_out_at_first_token() {
    let (engine, opened) = thinking_engine(true).await;
    let (text, _, end) = drain(&engine).await;
    let StreamItem::Done(done) = end else {
        panic!("{end:?}")
    };
    assert_eq!(done.provider, "quick");
    assert_eq!(text, "The answer.");
    assert_eq!(done.attempts[0].outcome.as_str(), "timeout");
    assert_eq!(opened.load(Ordering::SeqCst), 2);
}
