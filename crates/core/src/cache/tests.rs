//! The cache key's properties: two requests that differ in anything a
//! target would receive (or in API, route, policy, targets or client key)
//! never share a key, and one client key never reads another's entries
//! unless `[cache] shared` is set.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use understudy_types::chat::{
    Message, NativeRequest, Part, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
};
use understudy_types::protocol::Protocol;

use super::*;

/// Everything a key is made of, owned, so that two can be compared.
#[derive(Debug, Clone, PartialEq)]
struct Input {
    chat: ChatRequest,
    api: Option<Protocol>,
    route: String,
    policy: RefusalPolicy,
    targets: Vec<Target>,
    client: Option<ClientTag>,
}

impl Input {
    fn key(&self, shared: bool) -> CacheKey {
        let ctx = KeyContext {
            api: self.api,
            route: &self.route,
            policy: self.policy,
            targets: &self.targets,
            client: self.client,
        };
        CacheKey::new(&self.chat, &ctx, shared).expect("a request serializes")
    }
}

/// Strings from a tiny alphabet (with the characters JSON escapes), so
/// that generated pairs are often equal or nearly so.
fn s() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[ab\"\\\\,:]{0,2}").expect("a valid regex")
}

fn opt<T: std::fmt::Debug + Clone + 'static>(
    inner: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Option<T>> {
    proptest::option::of(inner)
}

fn float() -> impl Strategy<Value = f32> {
    prop_oneof![Just(0.0f32), Just(0.5), Just(1.0)]
}

fn part() -> impl Strategy<Value = Part> {
    prop_oneof![
        s().prop_map(|text| Part::Text { text }),
        (s(), opt(s())).prop_map(|(url, detail)| Part::Image { url, detail }),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    let role = prop_oneof![
        Just(Role::User),
        Just(Role::Assistant),
        Just(Role::Tool),
        Just(Role::System)
    ];
    let call = (s(), s(), s()).prop_map(|(id, name, arguments)| ToolCall {
        id,
        name,
        arguments,
    });
    (
        role,
        proptest::collection::vec(part(), 0..3),
        proptest::collection::vec(call, 0..2),
        opt(s()),
    )
        .prop_map(|(role, content, tool_calls, tool_call_id)| Message {
            role,
            content,
            tool_calls,
            tool_call_id,
        })
}

fn json() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::json!({})),
        Just(serde_json::json!({"type": "object"})),
        s().prop_map(|k| serde_json::json!({ k: 1 })),
        s().prop_map(|k| serde_json::json!({ "a": k })),
    ]
}

fn tool() -> impl Strategy<Value = Tool> {
    (s(), opt(s()), opt(json()), opt(any::<bool>())).prop_map(
        |(name, description, parameters, strict)| Tool {
            name,
            description,
            parameters,
            strict,
        },
    )
}

fn native() -> impl Strategy<Value = NativeRequest> {
    let kind = prop_oneof![
        Just(Protocol::Messages),
        Just(Protocol::ChatCompletions),
        Just(Protocol::GenerateContent)
    ];
    (
        kind,
        s(),
        proptest::collection::vec((s(), s()), 0..2),
        opt(s()),
    )
        .prop_map(|(kind, body, headers, query)| {
            let mut n = NativeRequest::new(kind, body);
            n.headers = headers;
            n.query = query;
            n
        })
}

