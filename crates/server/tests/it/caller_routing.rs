//! Routing a caller asks for, over real HTTP against strict simulators:
//! OpenRouter's `models` and `provider` object, LiteLLM's and the Messages
//! API's `fallbacks`, and `x-understudy-targets`, honoured where a client
//! record (or `[caller_routing]`) allows it and ignored elsewhere; a name
//! outside a record's `models` is each API's 403, naming it; the fields
//! never reach a provider, natively forwarded bodies included (the
//! simulators refuse them as the real APIs do), but for Anthropic's own
//! `fallbacks` behind its beta; the official openai and anthropic SDKs
//! send them through `extra_body`.

use serde_json::{Value, json};
use understudy_core::GenerationEvent;
use understudy_testkit::{Reply, SimProvider, TestGateway, eventually};

use crate::common::{self, Answer, TestServer};

/// Three client records: `allowed` may choose its routing, `plain` may
/// not (the global setting is off), `scoped` may, within its `models`.
const RECORDS: &str = r#"
[[server.clients]]
name = "allowed"
key = "sk-allowed-0123456789"
caller_routing = true

[[server.clients]]
name = "plain"
key = "sk-plain-0123456789"

[[server.clients]]
name = "scoped"
key = "sk-scoped-0123456789"
caller_routing = true
models = ["default", "groq", "backup"]
"#;

/// The providers: `groq` (down), `claude` (Anthropic) and `backup`, in
/// that default order.
struct Sims {
    groq: SimProvider,
    claude: SimProvider,
    backup: SimProvider,
}

impl Sims {
    async fn start() -> Self {
        let sims = Self {
            groq: SimProvider::openai().await.unwrap(),
            claude: SimProvider::anthropic().await.unwrap(),
            backup: SimProvider::openai().await.unwrap(),
        };
        sims.groq.always(Reply::status(503));
        sims.claude.always(Reply::text("Hello from claude"));
        sims.backup.always(Reply::text("Hello from backup"));
        sims
    }

    /// A gateway over them with `toml`.
    async fn gateway(&self, toml: &str) -> TestServer {
        let gw = TestGateway::builder()
            .provider("groq", &self.groq)
            .provider("claude", &self.claude)
            .provider("backup", &self.backup)
            .order(&["groq", "claude", "backup"])
            .toml(toml)
            .build()
            .await
            .unwrap();
        TestServer::start(gw.engine).await
    }

    /// Requests each simulator received: groq, claude, backup.
    fn counts(&self) -> [usize; 3] {
        [
            self.groq.request_count(),
            self.claude.request_count(),
            self.backup.request_count(),
        ]
    }

    fn no_violations(&self) {
        for sim in [&self.groq, &self.claude, &self.backup] {
            assert!(sim.violations().is_empty(), "{:?}", sim.violations());
        }
    }
}

/// A request's key name, body fields and headers; who serves, and the
/// calls each simulator (groq, claude, backup) received.
type Case = (
    &'static str,
    Value,
    &'static [(&'static str, &'static str)],
    &'static str,
    [usize; 3],
);

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

