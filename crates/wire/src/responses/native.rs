//! A client's own Responses API body made valid for the Responses target
//! that is about to get it, in place (byte ranges located through
//! `serde_json`'s `RawValue`, so nothing else changes, not even white
//! space):
//!
//! - `model`: the target's; `max_output_tokens`: clamped to its limit.
//! - `input`: reasoning items only when this target made them (their ids
//!   tagged on the way out, below, and restored here); another
//!   target's, or an untagged one with `encrypted_content`, left out.
//! - `tools`: tools the client runs (`function`, `custom`, `namespace`,
//!   `shell`, `local_shell`, `apply_patch`, `computer_use_preview`) as
//!   sent; hosted tools that run on the operator's key only where the
//!   provider's `passthrough` allows them (`web_search*` → `web_search`,
//!   `code_interpreter` → `code_execution`, `mcp`, `file_search` →
//!   `files`); any other hosted tool left out, as the translation does.
//!
//! A body with `previous_response_id` (the gateway's stored conversation,
//! unknown to the provider) goes with the stored items and its own as its
//! `input` instead ([`with_conversation`]).

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use understudy_types::passthrough::{Gated, GatedSet};

/// `body` without `previous_response_id`, its `input` the whole
/// conversation (the provider knows nothing of the gateway's store).
pub fn with_conversation(body: &str, conversation: [&[Value]; 2]) -> Option<String> {
    let mut top: serde_json::Map<String, Value> = serde_json::from_str(body).ok()?;
    top.remove("previous_response_id");
    let items: Vec<Value> = conversation.concat();
    top.insert("input".into(), Value::Array(items));
    serde_json::to_string(&top).ok()
}

// === reasoning items: whose they are ===

