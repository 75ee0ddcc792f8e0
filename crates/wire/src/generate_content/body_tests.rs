//! The strict reading of `generateContent` bodies, as data: what Google's
//! SDKs and the Gemini CLI send is accepted, what Google refuses is
//! refused with Google's own message.

use serde_json::{Value, json};

use super::*;

/// `Ok(())` for a body Google accepts, else Google's message.
fn check(body: &Value) -> Result<(), String> {
    let bytes = serde_json::to_vec(body).expect("JSON");
    read(&bytes).map(|_| ()).map_err(|e| {
        assert_eq!(e.field, None, "Google's message names the place itself");
        e.message
    })
}

#[test]
fn what_the_sdks_and_the_cli_send_is_accepted() {
    let bodies = [
        // google-genai (Python): snake_case, signatures as standard base64.
        json!({
            "contents": [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [
                    {"function_call": {"name": "f", "args": {"a": 1}}, "thought_signature": "AAEC/+8="},
                    {"text": "", "thought_signature": "AAEC_-8"}
                ]},
                {"role": "user", "parts": [{"function_response": {"name": "f", "response": {"result": 2}}}]}
            ],
            "system_instruction": {"parts": [{"text": "be brief"}]},
            "tools": [{"function_declarations": [{"name": "f", "parameters_json_schema": {"type": "object"}}]},
                      {"google_search": {}}, {"url_context": {}}, {"code_execution": {}}],
            "tool_config": {"function_calling_config": {"mode": "AUTO", "allowed_function_names": null}},
            "safety_settings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
            "generation_config": {
                "temperature": 0.5, "top_p": 0.9, "top_k": 40, "max_output_tokens": 100,
                "candidate_count": 1, "stop_sequences": ["x"], "seed": 7,
                "response_mime_type": "application/json", "response_json_schema": {"type": "object"},
                "response_modalities": ["TEXT"], "media_resolution": "MEDIA_RESOLUTION_LOW",
                "thinking_config": {"include_thoughts": true, "thinking_budget": 128, "thinking_level": "LOW"},
                "response_logprobs": false, "logprobs": 3, "presence_penalty": 0.1, "frequency_penalty": 0.1
            },
            "labels": {"team": "a"},
            "cached_content": "cachedContents/abc"
        }),
        // The Gemini CLI (camelCase): ids, the dummy signature, thoughts.
        json!({
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
            "systemInstruction": {"role": "user", "parts": [{"text": "You are an agent."}]},
            "tools": [{"functionDeclarations": [{"name": "write_file", "description": "w",
                "parametersJsonSchema": {"type": "object"}}]}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["write_file"]}},
            "generationConfig": {"temperature": 0, "topP": 1, "thinkingConfig": {"includeThoughts": true, "thinkingBudget": -1}}
        }),
        // Media, metadata Google defines, `null` as unset.
        json!({
            "contents": [{"parts": [
                {"inlineData": {"mimeType": "video/mp4", "data": "AAAA"}, "videoMetadata": {"startOffset": "1s"}},
                {"fileData": {"mimeType": "image/png", "fileUri": "https://example.com/a.png"},
                 "mediaResolution": {"level": "MEDIA_RESOLUTION_HIGH"}},
                {"text": "x", "partMetadata": {"k": "v"}, "inlineData": null},
                {"executableCode": {"language": "PYTHON", "code": "1"}},
                {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}}
            ]}, {"role": "", "parts": [{"text": "y"}]}],
            "tools": null,
            "generationConfig": {"speechConfig": {"voiceConfig": {}}, "imageConfig": {"aspectRatio": "1:1"},
                "responseModalities": ["TEXT", "IMAGE"]},
            "serviceTier": "standard", "store": false
        }),
        // `countTokens`.
        json!({"generateContentRequest": {"model": "models/x", "contents": [{"parts": [{"text": "a"}]}]}}),
        json!({}),
    ];
    for body in bodies {
        assert_eq!(check(&body), Ok(()), "{body}");
    }
}

