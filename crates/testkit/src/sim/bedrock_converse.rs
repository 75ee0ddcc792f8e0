//! Bedrock's Converse API in front of the Anthropic simulator:
//! the body checked as bedrock-runtime checks it, handed
//! on as the Messages request it means, and the answer dressed as
//! Converse's (a JSON answer, or ConverseStream's events).
//!
//! - Refused with a `ValidationException` (and counted as a violation): a
//!   member Converse does not have (`model` and `modelId` above all: the
//!   model is in the path), a conversation that does not start with a user
//!   turn or does not alternate, a content block that is not exactly one
//!   known member, blank text, an image of another format or whose bytes
//!   are not base64, a `toolUse` outside an assistant turn, a `toolResult`
//!   that answers no `toolUse` of the turn before, tool blocks without a
//!   `toolConfig`, and an `inferenceConfig` of the wrong types or out of
//!   range. `cachePoint` blocks (`type: "default"`, `ttl` `5m` or `1h`)
//!   in `system`, a message's content and `toolConfig.tools` become
//!   `cache_control` on the block before each, so the Anthropic
//!   simulator's prompt cache (and its rules: at most 4, no `1h` after a
//!   `5m`) serves Converse too.
//! - Answers: `output.message.content` with `toolUse` blocks (ids
//!   `tooluse_…`), `stopReason`, `usage`; the Anthropic simulator's refusal
//!   becomes a guardrail's: `stopReason: guardrail_intervened` and the
//!   guardrail's blocked message as the text (vercel's recorded
//!   `amazon-bedrock-guard-content-intervened.json`). Streamed: one
//!   event-stream message per event, named by `:event-type`, with the
//!   `p` padding Bedrock adds; the usage in `metadata`, after
//!   `messageStop`. Usage: `inputTokens` without the cache,
//!   `cacheReadInputTokens`, `cacheWriteInputTokens` and `cacheDetails`
//!   (per TTL, 1h first) when there are some.

use bytes::Bytes;
use serde_json::{Map, Value, json};
use understudy_wire::eventstream::{HeaderValue as EsValue, Message};

use super::Received;
use super::cache::converse::{cache_point, cache_points, with_cache_control};

/// What a guardrail says in place of the model's answer (its default
/// blocked message).
const GUARDRAIL_MESSAGE: &str = "Sorry, the model cannot answer this question.";

/// The body's members (smithy's `ConverseRequest`, `modelId` aside).
const MEMBERS: [&str; 12] = [
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "guardrailConfig",
    "additionalModelRequestFields",
    "additionalModelResponseFieldPaths",
    "promptVariables",
    "requestMetadata",
    "performanceConfig",
    "serviceTier",
    "outputConfig",
];

/// `Max_tokens` for the Anthropic simulator when the body sets none
/// (Converse's default is the model's maximum).
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Checks a Converse body; `Err` is the `ValidationException`'s message.
pub(super) fn check(body: &Value) -> Result<(), String> {
    let Some(body) = body.as_object() else {
        return Err("Malformed input request, please reformat your input and try again.".into());
    };
    if let Some(key) = body.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        return Err(format!(
            "Malformed input request: #: extraneous key [{key}] is not permitted, please reformat your input and try again."
        ));
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err("messages: a conversation needs at least one message".into());
    };
    let tools = tool_config(body.get("toolConfig"))?;
    conversation(messages, tools.is_some())?;
    if let Some(system) = body.get("system") {
        let ok = system.as_array().is_some_and(|blocks| {
            blocks.iter().all(|b| {
                b.as_object().is_some_and(|o| o.len() == 1)
                    && (text_ok(&b["text"]) || b.get("cachePoint").is_some())
            })
        });
        if !ok {
            return Err("system: each block is one `text`, not blank, or a `cachePoint`".into());
        }
        cache_points(system, "system")?;
    }
    if let Some(config) = body.get("inferenceConfig") {
        inference(config)?;
    }
    Ok(())
}

