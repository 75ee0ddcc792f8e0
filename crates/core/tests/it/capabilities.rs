//! What a request needs and what a target can do: a target that lacks a
//! capability is recorded as `unsupported` and never called; a request no
//! target can serve is a client error; an answer that breaks the requested
//! JSON shape is `invalid_output` and the plan moves on; the response cache
//! tells requests apart by every field. Through real HTTP to simulators.

use serde_json::json;
use understudy_core::GenerateRequest;
use understudy_testkit::{Reply, SimProvider, TestGateway, eventually};
use understudy_types::{Attempt, ChatRequest, Error, Message, Part, ResponseFormat, Tool};

fn weather_tool() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("The weather in a city".into()),
        parameters: Some(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        })),
        strict: None,
    }
}

fn with_tools() -> GenerateRequest {
    GenerateRequest::new(ChatRequest {
        tools: vec![weather_tool()],
        ..ChatRequest::user("What is the weather in Oslo?")
    })
}

fn weather_schema() -> ResponseFormat {
    ResponseFormat::JsonSchema {
        name: "weather".into(),
        schema: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
            "required": ["city", "celsius"]
        }),
        strict: true,
    }
}

fn trail(attempts: &[Attempt]) -> Vec<String> {
    attempts
        .iter()
        .map(|a| format!("{} {} {}", a.provider, a.kind.as_str(), a.outcome))
        .collect()
}

async fn pair(groq_line: &str) -> (SimProvider, SimProvider, TestGateway) {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .provider_option("groq", groq_line)
        .build()
        .await
        .unwrap();
    (groq, openai, gw)
}

#[tokio::test]
async fn a_provider_without_tools_receives_no_tool_request() {
    let (groq, openai, gw) = pair("capabilities = { tools = false }").await;
    openai.always(Reply::text("It is sunny."));
    let g = gw.engine.generate(with_tools()).await.unwrap();
    assert_eq!(g.provider, "openai");
    assert!(g.fell_back);
    assert_eq!(
        trail(&g.attempts),
        ["groq primary unsupported", "openai fallback ok"]
    );
    assert!(
        g.attempts[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("lacks tools")),
        "{:?}",
        g.attempts[0].detail
    );
    assert_eq!(groq.request_count(), 0, "groq never saw the tool request");
    // The event records the unsupported attempt too.
    let events = eventually("the event", async || {
        let events = gw.engine.recent().events();
        (!events.is_empty()).then_some(events)
    })
    .await;
    let outcomes: Vec<String> = events[0]
        .attempts
        .iter()
        .map(|a| a.outcome.to_string())
        .collect();
    assert_eq!(outcomes, ["unsupported", "ok"]);
    // A plain request still goes to groq.
    groq.always(Reply::text("plain"));
    let plain = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("hi")))
        .await
        .unwrap();
    assert_eq!(plain.provider, "groq");
}

#[tokio::test]
async fn a_model_override_narrows_one_model_only() {
    let (groq, openai, gw) =
        pair("model_capabilities = { \"groq-model\" = { vision = false } }").await;
    groq.always(Reply::text("from groq"));
    openai.always(Reply::text("from openai"));
    let image = GenerateRequest::new(ChatRequest {
        messages: vec![Message {
            content: vec![
                Part::Text {
                    text: "What is in this picture?".into(),
                },
                Part::Image {
                    url: "data:image/png;base64,iVBORw0KGgo=".into(),
                    detail: None,
                },
            ],
            ..Message::user("")
        }],
        ..ChatRequest::default()
    });
    let g = gw.engine.generate(image).await.unwrap();
    assert_eq!(g.provider, "openai");
    assert_eq!(trail(&g.attempts)[0], "groq primary unsupported");
    // Tools are still fine on groq's model.
    let g = gw.engine.generate(with_tools()).await.unwrap();
    assert_eq!(g.provider, "groq");
}

#[tokio::test]
async fn a_request_no_target_can_serve_is_a_client_error_naming_the_capability() {
    let groq = SimProvider::openai().await.unwrap();
    let gemini = SimProvider::gemini().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("gemini", &gemini)
        .provider_option("groq", "capabilities = { tools = false, vision = false }")
        .provider_option("gemini", "capabilities = { tools = false }")
        .build()
        .await
        .unwrap();
    let err = gw.engine.generate(with_tools()).await.unwrap_err();
    let Error::InvalidRequest { field, message } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*field, "tools");
    assert!(message.contains("groq:groq-model lacks tools"), "{message}");
    assert!(
        message.contains("gemini:gemini-model lacks tools"),
        "{message}"
    );
    // A remote image: groq lacks vision, and Gemini takes images inline only.
    let remote = GenerateRequest::new(ChatRequest {
        messages: vec![Message {
            content: vec![Part::Image {
                url: "https://example.com/cat.png".into(),
                detail: None,
            }],
            ..Message::user("")
        }],
        ..ChatRequest::default()
    });
    let err = gw.engine.generate(remote).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("lacks vision"), "{message}");
    assert!(message.contains("remote image URLs"), "{message}");
    assert_eq!(groq.request_count() + gemini.request_count(), 0);
}