fn chat() -> impl Strategy<Value = ChatRequest> {
    let tool_choice = prop_oneof![
        Just(ToolChoice::Auto),
        Just(ToolChoice::None),
        Just(ToolChoice::Required),
        s().prop_map(ToolChoice::Function),
    ];
    let format = prop_oneof![
        Just(ResponseFormat::Text),
        Just(ResponseFormat::JsonObject),
        (s(), json(), any::<bool>()).prop_map(|(name, schema, strict)| {
            ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            }
        }),
    ];
    let conversation = (
        opt(s()),
        proptest::collection::vec(message(), 0..3),
        opt(float()),
        opt(0u32..3),
        proptest::collection::vec(s(), 0..2),
    );
    let options = (
        proptest::collection::vec(tool(), 0..2),
        opt(tool_choice),
        opt(any::<bool>()),
        opt(format),
        opt(float()),
        opt(0i64..2),
        opt(float()),
        opt(float()),
        opt(s()),
    );
    let native = (
        opt(native()),
        opt(prop_oneof![Just("document"), Just("server tool")]),
    );
    (conversation, options, native).prop_map(|(c, o, n)| ChatRequest {
        system: c.0,
        messages: c.1,
        temperature: c.2,
        max_tokens: c.3,
        stop: c.4,
        tools: o.0,
        tool_choice: o.1,
        parallel_tool_calls: o.2,
        response_format: o.3,
        top_p: o.4,
        seed: o.5,
        presence_penalty: o.6,
        frequency_penalty: o.7,
        user: o.8,
        native: n.0.map(Arc::new),
        native_only: n.1,
        // Derived from the native body, which the key holds.
        ..ChatRequest::default()
    })
}

fn input() -> impl Strategy<Value = Input> {
    let api = prop_oneof![
        Just(None),
        Just(Some(Protocol::ChatCompletions)),
        Just(Some(Protocol::Messages))
    ];
    let policy = prop_oneof![
        Just(RefusalPolicy::SoftenThenFallback),
        Just(RefusalPolicy::Surface)
    ];
    let target = (s(), s()).prop_map(|(p, m)| Target::new(&p, &m));
    let client = opt(prop_oneof![Just("key-a"), Just("key-b")].prop_map(ClientTag::of_key));
    (
        chat(),
        api,
        s(),
        policy,
        proptest::collection::vec(target, 1..3),
        client,
    )
        .prop_map(|(chat, api, route, policy, targets, client)| Input {
            chat,
            api,
            route,
            policy,
            targets,
            client,
        })
}