/// The tool names `toolConfig` declares (`None`: no `toolConfig`).
fn tool_config(config: Option<&Value>) -> Result<Option<Vec<&str>>, String> {
    let Some(config) = config else {
        return Ok(None);
    };
    let mut names = Vec::new();
    cache_points(&config["tools"], "toolConfig.tools")?;
    for (i, tool) in config["tools"].as_array().into_iter().flatten().enumerate() {
        if tool.get("cachePoint").is_some() {
            continue;
        }
        let spec = &tool["toolSpec"];
        let name = spec["name"].as_str().unwrap_or_default();
        if !id_ok(name) || !spec["inputSchema"]["json"].is_object() {
            return Err(format!(
                "toolConfig.tools.{i}: a toolSpec needs a name of [a-zA-Z0-9_-]{{1,64}} and inputSchema.json an object"
            ));
        }
        names.push(name);
    }
    if names.is_empty() {
        return Err("toolConfig.tools: Member must have length greater than or equal to 1".into());
    }
    if let Some(choice) = config.get("toolChoice") {
        let ok = match choice.as_object().map(|o| o.iter().collect::<Vec<_>>()) {
            Some(members) if members.len() == 1 => match members[0] {
                (k, v) if k == "auto" || k == "any" => v.as_object().is_some_and(Map::is_empty),
                (k, v) if k == "tool" => v["name"].as_str().is_some_and(|n| names.contains(&n)),
                _ => false,
            },
            _ => false,
        };
        if !ok {
            return Err(
                "toolConfig.toolChoice: one of auto {}, any {}, tool {name} naming a declared tool"
                    .into(),
            );
        }
    }
    Ok(Some(names))
}

/// The turns: user first, then strictly alternating, each block valid
/// where it stands.
fn conversation(messages: &[Value], tools: bool) -> Result<(), String> {
    if messages.is_empty() {
        return Err("messages: a conversation needs at least one message".into());
    }
    let mut previous_uses: Vec<&str> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if role != expected {
            return Err(if i == 0 {
                "A conversation must start with a user message. Try again with a conversation that starts with a user message.".into()
            } else {
                "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.".into()
            });
        }
        let Some(content) = m["content"].as_array().filter(|c| !c.is_empty()) else {
            return Err(format!(
                "messages.{i}.content: Member must have length greater than or equal to 1"
            ));
        };
        let mut uses = Vec::new();
        for (j, block) in content.iter().enumerate() {
            let at = format!("messages.{i}.content.{j}");
            let Some((member, value)) = block
                .as_object()
                .filter(|o| o.len() == 1)
                .and_then(|o| o.iter().next())
            else {
                return Err(format!("{at}: a content block is exactly one member"));
            };
            if (member == "toolUse" || member == "toolResult") && !tools {
                return Err("The toolConfig field must be defined when using toolUse and toolResult content blocks.".into());
            }
            match (member.as_str(), role) {
                ("cachePoint", _) => cache_point(value, &at)?,
                ("text", _) if text_ok(value) => {}
                ("text", _) => {
                    return Err(format!(
                        "The text field in the ContentBlock object at {at} is blank. Add text to the text field, and try again."
                    ));
                }
                ("image", _) => image(value, &at)?,
                ("toolUse", "assistant") => {
                    let id = value["toolUseId"].as_str().unwrap_or_default();
                    if !id_ok(id)
                        || !id_ok(value["name"].as_str().unwrap_or_default())
                        || !value["input"].is_object()
                    {
                        return Err(format!(
                            "{at}.toolUse: toolUseId and name of [a-zA-Z0-9_-]{{1,64}}, input an object"
                        ));
                    }
                    uses.push(id);
                }
                ("toolResult", "user") => tool_result(value, &previous_uses, &at)?,
                (member, role) => {
                    return Err(format!(
                        "{at}: a `{member}` block cannot be in a {role} message"
                    ));
                }
            }
        }
        previous_uses = uses;
    }
    Ok(())
}

