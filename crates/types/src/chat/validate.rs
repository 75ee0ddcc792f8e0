//! What a neutral request must hold before any provider sees it:
//! [`ChatRequest::validate`] and the checks it runs (tools, tool turns,
//! images, the output schema, sampling ranges, limits).

use super::{ChatRequest, MAX_TOKENS_LIMIT, Message, Part, ResponseFormat, Role, ToolChoice};
use crate::error::Error;

// === impl ChatRequest ===

impl ChatRequest {
    /// Tools, tool turns, images, the output schema and sampling ranges
    /// that no provider could make sense of (checked in that order).
    fn validate_tools(&self) -> Result<(), Error> {
        self.validate_declared_tools()?;
        self.validate_messages()?;
        self.validate_format_and_sampling()
    }

    /// The declared tools (names, uniqueness, parameter schemas) and the
    /// tool choice that names them.
    fn validate_declared_tools(&self) -> Result<(), Error> {
        let mut names = std::collections::HashSet::new();
        for t in &self.tools {
            let ok = !t.name.is_empty()
                && t.name.len() <= 64
                && t.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !ok {
                return Err(Error::invalid(
                    "tools",
                    format!(
                        "tool name `{}` must be 1 to 64 letters, digits, `_` or `-`",
                        t.name
                    ),
                ));
            }
            if !names.insert(t.name.as_str()) {
                return Err(Error::invalid(
                    "tools",
                    format!("tool `{}` is declared twice", t.name),
                ));
            }
            if t.parameters.as_ref().is_some_and(|p| !p.is_object()) {
                return Err(Error::invalid(
                    "tools",
                    format!(
                        "the parameters of tool `{}` must be a JSON Schema object",
                        t.name
                    ),
                ));
            }
        }
        if let Some(ToolChoice::Function(name)) = &self.tool_choice {
            if !names.contains(name.as_str()) {
                return Err(Error::invalid(
                    "tool_choice",
                    format!("tool_choice names `{name}`, which is not among the tools"),
                ));
            }
        }
        if matches!(self.tool_choice, Some(ToolChoice::Required)) && self.tools.is_empty() {
            return Err(Error::invalid(
                "tool_choice",
                "tool_choice `required` needs at least one tool",
            ));
        }
        Ok(())
    }

    /// The messages: tool calls only from the assistant, with an id, a name
    /// and object arguments; tool answers to an earlier call; image URLs.
    fn validate_messages(&self) -> Result<(), Error> {
        let mut called = std::collections::HashSet::new();
        for m in &self.messages {
            for call in &m.tool_calls {
                if m.role != Role::Assistant {
                    return Err(Error::invalid(
                        "messages",
                        "only assistant messages carry tool_calls",
                    ));
                }
                if call.id.is_empty() || call.name.is_empty() {
                    return Err(Error::invalid(
                        "messages",
                        "every tool call needs an id and a function name",
                    ));
                }
                // Every protocol carries arguments as an object: anything
                // else is the client's mistake on every target alike.
                let arguments = call.arguments.trim();
                if !arguments.is_empty()
                    && !matches!(
                        serde_json::from_str::<serde_json::Value>(arguments),
                        Ok(serde_json::Value::Object(_) | serde_json::Value::Null)
                    )
                {
                    return Err(Error::invalid(
                        "messages",
                        format!(
                            "the arguments of tool call `{}` are not a JSON object",
                            call.id
                        ),
                    ));
                }
                called.insert(call.id.as_str());
            }
            match (&m.role, &m.tool_call_id) {
                (Role::Tool, None) => {
                    return Err(Error::invalid(
                        "messages",
                        "a tool message needs the tool_call_id it answers",
                    ));
                }
                (Role::Tool, Some(id)) if !called.contains(id.as_str()) => {
                    return Err(Error::invalid(
                        "messages",
                        format!("tool_call_id `{id}` answers no earlier assistant tool call"),
                    ));
                }
                _ => {}
            }
            for p in &m.content {
                if let Part::Image { url, .. } = p {
                    let inline = Part::is_data_url(url);
                    if inline && Part::inline_image(url).is_none() {
                        return Err(Error::invalid(
                            "messages",
                            "an image `data:` URL must be `data:image/<type>;base64,<data>` \
                             with base64 data of a possible length",
                        ));
                    }
                    if !inline && !url.starts_with("https://") {
                        return Err(Error::invalid(
                            "messages",
                            "an image URL must be `https:` or a `data:` URL",
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The structured-output schema and the sampling parameters' ranges.
    fn validate_format_and_sampling(&self) -> Result<(), Error> {
        if let Some(ResponseFormat::JsonSchema { schema, .. }) = &self.response_format {
            if !schema.is_object() {
                return Err(Error::invalid(
                    "response_format",
                    "json_schema.schema must be a JSON Schema object",
                ));
            }
        }
        for (name, v) in [
            ("top_p", self.top_p.map(|v| (v, 0.0, 1.0))),
            (
                "presence_penalty",
                self.presence_penalty.map(|v| (v, -2.0, 2.0)),
            ),
            (
                "frequency_penalty",
                self.frequency_penalty.map(|v| (v, -2.0, 2.0)),
            ),
        ] {
            if let Some((v, lo, hi)) = v {
                if !v.is_finite() || !(lo..=hi).contains(&v) {
                    return Err(Error::invalid(
                        name,
                        format!("{name} must be between {lo} and {hi}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Rejects input that no provider could serve, before any provider is
    /// called (input invalid for every provider never costs an attempt).
    pub fn validate(&self) -> Result<(), Error> {
        if self.native.is_some() && self.native_only.is_some() {
            // Only targets of the client's own protocol can serve it, and
            // they get the body as sent and judge it: the neutral form,
            // with what it could not carry left out, is never sent.
            return Ok(());
        }
        if self.messages.is_empty() {
            return Err(Error::invalid(
                "messages",
                "at least one message is required",
            ));
        }
        if self.messages.iter().all(Message::is_empty) {
            return Err(Error::invalid("messages", "every message is empty"));
        }
        self.validate_tools()?;
        if let Some(t) = self.temperature {
            if !t.is_finite() || !(0.0..=2.0).contains(&t) {
                return Err(Error::invalid(
                    "temperature",
                    "temperature must be between 0 and 2",
                ));
            }
        }
        if let Some(n) = self.max_tokens {
            if n == 0 || n > MAX_TOKENS_LIMIT {
                return Err(Error::invalid(
                    "max_tokens",
                    format!("max_tokens must be between 1 and {MAX_TOKENS_LIMIT}"),
                ));
            }
        }
        if self.stop.len() > 4 {
            return Err(Error::invalid(
                "stop",
                "at most 4 stop sequences are accepted",
            ));
        }
        Ok(())
    }
}
