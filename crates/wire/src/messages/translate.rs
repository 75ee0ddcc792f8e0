//! [`MessagesRequest`] onto the neutral [`ChatRequest`], for targets of
//! other protocols: the checks every protocol needs, the system prompt,
//! each turn's blocks sorted into neutral messages, `output_config.format`,
//! tools and `tool_choice`. What only Anthropic can take is noted in
//! `native_only` (and, for what needs the operator's word, `native_gated`:
//! server tools that fetch URLs or run code, MCP, files, skills) rather
//! than refused. Thinking settings and blocks are dropped (no other
//! protocol can verify a signature, and a thinking block is never sent as
//! text), `cache_control` markers and `top_k` too; unknown fields are
//! ignored (SDKs and Claude Code send many).

use serde_json::Value;
use understudy_types::passthrough::{Gated, GatedSet};
use understudy_types::{
    ChatRequest, Message, Part, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
};

use super::client::{Block, ImageSource, MessageIn, MessagesRequest, ResultBlock, TextOrBlocks};
use crate::Invalid;

// === impl MessagesRequest ===

impl MessagesRequest {
    /// The neutral request, for targets of other protocols. `max_tokens`
    /// is required, as Anthropic requires it; the system blocks are joined
    /// with blank lines. What the neutral types cannot carry (a content
    /// block, tool or role only Anthropic knows) does not refuse the
    /// request: Anthropic targets get the body as sent, and the request's
    /// `native_only` names what the others lack (each is then an
    /// `unsupported` attempt, and a route with no Anthropic target a 400
    /// that says so per target).
    pub fn take_chat(&mut self) -> Result<ChatRequest, Invalid> {
        let max_tokens = self.check()?;
        let mut foreign = Foreign::default();
        let mut gated = self.take_gated(&mut foreign);
        let system = self.take_system()?;
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in std::mem::take(&mut self.messages).into_iter().enumerate() {
            translate_message(i, m, &mut messages, &mut foreign)?;
        }
        let mut chat = ChatRequest {
            system,
            messages,
            temperature: self.temperature,
            max_tokens: Some(max_tokens),
            stop: self.stop_sequences.take().unwrap_or_default(),
            top_p: self.top_p,
            user: self.metadata.take().and_then(|m| m.user_id),
            response_format: self.take_format()?,
            ..ChatRequest::default()
        };
        chat.tools = self.take_tools(&mut foreign, &mut gated);
        self.take_tool_choice(&mut chat, &mut foreign)?;
        chat.native_only = foreign.0;
        chat.native_gated = gated;
        // (With `native_only`, what is left may not stand on its own — a
        // request of documents only — and is never sent: Anthropic judges
        // the body as sent. `native` is set by the caller, so the check is
        // made here as if it were.)
        if chat.native_only.is_none() {
            chat.validate().map_err(|e| match e {
                understudy_types::Error::InvalidRequest { field, message } => {
                    Invalid::new(field, message)
                }
                other => Invalid {
                    field: None,
                    message: other.to_string(),
                },
            })?;
        }
        Ok(chat)
    }