fn tool_result(value: &Value, previous_uses: &[&str], at: &str) -> Result<(), String> {
    let id = value["toolUseId"].as_str().unwrap_or_default();
    if !previous_uses.contains(&id) {
        return Err(format!(
            "{at}.toolResult: the toolUseId `{id}` answers no toolUse block of the previous turn"
        ));
    }
    if let Some(status) = value.get("status") {
        if !matches!(status.as_str(), Some("success" | "error")) {
            return Err(format!(
                "{at}.toolResult.status: Member must satisfy enum value set: [success, error]"
            ));
        }
    }
    let Some(content) = value["content"].as_array().filter(|c| !c.is_empty()) else {
        return Err(format!(
            "{at}.toolResult.content: Member must have length greater than or equal to 1"
        ));
    };
    for (k, c) in content.iter().enumerate() {
        let ok = match c
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.iter().next())
        {
            Some((m, v)) if m == "text" => v.is_string(),
            Some((m, _)) if m == "json" => true,
            Some((m, v)) if m == "image" => image(v, at).is_ok(),
            _ => false,
        };
        if !ok {
            return Err(format!(
                "{at}.toolResult.content.{k}: one of text, json, image"
            ));
        }
    }
    Ok(())
}

fn image(value: &Value, at: &str) -> Result<(), String> {
    use base64::Engine as _;
    let format = value["format"].as_str().unwrap_or_default();
    if !["png", "jpeg", "gif", "webp"].contains(&format) {
        return Err(format!(
            "{at}.image.format: Member must satisfy enum value set: [png, jpeg, gif, webp]"
        ));
    }
    let bytes = value["source"]["bytes"].as_str().unwrap_or_default();
    if bytes.is_empty()
        || base64::engine::general_purpose::STANDARD
            .decode(bytes)
            .is_err()
    {
        return Err(format!(
            "{at}.image.source.bytes: Invalid base64-encoded blob"
        ));
    }
    Ok(())
}

/// `inferenceConfig`: its four members, of their types and ranges.
fn inference(config: &Value) -> Result<(), String> {
    let Some(config) = config.as_object() else {
        return Err("inferenceConfig: an object".into());
    };
    for (key, value) in config {
        let ok = match key.as_str() {
            "maxTokens" => value.as_u64().is_some_and(|n| n >= 1),
            "temperature" | "topP" => value.as_f64().is_some_and(|v| (0.0..=1.0).contains(&v)),
            "stopSequences" => value.as_array().is_some_and(|s| {
                s.len() <= 2500 && s.iter().all(|s| s.as_str().is_some_and(|s| !s.is_empty()))
            }),
            _ => false,
        };
        if !ok {
            return Err(format!(
                "1 validation error detected: Value at 'inferenceConfig.{key}' failed to satisfy constraint: wrong type, range or member"
            ));
        }
    }
    Ok(())
}

fn text_ok(text: &Value) -> bool {
    text.as_str().is_some_and(|t| !t.trim().is_empty())
}

