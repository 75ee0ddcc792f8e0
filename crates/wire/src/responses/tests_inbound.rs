//! The Responses API's translation onto the neutral request, checked
//! item by item: what each input item, tool and choice becomes, and what a
//! translated target's answer becomes again.

use serde_json::{Value, json};
use understudy_types::{ResponseFormat, Role, ToolCall, ToolChoice};

use super::answer::{OutputItem, custom_input, output};
use super::inbound::{CreateRequest, Translated, flat_name};

/// The translation of `body` (its `input` as this request's items).
fn translate(body: Value) -> Result<Translated, String> {
    let mut req: CreateRequest = serde_json::from_value(body).map_err(|e| e.to_string())?;
    req.check().map_err(|e| format!("{e:?}"))?;
    let input = req.input_items().map_err(|e| format!("{e:?}"))?;
    req.translate(&[], &input).map_err(|e| format!("{e:?}"))
}

/// The offending field of a refused body.
fn refused(body: Value) -> String {
    match translate(body) {
        Ok(t) => panic!("accepted: {:?}", t.chat),
        Err(e) => e,
    }
}

#[test]
fn flat_names_are_valid_and_stable() {
    assert_eq!(flat_name(None, "exec_command"), "exec_command");
    assert_eq!(
        flat_name(Some("multi_agent_v1"), "spawn_agent"),
        "multi_agent_v1__spawn_agent"
    );
    let ns = "n".repeat(60);
    let long = flat_name(Some(&ns), "a.b");
    assert!(
        long.len() <= 64
            && long
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
        "{long}"
    );
    assert_eq!(long, flat_name(Some(&ns), "a.b"));
    assert_ne!(long, flat_name(Some(&ns), "a.c"));
}

#[test]
fn messages_and_instructions() {
    let t = translate(json!({
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Dev rules."},
            {"role": "user", "content": [{"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello", "annotations": []}]},
            {"role": "system", "content": "Now be formal."},
            {"role": "user", "content": "ok"},
        ],
    }))
    .unwrap();
    assert_eq!(t.chat.system.as_deref(), Some("Be brief.\n\nDev rules."));
    let roles: Vec<Role> = t.chat.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::System, Role::User]
    );
    assert!(t.chat.needs().vision);
}

#[test]
fn tool_history_and_custom_and_namespaced_calls() {
    let t = translate(json!({
        "input": [
            {"role": "user", "content": "go"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
            {"type": "function_call", "call_id": "call_1", "name": "spawn_agent",
             "namespace": "agents", "arguments": "{\"task\":\"a\"}"},
            {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "PATCH"},
            {"type": "function_call_output", "call_id": "call_1", "output": "spawned"},
            {"type": "custom_tool_call_output", "call_id": "call_2",
             "output": [{"type": "input_text", "text": "applied"}]},
        ],
        "tools": [
            {"type": "namespace", "name": "agents", "description": "Sub-agents.",
             "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}]},
            {"type": "custom", "name": "apply_patch"},
            {"type": "web_search"},
        ],
    }))
    .unwrap();
    assert_eq!(t.omitted, ["web_search"]);
    let names: Vec<&str> = t.chat.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["agents__spawn_agent", "apply_patch"]);
    let calls = &t.chat.messages[1].tool_calls;
    assert_eq!(calls[0].name, "agents__spawn_agent");
    assert_eq!(calls[1].arguments, r#"{"input":"PATCH"}"#);
    assert_eq!(t.chat.messages[3].text_content(), "applied");
    // And back: the model's calls in the client's terms.
    let out = output(
        "",
        &[
            ToolCall {
                id: "c1".into(),
                name: "agents__spawn_agent".into(),
                arguments: "{}".into(),
            },
            ToolCall {
                id: "c2".into(),
                name: "apply_patch".into(),
                arguments: r#"{"input":"P2"}"#.into(),
            },
        ],
        &t.names,
        "completed",
    );
    let out: Vec<Value> = out
        .iter()
        .map(|i| serde_json::to_value(i).unwrap())
        .collect();
    assert_eq!(out[0]["type"], "function_call");
    assert_eq!(out[0]["name"], "spawn_agent");
    assert_eq!(out[0]["namespace"], "agents");
    assert_eq!(out[1]["type"], "custom_tool_call");
    assert_eq!(out[1]["input"], "P2");
    assert_eq!(custom_input("not json"), "not json");
}

#[test]
fn choices_and_formats() {
    let tools = json!([
        {"type": "function", "name": "a", "parameters": {"type": "object"}},
        {"type": "function", "name": "b", "parameters": {"type": "object"}},
    ]);
    let t = translate(
        json!({"input": "x", "tools": tools, "tool_choice": {"type": "function", "name": "b"}}),
    )
    .unwrap();
    assert_eq!(t.chat.tool_choice, Some(ToolChoice::Function("b".into())));
    let t = translate(json!({"input": "x", "tools": tools, "tool_choice":
        {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "a"}]}}))
    .unwrap();
    assert_eq!(t.chat.tool_choice, Some(ToolChoice::Required));
    assert_eq!(t.chat.tools.len(), 1);
    let t = translate(
        json!({"input": "x", "text": {"format": {"type": "json_schema", "name": "w",
        "schema": {"type": "object"}, "strict": true}}}),
    )
    .unwrap();
    assert!(matches!(
        t.chat.response_format,
        Some(ResponseFormat::JsonSchema { strict: true, .. })
    ));
    let t = translate(
        json!({"input": "x", "max_output_tokens": 50, "temperature": 0.5,
        "top_p": 0.9, "user": "u", "reasoning": {"effort": "low"}, "include": ["x"],
        "prompt_cache_key": "k", "metadata": {"a": "b"}, "store": false}),
    )
    .unwrap();
    assert_eq!(t.chat.max_tokens, Some(50));
    assert_eq!(t.chat.user.as_deref(), Some("u"));
}

#[test]
fn what_is_refused_names_its_field() {
    let cases = [
        (json!({}), "input"),
        (json!({"input": [42]}), "input[0]"),
        (json!({"input": [{"content": "x"}]}), "input[0].type"),
        (
            json!({"input": [{"type": "item_reference", "id": "x"}]}),
            "input[0]",
        ),
        (
            json!({"input": [{"role": "assistant", "content": [{"type": "input_image", "image_url": "https://x/a.png"}]}]}),
            "input[0].content[0]",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0]",
        ),
        (
            json!({"input": "x", "tools": [{"type": "unknown_tool"}]}),
            "tools[0]",
        ),
        (
            json!({"input": "x", "tool_choice": {"type": "file_search"}}),
            "tool_choice",
        ),
        (json!({"input": "x", "background": true}), "background"),
        (json!({"input": "x", "temperature": 3.0}), "temperature"),
        (
            json!({"input": "x", "max_output_tokens": 0}),
            "max_output_tokens",
        ),
        (
            json!({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}),
            "input",
        ),
    ];
    for (body, field) in cases {
        let e = refused(body.clone());
        assert!(e.contains(&format!("{field:?}")), "{body}: {e}");
    }
}

#[test]
fn a_refusal_is_an_incomplete_message() {
    let item = serde_json::to_value(OutputItem::refusal("no")).unwrap();
    assert_eq!(item["status"], "incomplete");
    assert_eq!(
        item["content"][0],
        json!({"type": "refusal", "refusal": "no"})
    );
}
