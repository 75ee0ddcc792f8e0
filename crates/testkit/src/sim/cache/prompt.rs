//! A request's prompt as a prompt cache sees it: its blocks in the order
//! the provider renders them, each with a content hash and a token count,
//! and where the request put its cache breakpoints.
//!
//! The order: Anthropic's Messages (and Claude on Bedrock and Vertex)
//! `tools` → `system` → `messages`, one block per tool, system block and
//! content block; OpenAI's Chat Completions the tools, then one block per
//! message; the Responses API `instructions`, the tools, then one block
//! per input item; Gemini `systemInstruction`, the tools, then one block
//! per content.
//!
//! **Token counts** are the simulators' one estimate, deterministic and
//! near a bill: a text counts its words (whitespace-separated; so every
//! answer's input tokens for a plain text prompt are its words, as the
//! simulators always counted them), anything structured (a tool's
//! definition, a tool call, an image, a thinking block) a quarter of its
//! JSON's bytes, rounded up.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// A cache entry's lifetime class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ttl {
    /// Anthropic's `5m` (the default); OpenAI's in-memory retention;
    /// Gemini's implicit cache.
    Short,
    /// Anthropic's `1h`; OpenAI's `prompt_cache_retention: "24h"`.
    Long,
}

/// One block of a prompt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    /// Its content (and where it stands: section, role, first of its
    /// message), without any cache marker.
    pub hash: u64,
    pub tokens: u64,
}

/// A prompt, ready for a cache.
#[derive(Debug, Default)]
pub(crate) struct Prompt {
    pub model: String,
    pub blocks: Vec<Block>,
    /// Explicit breakpoints (Anthropic): the block each ends on, its TTL.
    pub breakpoints: Vec<(usize, Ttl)>,
    /// What else joins the cache's routing hash (OpenAI's
    /// `prompt_cache_key`).
    pub routing: Option<String>,
    /// The TTL class of automatic entries (OpenAI's retention).
    pub retention: Option<Ttl>,
}

impl Prompt {
    /// Every block's tokens together: the prompt's input tokens.
    pub(crate) fn tokens(&self) -> u64 {
        self.blocks.iter().map(|b| b.tokens).sum()
    }

    fn push(&mut self, place: &str, content: &Value, tokens: u64) -> usize {
        let mut h = DefaultHasher::new();
        place.hash(&mut h);
        without_marker(content).to_string().hash(&mut h);
        self.blocks.push(Block {
            hash: h.finish(),
            tokens,
        });
        self.blocks.len() - 1
    }

    /// Pushes a block and its `cache_control` breakpoint, if it has one.
    fn push_marked(&mut self, place: &str, block: &Value, tokens: u64) {
        let at = self.push(place, block, tokens);
        if let Some(ttl) = marker(&block["cache_control"]) {
            self.breakpoints.push((at, ttl));
        }
    }
}

/// A Messages API body (`/v1/messages`).
pub(crate) fn messages(body: &Value) -> Prompt {
    let mut p = Prompt {
        model: body["model"].as_str().unwrap_or_default().to_owned(),
        ..Prompt::default()
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        p.push_marked("tool", tool, quarter_bytes(&without_marker(tool)));
    }
    match &body["system"] {
        Value::String(text) => {
            p.push("system", &body["system"], words(text));
        }
        Value::Array(blocks) => {
            for b in blocks {
                p.push_marked("system", b, block_tokens(b));
            }
        }
        _ => {}
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or_default();
        match &m["content"] {
            Value::String(text) => {
                p.push(&format!("{role}:start"), &m["content"], words(text));
            }
            Value::Array(blocks) => {
                for (j, b) in blocks.iter().enumerate() {
                    let place = if j == 0 { "start" } else { "next" };
                    p.push_marked(&format!("{role}:{place}"), b, block_tokens(b));
                }
            }
            _ => {}
        }
    }
    // Automatic caching: the top-level marker is a breakpoint on the last
    // cacheable block, moving forward as the conversation grows.
    if let Some(ttl) = marker(&body["cache_control"]) {
        let last = p.blocks.len().checked_sub(1);
        if let Some(last) = last.filter(|l| !p.breakpoints.iter().any(|(at, _)| at == l)) {
            p.breakpoints.push((last, ttl));
        }
    }
    p
}

/// A Chat Completions body.
pub(crate) fn chat(body: &Value) -> Prompt {
    let mut p = openai_prompt(body);
    for tool in body["tools"].as_array().into_iter().flatten() {
        p.push("tool", tool, quarter_bytes(tool));
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        let mut tokens = text_words(&m["content"]);
        if let Some(calls) = m.get("tool_calls") {
            tokens += quarter_bytes(calls);
        }
        p.push("message", m, tokens);
    }
    p
}

