//! The Gemini front end's reading of clients' bodies, as data: what the
//! google-genai SDK and the Gemini CLI send, and what is refused.

use serde_json::{Value, json};
use understudy_types::passthrough::Gated;
use understudy_types::{Message, Part, ResponseFormat, Role, ToolCall, ToolChoice};

use super::*;

fn read(body: Value) -> Result<Translated, Invalid> {
    let bytes = serde_json::to_vec(&body).expect("JSON");
    super::read(&bytes)
        .expect("the body has Gemini's shape")
        .translate()
}

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.into(),
    }
}

#[test]
fn the_sdks_two_round_loop_pairs_results_by_order_and_name() {
    // google-genai: no call ids; snake_case `parameters_json_schema`.
    let t = read(json!({
        "contents": [
            {"role": "user", "parts": [{"text": "weather in Paris and Rome?"}]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "weather", "args": {"city": "Paris"}}},
                {"functionCall": {"name": "weather", "args": {"city": "Rome"}}}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "weather", "response": {"result": "sunny"}}},
                {"functionResponse": {"name": "weather", "response": {"temp": 20}}}
            ]}
        ],
        "tools": [{"functionDeclarations": [{
            "name": "weather", "description": "the weather",
            "parameters_json_schema": {"type": "object", "properties": {"city": {"type": "string"}}}
        }]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}},
        "generationConfig": {"temperature": 0.2, "maxOutputTokens": 100, "stopSequences": ["END"]}
    }))
    .expect("valid");
    let chat = t.chat;
    assert_eq!(
        chat.messages,
        vec![
            Message::user("weather in Paris and Rome?"),
            Message {
                tool_calls: vec![
                    call("gc_1_0", "weather", r#"{"city":"Paris"}"#),
                    call("gc_1_1", "weather", r#"{"city":"Rome"}"#),
                ],
                content: Vec::new(),
                ..Message::assistant("")
            },
            Message::tool_result("gc_1_0", "sunny"),
            Message::tool_result("gc_1_1", r#"{"temp":20}"#),
        ]
    );
    assert_eq!(chat.tools[0].name, "weather");
    assert_eq!(
        chat.tools[0].parameters,
        Some(json!({"type": "object", "properties": {"city": {"type": "string"}}}))
    );
    assert_eq!(
        chat.tool_choice,
        Some(ToolChoice::Function("weather".into()))
    );
    assert_eq!(chat.temperature, Some(0.2));
    assert_eq!(chat.max_tokens, Some(100));
    assert_eq!(chat.stop, ["END"]);
    assert_eq!(chat.native_only, None);
}

#[test]
fn the_clis_ids_and_signatures_are_its_own() {
    let t = read(json!({
        "systemInstruction": {"role": "user", "parts": [{"text": "You are an agent."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "write hi"}]},
            {"role": "model", "parts": [
                {"text": "thinking…", "thought": true},
                {"functionCall": {"id": "cli-1", "name": "write_file", "args": {"file_path": "a"}},
                 "thoughtSignature": "skip_thought_signature_validator"}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": "cli-1", "name": "write_file", "response": {"output": "ok"}}}
            ]}
        ],
        "generationConfig": {"topK": 64, "thinkingConfig": {"includeThoughts": true, "thinkingBudget": -1}}
    }))
    .expect("valid");
    assert!(t.include_thoughts);
    assert_eq!(t.chat.system.as_deref(), Some("You are an agent."));
    assert_eq!(t.chat.messages[1].tool_calls[0].id, "cli-1");
    assert_eq!(
        t.chat.messages[1].content,
        Vec::<Part>::new(),
        "no thoughts"
    );
    assert_eq!(t.chat.messages[2], Message::tool_result("cli-1", "ok"));
}

#[test]
fn google_schemas_become_json_schema() {
    let t = read(json!({
        "contents": [{"parts": [{"text": "a recipe"}]}],
        "tools": [{"function_declarations": [{
            "name": "f", "parameters": {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}}
        }]}],
        "generation_config": {
            "response_mime_type": "application/json",
            "response_schema": {"type": "OBJECT", "properties": {"name": {"type": "STRING"}}, "required": ["name"]}
        }
    }))
    .expect("valid");
    assert_eq!(
        t.chat.tools[0].parameters,
        Some(json!({"type": "object", "properties": {"n": {"type": "integer"}}}))
    );
    assert_eq!(
        t.chat.response_format,
        Some(ResponseFormat::JsonSchema {
            name: "response".into(),
            schema: json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            strict: true,
        })
    );
    assert_eq!(t.chat.messages[0].role, Role::User, "no role is the user's");
}

