//! The Messages API's translation onto the neutral request, checked as a
//! whole body: what a tool loop with thinking becomes, what only Anthropic
//! can take (noted, not refused), and the stop reasons written back.

use serde_json::Value;
use understudy_types::passthrough::Gated;
use understudy_types::{ChatRequest, FinishReason, Role, ToolChoice};

use super::client::MessagesRequest;
use super::stop_reason;

fn chat(body: Value) -> Result<ChatRequest, String> {
    let mut req: MessagesRequest = serde_json::from_value(body).map_err(|e| e.to_string())?;
    req.take_chat().map_err(|e| format!("{e:?}"))
}

#[test]
fn a_tool_loop_with_thinking_translates() {
    let c = chat(serde_json::json!({
        "model": "m", "max_tokens": 100,
        "system": [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "B"}],
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "xx"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Oslo"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "3"}, {"type": "text", "text": "C"}], "is_error": true},
                {"type": "text", "text": "and now?"}
            ]}
        ],
        "tools": [{"name": "w", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "metadata": {"user_id": "u1"}, "top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}
    }))
    .unwrap();
    assert_eq!(c.system.as_deref(), Some("A\n\nB"));
    assert_eq!(c.messages.len(), 4);
    assert_eq!(c.messages[1].text_content(), "Let me look.");
    assert_eq!(c.messages[1].tool_calls[0].arguments, r#"{"city":"Oslo"}"#);
    assert_eq!(c.messages[2].role, Role::Tool);
    assert_eq!(c.messages[2].text_content(), "Error: 3\nC");
    assert_eq!(c.messages[3].text_content(), "and now?");
    assert_eq!(c.tool_choice, Some(ToolChoice::Required));
    assert_eq!(c.parallel_tool_calls, Some(false));
    assert_eq!(c.user.as_deref(), Some("u1"));
}

#[test]
fn what_only_anthropic_can_take_is_noted_not_refused() {
    let base = |extra: Value| {
        let mut v = serde_json::json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            v.extend(extra.clone());
        }
        chat(v)
    };
    assert!(base(serde_json::json!({})).is_ok_and(|c| c.native_only.is_none()));
    // Mistakes every protocol would refuse.
    for bad in [
        serde_json::json!({"max_tokens": null}),
        serde_json::json!({"model": null}),
        serde_json::json!({"temperature": 1.5}),
        serde_json::json!({"tool_choice": {"type": "tool"}}),
    ] {
        assert!(base(bad.clone()).is_err(), "{bad}");
    }
    // What only Anthropic can take: the request stands, and says what
    // other protocols lack (and what needs the operator's word).
    for (foreign, lacks, gated) in [
        (
            serde_json::json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "Anthropic's server tools",
            Some(Gated::WebSearch),
        ),
        (
            serde_json::json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}),
            "content block types only Anthropic knows (documents, server tool results…)",
            None,
        ),
        (
            serde_json::json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}),
            "images by Files API id",
            None,
        ),
        (
            serde_json::json!({"messages": [{"role": "developer", "content": "x"}]}),
            "a message role only Anthropic knows",
            None,
        ),
        (
            serde_json::json!({"mcp_servers": [{"type": "url", "url": "https://x"}]}),
            "MCP servers",
            Some(Gated::Mcp),
        ),
    ] {
        let c = base(foreign.clone()).unwrap_or_else(|e| panic!("{foreign}: {e:?}"));
        assert_eq!(c.native_only, Some(lacks), "{foreign}");
        assert_eq!(
            gated.is_some_and(|g| c.native_gated.contains(g)),
            gated.is_some(),
            "{foreign}"
        );
    }
    // A system message is carried, in place.
    let c = base(serde_json::json!({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]}
    ]}))
    .unwrap();
    assert_eq!(c.native_only, None);
    assert_eq!(c.messages[1].role, Role::System);
    assert_eq!(c.messages[1].text_content(), "be brief");
}

#[test]
fn stop_reasons() {
    assert_eq!(stop_reason(&FinishReason::Stop), "end_turn");
    assert_eq!(stop_reason(&FinishReason::Length), "max_tokens");
    assert_eq!(stop_reason(&FinishReason::ToolCalls), "tool_use");
    assert_eq!(
        stop_reason(&FinishReason::Other("stop_sequence".into())),
        "stop_sequence"
    );
    assert_eq!(
        stop_reason(&FinishReason::Other("recitation".into())),
        "end_turn"
    );
}
