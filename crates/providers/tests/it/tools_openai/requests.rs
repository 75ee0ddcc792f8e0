//! What the provider receives through the OpenAI-compatible adapter: the
//! JSON a simulator got, compared whole (a plain request byte for byte as
//! before tools existed, a tool loop, each tool choice and response
//! format, a foreign id shortened alike on both sides).

use understudy_types::{Part, ResponseFormat, Role, ToolChoice};

use super::*;

/// The plain request, before and after: the same bytes.
#[tokio::test]
async fn a_plain_request_is_sent_exactly_as_before() {
    let mut request = ChatRequest::user("hi there")
        .with_system("Be brief.")
        .with_temperature(0.5);
    request.max_tokens = Some(100);
    request.stop = vec!["END".into()];
    request.messages.push(Message::assistant("Hello."));
    request.messages.push(Message::user("Again"));
    assert_eq!(
        sent("p", &request).await,
        r#"{"model":"p-model","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi there"},{"role":"assistant","content":"Hello."},{"role":"user","content":"Again"}],"temperature":0.5,"max_tokens":100,"stop":["END"],"stream":false}"#
    );
    assert_eq!(
        sent("openai", &request).await,
        r#"{"model":"p-model","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi there"},{"role":"assistant","content":"Hello."},{"role":"user","content":"Again"}],"temperature":0.5,"max_completion_tokens":100,"stop":["END"],"stream":false}"#
    );
    let sim = SimProvider::openai().await.unwrap();
    let _ = collect(&adapter(&sim, "p"), &ChatRequest::user("hi")).await;
    assert_eq!(
        String::from_utf8(sim.received()[0].body.to_vec()).unwrap(),
        r#"{"model":"p-model","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#
    );
}

/// `max_completion_tokens` is a capability (Azure OpenAI takes it too),
/// per provider and per model, not the provider's name.
#[tokio::test]
async fn max_completion_tokens_is_a_capability_of_the_provider_or_model() {
    let mut request = ChatRequest::user("hi");
    request.max_tokens = Some(100);
    let body = |sim: &SimProvider, i: usize| sim.received()[i].json();
    // A provider that declares it, and one model of it that does not.
    let sim = SimProvider::openai().await.unwrap();
    let settings = TestGateway::builder()
        .provider("azure", &sim)
        .provider_option("azure", "capabilities = { max_completion_tokens = true }")
        .provider_option(
            "azure",
            "model_capabilities = { \"old\" = { max_completion_tokens = false } }",
        )
        .settings()
        .unwrap();
    let azure = Providers.build(&settings.providers["azure"]).unwrap();
    let _ = azure
        .complete(
            "azure-model",
            &request,
            &understudy_core::CallOptions::connect(PATIENCE),
        )
        .await;
    assert_eq!(body(&sim, 0)["max_completion_tokens"], 100);
    assert!(body(&sim, 0).get("max_tokens").is_none());
    let _ = azure
        .complete(
            "old",
            &request,
            &understudy_core::CallOptions::connect(PATIENCE),
        )
        .await;
    assert_eq!(body(&sim, 1)["max_tokens"], 100);
    assert!(body(&sim, 1).get("max_completion_tokens").is_none());
    // The built-in openai has it unless its table says otherwise.
    let sim = SimProvider::openai().await.unwrap();
    let settings = TestGateway::builder()
        .provider("openai", &sim)
        .provider_option("openai", "capabilities = { max_completion_tokens = false }")
        .settings()
        .unwrap();
    let openai = Providers.build(&settings.providers["openai"]).unwrap();
    let _ = openai
        .complete(
            "gpt-4.1",
            &request,
            &understudy_core::CallOptions::connect(PATIENCE),
        )
        .await;
    assert_eq!(body(&sim, 0)["max_tokens"], 100);
}

