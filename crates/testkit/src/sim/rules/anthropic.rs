//! Anthropic's Messages API request rules, with
//! the API's own messages: `max_tokens` required and within the model's
//! output limit; roles `user` and `assistant` (and `system` under the
//! mid-conversation betas); tool-use ids in `^[a-zA-Z0-9_-]+$`;
//! every `tool_use` answered by a `tool_result` in the next (user) message,
//! results first, each naming a call of the message before; `tool_use.input`
//! an object; with thinking on, temperature 1 and a final tool loop whose
//! assistant turn starts with a thinking block; every thinking block's
//! signature one this simulator minted; `cache_control` markers of type
//! `ephemeral` with a `ttl` of `5m` or `1h`, at most 4 of them (a
//! top-level one included), no `1h` after a `5m` in the order tools →
//! system → messages.

use serde_json::Value;

use super::{Received, Violation, is_tool_id};

/// Where the extended-thinking rules are documented (quoted in the API's
/// messages).
const THINKING_DOCS: &str = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking";

/// Checks a Messages API request (`POST /v1/messages`, and the same body
/// rules for `/v1/messages/count_tokens`); `minted` says whether a
/// signature is one this simulator made.
pub(super) fn check(
    req: &Received,
    max_output_tokens: u64,
    minted: &dyn Fn(&str) -> bool,
) -> Result<(), Violation> {
    let path = req.path.split('?').next().unwrap_or_default();
    let counting = path.ends_with("/v1/messages/count_tokens");
    if req.method != "POST" || !(path.ends_with("/v1/messages") || counting) {
        return Ok(());
    }
    let body: Value = serde_json::from_slice(&req.body)
        .map_err(|e| Violation::anthropic(format!("There was an error parsing the body: {e}")))?;
    if let Some(unknown) = super::super::anthropic_credit::unknown_field(req) {
        return Err(Violation::anthropic(unknown));
    }
    let model = body["model"].as_str().unwrap_or_default();
    if !counting {
        max_tokens(&body, model, max_output_tokens)?;
    }
    let Some(messages) = body["messages"].as_array() else {
        return Err(Violation::anthropic("messages: Field required".into()));
    };
    cache_controls(&body, messages)?;
    roles(messages, system_beta(req))?;
    blocks(messages, minted)?;
    tool_pairing(messages)?;
    if thinking_on(&body) {
        thinking_rules(&body, messages)?;
    }
    Ok(())
}

/// `max_tokens`: required, an integer, at most the model's output limit.
fn max_tokens(body: &Value, model: &str, limit: u64) -> Result<(), Violation> {
    match &body["max_tokens"] {
        Value::Null => Err(Violation::anthropic("max_tokens: Field required".into())),
        v => match v.as_u64() {
            None => Err(Violation::anthropic(
                "max_tokens: Input should be a valid integer".into(),
            )),
            Some(n) if n > limit => Err(Violation::anthropic(format!(
                "max_tokens: {n} > {limit}, which is the maximum allowed number of output tokens for {model}"
            ))),
            Some(_) => Ok(()),
        },
    }
}

/// The most cache breakpoints a request may set.
const MAX_BREAKPOINTS: usize = 4;

