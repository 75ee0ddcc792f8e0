//! A body a client wrote in Anthropic's protocol, made valid for the
//! Anthropic target that is about to get it: every byte as the client sent
//! it but for the few top-level fields that depend on the target or on who
//! served earlier turns.
//!
//! - `model`: the target's.
//! - `max_tokens`: clamped to the target's output limit (a client's limit
//!   meant for a larger model would be a 400 exactly when this target is
//!   the fallback).
//! - `thinking`: with thinking on, Anthropic refuses a conversation that
//!   ends in a tool loop whose assistant turn does not start with a signed
//!   `thinking` block — which is what a turn another provider started looks
//!   like. Its documented way out is to send that request with thinking
//!   off, so that is what the target gets (`{"type": "disabled"}`), and
//!   `context_management` edits that only work with thinking on
//!   (`clear_thinking_…`) are left out with it. The next turn the target
//!   serves itself carries its own signed thinking again.
//!
//! - tool-use ids: when a history holds an id Anthropic's alphabet does not
//!   take (another provider minted it), every id of the conversation is
//!   mapped injectively ([`crate::ids::anthropic`]); otherwise the ids go
//!   as sent.
//!
//! Fields are replaced in place (their byte ranges located through
//! `serde_json`'s `RawValue`), so nothing else of the body changes, not
//! even white space.
//!
//! The thinking check is in `native/thinking.rs`; a cloud's form of the
//! body (Bedrock's, Vertex's) in `native/cloud.rs`.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;

mod cloud;
mod thinking;
pub use cloud::{CloudBody, for_cloud};
pub use thinking::fixes_sampling;
use thinking::{context_management_without_thinking, thinking_on, tool_turn_lacks_thinking};

/// What was changed, for tests and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub body: String,
    /// Thinking was turned off for this request (see the module docs).
    pub thinking_off: bool,
}

/// `body` ready for an Anthropic API target serving `model` whose output
/// limit is `limit`; `None` when the body is not a JSON object with a
/// `model`.
pub fn prepare(body: &str, model: &str, limit: Option<u32>) -> Option<Prepared> {
    prepare_for(body, model, limit, None)
}

/// [`prepare`] for a target on `platform` (`Some("bedrock")`,
/// `Some("vertex")`; `None`: the Anthropic API): the history keeps only
/// the thinking blocks that platform signed ([`super::signed_by`]).
pub fn prepare_for(
    body: &str,
    model: &str,
    limit: Option<u32>,
    platform: Option<&str>,
) -> Option<Prepared> {
    if !body.trim_start().starts_with('{') {
        return None;
    }
    let top: HashMap<Cow<'_, str>, &RawValue> = serde_json::from_str(body).ok()?;
    let mut edits = Vec::with_capacity(3);
    edits.push(Edit::set(
        body,
        top.get("model")?,
        serde_json::to_string(model).ok()?,
    )?);
    if let (Some(raw), Some(limit)) = (top.get("max_tokens"), limit) {
        if serde_json::from_str::<u64>(raw.get()).is_ok_and(|n| n > u64::from(limit)) {
            edits.push(Edit::set(body, raw, limit.to_string())?);
        }
    }
    // The history as this target takes it (ids in Anthropic's alphabet,
    // only its own signed blocks), read again for the thinking check.
    let rewritten = top
        .get("messages")
        .and_then(|m| messages_for_target(m, platform));
    let rewritten_raw = rewritten
        .as_ref()
        .and_then(|m| RawValue::from_string(m.clone()).ok());
    let messages = rewritten_raw.as_deref().or(top.get("messages").copied());
    let thinking_off = match (top.get("thinking"), messages) {
        (Some(thinking), Some(messages)) => {
            thinking_on(thinking) && tool_turn_lacks_thinking(messages)
        }
        _ => false,
    };
    if let (Some(raw), Some(mapped)) = (top.get("messages"), rewritten) {
        edits.push(Edit::set(body, raw, mapped)?);
    }
    if thinking_off {
        edits.push(Edit::set(
            body,
            top.get("thinking")?,
            r#"{"type":"disabled"}"#.to_owned(),
        )?);
        if let Some(raw) = top.get("context_management") {
            edits.push(context_management_without_thinking(body, raw)?);
        }
    }
    Some(Prepared {
        body: apply(body, edits)?,
        thinking_off,
    })
}