/// A whole tool loop's history, with every new field set: the body is
/// OpenAI's shape field for field.
#[tokio::test]
async fn a_tool_loop_is_sent_in_openai_s_shape() {
    let image = "data:image/png;base64,iVBORw0KGgo=";
    let request = ChatRequest {
        system: Some("You are a weather bot.".into()),
        messages: vec![
            Message {
                role: Role::User,
                content: vec![
                    Part::Text {
                        text: "Weather where this photo was taken, and in Oslo?".into(),
                    },
                    Part::Image {
                        url: image.into(),
                        detail: Some("low".into()),
                    },
                    Part::Image {
                        url: "https://example.com/p.jpg".into(),
                        detail: None,
                    },
                ],
                tool_calls: Vec::new(),
                tool_call_id: None,
            },
            assistant_calls(
                "",
                vec![
                    call(
                        "toolu_01A09q90qw90lq917835lq9",
                        "get_weather",
                        r#"{"city":"Paris"}"#,
                    ),
                    call("call_b", "get_weather", r#"{"city":"Oslo"}"#),
                ],
            ),
            Message::tool_result("toolu_01A09q90qw90lq917835lq9", "18°C, sunny"),
            Message::tool_result("call_b", "4°C, snow"),
            assistant_calls("Checking again.", vec![call("call_c", "get_weather", "")]),
            Message::tool_result("call_c", "19°C"),
        ],
        temperature: Some(0.2),
        max_tokens: Some(300),
        stop: vec!["\n\n\n".into()],
        tools: vec![
            weather_tool(),
            Tool {
                name: "noop".into(),
                description: None,
                parameters: None,
                strict: None,
            },
        ],
        tool_choice: Some(ToolChoice::Function("get_weather".into())),
        parallel_tool_calls: Some(false),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "weather".into(),
            schema: json!({"type": "object", "properties": {"summary": {"type": "string"}}}),
            strict: true,
        }),
        top_p: Some(0.5),
        seed: Some(42),
        presence_penalty: Some(0.25),
        frequency_penalty: Some(-0.5),
        user: Some("user-1234".into()),
        native: None,
        // (The native-only fields, which a translated request never sets.)
        ..ChatRequest::default()
    };
    request.validate().unwrap();
    let body: Value = serde_json::from_str(&sent("p", &request).await).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "p-model",
            "messages": [
                {"role": "system", "content": "You are a weather bot."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Weather where this photo was taken, and in Oslo?"},
                    {"type": "image_url", "image_url": {"url": image, "detail": "low"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/p.jpg"}}
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "toolu_01A09q90qw90lq917835lq9", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_b", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}
                ]},
                {"role": "tool", "content": "18°C, sunny", "tool_call_id": "toolu_01A09q90qw90lq917835lq9"},
                {"role": "tool", "content": "4°C, snow", "tool_call_id": "call_b"},
                {"role": "assistant", "content": "Checking again.", "tool_calls": [
                    {"id": "call_c", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{}"}}
                ]},
                {"role": "tool", "content": "19°C", "tool_call_id": "call_c"}
            ],
            "temperature": 0.2,
            "max_tokens": 300,
            "stop": ["\n\n\n"],
            "top_p": 0.5,
            "seed": 42,
            "presence_penalty": 0.25,
            "frequency_penalty": -0.5,
            "user": "user-1234",
            "tools": [
                {"type": "function", "function": {
                    "name": "get_weather",
                    "description": "The weather in a city.",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                        "additionalProperties": false
                    },
                    "strict": true
                }},
                {"type": "function", "function": {"name": "noop"}}
            ],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false,
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "weather",
                "schema": {"type": "object", "properties": {"summary": {"type": "string"}}},
                "strict": true
            }},
            "stream": false
        })
    );
}

#[tokio::test]
async fn each_tool_choice_and_response_format() {
    for (choice, format, want_choice, want_format) in [
        (
            ToolChoice::Auto,
            ResponseFormat::Text,
            json!("auto"),
            json!({"type": "text"}),
        ),
        (
            ToolChoice::None,
            ResponseFormat::JsonObject,
            json!("none"),
            json!({"type": "json_object"}),
        ),
        (
            ToolChoice::Required,
            ResponseFormat::JsonObject,
            json!("required"),
            json!({"type": "json_object"}),
        ),
    ] {
        let request = ChatRequest {
            tools: vec![weather_tool()],
            tool_choice: Some(choice),
            response_format: Some(format),
            ..ChatRequest::user("Answer in JSON.")
        };
        let body: Value = serde_json::from_str(&sent("p", &request).await).unwrap();
        assert_eq!(body["tool_choice"], want_choice);
        assert_eq!(body["response_format"], want_format);
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": "Answer in JSON."}])
        );
        assert!(body.get("parallel_tool_calls").is_none());
    }
    // Several text parts and no image: still an array, in order.
    let request = ChatRequest {
        messages: vec![Message {
            content: vec![
                Part::Text { text: "a".into() },
                Part::Text { text: "b".into() },
            ],
            ..Message::user("")
        }],
        ..ChatRequest::default()
    };
    let body: Value = serde_json::from_str(&sent("p", &request).await).unwrap();
    assert_eq!(
        body["messages"][0]["content"],
        json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    );
}

/// Ids minted elsewhere pass unchanged when OpenAI takes them (at most 40
/// characters); a longer one is replaced by the same short digest on the
/// call and on its result, so the pairing survives and OpenAI's 400
/// `string_above_max_length` never happens.
#[tokio::test]
async fn a_foreign_id_too_long_for_openai_is_shortened_the_same_on_both_sides() {
    let long = format!("gemini_get_weather_{}", "x".repeat(60));
    let request = ChatRequest {
        messages: vec![
            Message::user("weather?"),
            assistant_calls(
                "",
                vec![
                    call(&long, "get_weather", "{}"),
                    call("toolu_01A09q90qw90lq917835lq9", "get_weather", "{}"),
                ],
            ),
            Message::tool_result(&long, "sunny"),
            Message::tool_result("toolu_01A09q90qw90lq917835lq9", "rain"),
        ],
        tools: vec![weather_tool()],
        ..ChatRequest::default()
    };
    let first: Value = serde_json::from_str(&sent("p", &request).await).unwrap();
    let again: Value = serde_json::from_str(&sent("p", &request).await).unwrap();
    assert_eq!(first, again, "the digest is stable");
    let messages = &first["messages"];
    let short = messages[1]["tool_calls"][0]["id"].as_str().unwrap();
    assert!(short.len() <= 40 && short.starts_with("call_"), "{short}");
    assert_eq!(messages[2]["tool_call_id"], short);
    assert_eq!(
        messages[1]["tool_calls"][1]["id"],
        "toolu_01A09q90qw90lq917835lq9"
    );
    assert_eq!(messages[3]["tool_call_id"], "toolu_01A09q90qw90lq917835lq9");
}