#[test]
fn what_google_refuses_gets_googles_message() {
    let cases = [
        (
            json!({"contents": [{"parts": [{"text": "x", "foo": 1}]}]}),
            "Invalid JSON payload received. Unknown name \"foo\" at 'contents[0].parts[0]': Cannot find field.",
        ),
        (
            json!({"contents": [], "foo": 1}),
            "Invalid JSON payload received. Unknown name \"foo\": Cannot find field.",
        ),
        (
            json!({"contents": [{"role": "user", "content": "x"}]}),
            "Invalid JSON payload received. Unknown name \"content\" at 'contents[0]': Cannot find field.",
        ),
        (
            json!({"contents": [], "generationConfig": {"maxTokens": 5}}),
            "Invalid JSON payload received. Unknown name \"maxTokens\" at 'generation_config': Cannot find field.",
        ),
        (
            json!({"contents": [{"parts": [{"functionCall": {"name": "f", "arguments": "{}"}}]}]}),
            "Invalid JSON payload received. Unknown name \"arguments\" at 'contents[0].parts[0].function_call': Cannot find field.",
        ),
        (
            json!({"contents": [], "tools": [{"functionDeclarations": [{"name": "f", "strict": true}]}]}),
            "Invalid JSON payload received. Unknown name \"strict\" at 'tools[0].function_declarations[0]': Cannot find field.",
        ),
        (
            json!({"contents": [{"role": "function", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]}),
            "Please use a valid role: user, model.",
        ),
        (
            json!({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": 5}}]}]}),
            "Invalid value at 'contents[0].parts[0].function_call.args' (type.googleapis.com/google.protobuf.Struct), 5",
        ),
        (
            json!({"contents": [{"parts": [{"functionResponse": {"name": "f", "response": ["a"]}}]}]}),
            "Invalid value at 'contents[0].parts[0].function_response.response' (type.googleapis.com/google.protobuf.Struct), [\"a\"]",
        ),
        (
            json!({"contents": [], "generationConfig": {"topK": 40.5}}),
            "Invalid value at 'generation_config.top_k' (TYPE_INT32), 40.5",
        ),
        (
            json!({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}),
            "Please use a valid role: user, model.",
        ),
        (
            json!({"contents": [{"role": "model", "parts": [{"text": "x", "thoughtSignature": 5}]}]}),
            "Invalid value at 'contents[0].parts[0].thought_signature' (TYPE_BYTES), 5",
        ),
        (
            json!({"contents": [{"role": "model", "parts": [{"text": "x", "thoughtSignature": {"a": 1}}]}]}),
            "Invalid value at 'contents[0].parts[0].thought_signature' (TYPE_BYTES), {…}",
        ),
        (
            json!({"contents": [{"role": "model", "parts": [{"text": "x", "thoughtSignature": "not base64!"}]}]}),
            "Invalid value at 'contents[0].parts[0].thought_signature' (TYPE_BYTES), Base64 decoding failed for \"not base64!\"",
        ),
        (
            json!({"contents": [{"parts": [{}]}]}),
            "* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' must have one initialized field\n",
        ),
        (
            json!({"contents": [{"parts": [{"thought": true, "thoughtSignature": "AAAA"}]}]}),
            "* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' must have one initialized field\n",
        ),
        (
            // (`json!` writes keys in order: `inlineData` comes first.)
            json!({"contents": [{"parts": [{"text": "x", "inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]}),
            "Invalid value at 'contents[0].parts[0]' (oneof), oneof field 'data' is already set. Cannot set 'text'",
        ),
        (
            json!({"contents": [{"parts": [{"text": 5}]}]}),
            "Invalid value at 'contents[0].parts[0].text' (TYPE_STRING), 5",
        ),
        (
            json!({"contents": [], "generationConfig": {"temperature": "hot"}}),
            "Invalid value at 'generation_config.temperature' (TYPE_FLOAT), \"hot\"",
        ),
        (
            json!({"contents": [], "generationConfig": {"maxOutputTokens": 1.5}}),
            "Invalid value at 'generation_config.max_output_tokens' (TYPE_INT32), 1.5",
        ),
        (
            json!({"contents": [{"parts": {"text": "x"}}]}),
            "Invalid value at 'contents[0].parts' (list), {…}",
        ),
        (
            json!({"contents": [{"parts": [{"text": ["x"]}]}]}),
            "Invalid JSON payload received. Unknown name \"text\" at 'contents[0].parts[0]': Proto field is not repeating, cannot start list.",
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|(body, message)| {
            let got = check(body);
            (got != Err((*message).to_owned())).then(|| format!("{body}: {got:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn bodies_that_are_not_one_json_object_are_refused() {
    for text in [
        "",
        "[]",
        "{\"contents\": [",
        "{} {}",
        "{\"contents\": []} x",
    ] {
        let e = read(text.as_bytes()).expect_err(text);
        assert!(
            e.message.starts_with("Invalid JSON payload received."),
            "{text}: {}",
            e.message
        );
    }
}

#[test]
fn a_refused_value_is_not_repeated_whole() {
    let long = "!".repeat(100_000);
    let body = json!({"contents": [{"role": "model", "parts": [{"text": "x", "thoughtSignature": long}]}]});
    let message = check(&body).expect_err("refused");
    assert!(message.len() <= 1030, "{}", message.len());
    assert!(
        message
            .starts_with("Invalid value at 'contents[0].parts[0].thought_signature' (TYPE_BYTES)")
    );
}

#[test]
fn a_part_is_small() {
    // A part of a body of many small parts costs a few words, not the
    // hundreds of bytes of a struct of every optional field.
    assert!(std::mem::size_of::<PartIn>() <= 24);
    assert!(std::mem::size_of::<Content>() <= 24);
}

#[test]
fn base64_as_proto3_json_reads_bytes() {
    let cases = [
        ("", true),
        ("AAEC", true),
        ("AAE=", true),
        ("AAE", true),
        ("AA==", true),
        ("+/-_", true),
        ("skip_thought_signature_validator", true),
        ("A", false),
        ("AAAAA", false),
        ("AA=", false),
        ("A===", false),
        ("a b", false),
        ("é", false),
    ];
    for (s, ok) in cases {
        assert_eq!(is_base64(s), ok, "{s:?}");
    }
}