    /// What every protocol would refuse: no `model`, no `max_tokens`
    /// (returned: the Messages API has no default), a `temperature` out of
    /// Anthropic's range.
    fn check(&self) -> Result<u32, Invalid> {
        if self.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
            return Err(Invalid::new("model", "model is required"));
        }
        let Some(max_tokens) = self.max_tokens else {
            return Err(Invalid::new(
                "max_tokens",
                "max_tokens is required (the Messages API has no default)",
            ));
        };
        if let Some(t) = self.temperature {
            if !t.is_finite() || !(0.0..=1.0).contains(&t) {
                return Err(Invalid::new(
                    "temperature",
                    "temperature must be between 0 and 1",
                ));
            }
        }
        Ok(max_tokens)
    }

    /// MCP servers and a code-execution container: the provider would call
    /// or run them, so only Anthropic can take them, and only with the
    /// operator's permission.
    fn take_gated(&mut self, foreign: &mut Foreign) -> GatedSet {
        let mut gated = GatedSet::NONE;
        if self.mcp_servers.take().is_some_and(|v| !v.is_null()) {
            foreign.note("MCP servers");
            gated.insert(Gated::Mcp);
        }
        if self.container.take().is_some_and(|v| !v.is_null()) {
            foreign.note("code execution containers");
            gated.insert(Gated::CodeExecution);
        }
        gated
    }

    /// The custom tools as neutral tools; server tools are left out and
    /// noted (with their gate, where they have one).
    fn take_tools(&mut self, foreign: &mut Foreign, gated: &mut GatedSet) -> Vec<Tool> {
        let mut tools = Vec::new();
        for t in self.tools.take().into_iter().flatten() {
            if let Some(kind) = t.kind.as_deref().filter(|k| *k != "custom") {
                // A server tool (web search, code execution…) runs at
                // Anthropic; no other protocol has it, and those that
                // fetch URLs or run code need the operator's permission.
                foreign.note("Anthropic's server tools");
                if let Some(g) = super::gated::of_tool(kind) {
                    gated.insert(g);
                }
                continue;
            }
            tools.push(Tool {
                name: t.name,
                description: t.description,
                parameters: t.input_schema,
                strict: t.strict,
            });
        }
        tools
    }

    /// `tool_choice` onto `chat` (`any` is the neutral `Required`), and
    /// `disable_parallel_tool_use` as `parallel_tool_calls: false`.
    fn take_tool_choice(
        &mut self,
        chat: &mut ChatRequest,
        foreign: &mut Foreign,
    ) -> Result<(), Invalid> {
        let Some(choice) = self.tool_choice.take() else {
            return Ok(());
        };
        chat.tool_choice = match choice.kind.as_str() {
            "auto" => Some(ToolChoice::Auto),
            "any" => Some(ToolChoice::Required),
            "none" => Some(ToolChoice::None),
            "tool" => Some(ToolChoice::Function(choice.name.ok_or_else(|| {
                Invalid::new("tool_choice.name", "tool_choice `tool` needs a `name`")
            })?)),
            _ => {
                foreign.note("a tool_choice type only Anthropic knows");
                None
            }
        };
        if choice.disable_parallel_tool_use {
            chat.parallel_tool_calls = Some(false);
        }
        Ok(())
    }

    /// The system prompt: a string, or text blocks joined with blank lines.
    fn take_system(&mut self) -> Result<Option<String>, Invalid> {
        let system = match self.system.take() {
            None => None,
            Some(TextOrBlocks::Text(text)) => Some(text),
            Some(TextOrBlocks::Blocks(blocks)) => {
                let mut texts = Vec::with_capacity(blocks.len());
                for (i, b) in blocks.into_iter().enumerate() {
                    match (b.kind.as_str(), b.text) {
                        ("text", Some(text)) => texts.push(text),
                        (kind, _) => {
                            return Err(Invalid::new(
                                format!("system[{i}]"),
                                format!("system blocks must be text blocks, not `{kind}`"),
                            ));
                        }
                    }
                }
                Some(texts.join("\n\n"))
            }
        };
        Ok(system.filter(|s| !s.is_empty()))
    }

    /// `output_config.format` (or the older `output_format`) as the
    /// neutral `response_format`: every target is then asked for JSON
    /// valid against the schema, and an answer that is not is
    /// `invalid_output` (the next target is tried).
    fn take_format(&mut self) -> Result<Option<ResponseFormat>, Invalid> {
        let (format, field) = match (
            self.output_config.take().and_then(|c| c.format),
            self.output_format.take(),
        ) {
            (Some(f), _) => (f, "output_config.format"),
            (None, Some(f)) => (f, "output_format"),
            (None, None) => return Ok(None),
        };
        match (format.kind.as_str(), format.schema) {
            ("json_schema", Some(schema)) if schema.is_object() => {
                Ok(Some(ResponseFormat::JsonSchema {
                    name: "output".into(),
                    schema,
                    strict: false,
                }))
            }
            ("json_schema", _) => Err(Invalid::new(
                format!("{field}.schema"),
                "a json_schema format needs a JSON Schema object in `schema`",
            )),
            (other, _) => Err(Invalid::new(
                format!("{field}.type"),
                format!("unknown format type `{other}` (expected json_schema)"),
            )),
        }
    }
}

/// What the translation for other protocols left out of a request: the
/// first thing only Anthropic can take, named for the `unsupported`
/// attempts of other targets.
#[derive(Debug, Default)]
struct Foreign(Option<&'static str>);

impl Foreign {
    fn note(&mut self, what: &'static str) {
        self.0.get_or_insert(what);
    }
}

/// Translates one Anthropic turn into neutral messages, appended to `out`:
/// a user turn's `tool_result` blocks become one tool message each (first,
/// as every protocol wants them right after the calls), then the rest of
/// the turn as one user message; images inside tool results move to that
/// user message, since a neutral tool result is text. A `system` message
/// stays a system message in place. Thinking blocks are dropped, what only
/// Anthropic knows is noted in `foreign` and left out, and a turn left with
/// nothing is left out.
fn translate_message(
    i: usize,
    m: MessageIn,
    out: &mut Vec<Message>,
    foreign: &mut Foreign,
) -> Result<(), Invalid> {
    let role = match m.role.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        _ => {
            foreign.note("a message role only Anthropic knows");
            return Ok(());
        }
    };
    let blocks = match m.content {
        TextOrBlocks::Text(text) => {
            out.push(Message::text(role, text));
            return Ok(());
        }
        TextOrBlocks::Blocks(blocks) => blocks,
    };
    let mut turn = Turn::default();
    for (j, block) in blocks.into_iter().enumerate() {
        turn.add(
            block,
            role,
            || format!("messages[{i}].content[{j}]"),
            foreign,
        )?;
    }
    turn.finish(role, out);
    Ok(())
}