#[tokio::test]
async fn an_answer_that_breaks_the_schema_falls_back() {
    let (groq, openai, gw) = pair("").await;
    groq.always(Reply::text(r#"{"city": "Oslo"}"#));
    openai.always(Reply::text(r#"{"city": "Oslo", "celsius": -3}"#));
    let request = GenerateRequest::new(ChatRequest {
        response_format: Some(weather_schema()),
        ..ChatRequest::user("Weather in Oslo as JSON")
    });
    let g = gw.engine.generate(request).await.unwrap();
    assert_eq!(g.provider, "openai");
    assert_eq!(g.text, r#"{"city": "Oslo", "celsius": -3}"#);
    assert_eq!(
        trail(&g.attempts),
        ["groq primary invalid_output", "openai fallback ok"]
    );
    let detail = g.attempts[0].detail.clone().unwrap_or_default();
    assert!(detail.contains("breaks the schema"), "{detail}");
    // Every target breaking it: the request fails with invalid_output, and
    // the client never gets an answer that breaks its schema.
    openai.always(Reply::text("Sure! It is cold."));
    let request = GenerateRequest::new(ChatRequest {
        response_format: Some(weather_schema()),
        ..ChatRequest::user("Weather in Oslo as JSON, again")
    });
    let err = gw.engine.generate(request).await.unwrap_err();
    assert_eq!(err.code().as_str(), "invalid_output");
}

#[tokio::test]
async fn json_object_needs_an_object_and_fences_are_taken_off() {
    let (groq, openai, gw) = pair("").await;
    groq.always(Reply::text("[1, 2, 3]"));
    openai.always(Reply::text("```json\n{\"ok\": true}\n```"));
    let request = GenerateRequest::new(ChatRequest {
        response_format: Some(ResponseFormat::JsonObject),
        ..ChatRequest::user("JSON please")
    });
    let g = gw.engine.generate(request).await.unwrap();
    assert_eq!(trail(&g.attempts)[0], "groq primary invalid_output");
    assert_eq!(g.text, "{\"ok\": true}");
}

#[tokio::test]
async fn a_schema_that_does_not_compile_never_reaches_a_provider() {
    let (groq, _openai, gw) = pair("").await;
    let request = GenerateRequest::new(ChatRequest {
        response_format: Some(ResponseFormat::JsonSchema {
            name: "bad".into(),
            schema: json!({"type": 17}),
            strict: false,
        }),
        ..ChatRequest::user("x")
    });
    let err = gw.engine.generate(request).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidRequest {
                field: "response_format",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(groq.request_count(), 0);
}

#[tokio::test]
async fn the_cache_tells_requests_apart_by_their_tools_and_format() {
    let groq = SimProvider::openai().await.unwrap();
    groq.always(Reply::text(r#"{"answer": 1}"#));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .cache(true)
        .build()
        .await
        .unwrap();
    let plain = || ChatRequest::user("Same prompt");
    let variants = [
        plain(),
        ChatRequest {
            tools: vec![weather_tool()],
            ..plain()
        },
        ChatRequest {
            response_format: Some(ResponseFormat::JsonObject),
            ..plain()
        },
        ChatRequest {
            seed: Some(7),
            ..plain()
        },
    ];
    for chat in variants.iter().cloned() {
        let g = gw
            .engine
            .generate(GenerateRequest::new(chat))
            .await
            .unwrap();
        assert!(
            !g.cached,
            "a request that differs must not get another's answer"
        );
    }
    assert_eq!(groq.request_count(), variants.len());
    // The same request again is a hit.
    for chat in variants {
        let g = gw
            .engine
            .generate(GenerateRequest::new(chat))
            .await
            .unwrap();
        assert!(g.cached);
    }
    assert_eq!(groq.request_count(), 4);
}

#[tokio::test]
async fn the_softened_retry_keeps_tools_and_the_response_format() {
    let (groq, openai, gw) = pair("").await;
    groq.push(Reply::Refuse(understudy_testkit::Refusal::FinishReason))
        .push(Reply::text(r#"{"city": "Oslo", "celsius": 1}"#));
    let request = GenerateRequest::new(ChatRequest {
        tools: vec![weather_tool()],
        response_format: Some(weather_schema()),
        ..ChatRequest::user("Weather in Oslo as JSON").with_system("Be exact.")
    });
    let g = gw.engine.generate(request).await.unwrap();
    assert_eq!(
        trail(&g.attempts),
        ["groq primary content_filter", "groq softened ok"]
    );
    let received = groq.received();
    let (first, softened) = (received[0].json(), received[1].json());
    assert_eq!(softened["tools"], first["tools"]);
    assert_eq!(softened["response_format"], first["response_format"]);
    assert_eq!(softened["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(softened["response_format"]["type"], "json_schema");
    assert_ne!(
        softened["messages"][0], first["messages"][0],
        "only the system prompt changes"
    );
    assert_eq!(openai.request_count(), 0);
}

#[tokio::test]
async fn a_tool_history_without_tools_offered_sends_no_tool_choice_to_openai() {
    let (groq, _openai, gw) = pair("").await;
    groq.always(Reply::text("It was sunny."));
    let call = understudy_types::ToolCall {
        id: "toolu_01".into(),
        name: "get_weather".into(),
        arguments: r#"{"city": "Oslo"}"#.into(),
    };
    let chat = ChatRequest {
        messages: vec![
            Message::user("Weather?"),
            Message {
                tool_calls: vec![call],
                ..Message::assistant("")
            },
            Message::tool_result("toolu_01", r#"{"celsius": 21}"#),
        ],
        tool_choice: Some(understudy_types::ToolChoice::Auto),
        parallel_tool_calls: Some(false),
        ..ChatRequest::default()
    };
    let g = gw
        .engine
        .generate(GenerateRequest::new(chat))
        .await
        .unwrap();
    assert_eq!(g.provider, "groq");
    let body = groq.received()[0].json();
    // OpenAI refuses both when no tools are offered.
    assert!(body.get("tool_choice").is_none(), "{body}");
    assert!(body.get("parallel_tool_calls").is_none(), "{body}");
    assert_eq!(body["messages"][1]["tool_calls"][0]["id"], "toolu_01");
    assert_eq!(body["messages"][2]["tool_call_id"], "toolu_01");
}