/// `input` with one of its fields changed (which one by `field`).
fn mutate(mut input: Input, field: u8, text: String) -> Input {
    let chat = &mut input.chat;
    match field % 16 {
        0 => chat.system = Some(chat.system.take().unwrap_or_default() + "x"),
        1 => chat.messages.push(Message::user(text)),
        2 => chat.temperature = Some(chat.temperature.map_or(0.25, |t| t + 0.125)),
        3 => chat.max_tokens = Some(chat.max_tokens.map_or(7, |n| n + 1)),
        4 => chat.stop.push(text),
        5 => chat.tools.push(Tool {
            name: text,
            description: None,
            parameters: None,
            strict: None,
        }),
        6 => chat.tool_choice = Some(ToolChoice::Function(text + "!")),
        7 => chat.parallel_tool_calls = Some(!chat.parallel_tool_calls.unwrap_or(false)),
        8 => chat.top_p = Some(chat.top_p.map_or(0.25, |t| t + 0.125)),
        9 => chat.seed = Some(chat.seed.map_or(9, |n| n + 1)),
        10 => chat.user = Some(chat.user.take().unwrap_or_default() + "u"),
        11 => {
            let mut n = chat
                .native
                .as_deref()
                .cloned()
                .unwrap_or_else(|| NativeRequest::new(Protocol::Messages, String::new()));
            n.headers.push(("anthropic-beta".into(), text));
            chat.native = Some(Arc::new(n));
        }
        12 => {
            input.api = if input.api == Some(Protocol::ChatCompletions) {
                Some(Protocol::Messages)
            } else {
                Some(Protocol::ChatCompletions)
            }
        }
        13 => input.route.push('r'),
        14 => input.targets.push(Target::new("p", &text)),
        _ => {
            input.client = match input.client {
                Some(_) => None,
                None => Some(ClientTag::of_key(&text)),
            }
        }
    }
    input
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Two inputs share a key exactly when they are equal (the floats
    /// generated have one representation each, so equal means identical).
    #[test]
    fn keys_differ_exactly_when_requests_do(a in input(), b in input()) {
        for shared in [false, true] {
            let (ka, kb) = (a.key(shared), b.key(shared));
            let same_scope = shared || a.client == b.client;
            let equal = same_scope
                && Input { client: None, ..a.clone() } == Input { client: None, ..b.clone() };
            prop_assert_eq!(ka == kb, equal, "{:?}\n{:?}", a, b);
        }
    }

    /// Changing any one field changes the key.
    #[test]
    fn any_one_field_changes_the_key(a in input(), field in any::<u8>(), text in s()) {
        let b = mutate(a.clone(), field, text);
        prop_assume!(a != b);
        prop_assert_ne!(a.key(false), b.key(false));
        if a.client == b.client {
            prop_assert_ne!(a.key(true), b.key(true));
        }
    }
}

fn generation(text: &str) -> Generation {
    Generation {
        request_id: "r".into(),
        text: text.into(),
        tool_calls: Vec::new(),
        provider: "p".into(),
        model: "m".into(),
        finish_reason: understudy_types::chat::FinishReason::Stop,
        usage: None,
        fell_back: false,
        content_filtered: false,
        attempts: Vec::new(),
        latency_ms: 0.0,
        cached: false,
        native: None,
    }
}

fn cache(shared: bool) -> ResponseCache {
    let settings = CacheSettings {
        enabled: true,
        ttl: Duration::from_secs(60),
        max_entries: 100,
        shared,
    };
    ResponseCache::new(settings, None)
}

/// (shared, whether key B reads what key A stored)
#[tokio::test]
async fn a_client_key_reads_only_its_own_entries_unless_shared() {
    for (shared, b_reads_a) in [(false, false), (true, true)] {
        let cache = cache(shared);
        let targets = [Target::new("groq", "llama")];
        let ctx = |client: Option<ClientTag>| KeyContext {
            api: Some(Protocol::ChatCompletions),
            route: "default",
            policy: RefusalPolicy::SoftenThenFallback,
            targets: &targets,
            client,
        };
        let chat = ChatRequest::user("what is the secret plan?");
        let (a, b) = (ClientTag::of_key("key-a"), ClientTag::of_key("key-b"));
        let key_a = cache.key(&chat, &ctx(Some(a))).expect("a key");
        cache.put(key_a, &generation("A's answer"));
        let key_a_again = cache.key(&chat, &ctx(Some(a))).expect("a key");
        assert!(
            cache.get(key_a_again).await.is_some(),
            "A reads its own entry"
        );
        let key_b = cache.key(&chat, &ctx(Some(b))).expect("a key");
        assert_eq!(
            cache.get(key_b).await.is_some(),
            b_reads_a,
            "shared = {shared}"
        );
        let open = cache.key(&chat, &ctx(None)).expect("a key");
        assert_eq!(
            cache.get(open).await.is_some(),
            b_reads_a,
            "shared = {shared}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn entries_expire_and_the_memory_tier_is_bounded() {
    let cache = cache(false);
    let targets = [Target::new("groq", "llama")];
    let ctx = KeyContext {
        api: None,
        route: "default",
        policy: RefusalPolicy::SoftenThenFallback,
        targets: &targets,
        client: None,
    };
    let key = |i: usize| {
        cache
            .key(&ChatRequest::user(format!("q{i}")), &ctx)
            .expect("a key")
    };
    cache.put(key(0), &generation("0"));
    assert!(cache.get(key(0)).await.is_some());
    tokio::time::advance(Duration::from_secs(61)).await;
    assert!(cache.get(key(0)).await.is_none(), "past its ttl");
    for i in 0..1000 {
        cache.put(key(i), &generation("x"));
    }
    let memory = cache.memory.as_ref().expect("a memory tier");
    assert!(memory.len() <= 100, "{} entries", memory.len());
}