/// `cache_control` markers: well formed, at most [`MAX_BREAKPOINTS`]
/// (the top-level automatic one counts), and no `1h` after a `5m` in the
/// order the API processes blocks (tools, system, messages).
fn cache_controls(body: &Value, messages: &[Value]) -> Result<(), Violation> {
    let tools = body["tools"].as_array().into_iter().flatten().enumerate();
    let system = body["system"].as_array().into_iter().flatten().enumerate();
    let in_messages = messages.iter().enumerate().flat_map(|(i, m)| {
        content(m)
            .iter()
            .enumerate()
            .map(move |(j, b)| (format!("messages.{i}.content.{j}"), b))
    });
    let mut markers: Vec<(String, &Value)> = tools
        .map(|(i, b)| (format!("tools.{i}"), b))
        .chain(system.map(|(i, b)| (format!("system.{i}"), b)))
        .chain(in_messages)
        .filter(|(_, b)| !b["cache_control"].is_null())
        .map(|(at, b)| (at, &b["cache_control"]))
        .collect();
    if !body["cache_control"].is_null() {
        markers.push(("cache_control".into(), &body["cache_control"]));
    }
    if markers.len() > MAX_BREAKPOINTS {
        return Err(Violation::anthropic(format!(
            "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
            markers.len()
        )));
    }
    let mut seen_short = false;
    for (at, marker) in markers {
        if marker["type"] != "ephemeral" {
            return Err(Violation::anthropic(format!(
                "{at}.cache_control.type: Input should be 'ephemeral'"
            )));
        }
        let long = match marker.get("ttl") {
            None => false,
            Some(ttl) if ttl == "5m" => false,
            Some(ttl) if ttl == "1h" => true,
            Some(_) => {
                return Err(Violation::anthropic(format!(
                    "{at}.cache_control.ttl: Input should be '5m' or '1h'"
                )));
            }
        };
        if long && seen_short {
            return Err(Violation::anthropic(format!(
                "{at}.cache_control.ttl: a ttl='1h' cache_control block must not come after a \
                 ttl='5m' cache_control block. Note that blocks are processed in the following \
                 order: `tools`, `system`, `messages`."
            )));
        }
        seen_short |= !long;
    }
    Ok(())
}

/// Whether the request turned on mid-conversation system messages: an
/// `anthropic-beta` value starting with `mid-conversation-system`, or
/// `mid-conversation-tool-changes`, the one Claude Code 2.1.328 actually
/// sends with its `system` messages (recorded in the server's
/// `tests/data/claude_code/turn1.headers.txt`; refused, it sends the
/// request again without them and without that beta).
fn system_beta(req: &Received) -> bool {
    req.headers
        .iter()
        .filter(|(name, _)| name == "anthropic-beta")
        .flat_map(|(_, value)| value.split(','))
        .map(str::trim)
        .any(|beta| {
            beta.starts_with("mid-conversation-system")
                || beta.starts_with("mid-conversation-tool-changes")
        })
}

fn roles(messages: &[Value], system_allowed: bool) -> Result<(), Violation> {
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str() {
            Some("user" | "assistant") => {}
            Some("system") if system_allowed => {}
            _ => {
                return Err(Violation::anthropic(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant'"
                )));
            }
        }
    }
    Ok(())
}

/// The blocks of a message's content (none for a string).
fn content(message: &Value) -> &[Value] {
    message["content"].as_array().map_or(&[], Vec::as_slice)
}