/// A tool name or tool-use id: `[a-zA-Z0-9_-]{1,64}`.
fn id_ok(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The checked body as the Messages request it means, for the Anthropic
/// simulator.
pub(super) fn as_anthropic(req: &Received, body: &Value, model: &str, stream: bool) -> Received {
    let messages: Vec<Value> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let blocks = m["content"].as_array().map_or(&[][..], Vec::as_slice);
            json!({"role": m["role"], "content": with_cache_control(blocks, block)})
        })
        .collect();
    let config = &body["inferenceConfig"];
    let mut out = json!({
        "model": model,
        "messages": messages,
        "max_tokens": config["maxTokens"].as_u64().unwrap_or(DEFAULT_MAX_TOKENS),
    });
    if let Some(system) = body["system"].as_array() {
        let blocks = with_cache_control(system, |b| json!({"type": "text", "text": b["text"]}));
        out["system"] = Value::Array(blocks);
    }
    if let Some(t) = config.get("temperature") {
        out["temperature"] = t.clone();
    } else if let Some(p) = config.get("topP") {
        // Claude refuses both together; Converse's models do not.
        out["top_p"] = p.clone();
    }
    if let Some(stops) = config.get("stopSequences") {
        out["stop_sequences"] = stops.clone();
    }
    if let Some(tools) = body["toolConfig"]["tools"].as_array() {
        let tools = with_cache_control(tools, |t| {
            let spec = &t["toolSpec"];
            let mut tool =
                json!({"name": spec["name"], "input_schema": spec["inputSchema"]["json"]});
            if let Some(d) = spec.get("description") {
                tool["description"] = d.clone();
            }
            tool
        });
        out["tools"] = Value::Array(tools);
    }
    if let Some(choice) = body["toolConfig"].get("toolChoice") {
        out["tool_choice"] = match choice.get("tool") {
            Some(tool) => json!({"type": "tool", "name": tool["name"]}),
            None if choice.get("any").is_some() => json!({"type": "any"}),
            None => json!({"type": "auto"}),
        };
    }
    if stream {
        out["stream"] = Value::Bool(true);
    }
    let mut headers: Vec<(String, String)> =
        vec![("content-type".into(), "application/json".into())];
    headers.push(("x-api-key".into(), "bedrock-sim".into()));
    headers.push(("anthropic-version".into(), "2023-06-01".into()));
    Received {
        method: req.method.clone(),
        path: "/v1/messages".into(),
        headers,
        body: Bytes::from(out.to_string()),
        at: req.at,
        version: req.version,
        shared: req.shared.clone(),
        cached: Default::default(),
    }
}

/// One Converse content block as its Messages block.
fn block(b: &Value) -> Value {
    if let Some(text) = b.get("text") {
        return json!({"type": "text", "text": text});
    }
    if let Some(image) = b.get("image") {
        return json!({"type": "image", "source": {
            "type": "base64",
            "media_type": format!("image/{}", image["format"].as_str().unwrap_or("png")),
            "data": image["source"]["bytes"],
        }});
    }
    if let Some(u) = b.get("toolUse") {
        return json!({"type": "tool_use", "id": u["toolUseId"], "name": u["name"], "input": u["input"]});
    }
    let r = &b["toolResult"];
    let content: Vec<Value> = r["content"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| match (c.get("text"), c.get("json")) {
            (Some(text), _) => json!({"type": "text", "text": text}),
            (None, Some(doc)) => json!({"type": "text", "text": doc.to_string()}),
            (None, None) => block(c),
        })
        .collect();
    json!({"type": "tool_result", "tool_use_id": r["toolUseId"], "content": content, "is_error": r["status"] == "error"})
}

/// Converse's name for an Anthropic stop reason (a refusal is a
/// guardrail's).
fn stop_reason(anthropic: &str) -> &'static str {
    match anthropic {
        "tool_use" => "tool_use",
        "max_tokens" => "max_tokens",
        "stop_sequence" => "stop_sequence",
        "refusal" => "guardrail_intervened",
        _ => "end_turn",
    }
}

/// Bedrock's tool-use ids (`tooluse_…`) for the simulator's (`toolu_…`).
fn tool_use_id(id: &Value) -> Value {
    match id.as_str() {
        Some(id) => Value::String(match id.strip_prefix("toolu_") {
            Some(rest) => format!("tooluse_{rest}"),
            None => id.to_owned(),
        }),
        None => Value::Null,
    }
}

