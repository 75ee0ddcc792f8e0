//! What a sampled request's spans need beyond its event, gathered on the
//! request's way (and only for a sampled request: a plain one carries a
//! `None`): the refusal policy in force, the targets passed over and why,
//! the serving answer's id and finish reason, and — only where the operator
//! opted in (`capture_content`) — the messages, in the GenAI conventions'
//! JSON forms (`gen_ai.input.messages`, `gen_ai.system_instructions`,
//! `gen_ai.output.messages`).

use serde_json::{Value, json};
use understudy_types::chat::{ChatRequest, FinishReason, Message, Part, Role, ToolCall};

/// A sampled request's notes for its spans.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceNotes {
    /// The refusal policy the request ran under.
    pub refusal_policy: &'static str,
    /// Targets passed over, in order.
    pub skips: Vec<Skip>,
    /// The serving answer's id, as its provider named it.
    pub response_id: Option<String>,
    /// Why the serving answer ended.
    pub finish_reason: Option<FinishReason>,
    /// Message content (`capture_content = true` only).
    pub content: Option<Content>,
}

/// A target the request passed over without calling it.
#[derive(Debug, Clone, PartialEq)]
pub struct Skip {
    pub provider: String,
    pub model: String,
    /// Its breaker is open (it was left out of the plan, or turned away
    /// when its turn came), every key of its pool is out, its credentials
    /// cannot be had within the bound a request waits for them, or its
    /// actor is gone.
    pub reason: understudy_policy::plan::Unavailable,
    /// When, in milliseconds from the engine's start of the request.
    pub at_ms: f64,
}

/// Message content as the GenAI conventions write it (JSON text).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Content {
    /// `gen_ai.input.messages`: the conversation the client sent (its
    /// latest messages, within [`INPUT_LIMIT`]).
    pub input: String,
    /// How many of the earliest messages were left out of `input`.
    pub omitted: usize,
    /// `gen_ai.system_instructions`, when the request has a system prompt.
    pub system: Option<String>,
    /// The softened retry's system instructions, when one was made.
    pub softened_system: Option<String>,
    /// `gen_ai.output.messages`: the answer that served.
    pub output: Option<String>,
}

/// The most bytes of one text part kept in a span; the rest is cut (at a
/// character boundary) and marked, so a long conversation cannot make a
/// span a collector refuses.
pub const PART_LIMIT: usize = 16 * 1024;

/// The most bytes of `gen_ai.input.messages`: a long conversation keeps
/// its latest messages (a batch of spans must stay well under a
/// collector's limit, 4 MiB for the OpenTelemetry Collector's gRPC).
pub const INPUT_LIMIT: usize = 64 * 1024;

// === impl Content ===

impl Content {
    /// The request's content.
    pub fn of_request(chat: &ChatRequest) -> Self {
        // The latest messages that fit, in order.
        let mut kept = Vec::new();
        let mut size = 2;
        for m in chat.messages.iter().rev() {
            let text = message(m).to_string();
            if size + text.len() + 1 > INPUT_LIMIT && !kept.is_empty() {
                break;
            }
            size += text.len() + 1;
            kept.push(text);
        }
        kept.reverse();
        Self {
            input: format!("[{}]", kept.join(",")),
            omitted: chat.messages.len() - kept.len(),
            system: chat.system.as_deref().map(instructions),
            softened_system: None,
            output: None,
        }
    }

    /// Roughly how many bytes the content adds to its spans.
    pub fn size(&self) -> usize {
        [&self.system, &self.softened_system, &self.output]
            .into_iter()
            .flatten()
            .map(String::len)
            .sum::<usize>()
            + self.input.len()
    }
}

/// `gen_ai.system_instructions` of a system prompt.
pub fn instructions(system: &str) -> String {
    json!([{"type": "text", "content": bounded(system)}]).to_string()
}

/// `gen_ai.output.messages` of an answer: its text and tool calls.
pub fn output(text: &str, tool_calls: &[ToolCall], finish: &FinishReason) -> String {
    let mut parts = Vec::with_capacity(tool_calls.len() + 1);
    if !text.is_empty() {
        parts.push(json!({"type": "text", "content": bounded(text)}));
    }
    parts.extend(tool_calls.iter().map(tool_call));
    json!([{"role": "assistant", "parts": parts, "finish_reason": finish_reason(finish)}])
        .to_string()
}

/// A finish reason as the conventions name it.
pub fn finish_reason(f: &FinishReason) -> &str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_call",
        FinishReason::Other(other) => other,
    }
}