/// A message as far as these checks read it: its role and its blocks'
/// types and tool ids (everything else is skipped, not copied).
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    content: Option<Content<'a>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content<'a> {
    // Tried in order: blocks first (anything else holds none).
    Blocks(#[serde(borrow)] Vec<Block<'a>>),
    #[allow(dead_code, reason = "a string (or anything else) holds no blocks")]
    Other(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tool_use_id: Option<Cow<'a, str>>,
    /// A thinking block's signature, a redacted one's `data`.
    #[serde(borrow, alias = "data")]
    signature: Option<Cow<'a, str>>,
}

/// `body` with its top-level `model` set to `model`, every other byte as it
/// was; `None` when the body is not a JSON object with one `model`.
pub fn with_model(body: &str, model: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        model: Option<&'a RawValue>,
    }
    // (A struct also deserializes from an array, positionally.)
    if !body.trim_start().starts_with('{') {
        return None;
    }
    let top: Top<'_> = serde_json::from_str(body).ok()?;
    let edit = Edit::set(body, top.model?, serde_json::to_string(model).ok()?)?;
    apply(body, vec![edit])
}

/// `body` without its top-level members named in `keys`, every other byte
/// as it was (any protocol's JSON object: the gateway's own fields leave a
/// native body this way); `None` when it is not a JSON object or a member
/// is not written plainly.
pub fn without_members(body: &str, keys: &[&str]) -> Option<String> {
    let mut out = Cow::Borrowed(body);
    // One at a time: two members side by side would both take the comma
    // between them.
    for key in keys {
        if !out.trim_start().starts_with('{') {
            return None;
        }
        let top: HashMap<Cow<'_, str>, &RawValue> = serde_json::from_str(&out).ok()?;
        let Some(raw) = top.get(*key) else {
            continue;
        };
        let edit = Edit::remove(&out, key, raw)?;
        let next = apply(&out, vec![edit])?;
        out = Cow::Owned(next);
    }
    Some(out.into_owned())
}

/// `messages` with every tool-use id in Anthropic's alphabet, when some id
/// is not (one another provider minted, e.g. `functions.get:0`, which
/// Anthropic refuses): then every `tool_use` id and `tool_result`
/// reference goes through [`crate::ids::anthropic`], injective, so two ids
/// never become one and a call and its result stay paired. `None` (the
/// bytes as sent) when every id is already valid.
fn messages_for_target(messages: &RawValue, platform: Option<&str>) -> Option<String> {
    let valid = |id: &str| {
        !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    let parsed: Vec<Message<'_>> = serde_json::from_str(messages.get()).ok()?;
    let blocks = || {
        parsed.iter().flat_map(|m| match &m.content {
            Some(Content::Blocks(blocks)) => blocks.as_slice(),
            _ => &[],
        })
    };
    let all_valid = blocks().all(|b| match b.kind.as_ref() {
        "tool_use" => b.id.as_deref().is_none_or(valid),
        "tool_result" => b.tool_use_id.as_deref().is_none_or(valid),
        _ => true,
    });
    let signatures_fit = blocks()
        .filter(|b| matches!(b.kind.as_ref(), "thinking" | "redacted_thinking"))
        .all(|b| !super::signed_by::needs_change(b.signature.as_deref(), platform));
    if all_valid && signatures_fit {
        return None;
    }
    let mut value: serde_json::Value = serde_json::from_str(messages.get()).ok()?;
    for m in value.as_array_mut()? {
        let Some(blocks) = m.get_mut("content").and_then(|c| c.as_array_mut()) else {
            continue;
        };
        if !signatures_fit {
            super::signed_by::keep_own(blocks, platform);
        }
        if all_valid {
            continue;
        }
        for b in blocks {
            let field = match b.get("type").and_then(|t| t.as_str()) {
                Some("tool_use") => "id",
                Some("tool_result") => "tool_use_id",
                _ => continue,
            };
            if let Some(id) = b.get(field).and_then(|i| i.as_str()) {
                let mapped = crate::ids::anthropic(id).into_owned();
                b[field] = serde_json::Value::String(mapped);
            }
        }
    }
    Some(value.to_string())
}

/// One change to the body: the bytes `start..end` become `with`.
#[derive(Debug)]
struct Edit {
    start: usize,
    end: usize,
    with: String,
}

impl Edit {
    /// The value `raw` (a slice of `body`) replaced by `with`.
    fn set(body: &str, raw: &RawValue, with: String) -> Option<Self> {
        let (start, end) = span(body, raw)?;
        Some(Self { start, end, with })
    }

    /// The member `"key": raw` removed with one comma beside it. `None`
    /// when the key is not written plainly right before its value.
    fn remove(body: &str, key: &str, raw: &RawValue) -> Option<Self> {
        let (value_start, value_end) = span(body, raw)?;
        let before = body[..value_start].trim_end();
        let before = before.strip_suffix(':')?.trim_end();
        let quoted = serde_json::to_string(key).ok()?;
        let key_start = before.strip_suffix(quoted.as_str())?.len();
        // A comma after the member goes with it; else the one before it.
        let after = &body[value_end..];
        let trailing = after.len() - after.trim_start().len();
        if after.trim_start().starts_with(',') {
            return Some(Self {
                start: key_start,
                end: value_end + trailing + 1,
                with: String::new(),
            });
        }
        let head = body[..key_start].trim_end();
        // The only member: nothing but itself goes.
        let start = match head.strip_suffix(',') {
            Some(before) => before.len(),
            None if head.ends_with('{') => key_start,
            None => return None,
        };
        Some(Self {
            start,
            end: value_end,
            with: String::new(),
        })
    }
}

/// Where `raw`, a slice of `body`, lies in it.
fn span(body: &str, raw: &RawValue) -> Option<(usize, usize)> {
    let raw = raw.get();
    let start = (raw.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start.checked_add(raw.len())?;
    (body.get(start..end) == Some(raw)).then_some((start, end))
}

/// `body` with `edits` (non-overlapping) made.
fn apply(body: &str, mut edits: Vec<Edit>) -> Option<String> {
    // An insertion at a removal's start goes first.
    edits.sort_by_key(|e| (e.start, e.end));
    let mut out = String::with_capacity(body.len() + 64);
    let mut at = 0;
    for e in edits {
        out.push_str(body.get(at..e.start)?);
        out.push_str(&e.with);
        at = e.end;
    }
    out.push_str(body.get(at..)?);
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

    use super::*;

    fn body(thinking: &str, last_assistant: &str, extra: &str) -> String {
        format!(
            r#"{{"model": "claude-x", "max_tokens": 128000, {thinking}"messages": [{{"role": "user", "content": "hi"}}, {{"role": "assistant", "content": {last_assistant}}}, {{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}}]}}]{extra}}}"#
        )
    }

    const ON: &str = r#""thinking": {"type": "adaptive"}, "#;
    const TOOL_ONLY: &str = r#"[{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]"#;
    const SIGNED: &str = r#"[{"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]"#;

    #[test]
    fn thinking_goes_off_only_when_the_final_tool_turn_has_no_thinking_block() {
        // (thinking, final assistant content, turned off)
        let cases = [
            (ON, TOOL_ONLY, true),
            (ON, SIGNED, false),
            (
                r#""thinking": {"type": "enabled", "budget_tokens": 2048}, "#,
                TOOL_ONLY,
                true,
            ),
            (r#""thinking": {"type": "disabled"}, "#, TOOL_ONLY, false),
            ("", TOOL_ONLY, false),
            (ON, r#""plain text""#, false),
            (ON, r#"[{"type": "text", "text": "no tools"}]"#, false),
            (
                ON,
                r#"[{"type": "redacted_thinking", "data": "x"}, {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]"#,
                false,
            ),
        ];
        for (thinking, last, off) in cases {
            let b = body(thinking, last, "");
            let p = prepare(&b, "claude-y", None).unwrap();
            assert_eq!(p.thinking_off, off, "{b}");
            let v: serde_json::Value = serde_json::from_str(&p.body).unwrap();
            assert_eq!(v["model"], "claude-y");
            if off {
                assert_eq!(v["thinking"], serde_json::json!({"type": "disabled"}));
            }
        }
    }

    #[test]
    fn the_tool_loop_is_one_turn_that_must_start_thinking() {
        let signed = r#"{"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]}"#;
        let bare = r#"{"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "Read", "input": {}}]}"#;
        let result = |id: &str| {
            format!(
                r#"{{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "{id}", "content": "ok"}}]}}"#
            )
        };
        let user = r#"{"role": "user", "content": "hi"}"#;
        let system = r#"{"role": "system", "content": "note"}"#;
        // (messages, thinking turned off)
        let cases = [
            // Thinking at the turn's start only (no interleaved thinking).
            ([user, signed, &result("t1"), bare, &result("t2")].join(","), false),
            // Another provider started the turn; Anthropic went on.
            ([user, bare, &result("t2"), signed, &result("t1")].join(","), true),
            // A system message inside the loop takes no part.
            ([user, bare, system, &result("t2")].join(","), true),
            ([user, signed, system, &result("t1")].join(","), false),
            // A new user turn after a finished loop starts afresh.
            ([user, bare, &result("t2"), r#"{"role": "assistant", "content": "done"}"#, user].join(","), false),
            // A user message with more than results ends the earlier turn.
            (
                [
                    user,
                    bare,
                    r#"{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "ok"}, {"type": "text", "text": "and?"}]}"#,
                    signed,
                    &result("t1"),
                ]
                .join(","),
                false,
            ),
        ];
        for (messages, off) in cases {
            let b = format!(r#"{{"model": "m", "max_tokens": 10, {ON}"messages": [{messages}]}}"#);
            assert_eq!(
                prepare(&b, "m", None).unwrap().thinking_off,
                off,
                "{messages}"
            );
        }
    }

    #[test]
    fn ids_another_provider_minted_are_mapped_injectively_with_their_results() {
        let conv = |a: &str, b: &str| {
            format!(
                r#"{{"model": "m", "max_tokens": 10, "messages": [{{"role": "user", "content": "hi"}}, {{"role": "assistant", "content": [{{"type": "tool_use", "id": "{a}", "name": "get", "input": {{}}}}, {{"type": "tool_use", "id": "{b}", "name": "get", "input": {{}}}}]}}, {{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "{a}", "content": "1"}}, {{"type": "tool_result", "tool_use_id": "{b}", "content": "2"}}]}}]}}"#
            )
        };
        // Valid ids: the bytes as sent.
        let b = conv("toolu_01A", "call_b-c");
        assert_eq!(prepare(&b, "m", None).unwrap().body, b);
        // Groq/Kimi-style ids that differ only where Anthropic's alphabet
        // has no letter stay two ids, each paired with its result.
        for (a, c) in [
            ("functions.get:0", "functions.get:1"),
            ("a.b", "a_b"),
            ("a:b", "a.b"),
        ] {
            let p = prepare(&conv(a, c), "m", None).unwrap();
            let v: serde_json::Value = serde_json::from_str(&p.body).unwrap();
            let calls: Vec<&str> = v["messages"][1]["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["id"].as_str().unwrap())
                .collect();
            let results: Vec<&str> = v["messages"][2]["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["tool_use_id"].as_str().unwrap())
                .collect();
            assert_eq!(calls, results, "{a} {c}");
            assert_ne!(calls[0], calls[1], "{a} {c}");
            for id in calls {
                assert!(
                    id.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                    "{id}"
                );
            }
        }
    }

    #[test]
    fn only_the_changed_fields_change() {
        let b = body(ON, SIGNED, r#", "stream": true"#);
        let p = prepare(&b, "claude-opus-4-1", Some(32_000)).unwrap();
        assert_eq!(
            p.body,
            b.replace("claude-x", "claude-opus-4-1")
                .replace("128000", "32000")
        );
        // A limit above the request's leaves it alone.
        let p = prepare(&b, "claude-x", Some(200_000)).unwrap();
        assert_eq!(p.body, b);
    }

    #[test]
    fn context_management_that_needs_thinking_goes_with_it() {
        let clear = r#""clear_thinking_20251015""#;
        let cases = [
            // (context_management, what remains)
            (
                format!(r#"{{"edits": [{{"type": {clear}, "keep": "all"}}]}}"#),
                None,
            ),
            (
                format!(
                    r#"{{"edits": [{{"type": {clear}}}, {{"type": "clear_tool_uses_20250919"}}]}}"#
                ),
                Some(serde_json::json!({"edits": [{"type": "clear_tool_uses_20250919"}]})),
            ),
        ];
        for (cm, remains) in cases {
            for at_end in [true, false] {
                let b = if at_end {
                    body(ON, TOOL_ONLY, &format!(r#", "context_management": {cm}"#))
                } else {
                    body(ON, TOOL_ONLY, "").replacen(
                        r#""max_tokens""#,
                        &format!(r#""context_management": {cm}, "max_tokens""#),
                        1,
                    )
                };
                let p = prepare(&b, "claude-x", None).unwrap();
                let v: serde_json::Value =
                    serde_json::from_str(&p.body).unwrap_or_else(|e| panic!("{e}: {}", p.body));
                assert_eq!(v.get("context_management").cloned(), remains, "{}", p.body);
                assert_eq!(v["messages"].as_array().unwrap().len(), 3);
            }
        }
    }

    #[test]
    fn bodies_that_are_not_objects_with_a_model_are_left_to_the_translation() {
        for b in [
            "[1, 2]",
            r#"{"messages": []}"#,
            "not json",
            r#"{"model": "a"} x"#,
        ] {
            assert_eq!(prepare(b, "m", None), None, "{b}");
        }
    }
}

#[cfg(test)]
mod id_properties {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

    use proptest::prelude::*;

    use super::prepare;

    /// Ids of every shape: Anthropic's own, other providers' (`.`, `:`),
    /// any Unicode, empty.
    fn id() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9_-]{0,12}",
            "[a-z]{1,6}[.:][a-z0-9]{1,4}(:[0-9])?",
            "\\PC{0,10}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// A conversation the client wrote natively, whatever its tool ids,
        /// reaches Anthropic with ids in its alphabet, pairwise distinct when
        /// the client's were, each call's id its result's.
        #[test]
        fn native_ids_stay_distinct_valid_and_paired(ids in prop::collection::hash_set(id(), 1..5)) {
            let ids: Vec<String> = ids.into_iter().collect();
            let calls: Vec<serde_json::Value> = ids
                .iter()
                .map(|i| serde_json::json!({"type": "tool_use", "id": i, "name": "f", "input": {}}))
                .collect();
            let results: Vec<serde_json::Value> = ids
                .iter()
                .map(|i| serde_json::json!({"type": "tool_result", "tool_use_id": i, "content": "ok"}))
                .collect();
            let body = serde_json::json!({
                "model": "m", "max_tokens": 10,
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": calls},
                    {"role": "user", "content": results}
                ]
            })
            .to_string();
            let sent: serde_json::Value =
                serde_json::from_str(&prepare(&body, "m", None).unwrap().body).unwrap();
            let got = |m: usize, field: &str| -> Vec<String> {
                sent["messages"][m]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b[field].as_str().unwrap().to_owned())
                    .collect()
            };
            let (call_ids, result_ids) = (got(1, "id"), got(2, "tool_use_id"));
            prop_assert_eq!(&call_ids, &result_ids);
            let distinct: std::collections::HashSet<&String> = call_ids.iter().collect();
            prop_assert_eq!(distinct.len(), ids.len());
            for id in &call_ids {
                prop_assert!(
                    !id.is_empty()
                        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                    "{}", id
                );
            }
        }
    }
}
