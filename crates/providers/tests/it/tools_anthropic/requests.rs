//! The exact request JSON a simulator receives over Anthropic's Messages
//! API: tools and tool choice, a tool loop's history, merged turns,
//! images, sampling, JSON output and structured outputs, and arguments
//! that are not an object.

use understudy_types::{ResponseFormat, ToolChoice};

use super::*;

/// The JSON body the simulator received for `request` (answered with text).
async fn sent(request: &ChatRequest) -> Value {
    let sim = SimProvider::anthropic().await.unwrap();
    let adapter = adapter_for(&sim).await;
    let result = adapter
        .complete(
            "claude-test",
            request,
            &understudy_core::CallOptions::connect(Duration::from_secs(5)),
        )
        .await;
    assert!(result.is_ok(), "{result:?}");
    let received = sim.received();
    assert_eq!(received.len(), 1);
    received[0].json()
}

/// A tool whose schema leaves `type` out.
fn untyped_tool() -> Tool {
    Tool {
        name: "get_news".into(),
        description: None,
        parameters: Some(json!({"properties": {"topic": {"type": "string"}}})),
        strict: Some(true),
    }
}

fn time_tool() -> Tool {
    Tool {
        name: "get_time".into(),
        description: None,
        parameters: None,
        strict: None,
    }
}

#[tokio::test]
async fn tools_and_tool_choice() {
    let base = ChatRequest {
        tools: vec![weather_tool(), time_tool(), untyped_tool()],
        ..ChatRequest::user("weather?")
    };
    let body = sent(&base).await;
    assert_eq!(
        body["tools"],
        json!([
            {
                "name": "get_weather",
                "description": "The weather in a city.",
                "input_schema": {
                    "type": "object",
                    "properties": {"location": {"type": "string"}},
                    "required": ["location"]
                }
            },
            {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
            {
                "name": "get_news",
                "input_schema": {"type": "object", "properties": {"topic": {"type": "string"}}}
            }
        ]),
        "a missing schema is an empty object schema; a missing `type` is added; `strict` is not sent"
    );
    assert!(body.get("tool_choice").is_none(), "the default is auto");

    for (choice, parallel, want) in [
        (Some(ToolChoice::Auto), None, json!({"type": "auto"})),
        (Some(ToolChoice::None), None, json!({"type": "none"})),
        (Some(ToolChoice::Required), None, json!({"type": "any"})),
        (
            Some(ToolChoice::Function("get_time".into())),
            None,
            json!({"type": "tool", "name": "get_time"}),
        ),
        (
            None,
            Some(false),
            json!({"type": "auto", "disable_parallel_tool_use": true}),
        ),
        (
            Some(ToolChoice::Required),
            Some(false),
            json!({"type": "any", "disable_parallel_tool_use": true}),
        ),
        (
            Some(ToolChoice::Function("get_weather".into())),
            Some(false),
            json!({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}),
        ),
        (Some(ToolChoice::None), Some(false), json!({"type": "none"})),
        (Some(ToolChoice::Auto), Some(true), json!({"type": "auto"})),
    ] {
        let request = ChatRequest {
            tool_choice: choice.clone(),
            parallel_tool_calls: parallel,
            ..base.clone()
        };
        assert_eq!(
            sent(&request).await["tool_choice"],
            want,
            "{choice:?} {parallel:?}"
        );
    }
}

#[tokio::test]
async fn a_tool_loop_history_becomes_tool_use_and_one_merged_tool_result_turn() {
    let body = sent(&tool_loop()).await;
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "Weather in Paris and Tokyo?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "call_abc123", "name": "get_weather", "input": {"location": "Paris"}},
                {"type": "tool_use", "id": "gemini-3aget_weather-2f1-2ex", "name": "get_weather", "input": {"location": "Tokyo"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_abc123", "content": "18°C, cloudy"},
                {"type": "tool_result", "tool_use_id": "gemini-3aget_weather-2f1-2ex", "content": "25°C, sunny"},
                {"type": "text", "text": "And which is warmer?"}
            ]}
        ])
    );
}

#[tokio::test]
async fn same_role_turns_merge_and_tool_results_come_first() {
    let request = ChatRequest {
        messages: vec![
            Message::user("first"),
            Message::user("second"),
            Message {
                role: Role::Assistant,
                content: vec![Part::Text { text: "  ".into() }],
                tool_calls: vec![call("toolu_1", "get_time", "")],
                tool_call_id: None,
            },
            Message::user("a note before the result"),
            Message::tool_result("toolu_1", ""),
        ],
        tools: vec![time_tool()],
        ..ChatRequest::default()
    };
    let body = sent(&request).await;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "first"},
                {"type": "text", "text": "second"}
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1"},
                {"type": "text", "text": "a note before the result"}
            ]}
        ]),
        "blank text is left out; no arguments is {{}}; an empty result has no content"
    );
}

#[tokio::test]
async fn a_history_with_tool_calls_but_no_tools_declares_them_and_forbids_calls() {
    let request = ChatRequest {
        tools: Vec::new(),
        ..tool_loop()
    };
    let body = sent(&request).await;
    assert_eq!(
        body["tools"],
        json!([{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}])
    );
    assert_eq!(body["tool_choice"], json!({"type": "none"}));
}

