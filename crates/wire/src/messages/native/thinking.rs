//! Extended thinking in a native Messages body: whether it is on, whether
//! the conversation ends in a tool turn that no signed thinking block
//! starts (so the target gets the body with thinking off), and the
//! `context_management` edits that go with it.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Content, Edit, Message};

/// Whether a Messages body turns extended thinking on (`thinking` of any
/// type but `disabled`): the API then refuses any temperature but 1, so
/// the front end marks it `NativeRequest::fixed_sampling`.
pub fn fixes_sampling(body: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Body {
        thinking: Option<Thinking>,
    }
    #[derive(serde::Deserialize)]
    struct Thinking {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    serde_json::from_str::<Body>(body)
        .ok()
        .and_then(|b| b.thinking)
        .is_some_and(|t| t.kind.as_deref() != Some("disabled"))
}

/// Whether `thinking` turns thinking on (`enabled` or `adaptive`).
pub(super) fn thinking_on(thinking: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Thinking<'a> {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
    }
    serde_json::from_str::<Thinking<'_>>(thinking.get())
        .is_ok_and(|t| matches!(t.kind.as_ref(), "enabled" | "adaptive"))
}

/// Whether the conversation ends inside a tool loop whose assistant turn
/// does not start with a `thinking` or `redacted_thinking` block.
///
/// A tool loop is one assistant turn (Anthropic's docs): its assistant
/// messages, joined by user messages of tool results only, up to the last
/// user message, which answers the last calls. Without interleaved
/// thinking Claude thinks only at the start of the turn, so only the
/// turn's first assistant message must start with a thinking block; a turn
/// another provider started has none.
pub(super) fn tool_turn_lacks_thinking(messages: &RawValue) -> bool {
    let blocks = |m: &Message<'_>| -> Vec<String> {
        match &m.content {
            Some(Content::Blocks(blocks)) => blocks.iter().map(|b| b.kind.to_string()).collect(),
            _ => Vec::new(),
        }
    };
    let Ok(messages) = serde_json::from_str::<Vec<Message<'_>>>(messages.get()) else {
        return false;
    };
    // (Mid-conversation system messages take no part in the turn.)
    let turns: Vec<&Message<'_>> = messages.iter().filter(|m| m.role != "system").collect();
    let Some((last, earlier)) = turns.split_last() else {
        return false;
    };
    if last.role != "user" || !blocks(last).iter().any(|b| b == "tool_result") {
        return false;
    }
    let (mut start, mut calls_tools) = (None, false);
    for m in earlier.iter().rev() {
        match m.role.as_ref() {
            "assistant" => {
                calls_tools |= blocks(m).iter().any(|b| b == "tool_use");
                start = Some(*m);
            }
            "user" => {
                let b = blocks(m);
                if b.is_empty() || b.iter().any(|k| k != "tool_result") {
                    break;
                }
            }
            _ => break,
        }
    }
    let Some(start) = start.filter(|_| calls_tools) else {
        return false;
    };
    !blocks(start)
        .first()
        .is_some_and(|k| matches!(k.as_str(), "thinking" | "redacted_thinking"))
}

/// `context_management` without the edits that need thinking on; the
/// field is left out when none remain.
pub(super) fn context_management_without_thinking(body: &str, raw: &RawValue) -> Option<Edit> {
    let mut value: serde_json::Value = serde_json::from_str(raw.get()).ok()?;
    let Some(edits) = value.get_mut("edits").and_then(|e| e.as_array_mut()) else {
        return Edit::set(body, raw, raw.get().to_owned());
    };
    edits.retain(|e| {
        !e.get("type")
            .and_then(|t| t.as_str())
            .is_some_and(|t| t.starts_with("clear_thinking"))
    });
    if edits.is_empty() {
        Edit::remove(body, "context_management", raw)
    } else {
        Edit::set(body, raw, value.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

    use super::*;

    #[test]
    fn thinking_fixes_the_sampling() {
        for (body, fixed) in [
            (
                r#"{"thinking":{"type":"enabled","budget_tokens":2048}}"#,
                true,
            ),
            (r#"{"thinking":{"type":"adaptive"}}"#, true),
            (r#"{"thinking":{"type":"disabled"}}"#, false),
            (r#"{"model":"m"}"#, false),
        ] {
            assert_eq!(fixes_sampling(body), fixed, "{body}");
        }
    }
}
