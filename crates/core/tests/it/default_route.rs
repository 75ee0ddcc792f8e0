//! The default route `groq → gemini → claude` across three wire protocols,
//! through real HTTP: each provider gets the request in its own format.

use understudy_core::GenerateRequest;
use understudy_testkit::{Refusal, Reply, SimProvider, TestGateway};
use understudy_types::chat::SOFTENING_SUFFIX;
use understudy_types::{ChatRequest, Message, Role};

#[tokio::test]
async fn groq_refuses_twice_gemini_blocks_claude_answers() {
    let groq = SimProvider::openai().await.unwrap();
    let gemini = SimProvider::gemini().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::Refuse(Refusal::FinishReason));
    gemini.always(Reply::Refuse(Refusal::PromptBlocked));
    claude.always(Reply::text("A roast, gently done."));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("gemini", &gemini)
        .provider("claude", &claude)
        .build()
        .await
        .unwrap();
    let mut chat = ChatRequest::user("Roast my code")
        .with_system("You are a comedian.")
        .with_temperature(0.9);
    chat.messages
        .insert(0, Message::text(Role::Assistant, "Hi! Want a joke?"));
    chat.messages.insert(0, Message::text(Role::User, "Hello"));
    let g = gw
        .engine
        .generate(GenerateRequest::new(chat))
        .await
        .unwrap();

    let attempts: Vec<String> = g
        .attempts
        .iter()
        .map(|a| format!("{}/{}/{}", a.provider, a.kind.as_str(), a.outcome))
        .collect();
    assert_eq!(
        attempts,
        [
            "groq/primary/content_filter",
            "groq/softened/content_filter",
            "gemini/fallback/content_filter",
            "claude/fallback/ok"
        ]
    );
    assert_eq!(g.provider, "claude");
    assert_eq!(g.text, "A roast, gently done.");
    assert!(g.fell_back && g.content_filtered);
    assert!(
        g.attempts[2]
            .detail
            .as_deref()
            .unwrap()
            .contains("blockReason PROHIBITED_CONTENT")
    );
    assert_eq!(
        groq.received()[1].json()["messages"][0]["content"],
        format!("You are a comedian.{SOFTENING_SUFFIX}")
    );

    // Gemini: systemInstruction, assistant turns as `model`, generationConfig.
    let sent = gemini.received()[0].clone();
    assert_eq!(sent.path, "/v1beta/models/gemini-model:generateContent");
    assert_eq!(
        sent.header("x-goog-api-key"),
        Some(TestGateway::key_for("gemini").as_str())
    );
    assert!(!sent.path.contains("key="), "the key never goes in the URL");
    let body = sent.json();
    assert_eq!(
        body["systemInstruction"]["parts"][0]["text"],
        "You are a comedian."
    );
    let roles: Vec<_> = body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "model", "user"]);
    assert_eq!(body["contents"][2]["parts"][0]["text"], "Roast my code");
    assert_eq!(
        body["generationConfig"]["temperature"],
        serde_json::json!(0.9)
    );

    // Anthropic: top-level system, x-api-key, version header, max_tokens always.
    let sent = claude.received()[0].clone();
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(
        sent.header("x-api-key"),
        Some(TestGateway::key_for("claude").as_str())
    );
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    let body = sent.json();
    assert_eq!(body["system"], "You are a comedian.");
    assert_eq!(body["messages"][2]["content"], "Roast my code");
    assert_eq!(body["messages"][1]["role"], "assistant");
    // The request sets none, and the model's output limit is unknown: the
    // Messages API requires one, so the adapter's default.
    assert_eq!(body["max_tokens"], 8192);
    assert_eq!(body["temperature"], serde_json::json!(0.9));
    assert_eq!(body["model"], "claude-model");
    assert!(
        g.usage
            .is_some_and(|u| u.input_tokens > 0 && u.output_tokens > 0)
    );
}

#[tokio::test]
async fn each_protocol_s_refusal_is_softened_on_its_own_provider() {
    for (sim, name) in [
        (SimProvider::gemini().await.unwrap(), "gemini"),
        (SimProvider::anthropic().await.unwrap(), "claude"),
    ] {
        for refusal in [
            Refusal::FinishReason,
            Refusal::Message("no".into()),
            Refusal::Status400,
            Refusal::PromptBlocked,
            Refusal::NoText,
        ] {
            let is_refusal = !(name == "claude" && refusal == Refusal::NoText);
            sim.push(Reply::Refuse(refusal.clone()));
            if is_refusal {
                sim.push(Reply::text("softer"));
            }
            let gw = TestGateway::builder()
                .provider(name, &sim)
                .order(&[name])
                .build()
                .await
                .unwrap();
            let g = gw
                .engine
                .generate(GenerateRequest::new(
                    ChatRequest::user("x").with_temperature(0.7),
                ))
                .await;
            if is_refusal {
                let g = g.unwrap();
                let kinds: Vec<_> = g.attempts.iter().map(|a| a.kind.as_str()).collect();
                assert_eq!(kinds, ["primary", "softened"], "{name} {refusal:?}");
                assert!(g.content_filtered);
            } else {
                // An empty Anthropic answer is an empty response, not a refusal: no softening.
                let e = g.unwrap_err();
                assert_eq!(e.attempts()[0].outcome.as_str(), "empty_response");
                assert_eq!(e.attempts().len(), 1);
            }
        }
    }
}