#[test]
fn images_inline_and_by_url() {
    let t = read(json!({"contents": [{"role": "user", "parts": [
        {"text": "what is this?"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}}
    ]}]}))
    .expect("valid");
    assert_eq!(
        t.chat.messages[0].content[1..],
        [
            Part::Image {
                url: "data:image/png;base64,iVBORw0KGgo=".into(),
                detail: None
            },
            Part::Image {
                url: "https://example.com/cat.jpg".into(),
                detail: None
            },
        ]
    );
}

#[test]
fn what_only_gemini_carries_is_named_and_gated() {
    // (body, native_only, gated)
    let cases = [
        (
            json!({"contents": [], "tools": [{"googleSearch": {}}]}),
            Some("Google's own tools"),
            Some(Gated::WebSearch),
        ),
        (
            json!({"contents": [], "tools": [{"codeExecution": {}}]}),
            Some("Google's own tools"),
            Some(Gated::CodeExecution),
        ),
        (
            json!({"contents": [], "tools": [{"urlContext": {}}]}),
            Some("Google's own tools"),
            Some(Gated::WebFetch),
        ),
        (
            json!({"contents": [], "cachedContent": "cachedContents/abc"}),
            Some("cachedContent"),
            Some(Gated::Files),
        ),
        (
            json!({"contents": [{"parts": [{"fileData": {"mimeType": "application/pdf",
                "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc"}}]}]}),
            Some("files of the Files API"),
            Some(Gated::Files),
        ),
        (
            json!({"contents": [{"parts": [{"inlineData": {"mimeType": "application/pdf", "data": "AA=="}}]}]}),
            Some("inline data that is not an image"),
            None,
        ),
        (
            json!({"contents": [{"role": "model", "parts": [{"executableCode": {"code": "1"}}]}]}),
            Some("code execution parts"),
            None,
        ),
        (
            json!({"contents": [], "generationConfig": {"responseModalities": ["TEXT", "IMAGE"]}}),
            Some("image and audio output"),
            None,
        ),
    ];
    for (body, only, gated) in cases {
        let t = read(body.clone()).expect("valid");
        assert_eq!(t.chat.native_only, only, "{body}");
        assert_eq!(
            gated.is_some_and(|g| t.chat.native_gated.contains(g)),
            gated.is_some(),
            "{body}"
        );
    }
}

#[test]
fn what_google_refuses_is_a_400_naming_the_field() {
    // (body, field)
    let cases = [
        (
            json!({"contents": [{"role": "model", "parts": [
                {"functionResponse": {"name": "f", "response": {}}}]}]}),
            "contents[0].parts[0].functionResponse",
        ),
        (
            json!({"contents": [{"role": "user", "parts": [
                {"functionResponse": {"name": "f", "response": {}}}]}]}),
            "contents[0].parts[0].functionResponse",
        ),
        (
            json!({"contents": [], "tools": [{"functionDeclarations": [
                {"name": "f", "parameters": {"type": "OBJECT"}, "parametersJsonSchema": {"type": "object"}}]}]}),
            "tools[0].functionDeclarations[0]",
        ),
        (
            json!({"contents": [], "generationConfig": {"candidateCount": 2}}),
            "generationConfig.candidateCount",
        ),
        (
            json!({"contents": [], "generationConfig": {"responseSchema": {"type": "STRING"}}}),
            "generationConfig.responseSchema",
        ),
        (
            json!({"contents": [], "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}}),
            "toolConfig.functionCallingConfig.mode",
        ),
        (
            json!({"contents": [{"parts": [{"fileData": {"fileUri": "file:///etc/passwd"}}]}]}),
            "contents[0].parts[0].fileData.fileUri",
        ),
    ];
    for (body, field) in cases {
        let e = read(body.clone()).expect_err("refused");
        assert_eq!(e.field.as_deref(), Some(field), "{body}: {}", e.message);
    }
}

#[test]
fn a_count_body_counts_its_inner_request() {
    let body = json!({
        "generateContentRequest": {"model": "models/x", "contents": [{"parts": [{"text": "12345678"}]}]}
    });
    let r = super::read(body.to_string().as_bytes()).expect("shape");
    let r = r.counted();
    assert_eq!(r.estimate_input_tokens(), 2);
}