/// An Anthropic usage object as Converse's (AWS `TokenUsage`): both count
/// the cache apart from the input, Converse names its reads and writes
/// only when there are some, and its total counts everything.
fn usage(anthropic: &Value) -> Value {
    let count = |k: &str| anthropic[k].as_u64().unwrap_or(0);
    let (input, output) = (count("input_tokens"), count("output_tokens"));
    let read = count("cache_read_input_tokens");
    let write = count("cache_creation_input_tokens");
    let mut u = json!({"inputTokens": input, "outputTokens": output,
        "totalTokens": input + output + read + write});
    if read > 0 {
        u["cacheReadInputTokens"] = json!(read);
    }
    if write > 0 {
        u["cacheWriteInputTokens"] = json!(write);
        // Per TTL, 1h first (AWS `CacheDetail`).
        let creation = &anthropic["cache_creation"];
        let details: Vec<Value> = [
            ("1h", "ephemeral_1h_input_tokens"),
            ("5m", "ephemeral_5m_input_tokens"),
        ]
        .iter()
        .filter_map(|(ttl, k)| {
            let n = creation[*k].as_u64().unwrap_or(0);
            (n > 0).then(|| json!({"ttl": ttl, "inputTokens": n}))
        })
        .collect();
        u["cacheDetails"] = Value::Array(details);
    }
    u
}

/// An Anthropic answer's body as Converse's (the bytes as they were when
/// they are not an Anthropic message).
pub(super) fn answer(body: &[u8]) -> Bytes {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return Bytes::copy_from_slice(body);
    };
    if message["type"] != "message" {
        return Bytes::copy_from_slice(body);
    }
    let stop = message["stop_reason"].as_str().unwrap_or("end_turn");
    let refused = stop == "refusal";
    let content: Vec<Value> = if refused {
        vec![json!({"text": GUARDRAIL_MESSAGE})]
    } else {
        message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| match b["type"].as_str() {
                Some("text") => Some(json!({"text": b["text"]})),
                Some("tool_use") => Some(json!({"toolUse": {"toolUseId": tool_use_id(&b["id"]), "name": b["name"], "input": b["input"]}})),
                Some("thinking") => Some(json!({"reasoningContent": {"reasoningText": {"text": b["thinking"], "signature": b["signature"]}}})),
                _ => None,
            })
            .collect()
    };
    let mut out = json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason(stop),
        "usage": usage(&message["usage"]),
        "metrics": {"latencyMs": 42},
    });
    if refused {
        out["trace"] = json!({"guardrail": {"inputAssessment": {"sim": {"topicPolicy": {"topics": [
            {"name": "simulated", "type": "DENY", "action": "BLOCKED"}
        ]}}}}});
    }
    Bytes::from(out.to_string())
}

/// Turns the Anthropic simulator's stream events into ConverseStream's,
/// one SSE event at a time (it remembers the usage, which Converse sends
/// at the end).
#[derive(Default)]
pub(super) struct StreamFrames {
    /// The Anthropic usage so far: `message_start`'s, its counts replaced
    /// by each `message_delta`'s cumulative ones.
    usage: Value,
    /// The exception an error event becomes (`None`: by its type).
    exception: Option<String>,
}

impl StreamFrames {
    /// A stream whose error event becomes `exception` (`None`: the one
    /// its error type names).
    pub(super) fn new(exception: Option<String>) -> Self {
        Self {
            exception,
            ..Self::default()
        }
    }

