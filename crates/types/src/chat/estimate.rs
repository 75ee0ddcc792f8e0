//! A request's input tokens, estimated without a tokenizer (four
//! characters a token), and the bound that estimate keeps to for a body of
//! a given length.

use super::{ChatRequest, Part};

/// Three bytes a token: the estimate's bound from a body of `body_len`
/// bytes holding no image. The estimate counts four characters a token,
/// and nothing it counts is longer than the body writes it: each text is
/// no shorter in the JSON body than read (escapes only lengthen it), and a
/// tool's schema is sized at about its compact JSON form, never much more.
pub fn estimate_bound(body_len: u32) -> u64 {
    u64::from(body_len) / 3 + 1
}

/// A rough count of a request's input tokens (four characters a token),
/// for the token budgets a provider reports and a context window's fit:
/// the system prompt, every turn's text, its tool calls (name and
/// arguments) and tool-call id, and the tools offered (name, description,
/// schema). One pass over the parts summing lengths: nothing allocated,
/// no text read.
pub fn estimate_tokens(chat: &ChatRequest) -> u64 {
    // A Chat Completions body goes as it is only where the neutral fields
    // hold all of it, so those are counted, as for a translated request.
    let native = chat.native.as_deref();
    if let Some(native) = native.filter(|n| n.kind != crate::protocol::Protocol::ChatCompletions) {
        return native.body.len() as u64 / 4;
    }
    let turns: usize = chat
        .messages
        .iter()
        .map(|m| {
            let parts: usize = m
                .content
                .iter()
                .map(|p| match p {
                    Part::Text { text } => text.len(),
                    // An image counts as a thousand tokens or so.
                    _ => 4000,
                })
                .sum();
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                .sum();
            parts + calls + m.tool_call_id.as_ref().map_or(0, String::len)
        })
        .sum();
    let tools: usize = chat
        .tools
        .iter()
        .map(|t| {
            t.name.len()
                + t.description.as_ref().map_or(0, String::len)
                + t.parameters.as_ref().map_or(0, json_len)
        })
        .sum();
    (chat.system.as_ref().map_or(0, String::len) + turns + tools) as u64 / 4
}

/// About the length of `v` written as JSON, without writing it: its
/// compact form's, a number counted as one character (so never more than
/// that form but for one separator per object or array).
fn json_len(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(|i| json_len(i) + 1).sum::<usize>() + 2,
        Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + 4 + json_len(v))
                .sum::<usize>()
                + 2
        }
        Value::Bool(true) | Value::Null => 4,
        Value::Bool(false) => 5,
        Value::Number(_) => 1,
    }
}