/// One turn's blocks, sorted by where each goes in the neutral messages.
#[derive(Debug, Default)]
struct Turn {
    /// The turn's own text and images.
    parts: Vec<Part>,
    /// An assistant turn's `tool_use` blocks.
    calls: Vec<ToolCall>,
    /// A user turn's `tool_result` blocks, one tool message each.
    results: Vec<Message>,
    /// The images inside those results (a neutral tool result is text).
    result_images: Vec<Part>,
}

impl Turn {
    /// Sorts one block of a `role` turn; `at` names its place, for the
    /// 400 that a block in the wrong turn gets.
    fn add(
        &mut self,
        block: Block,
        role: Role,
        at: impl Fn() -> String,
        foreign: &mut Foreign,
    ) -> Result<(), Invalid> {
        match (block, role) {
            (Block::Text { text }, _) => self.parts.push(Part::Text { text }),
            (Block::Image { source }, Role::User) => self.parts.extend(image(source, foreign)),
            (Block::ToolUse { id, name, input }, Role::Assistant) => {
                self.calls.push(tool_call(id, name, input, at)?);
            }
            (
                Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                },
                Role::User,
            ) => {
                let text = result_text(content, is_error, &mut self.result_images, foreign);
                self.results.push(Message::tool_result(tool_use_id, text));
            }
            (Block::Thinking { .. } | Block::RedactedThinking {}, _) => {}
            (Block::Image { .. }, _) => {
                return Err(Invalid::new(
                    at(),
                    "images are accepted in user messages only",
                ));
            }
            (Block::ToolUse { .. }, _) => {
                return Err(Invalid::new(
                    at(),
                    "tool_use blocks belong in assistant messages",
                ));
            }
            (Block::ToolResult { .. }, _) => {
                return Err(Invalid::new(
                    at(),
                    "tool_result blocks belong in user messages",
                ));
            }
            (Block::Other, _) => {
                foreign.note(
                    "content block types only Anthropic knows (documents, server tool results…)",
                );
            }
        }
        Ok(())
    }

    /// The turn's messages, appended to `out`: the tool results first, then
    /// the rest (the results' images ahead of the turn's own parts) as one
    /// message, unless nothing is left.
    fn finish(self, role: Role, out: &mut Vec<Message>) {
        let Turn {
            mut parts,
            calls,
            results,
            mut result_images,
        } = self;
        out.extend(results);
        if !result_images.is_empty() {
            result_images.append(&mut parts);
            parts = result_images;
        }
        if !parts.is_empty() || !calls.is_empty() {
            out.push(Message {
                role,
                content: parts,
                tool_calls: calls,
                tool_call_id: None,
            });
        }
    }
}

/// A `tool_use` block as a neutral call, its `input` as the arguments'
/// JSON (none is `{}`).
fn tool_call(
    id: String,
    name: String,
    input: Value,
    at: impl Fn() -> String,
) -> Result<ToolCall, Invalid> {
    // Anthropic takes only an object; so does every other
    // protocol once translated: the client's mistake, a 400 on
    // every route alike.
    if !(input.is_object() || input.is_null()) {
        return Err(Invalid::new(
            at(),
            "the input of a tool_use block must be a JSON object",
        ));
    }
    Ok(ToolCall {
        id,
        name,
        arguments: if input.is_null() {
            "{}".to_owned()
        } else {
            input.to_string()
        },
    })
}

/// A `tool_result`'s content as the neutral tool result's text (`Error: `
/// first when it is one); its images go to `images`, for the user turn.
fn result_text(
    content: Option<TextOrBlocks<ResultBlock>>,
    is_error: bool,
    images: &mut Vec<Part>,
    foreign: &mut Foreign,
) -> String {
    let mut text = String::from(if is_error { "Error: " } else { "" });
    let blocks = match content {
        None => return text,
        Some(TextOrBlocks::Text(t)) => {
            text.push_str(&t);
            return text;
        }
        Some(TextOrBlocks::Blocks(blocks)) => blocks,
    };
    let mut first = true;
    let mut line = |text: &mut String, t: &str| {
        if !first {
            text.push('\n');
        }
        text.push_str(t);
        first = false;
    };
    for r in blocks {
        match r {
            ResultBlock::Text { text: t } => line(&mut text, &t),
            ResultBlock::ToolReference { tool_name } => {
                line(&mut text, &format!("Tool loaded: {tool_name}"));
            }
            ResultBlock::Image { source } => images.extend(image(source, foreign)),
            ResultBlock::Other => {
                foreign.note("tool_result content blocks only Anthropic knows");
            }
        }
    }
    text
}

/// An image block's source as a neutral image: base64 data becomes a
/// `data:` URL, a URL stays as it is (the engine accepts `https:` only); a
/// Files API id only Anthropic can resolve.
fn image(source: ImageSource, foreign: &mut Foreign) -> Option<Part> {
    match source {
        ImageSource::Base64 { media_type, data } => Some(Part::Image {
            url: format!("data:{media_type};base64,{data}"),
            detail: None,
        }),
        ImageSource::Url { url } => Some(Part::Image { url, detail: None }),
        ImageSource::Other => {
            foreign.note("images by Files API id");
            None
        }
    }
}