    /// The messages for one Anthropic event's JSON.
    pub(super) fn frames(&mut self, data: &Value) -> Vec<Message> {
        let index = &data["index"];
        match data["type"].as_str().unwrap_or_default() {
            "message_start" => {
                self.usage = data["message"]["usage"].clone();
                vec![event("messageStart", json!({"role": "assistant"}))]
            }
            "content_block_start" if data["content_block"]["type"] == "tool_use" => {
                let b = &data["content_block"];
                vec![event(
                    "contentBlockStart",
                    json!({"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": tool_use_id(&b["id"]), "name": b["name"]}}}),
                )]
            }
            "content_block_delta" => {
                let d = &data["delta"];
                let delta = match d["type"].as_str().unwrap_or_default() {
                    "text_delta" => json!({"text": d["text"]}),
                    "input_json_delta" => json!({"toolUse": {"input": d["partial_json"]}}),
                    "thinking_delta" => json!({"reasoningContent": {"text": d["thinking"]}}),
                    "signature_delta" => json!({"reasoningContent": {"signature": d["signature"]}}),
                    _ => return Vec::new(),
                };
                vec![event(
                    "contentBlockDelta",
                    json!({"contentBlockIndex": index, "delta": delta}),
                )]
            }
            "content_block_stop" => vec![event(
                "contentBlockStop",
                json!({"contentBlockIndex": index}),
            )],
            "message_delta" => {
                if let (Some(known), Some(delta)) =
                    (self.usage.as_object_mut(), data["usage"].as_object())
                {
                    known.extend(delta.clone());
                }
                match data["delta"]["stop_reason"].as_str() {
                    Some(stop) => vec![event(
                        "messageStop",
                        json!({"stopReason": stop_reason(stop)}),
                    )],
                    None => Vec::new(),
                }
            }
            "message_stop" => vec![event(
                "metadata",
                json!({"usage": usage(&self.usage), "metrics": {"latencyMs": 42}}),
            )],
            "error" => {
                let kind = self.exception.clone().unwrap_or_else(|| {
                    match data["error"]["type"].as_str() {
                        Some("rate_limit_error") => "throttlingException",
                        Some("overloaded_error") => "serviceUnavailableException",
                        _ => "internalServerException",
                    }
                    .to_owned()
                });
                let message = data["error"]["message"].as_str().unwrap_or("error");
                vec![exception(&kind, message)]
            }
            _ => Vec::new(),
        }
    }
}

/// A ConverseStream event, padded as Bedrock pads them.
fn event(name: &str, mut payload: Value) -> Message {
    let string = |s: &str| EsValue::String(s.to_owned());
    let len = payload.to_string().len();
    payload["p"] =
        json!(&"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"[..(len % 40) + 1]);
    Message {
        headers: vec![
            (":event-type".into(), string(name)),
            (":content-type".into(), string("application/json")),
            (":message-type".into(), string("event")),
        ],
        payload: payload.to_string().into_bytes(),
    }
}