async fn chat(s: &TestServer, key: &str, extra: Value, headers: &[(&str, &str)]) -> Answer {
    let mut body = json!({"model": "groq", "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let auth = bearer(key);
    let mut all = vec![("authorization", auth.as_str())];
    all.extend_from_slice(headers);
    s.post_with("/v1/chat/completions", &all, body.to_string())
        .await
}

fn served_by(a: &Answer) -> &str {
    a.header("x-understudy-provider").unwrap_or_default()
}

/// The event of the request `a` answered.
async fn event_of(s: &TestServer, a: &Answer) -> GenerationEvent {
    let id = a.header("x-request-id").unwrap().to_owned();
    eventually("the request's event", async || {
        s.engine
            .recent()
            .events()
            .into_iter()
            .find(|e| *e.request_id == *id)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_walks_the_callers_list_where_its_record_allows() {
    let sims = Sims::start().await;
    // groq stays down throughout: its breaker must not hide it.
    let s = sims
        .gateway(&format!("{RECORDS}\n[breaker]\nfailure_threshold = 1000\n"))
        .await;
    // (key, body fields, headers, who serves, [groq, claude, backup] calls)
    let cases: [Case; 7] = [
        // The pin alone, then the caller's list: claude is not in it.
        (
            "allowed",
            json!({"models": ["backup"]}),
            &[],
            "backup",
            [1, 0, 1],
        ),
        // Ignored without the record's leave: the pin, then the default
        // order.
        (
            "plain",
            json!({"models": ["backup"]}),
            &[],
            "claude",
            [1, 1, 0],
        ),
        // The provider order within the model's route.
        (
            "allowed",
            json!({"model": "default", "provider": {"order": ["backup"]}}),
            &[],
            "backup",
            [0, 0, 1],
        ),
        (
            "allowed",
            json!({"model": "default", "provider": {"ignore": ["groq", "claude"]}}),
            &[],
            "backup",
            [0, 0, 1],
        ),
        // Only the first: groq fails, and nobody follows.
        (
            "allowed",
            json!({"models": ["backup"], "provider": {"allow_fallbacks": false}}),
            &[],
            "",
            [1, 0, 0],
        ),
        // LiteLLM's fallbacks, names and objects.
        (
            "allowed",
            json!({"fallbacks": [{"model": "backup"}]}),
            &[],
            "backup",
            [1, 0, 1],
        ),
        // The header's list replaces the model.
        (
            "allowed",
            json!({}),
            &[("x-understudy-targets", "claude, backup")],
            "claude",
            [0, 1, 0],
        ),
    ];
    for (key, extra, headers, serves, calls) in cases {
        let before = sims.counts();
        let a = chat(&s, &format!("sk-{key}-0123456789"), extra.clone(), headers).await;
        let what = format!("{key} {extra} {headers:?}: {} {}", a.status, a.body);
        assert_eq!(served_by(&a), serves, "{what}");
        let after = sims.counts();
        let made: Vec<usize> = (0..3).map(|i| after[i] - before[i]).collect();
        assert_eq!(made, calls, "{what}");
        let note = event_of(&s, &a).await.caller_routing.expect("noted");
        assert_eq!(note.honoured, key == "allowed", "{what}");
    }
    // Streamed, the same walk.
    let a = chat(
        &s,
        "sk-allowed-0123456789",
        json!({"stream": true, "models": ["backup"]}),
        &[],
    )
    .await;
    assert_eq!(served_by(&a), "backup", "{}", a.body);
    assert!(a.body.contains("[DONE]"), "{}", a.body);
    sims.no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_outside_the_records_models_is_each_apis_403() {
    let sims = Sims::start().await;
    let s = sims.gateway(RECORDS).await;
    let a = chat(
        &s,
        "sk-scoped-0123456789",
        json!({"models": ["backup", "claude"]}),
        &[],
    )
    .await;
    assert_eq!(a.status, 403, "{}", a.body);
    let e = a.json();
    assert_eq!(e["error"]["code"], "model_not_allowed", "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("`claude`"),
        "{e}"
    );
    let auth = bearer("sk-scoped-0123456789");
    let header = [
        ("authorization", auth.as_str()),
        ("x-understudy-targets", "groq,claude:x"),
    ];
    let body =
        json!({"model": "groq", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    let a = s.post_with("/v1/messages", &header, body.to_string()).await;
    assert_eq!(a.status, 403, "{}", a.body);
    let e = a.json();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["type"], "permission_error", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`claude:x`"),
        "{e}"
    );
    let body = json!({"model": "groq", "input": "hi", "models": ["claude"]});
    let a = s
        .post_with(
            "/v1/responses",
            &[("authorization", auth.as_str())],
            body.to_string(),
        )
        .await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.body.contains("`claude`"), "{}", a.body);
    assert_eq!(sims.counts(), [0, 0, 0], "nothing was called");
    // Without the record's leave the same names are not asked for at all.
    let a = chat(
        &s,
        "sk-plain-0123456789",
        json!({"models": ["nobody-knows"]}),
        &[],
    )
    .await;
    assert_eq!(served_by(&a), "claude", "{}", a.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_bodies_lose_the_fields_but_anthropics_own_fallbacks() {
    let sims = Sims::start().await;
    // Allowed for every client (no record here).
    let s = sims.gateway("[caller_routing]\nenabled = true\n").await;
    let messages = |extra: Value| {
        let mut body = json!({"model": "claude", "max_tokens": 16,
                              "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body.to_string()
    };
    let version = ("anthropic-version", "2023-06-01");
    // Forwarded natively to claude (the primary), without the fields.
    let a = s
        .post_with(
            "/v1/messages",
            &[version],
            messages(json!({"fallbacks": [{"model": "backup"}], "provider": {"sort": "price"}})),
        )
        .await;
    assert_eq!(served_by(&a), "claude", "{}", a.body);
    let sent = sims.claude.received().last().unwrap().json();
    assert!(
        sent.get("fallbacks").is_none() && sent.get("provider").is_none(),
        "{sent}"
    );
    assert_eq!(sent["model"], "claude-model");
    // Anthropic's server-side fallbacks (its beta) are the provider's:
    // forwarded as sent, not routed by.
    let beta = ("anthropic-beta", "server-side-fallback-2026-07-01");
    let a = s
        .post_with(
            "/v1/messages",
            &[version, beta],
            messages(json!({"fallbacks": [{"model": "claude-opus-5"}]})),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let sent = sims.claude.received().last().unwrap().json();
    assert_eq!(
        sent["fallbacks"],
        json!([{"model": "claude-opus-5"}]),
        "{sent}"
    );
    assert!(event_of(&s, &a).await.caller_routing.is_none());
    // Claude down: the caller's fallbacks are walked.
    sims.claude.push(Reply::status(529));
    let a = s
        .post_with(
            "/v1/messages",
            &[version],
            messages(json!({"fallbacks": ["backup"]})),
        )
        .await;
    assert_eq!(served_by(&a), "backup", "{}", a.body);
    assert_eq!(a.json()["model"], "backup-model");
    sims.no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_native_body_loses_the_fields() {
    let native = SimProvider::openai_responses().await.unwrap();
    native.always(Reply::text("Hello from responses"));
    let backup = SimProvider::openai().await.unwrap();
    backup.always(Reply::text("Hello from backup"));
    let gw = TestGateway::builder()
        .provider("native", &native)
        .provider("backup", &backup)
        .toml("[caller_routing]\nenabled = true\n")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let body = json!({"model": "native", "input": "hi", "models": ["backup"],
                      "provider": {"order": ["native"]}, "store": false});
    let a = s.post("/v1/responses", body.to_string()).await;
    assert_eq!(served_by(&a), "native", "{}", a.body);
    let sent = native.received().last().unwrap().json();
    assert!(
        sent.get("models").is_none() && sent.get("provider").is_none(),
        "{sent}"
    );
    assert!(native.violations().is_empty(), "{:?}", native.violations());
    // The primary down: the caller's list goes on to backup.
    native.push(Reply::status(503));
    let a = s.post("/v1/responses", body.to_string()).await;
    assert_eq!(served_by(&a), "backup", "{}", a.body);
    assert!(backup.violations().is_empty(), "{:?}", backup.violations());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdks_route_as_asked_and_are_refused_outside_the_scope() {
    let sims = Sims::start().await;
    let s = sims.gateway(RECORDS).await;
    // (SDK, mode, who serves for `allowed`, for `plain`)
    let cases = [
        ("openai", "openai-models", "backup", "claude"),
        ("openai", "openai-provider", "backup", "claude"),
        ("anthropic", "anthropic-fallbacks", "backup", "claude"),
    ];
    for (sdk, mode, allowed, plain) in cases {
        let v = common::run_sdk(sdk, "caller_routing_sdk.py", &s.url, mode).await;
        assert_eq!(v["allowed"]["provider"], allowed, "{mode}: {v}");
        assert_eq!(
            v["allowed"]["model"],
            format!("{allowed}-model"),
            "{mode}: {v}"
        );
        assert_eq!(v["plain"]["provider"], plain, "{mode}: {v}");
        assert_eq!(v["scoped"]["status"], 403, "{mode}: {v}");
        assert_eq!(v["scoped"]["type"], "PermissionDeniedError", "{mode}: {v}");
        let message = v["scoped"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("claude"), "{mode}: {v}");
    }
    sims.no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_routes_every_api_and_the_admin_api_keeps_the_setting() {
    let sims = Sims::start().await;
    let admin = "admin-token-0123456789";
    let gw = TestGateway::builder()
        .provider("groq", &sims.groq)
        .provider("claude", &sims.claude)
        .provider("backup", &sims.backup)
        .order(&["groq", "claude", "backup"])
        .toml(RECORDS)
        .env("UNDERSTUDY_ADMIN_TOKEN", admin)
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    // A record made at run time with the setting keeps it, and is honoured.
    let auth = bearer(admin);
    let made = s
        .post_with(
            "/v1/admin/clients",
            &[("authorization", auth.as_str())],
            json!({"name": "later", "key": "sk-later-0123456789", "caller_routing": true})
                .to_string(),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    assert_eq!(
        made.json()["client"]["caller_routing"],
        true,
        "{}",
        made.body
    );
    let listed = s
        .get_with("/v1/admin/clients", &[("authorization", auth.as_str())])
        .await
        .json();
    let later = listed["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "later")
        .cloned()
        .unwrap();
    assert_eq!(later["caller_routing"], true, "{listed}");
    let a = chat(
        &s,
        "sk-later-0123456789",
        json!({"models": ["backup"]}),
        &[],
    )
    .await;
    assert_eq!(served_by(&a), "backup", "{}", a.body);
    // The Gemini API: the header alone.
    let targets = ("x-understudy-targets", "backup");
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let a = s
        .post_with(
            "/v1beta/models/groq:generateContent",
            &[("x-goog-api-key", "sk-allowed-0123456789"), targets],
            body.to_string(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(served_by(&a), "backup", "{}", a.body);
    // The neutral API: the header alone (its `provider` is its own pin).
    let a = s
        .post_with(
            "/v1/generate",
            &[("authorization", "Bearer sk-allowed-0123456789"), targets],
            json!({"prompt": "hi"}).to_string(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["provider"], "backup", "{}", a.body);
    let note = event_of(&s, &a).await.caller_routing.unwrap();
    assert_eq!((note.source.as_ref(), note.honoured), ("header", true));
    assert_eq!(note.targets, ["backup"]);
    // …and its body's `models` and `fallbacks` (names).
    let auth = bearer("sk-allowed-0123456789");
    let body = json!({"prompt": "hi", "provider": "groq", "models": ["claude:x"], "fallbacks": ["backup"]});
    let a = s
        .post_with(
            "/v1/generate",
            &[("authorization", auth.as_str())],
            body.to_string(),
        )
        .await;
    assert_eq!(a.json()["provider"], "claude", "{}", a.body);
    let note = event_of(&s, &a).await.caller_routing.unwrap();
    assert_eq!(note.targets, ["claude:x", "backup"]);
    sims.no_violations();
}

/// Body fields, headers, and the field a 400 names where routing is
/// honoured (`None`: not routing at all, served as if absent).
type Odd = (
    Value,
    &'static [(&'static str, &'static str)],
    Option<&'static str>,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_fields_fail_no_request_that_may_not_route_itself() {
    let sims = Sims::start().await;
    let s = sims.gateway(RECORDS).await;
    let many: Vec<String> = (0..17).map(|i| format!("m{i}")).collect();
    let cases: [Odd; 6] = [
        (json!({"models": many}), &[], Some("models")),
        (json!({"models": [""]}), &[], Some("models")),
        (
            json!({"provider": {"only": many}}),
            &[],
            Some("provider.only"),
        ),
        (
            json!({}),
            &[("x-understudy-targets", "backup,")],
            Some("x-understudy-targets"),
        ),
        (json!({"models": "backup"}), &[], None),
        (json!({"models": [{"id": 1}], "fallbacks": 3}), &[], None),
    ];
    for (extra, headers, refused) in cases {
        let what = format!("{extra} {headers:?}");
        // Off for `plain`: the fields are ignored, the default order serves.
        let a = chat(&s, "sk-plain-0123456789", extra.clone(), headers).await;
        assert_eq!(a.status, 200, "{what}: {}", a.body);
        assert_eq!(served_by(&a), "claude", "{what}: {}", a.body);
        // On for `allowed`: the clear 400, naming the field, no call.
        let before = sims.counts();
        let a = chat(&s, "sk-allowed-0123456789", extra.clone(), headers).await;
        match refused {
            Some(field) => {
                assert_eq!(a.status, 400, "{what}: {}", a.body);
                let e = a.json();
                let message = e["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains(field), "{what}: {e}");
                assert_eq!(sims.counts(), before, "{what}: nothing was called");
            }
            None => assert_eq!(served_by(&a), "claude", "{what}: {}", a.body),
        }
    }
    // A natively forwarded Messages body of `plain`: served by claude (its
    // primary), the fields not forwarded.
    let body = json!({"model": "claude", "max_tokens": 16, "models": many,
                      "provider": "anthropic", "fallbacks": [""],
                      "messages": [{"role": "user", "content": "hi"}]});
    let auth = bearer("sk-plain-0123456789");
    let a = s
        .post_with(
            "/v1/messages",
            &[("authorization", auth.as_str())],
            body.to_string(),
        )
        .await;
    assert_eq!(served_by(&a), "claude", "{}", a.body);
    let sent = sims.claude.received().last().unwrap().json();
    for field in ["models", "provider", "fallbacks"] {
        assert!(sent.get(field).is_none(), "{field}: {sent}");
    }
    sims.no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_spelled_with_escapes_never_reaches_the_provider() {
    let sims = Sims::start().await;
    let s = sims.gateway("[caller_routing]\nenabled = true\n").await;
    // `models` and `provider` with escaped keys: the typed parse reads
    // them, the byte edit cannot find them; the body is translated.
    let body = r#"{"model": "claude", "max_tokens": 16,
        "mod\u0065ls": ["backup"], "provid\u0065r": {"order": ["claude"]},
        "messages": [{"role": "user", "content": "hi"}]}"#;
    let a = s
        .post_with(
            "/v1/messages",
            &[("anthropic-version", "2023-06-01")],
            body.to_owned(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(served_by(&a), "claude", "{}", a.body);
    let sent = sims.claude.received().pop().unwrap();
    let text = String::from_utf8_lossy(&sent.body);
    assert!(!text.contains("\\u0065"), "{text}");
    let sent = sent.json();
    assert!(
        sent.get("models").is_none() && sent.get("provider").is_none(),
        "{sent}"
    );
    sims.no_violations();
}