/// A Responses API body.
pub(crate) fn responses(body: &Value) -> Prompt {
    let mut p = openai_prompt(body);
    if let Some(text) = body["instructions"].as_str() {
        p.push("instructions", &body["instructions"], words(text));
    }
    for tool in body["tools"].as_array().into_iter().flatten() {
        p.push("tool", tool, quarter_bytes(tool));
    }
    match &body["input"] {
        Value::String(text) => {
            p.push("input", &body["input"], words(text));
        }
        Value::Array(items) => {
            for item in items {
                let tokens = match item["type"].as_str() {
                    Some("message") | None => text_words(&item["content"]),
                    Some("function_call_output") => text_words(&item["output"]),
                    _ => quarter_bytes(item),
                };
                p.push("item", item, tokens);
            }
        }
        _ => {}
    }
    p
}

/// A `generateContent` body; `model` from the path.
pub(crate) fn gemini(body: &Value, model: &str) -> Prompt {
    let mut p = Prompt {
        model: model.to_owned(),
        ..Prompt::default()
    };
    let system = &body["systemInstruction"];
    if !system.is_null() {
        p.push("system", system, parts_tokens(&system["parts"]));
    }
    for tool in body["tools"].as_array().into_iter().flatten() {
        p.push("tool", tool, quarter_bytes(tool));
    }
    for c in body["contents"].as_array().into_iter().flatten() {
        p.push("content", c, parts_tokens(&c["parts"]));
    }
    p
}

/// What OpenAI's two APIs share: the model, `prompt_cache_key`, retention.
fn openai_prompt(body: &Value) -> Prompt {
    Prompt {
        model: body["model"].as_str().unwrap_or_default().to_owned(),
        routing: body["prompt_cache_key"].as_str().map(str::to_owned),
        retention: Some(match body["prompt_cache_retention"].as_str() {
            Some("24h") => Ttl::Long,
            _ => Ttl::Short,
        }),
        ..Prompt::default()
    }
}

/// A `cache_control` marker's TTL (`None`: no marker). A TTL other than
/// `1h` is the default's (the request rules refuse the wrong ones).
pub(crate) fn marker(cache_control: &Value) -> Option<Ttl> {
    if !cache_control.is_object() {
        return None;
    }
    Some(match cache_control["ttl"].as_str() {
        Some("1h") => Ttl::Long,
        _ => Ttl::Short,
    })
}

/// A block without its `cache_control` (markers are not content).
fn without_marker(block: &Value) -> Value {
    match block {
        Value::Object(o) if o.contains_key("cache_control") => {
            let mut o = o.clone();
            o.remove("cache_control");
            Value::Object(o)
        }
        other => other.clone(),
    }
}

/// An Anthropic content block's tokens: a text's words, a tool result's
/// content, anything else a quarter of its bytes.
fn block_tokens(block: &Value) -> u64 {
    match block["type"].as_str() {
        Some("text") => words(block["text"].as_str().unwrap_or_default()),
        Some("tool_result") => match &block["content"] {
            Value::String(text) => words(text),
            Value::Array(inner) => inner.iter().map(block_tokens).sum(),
            _ => 0,
        },
        _ => quarter_bytes(&without_marker(block)),
    }
}

/// An OpenAI content's words: a string, or the text of its parts (the
/// other parts a quarter of their bytes).
fn text_words(content: &Value) -> u64 {
    match content {
        Value::String(text) => words(text),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p["text"].as_str() {
                Some(text) => words(text),
                None => quarter_bytes(p),
            })
            .sum(),
        _ => 0,
    }
}

/// Gemini parts: a text's words, any other part a quarter of its bytes.
fn parts_tokens(parts: &Value) -> u64 {
    parts
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| match p["text"].as_str() {
            Some(text) => words(text),
            None => quarter_bytes(p),
        })
        .sum()
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn quarter_bytes(v: &Value) -> u64 {
    (v.to_string().len() as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn anthropic_blocks_come_in_render_order_with_their_breakpoints() {
        let body = json!({
            "model": "claude-sonnet-4-5",
            "tools": [{"name": "t", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "one two three"}]}],
            "cache_control": {"type": "ephemeral"}
        });
        let p = messages(&body);
        assert_eq!(p.blocks.len(), 3);
        assert_eq!(p.blocks[1].tokens, 2);
        assert_eq!(p.blocks[2].tokens, 3);
        assert_eq!(
            p.breakpoints,
            vec![(0, Ttl::Long), (1, Ttl::Short), (2, Ttl::Short)]
        );
        // A marker is not content: the same block without it hashes alike.
        let mut bare = body.clone();
        bare["system"][0]
            .as_object_mut()
            .unwrap()
            .remove("cache_control");
        assert_eq!(messages(&bare).blocks[1].hash, p.blocks[1].hash);
    }

    #[test]
    fn a_plain_text_prompt_counts_its_words() {
        let chat_body = json!({"model": "m", "messages": [{"role": "user", "content": "What is the capital of France?"}]});
        assert_eq!(chat(&chat_body).tokens(), 6);
        let gemini_body =
            json!({"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]});
        assert_eq!(gemini(&gemini_body, "g").tokens(), 2);
        let responses_body = json!({"model": "m", "input": "hello there you"});
        assert_eq!(responses(&responses_body).tokens(), 3);
    }
}