/// An exception message, as Bedrock sends one inside a 200 stream.
pub(super) fn exception(kind: &str, message: &str) -> Message {
    let string = |s: &str| EsValue::String(s.to_owned());
    Message {
        headers: vec![
            (":exception-type".into(), string(kind)),
            (":content-type".into(), string("application/json")),
            (":message-type".into(), string("exception")),
        ],
        payload: json!({ "message": message }).to_string().into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": [{"text": text}]})
    }

    fn with_tools(messages: Value) -> Value {
        json!({"messages": messages, "toolConfig": {"tools": [{"toolSpec": {"name": "w", "inputSchema": {"json": {"type": "object"}}}}]}})
    }

    #[test]
    fn bodies_bedrock_refuses_are_refused() {
        let call = json!({"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "w", "input": {}}}]});
        let result = |id: &str| json!({"role": "user", "content": [{"toolResult": {"toolUseId": id, "content": [{"text": "3"}]}}]});
        let cases: Vec<(&str, Value, Option<&str>)> = vec![
            ("plain", json!({"messages": [user("hi")]}), None),
            (
                "a tool loop",
                with_tools(json!([user("hi"), call, result("tooluse_1")])),
                None,
            ),
            (
                "the model in the body",
                json!({"modelId": "m", "messages": [user("hi")]}),
                Some("extraneous key [modelId]"),
            ),
            (
                "`model` too",
                json!({"model": "m", "messages": [user("hi")]}),
                Some("extraneous key [model]"),
            ),
            (
                "an unknown member",
                json!({"stream": true, "messages": [user("hi")]}),
                Some("extraneous key [stream]"),
            ),
            (
                "an assistant first",
                json!({"messages": [{"role": "assistant", "content": [{"text": "x"}]}]}),
                Some("must start with a user message"),
            ),
            (
                "two user turns",
                json!({"messages": [user("a"), user("b")]}),
                Some("must alternate"),
            ),
            (
                "a result of no call",
                with_tools(
                    json!([user("hi"), {"role": "assistant", "content": [{"text": "x"}]}, result("tooluse_9")]),
                ),
                Some("answers no toolUse"),
            ),
            (
                "tool blocks without toolConfig",
                json!({"messages": [user("hi"), call, result("tooluse_1")]}),
                Some("toolConfig field must be defined"),
            ),
            (
                "blank text",
                json!({"messages": [user(" ")]}),
                Some("is blank"),
            ),
            (
                "a block of two members",
                json!({"messages": [{"role": "user", "content": [{"text": "a", "image": {}}]}]}),
                Some("exactly one member"),
            ),
            (
                "a temperature as a string",
                json!({"messages": [user("hi")], "inferenceConfig": {"temperature": "0.5"}}),
                Some("inferenceConfig.temperature"),
            ),
            (
                "a temperature over 1",
                json!({"messages": [user("hi")], "inferenceConfig": {"temperature": 1.5}}),
                Some("inferenceConfig.temperature"),
            ),
            (
                "maxTokens 0",
                json!({"messages": [user("hi")], "inferenceConfig": {"maxTokens": 0}}),
                Some("inferenceConfig.maxTokens"),
            ),
            (
                "topK",
                json!({"messages": [user("hi")], "inferenceConfig": {"topK": 5}}),
                Some("inferenceConfig.topK"),
            ),
            (
                "a bmp",
                json!({"messages": [{"role": "user", "content": [{"image": {"format": "bmp", "source": {"bytes": "Qk0="}}}]}]}),
                Some("image.format"),
            ),
            (
                "cache points in system, messages and tools",
                json!({"system": [{"text": "s"}, {"cachePoint": {"type": "default", "ttl": "1h"}}],
                    "messages": [{"role": "user", "content": [{"text": "hi"}, {"cachePoint": {"type": "default"}}]}],
                    "toolConfig": {"tools": [{"toolSpec": {"name": "w", "inputSchema": {"json": {"type": "object"}}}}, {"cachePoint": {"type": "default"}}]}}),
                None,
            ),
            (
                "a cache point of another type",
                json!({"messages": [{"role": "user", "content": [{"text": "hi"}, {"cachePoint": {"type": "ephemeral"}}]}]}),
                Some("cachePoint.type"),
            ),
            (
                "a cache point's ttl of ten minutes",
                json!({"system": [{"text": "s"}, {"cachePoint": {"type": "default", "ttl": "10m"}}], "messages": [user("hi")]}),
                Some("system.1.cachePoint.ttl"),
            ),
            (
                "bytes not base64",
                json!({"messages": [{"role": "user", "content": [{"image": {"format": "png", "source": {"bytes": "%%%"}}}]}]}),
                Some("base64"),
            ),
        ];
        for (what, body, refused) in cases {
            match (check(&body), refused) {
                (Ok(()), None) => {}
                (Err(message), Some(expected)) => {
                    assert!(message.contains(expected), "{what}: {message}");
                }
                (got, _) => panic!("{what}: {got:?}"),
            }
        }
    }

    #[test]
    fn cache_points_become_cache_control_on_the_block_before() {
        let body = json!({
            "system": [{"text": "s"}, {"cachePoint": {"type": "default", "ttl": "1h"}}],
            "messages": [{"role": "user", "content": [{"cachePoint": {"type": "default"}}, {"text": "hi"}, {"cachePoint": {"type": "default"}}]}],
            "toolConfig": {"tools": [{"toolSpec": {"name": "w", "inputSchema": {"json": {"type": "object"}}}}, {"cachePoint": {"type": "default"}}]}
        });
        let converse = Received {
            method: "POST".into(),
            path: "/model/m/converse".into(),
            headers: Vec::new(),
            body: Bytes::new(),
            at: std::time::Instant::now(),
            version: hyper::Version::HTTP_11,
            shared: None,
            cached: Default::default(),
        };
        let req = as_anthropic(&converse, &body, "m", false).json();
        assert_eq!(
            req["system"],
            json!([{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}])
        );
        // A point with nothing before it marks nothing.
        assert_eq!(
            req["messages"][0]["content"],
            json!([{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(
            req["tools"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert_eq!(req["tools"].as_array().unwrap().len(), 1);
    }
}