/// Eight hex digits naming a target (FNV-1a of provider and model): the
/// mark in the reasoning-item ids the gateway hands out.
pub fn target_tag(provider: &str, model: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in provider.bytes().chain([0]).chain(model.bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

/// `rs_X` as the gateway hands it out from the target tagged `tag`.
pub fn tagged_id(id: &str, tag: &str) -> Option<String> {
    let rest = id.strip_prefix("rs_")?;
    // Already tagged (the provider echoed a tagged id): as it is.
    (!rest.starts_with("us")).then(|| format!("rs_us{tag}_{rest}"))
}

/// `text` (an answer or event as the provider sent it) with the id of every
/// reasoning item in `ids` tagged; the ids are the provider's own (letters,
/// digits, `_`), replaced where they appear as JSON strings.
pub fn tag_ids(text: &str, ids: &[String], tag: &str) -> Option<String> {
    let mut out: Option<String> = None;
    for id in ids {
        let Some(tagged) = tagged_id(id, tag) else {
            continue;
        };
        let from = format!("\"{id}\"");
        let current = out.as_deref().unwrap_or(text);
        if current.contains(&from) {
            out = Some(current.replace(&from, &format!("\"{tagged}\"")));
        }
    }
    out
}

/// The ids of reasoning items in a `response` object's `output`.
pub fn reasoning_ids(output: &[Value]) -> Vec<String> {
    output
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("reasoning"))
        .filter_map(|i| i.get("id").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// Tool types the client runs itself: they go as sent.
const CLIENT_TOOLS: [&str; 8] = [
    "function",
    "custom",
    "namespace",
    "shell",
    "local_shell",
    "apply_patch",
    "computer",
    "computer_use_preview",
];

/// The client's Responses `body` for the target `model` tagged `tag`:
/// `model` set, `max_output_tokens` clamped to `limit`, reasoning items
/// kept only when this target made them (their ids restored), hosted tools
/// only where `allowed`; every other byte as sent. `None` when it is not a
/// JSON object with a `model`.
pub fn prepare_native(
    body: &str,
    model: &str,
    tag: &str,
    limit: Option<u32>,
    allowed: GatedSet,
) -> Option<String> {
    if !body.trim_start().starts_with('{') {
        return None;
    }
    let top: HashMap<Cow<'_, str>, &RawValue> = serde_json::from_str(body).ok()?;
    let mut edits = vec![(
        span(body, top.get("model")?)?,
        serde_json::to_string(model).ok()?,
    )];
    if let (Some(raw), Some(limit)) = (top.get("max_output_tokens"), limit) {
        if serde_json::from_str::<u64>(raw.get()).is_ok_and(|n| n > u64::from(limit)) {
            edits.push((span(body, raw)?, limit.to_string()));
        }
    }
    if let Some(input) = top.get("input") {
        if let Some(kept) = input_for_target(input.get(), tag) {
            edits.push((span(body, input)?, kept));
        }
    }
    if let Some(tools) = top.get("tools") {
        if let Some(kept) = tools_for_target(tools.get(), allowed) {
            edits.push((span(body, tools)?, kept));
        }
    }
    edits.sort_by_key(|((start, _), _)| *start);
    let mut out = String::with_capacity(body.len() + 16);
    let mut at = 0;
    for ((start, end), with) in edits {
        out.push_str(body.get(at..start)?);
        out.push_str(&with);
        at = end;
    }
    out.push_str(body.get(at..)?);
    Some(out)
}

/// The `input` array with the reasoning items of other targets left out
/// and this target's ids restored; `None` when nothing changes (a string
/// input, or no reasoning item to change).
fn input_for_target(input: &str, tag: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Item<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<Cow<'a, str>>,
        #[serde(borrow)]
        id: Option<Cow<'a, str>>,
        encrypted_content: Option<&'a RawValue>,
    }
    let items: Vec<&RawValue> = serde_json::from_str(input).ok()?;
    let mut changed = false;
    let mut kept = Vec::with_capacity(items.len());
    for raw in items {
        let Ok(item) = serde_json::from_str::<Item<'_>>(raw.get()) else {
            kept.push(Cow::Borrowed(raw.get()));
            continue;
        };
        if item.kind.as_deref() != Some("reasoning") {
            kept.push(Cow::Borrowed(raw.get()));
            continue;
        }
        let sealed = item.encrypted_content.is_some_and(|e| e.get() != "null");
        match item.id.as_deref().map(|id| (id, untagged_id(id, tag))) {
            Some((id, Ok(original))) => {
                changed = true;
                let from = format!("\"{id}\"");
                kept.push(Cow::Owned(
                    raw.get().replace(&from, &format!("\"{original}\"")),
                ));
            }
            Some((_, Err(true))) => changed = true,
            _ if sealed => changed = true,
            _ => kept.push(Cow::Borrowed(raw.get())),
        }
    }
    changed.then(|| format!("[{}]", kept.join(",")))
}

/// Where `raw`, a slice of `body`, lies in it.
fn span(body: &str, raw: &RawValue) -> Option<(usize, usize)> {
    let raw = raw.get();
    let start = (raw.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start.checked_add(raw.len())?;
    (body.get(start..end) == Some(raw)).then_some((start, end))
}

/// The pass-through feature a hosted tool type switches on (`None`: none
/// the operator can allow; the tool is left out).
fn hosted_feature(kind: &str) -> Option<Gated> {
    match kind {
        k if k.starts_with("web_search") => Some(Gated::WebSearch),
        "code_interpreter" => Some(Gated::CodeExecution),
        "mcp" => Some(Gated::Mcp),
        "file_search" => Some(Gated::Files),
        _ => None,
    }
}

/// The `tools` array without the hosted tools `allowed` does not cover;
/// `None` when nothing changes.
fn tools_for_target(tools: &str, allowed: GatedSet) -> Option<String> {
    #[derive(Deserialize)]
    struct Tool<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<Cow<'a, str>>,
    }
    let items: Vec<&RawValue> = serde_json::from_str(tools).ok()?;
    let n = items.len();
    let kept: Vec<&str> = items
        .into_iter()
        .filter(|raw| {
            let Ok(tool) = serde_json::from_str::<Tool<'_>>(raw.get()) else {
                return true;
            };
            let kind = tool.kind.as_deref().unwrap_or("function");
            CLIENT_TOOLS.contains(&kind)
                || hosted_feature(kind).is_some_and(|g| allowed.contains(g))
        })
        .map(RawValue::get)
        .collect();
    (kept.len() != n).then(|| format!("[{}]", kept.join(",")))
}

/// The id a tagged reasoning item had at its target: `Ok(original)` when
/// `tag` made it, `Err(true)` when another target did, `Err(false)` when
/// it carries no tag.
pub fn untagged_id(id: &str, tag: &str) -> Result<String, bool> {
    let Some(marked) = id.strip_prefix("rs_us") else {
        return Err(false);
    };
    match marked.strip_prefix(tag).and_then(|r| r.strip_prefix('_')) {
        Some(rest) => Ok(format!("rs_{rest}")),
        None => Err(marked.len() > 9 && marked.as_bytes().get(8) == Some(&b'_')),
    }
}