fn message(m: &Message) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
        Role::System => "system",
    };
    let mut parts: Vec<Value> = Vec::with_capacity(m.content.len() + m.tool_calls.len());
    for p in &m.content {
        parts.push(match (p, &m.tool_call_id) {
            (Part::Text { text }, Some(id)) => {
                json!({"type": "tool_call_response", "id": id, "response": bounded(text)})
            }
            (Part::Text { text }, None) => json!({"type": "text", "content": bounded(text)}),
            (Part::Image { url, .. }, _) => image(url),
        });
    }
    parts.extend(m.tool_calls.iter().map(tool_call));
    json!({"role": role, "parts": parts})
}

fn tool_call(c: &ToolCall) -> Value {
    // The arguments as the object they are, else (or when too long) as
    // the text, cut.
    let arguments = match serde_json::from_str::<Value>(&c.arguments) {
        Ok(v) if c.arguments.len() <= PART_LIMIT => v,
        _ => Value::String(bounded(&c.arguments)),
    };
    json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": arguments})
}

/// An image: its URL, or for a `data:` URL only its media type (the bytes
/// are not text a trace should hold).
fn image(url: &str) -> Value {
    match url.strip_prefix("data:") {
        Some(rest) => {
            let mime = rest.split([';', ',']).next().unwrap_or_default();
            json!({"type": "blob", "modality": "image", "mime_type": mime, "content": "(omitted)"})
        }
        None => json!({"type": "uri", "modality": "image", "uri": bounded(url)}),
    }
}

/// `text`, cut to [`PART_LIMIT`] bytes.
fn bounded(text: &str) -> String {
    if text.len() <= PART_LIMIT {
        return text.to_owned();
    }
    let mut end = PART_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…(cut, {} bytes in all)", &text[..end], text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_in_the_conventions_forms() {
        let chat = ChatRequest {
            system: Some("be brief".into()),
            messages: vec![
                Message::user("hi"),
                Message {
                    role: Role::Assistant,
                    content: Vec::new(),
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    }],
                    tool_call_id: None,
                },
                Message {
                    role: Role::Tool,
                    content: vec![Part::Text {
                        text: "sunny".into(),
                    }],
                    tool_calls: Vec::new(),
                    tool_call_id: Some("call_1".into()),
                },
                Message {
                    role: Role::User,
                    content: vec![Part::Image {
                        url: "data:image/png;base64,AAAA".into(),
                        detail: None,
                    }],
                    tool_calls: Vec::new(),
                    tool_call_id: None,
                },
            ],
            ..ChatRequest::default()
        };
        let c = Content::of_request(&chat);
        let input: Value = serde_json::from_str(&c.input).unwrap();
        assert_eq!(
            input,
            json!([
                {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1",
                    "name": "weather", "arguments": {"city": "Paris"}}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1",
                    "response": "sunny"}]},
                {"role": "user", "parts": [{"type": "blob", "modality": "image",
                    "mime_type": "image/png", "content": "(omitted)"}]},
            ])
        );
        assert_eq!(
            c.system.as_deref(),
            Some(r#"[{"content":"be brief","type":"text"}]"#)
        );
        let out: Value = serde_json::from_str(&output("Hello", &[], &FinishReason::Stop)).unwrap();
        assert_eq!(
            out,
            json!([{"role": "assistant", "parts": [{"type": "text", "content": "Hello"}],
                    "finish_reason": "stop"}])
        );
    }

    #[test]
    fn a_long_conversation_keeps_its_latest_messages() {
        let chat = ChatRequest {
            messages: (0..40)
                .map(|i| Message::user(format!("{i}:{}", "x".repeat(8 * 1024))))
                .collect(),
            ..ChatRequest::default()
        };
        let c = Content::of_request(&chat);
        assert!(c.input.len() <= INPUT_LIMIT, "{}", c.input.len());
        let input: Value = serde_json::from_str(&c.input).unwrap();
        let kept = input.as_array().unwrap();
        assert_eq!(kept.len() + c.omitted, 40);
        assert!(c.omitted > 0);
        let last = kept.last().unwrap()["parts"][0]["content"]
            .as_str()
            .unwrap();
        assert!(last.starts_with("39:"), "the latest message is kept");
        // Tool arguments too long are cut as text.
        let call = ToolCall {
            id: "c".into(),
            name: "write".into(),
            arguments: serde_json::json!({"body": "y".repeat(PART_LIMIT)}).to_string(),
        };
        let out: Value =
            serde_json::from_str(&output("", &[call], &FinishReason::ToolCalls)).unwrap();
        let args = out[0]["parts"][0]["arguments"].as_str().unwrap();
        assert!(args.len() < PART_LIMIT + 64, "{}", args.len());
    }

    #[test]
    fn long_parts_are_cut_at_a_character() {
        let long = "é".repeat(PART_LIMIT);
        let cut = bounded(&long);
        assert!(cut.len() < long.len());
        assert!(cut.ends_with(&format!("(cut, {} bytes in all)", long.len())));
    }
}