#[tokio::test]
async fn images_go_as_base64_and_url_sources() {
    let request = ChatRequest {
        messages: vec![Message {
            role: Role::User,
            content: vec![
                Part::Text {
                    text: "Compare these.".into(),
                },
                Part::Image {
                    url: "data:image/png;base64,iVBORw0KGgo=".into(),
                    detail: Some("high".into()),
                },
                Part::Image {
                    url: "https://example.com/cat.jpg".into(),
                    detail: None,
                },
            ],
            tool_calls: Vec::new(),
            tool_call_id: None,
        }],
        ..ChatRequest::default()
    };
    let body = sent(&request).await;
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "Compare these."},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}
        ]}])
    );
}

#[tokio::test]
async fn sampling_parameters_stop_sequences_and_user() {
    let request = ChatRequest {
        stop: vec!["END".into(), "\n".into(), "###".into()],
        top_p: Some(0.9),
        seed: Some(7),
        presence_penalty: Some(0.5),
        frequency_penalty: Some(0.5),
        user: Some("user-1234".into()),
        max_tokens: Some(300),
        ..ChatRequest::user("hi")
    };
    let body = sent(&request).await;
    assert_eq!(
        body,
        json!({
            "model": "claude-test",
            "max_tokens": 300,
            "messages": [{"role": "user", "content": "hi"}],
            "top_p": 0.9,
            "stop_sequences": ["END", "###"],
            "metadata": {"user_id": "user-1234"}
        }),
        "whitespace-only stop sequences, seed and penalties are dropped"
    );
    let both = sent(&ChatRequest {
        temperature: Some(0.5),
        ..request
    })
    .await;
    assert_eq!(both["temperature"], 0.5);
    assert!(
        both.get("top_p").is_none(),
        "temperature and top_p are not sent together"
    );
}

#[tokio::test]
async fn a_plain_request_is_as_before() {
    let body = sent(&ChatRequest::user("hi").with_system("Be brief.")).await;
    assert_eq!(
        body,
        json!({
            "model": "claude-test",
            // No limit asked, and the model's is unknown: the adapter's
            // default (the API requires one).
            "max_tokens": understudy_providers::anthropic::DEFAULT_MAX_TOKENS,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "hi"}]
        })
    );
}

#[tokio::test]
async fn json_object_asks_in_the_system_prompt() {
    let request = ChatRequest {
        response_format: Some(ResponseFormat::JsonObject),
        ..ChatRequest::user("a color").with_system("Be brief.")
    };
    let body = sent(&request).await;
    let system = body["system"].as_str().unwrap();
    assert!(system.starts_with("Be brief.\n\n"), "{system}");
    assert!(system.contains("only a JSON object"), "{system}");
    assert!(body.get("output_config").is_none());
}

#[tokio::test]
async fn json_schema_uses_structured_outputs_with_the_supported_subset() {
    let schema = json!({
        "title": "Weather",
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "temperature_c": {"type": "integer", "minimum": -90, "description": "In Celsius."},
            "when": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "wind": {"anyOf": [{"$ref": "#/$defs/Wind"}, {"type": "null"}]}
        },
        "required": ["city", "temperature_c"],
        "$defs": {"Wind": {"type": "object", "properties": {"speed": {"type": "number"}}, "additionalProperties": true}}
    });
    let request = ChatRequest {
        response_format: Some(ResponseFormat::JsonSchema {
            name: "weather".into(),
            schema,
            strict: true,
        }),
        ..ChatRequest::user("Paris?").with_system("Be brief.")
    };
    let body = sent(&request).await;
    assert_eq!(body["system"], "Be brief.", "no instruction is needed");
    assert_eq!(
        body["output_config"],
        json!({"format": {"type": "json_schema", "schema": {
            "$defs": {"Wind": {
                "type": "object",
                "properties": {"speed": {"type": "number"}},
                "additionalProperties": false
            }},
            "title": "Weather",
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "{minLength: 1}"},
                "temperature_c": {"type": "integer", "description": "In Celsius.\n\n{minimum: -90}"},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "{minItems: 2}"},
                "wind": {"anyOf": [{"$ref": "#/$defs/Wind"}, {"type": "null"}]}
            },
            "additionalProperties": false,
            "required": ["city", "temperature_c"]
        }}})
    );
}

#[tokio::test]
async fn a_schema_structured_outputs_cannot_take_goes_to_the_system_prompt() {
    let request = ChatRequest {
        response_format: Some(ResponseFormat::JsonSchema {
            name: "anything".into(),
            schema: json!({"type": "object", "properties": {"x": {}}}),
            strict: false,
        }),
        ..ChatRequest::user("x?")
    };
    let body = sent(&request).await;
    assert!(body.get("output_config").is_none());
    let system = body["system"].as_str().unwrap();
    assert!(system.contains("only a JSON object"), "{system}");
    assert!(system.contains(r#""properties":{"x":{}}"#), "{system}");
}

#[tokio::test]
async fn arguments_that_are_not_a_json_object_are_a_bad_request_and_nothing_is_sent() {
    for bad in ["{\"location\": \"Par", "[1, 2]", "\"text\""] {
        let sim = SimProvider::anthropic().await.unwrap();
        let adapter = adapter_for(&sim).await;
        let mut request = tool_loop();
        request.messages[1].tool_calls[0].arguments = bad.into();
        let f = adapter
            .complete(
                "claude-test",
                &request,
                &understudy_core::CallOptions::connect(Duration::from_secs(5)),
            )
            .await
            .unwrap_err();
        assert_eq!(f.code().as_str(), "bad_request", "{bad}: {f}");
        assert!(f.detail.contains("call_abc123"), "{f}");
        assert_eq!(sim.request_count(), 0);
    }
}