/// Block by block: tool ids in the API's alphabet, `tool_use.input` an
/// object, thinking signatures this simulator's own.
fn blocks(messages: &[Value], minted: &dyn Fn(&str) -> bool) -> Result<(), Violation> {
    for (i, m) in messages.iter().enumerate() {
        for (j, block) in content(m).iter().enumerate() {
            match block["type"].as_str() {
                Some("tool_use") => {
                    let id = block["id"].as_str().unwrap_or_default();
                    if !is_tool_id(id) {
                        return Err(Violation::anthropic(format!(
                            "messages.{i}.content.{j}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                        )));
                    }
                    if !block["input"].is_object() {
                        return Err(Violation::anthropic(format!(
                            "messages.{i}.content.{j}.tool_use.input: Input should be a valid dictionary"
                        )));
                    }
                }
                Some("tool_result") => {
                    let id = block["tool_use_id"].as_str().unwrap_or_default();
                    if !is_tool_id(id) {
                        return Err(Violation::anthropic(format!(
                            "messages.{i}.content.{j}.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                        )));
                    }
                }
                Some("thinking") => {
                    let signature = block["signature"].as_str().unwrap_or_default();
                    if !minted(signature) {
                        return Err(Violation::anthropic(format!(
                            "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                        )));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The ids of a message's blocks of `kind` (`tool_use`: `id`;
/// `tool_result`: `tool_use_id`).
fn ids<'a>(message: &'a Value, kind: &str) -> Vec<&'a str> {
    let field = if kind == "tool_use" {
        "id"
    } else {
        "tool_use_id"
    };
    content(message)
        .iter()
        .filter(|b| b["type"] == kind)
        .filter_map(|b| b[field].as_str())
        .collect()
}

/// Every `tool_use` is answered in the very next message, a user one, by
/// `tool_result` blocks that come before anything else there; every
/// `tool_result` answers a `tool_use` of the message just before.
fn tool_pairing(messages: &[Value]) -> Result<(), Violation> {
    for (i, m) in messages.iter().enumerate() {
        let previous_calls = match i.checked_sub(1).map(|p| &messages[p]) {
            Some(p) if p["role"] == "assistant" => ids(p, "tool_use"),
            _ => Vec::new(),
        };
        let blocks = content(m);
        let mut seen_other = false;
        for (j, block) in blocks.iter().enumerate() {
            if block["type"] != "tool_result" {
                seen_other = true;
                continue;
            }
            let id = block["tool_use_id"].as_str().unwrap_or_default();
            if m["role"] != "user" || !previous_calls.contains(&id) {
                return Err(Violation::anthropic(format!(
                    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. \
                     Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                )));
            }
            if seen_other {
                return Err(Violation::anthropic(format!(
                    "messages.{i}.content.{j}: `tool_result` blocks must come first in the user message \
                     that answers a `tool_use`, before any other content"
                )));
            }
        }
        if m["role"] != "assistant" {
            continue;
        }
        let calls = ids(m, "tool_use");
        if calls.is_empty() {
            continue;
        }
        let answered = match messages.get(i + 1) {
            Some(next) if next["role"] == "user" => ids(next, "tool_result"),
            _ => Vec::new(),
        };
        let missing: Vec<&str> = calls
            .iter()
            .copied()
            .filter(|id| !answered.contains(id))
            .collect();
        if !missing.is_empty() {
            return Err(Violation::anthropic(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. \
                 Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                missing.join(", ")
            )));
        }
    }
    Ok(())
}

/// Whether extended thinking is on (`enabled`, or `adaptive`).
fn thinking_on(body: &Value) -> bool {
    matches!(
        body["thinking"]["type"].as_str(),
        Some("enabled" | "adaptive")
    )
}

/// With thinking on: temperature 1 (or unset), and a conversation that ends
/// in a tool loop has the loop's assistant turn start with a thinking block.
fn thinking_rules(body: &Value, messages: &[Value]) -> Result<(), Violation> {
    if let Some(t) = body.get("temperature").filter(|t| !t.is_null()) {
        if t.as_f64() != Some(1.0) {
            return Err(Violation::anthropic(format!(
                "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. \
                 Please consult our documentation at {THINKING_DOCS}#important-considerations-when-using-extended-thinking"
            )));
        }
    }
    // A tool loop is one assistant turn: its assistant messages, joined by
    // user messages of tool results only, up to the last user message
    // (results for the last calls). Its first assistant message must start
    // with thinking; later ones need not (Claude thinks once per turn
    // without interleaved thinking). System messages take no part.
    let turn: Vec<(usize, &Value)> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m["role"] != "system")
        .collect();
    let Some(((_, last), earlier)) = turn.split_last() else {
        return Ok(());
    };
    if last["role"] != "user" || ids(last, "tool_result").is_empty() {
        return Ok(());
    }
    let (mut start, mut calls_tools) = (None, false);
    for &(i, m) in earlier.iter().rev() {
        if m["role"] == "assistant" {
            calls_tools |= !ids(m, "tool_use").is_empty();
            start = Some((i, m));
            continue;
        }
        let only_results =
            !content(m).is_empty() && content(m).iter().all(|b| b["type"] == "tool_result");
        if m["role"] != "user" || !only_results {
            break;
        }
    }
    let Some((n, assistant)) = start.filter(|_| calls_tools) else {
        return Ok(());
    };
    let first = content(assistant)
        .first()
        .and_then(|b| b["type"].as_str())
        .unwrap_or("text");
    if matches!(first, "thinking" | "redacted_thinking") {
        return Ok(());
    }
    Err(Violation::anthropic(format!(
        "messages.{n}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. \
         When `thinking` is enabled, a final `assistant` message must start with a thinking block \
         (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include \
         thinking blocks from your previous turn. To avoid this requirement, disable `thinking`. \
         Please consult our documentation at {THINKING_DOCS}"
    )))
}
