//! A client's `generateContent` body read into the neutral request: what
//! Google's SDKs and the Gemini CLI send (both spellings of every field:
//! Google's JSON mapping takes `camelCase` and the proto's `snake_case`,
//! and the Python SDK writes `parameters_json_schema` in snake case).
//!
//! Tool calls and their results: a `functionCall` keeps the client's `id`
//! where it sent one (the Gemini CLI does) and otherwise gets one from its
//! place in the history (`gc_<turn>_<part>`, the same every time the
//! history is resent); a `functionResponse` answers the call with its id,
//! else the first unanswered call of that name in the model turn before it
//! (google-genai sends no ids: Google pairs by order and name).
//!
//! What only Gemini can carry (code execution parts, non-image inline data,
//! `cachedContent`, Google's server tools…) is named in
//! [`ChatRequest::native_only`], so only Gemini targets serve it; what
//! would switch something on at Google on the operator's key is
//! [`ChatRequest::native_gated`].

use std::collections::HashSet;

use serde_json::Value;
use understudy_types::passthrough::Gated;
use understudy_types::{
    ChatRequest, Message, Part, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
};

pub use super::body::{
    Content, FileData, FunctionCall, FunctionResponse, GenerateContentRequest, GenerationConfig,
    Instruction, NativePart, PartIn, Speaker, ToolConfig, ToolIn, read,
};
use super::schema;
use crate::Invalid;

/// The neutral request, and whether the client asked to see thoughts.
#[derive(Debug)]
pub struct Translated {
    pub chat: ChatRequest,
    /// `thinkingConfig.includeThoughts`: reasoning is rendered as `thought`
    /// parts.
    pub include_thoughts: bool,
}

// === impl GenerateContentRequest ===

impl GenerateContentRequest {
    /// The request a `countTokens` body counts: its `generateContentRequest`
    /// when it has one, else itself.
    pub fn counted(self) -> GenerateContentRequest {
        match self.generate_content_request {
            Some(inner) => *inner,
            None => self,
        }
    }

    /// The neutral request: every field a neutral target can serve,
    /// translated; what it cannot, named in `native_only`. The request is
    /// consumed: its texts move into the neutral one rather than being
    /// copied.
    pub fn translate(self) -> Result<Translated, Invalid> {
        let mut foreign = Foreign::default();
        let mut chat = ChatRequest {
            system: self.system_instruction.as_ref().and_then(system_text),
            tools: tools(&self.tools, &mut foreign)?,
            ..ChatRequest::default()
        };
        if let Some(config) = &self.tool_config {
            chat.tool_choice = tool_choice(config)?;
        }
        let mut include_thoughts = false;
        if let Some(config) = &self.generation_config {
            generation(config, &mut chat, &mut foreign)?;
            include_thoughts = config
                .thinking_config
                .as_ref()
                .and_then(|t| t.include_thoughts)
                .unwrap_or(false);
        }
        if self.cached_content.is_some() {
            foreign.only("cachedContent");
            // Content cached on the operator's account.
            foreign.gate(Gated::Files);
        }
        if self.continuation_token.is_some() {
            foreign.only("continuationToken");
        }
        chat.messages = messages(self.contents, &mut foreign)?;
        chat.native_only = foreign.only;
        chat.native_gated = foreign.gated;
        Ok(Translated {
            chat,
            include_thoughts,
        })
    }

    /// A rough count of the input tokens (four characters a token), for
    /// `countTokens` when no Gemini target can count.
    pub fn estimate_input_tokens(&self) -> u64 {
        let text = |parts: &[PartIn]| -> usize {
            parts
                .iter()
                .map(|p| match p {
                    PartIn::Text { text, .. } => text.len(),
                    PartIn::FunctionCall(f) => {
                        f.name.len() + f.args.as_ref().map_or(0, |a| a.get().len())
                    }
                    PartIn::FunctionResponse(f) => f.response.as_ref().map_or(0, |r| r.get().len()),
                    _ => 0,
                })
                .sum()
        };
        let chars: usize = self.contents.iter().map(|c| text(&c.parts)).sum::<usize>()
            + self
                .system_instruction
                .as_ref()
                .map_or(0, |s| text(&s.parts));
        (chars as u64).div_ceil(4)
    }
}

/// What the neutral request cannot carry, and what the body would switch
/// on at Google.
#[derive(Debug, Default)]
struct Foreign {
    only: Option<&'static str>,
    gated: understudy_types::passthrough::GatedSet,
}

impl Foreign {
    fn only(&mut self, what: &'static str) {
        self.only.get_or_insert(what);
    }

    fn gate(&mut self, g: Gated) {
        self.gated.insert(g);
    }
}

/// The system instruction's text parts, joined (its role is ignored, as
/// Google ignores it: the Gemini CLI sends `user`).
fn system_text(instruction: &Instruction) -> Option<String> {
    let text: Vec<&str> = instruction
        .parts
        .iter()
        .filter_map(|p| match p {
            PartIn::Text { text, .. } => Some(&**text),
            _ => None,
        })
        .collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// The conversation as neutral turns.
fn messages(contents: Vec<Content>, foreign: &mut Foreign) -> Result<Vec<Message>, Invalid> {
    let mut out = Vec::with_capacity(contents.len());
    let mut ids: HashSet<String> = HashSet::new();
    // The calls of the latest model turn not answered yet: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    for (i, content) in contents.into_iter().enumerate() {
        let field = |j: usize, what: &str| format!("contents[{i}].parts[{j}].{what}");
        match content.role {
            None | Some(Speaker::User) => {
                user_turn(content.parts, &mut pending, foreign, &mut out, &field)?
            }
            Some(Speaker::Model) => {
                pending.clear();
                let mut m = Message::text(Role::Assistant, String::new());
                m.content.clear();
                for (j, part) in content.parts.into_vec().into_iter().enumerate() {
                    match part {
                        PartIn::FunctionCall(call) => {
                            let FunctionCall { id, name, args, .. } = *call;
                            let id = call_id(id.as_deref(), i, j, &mut ids);
                            pending.push((id.clone(), name.clone()));
                            m.tool_calls.push(ToolCall {
                                id,
                                name,
                                arguments: args
                                    .map_or_else(|| "{}".to_owned(), |a| a.get().to_owned()),
                            });
                        }
                        // Reasoning: only Gemini reads its own back.
                        PartIn::Text { thought: true, .. } => {}
                        part => content_part(part, &mut m.content, foreign, &|w| field(j, w))?,
                    }
                }
                if !m.is_empty() {
                    out.push(m);
                }
            }
        }
    }
    Ok(out)
}

/// A user turn: its function responses first (each a tool turn answering
/// its call), then its text and images as one user turn.
fn user_turn(
    parts: Box<[PartIn]>,
    pending: &mut Vec<(String, String)>,
    foreign: &mut Foreign,
    out: &mut Vec<Message>,
    field: &dyn Fn(usize, &str) -> String,
) -> Result<(), Invalid> {
    let mut user = Message::text(Role::User, String::new());
    user.content.clear();
    for (j, part) in parts.into_vec().into_iter().enumerate() {
        let PartIn::FunctionResponse(response) = part else {
            content_part(part, &mut user.content, foreign, &|w| field(j, w))?;
            continue;
        };
        let by_id = response
            .id
            .as_deref()
            .and_then(|id| pending.iter().position(|(p, _)| p == id));
        let at = by_id.or_else(|| pending.iter().position(|(_, n)| *n == response.name));
        let Some(at) = at else {
            return Err(Invalid::new(
                field(j, "functionResponse"),
                format!(
                    "`{}` answers no function call of the model turn before it",
                    response.name
                ),
            ));
        };
        let (id, _) = pending.remove(at);
        out.push(Message::tool_result(id, response_text(&response)));
    }
    if !user.is_empty() {
        out.push(user);
    }
    Ok(())
}

/// A call's id: the client's own when it is new, else its place.
fn call_id(given: Option<&str>, i: usize, j: usize, ids: &mut HashSet<String>) -> String {
    if let Some(id) = given.filter(|id| !id.is_empty()) {
        if ids.insert(id.to_owned()) {
            return id.to_owned();
        }
    }
    let mut id = format!("gc_{i}_{j}");
    while !ids.insert(id.clone()) {
        id.push('_');
    }
    id
}

/// A function response as the tool result's text: the `output` or
/// `result` text when that is all it holds, else its JSON.
fn response_text(response: &FunctionResponse) -> String {
    let Some(raw) = &response.response else {
        return String::new();
    };
    if let Ok(map) = serde_json::from_str::<serde_json::Map<String, Value>>(raw.get()) {
        if map.len() == 1 {
            if let Some(Value::String(s)) = map.get("output").or_else(|| map.get("result")) {
                return s.clone();
            }
        }
        return Value::Object(map).to_string();
    }
    raw.get().to_owned()
}

/// One text, image or file part into `parts`; anything else only Gemini
/// can carry.
fn content_part(
    part: PartIn,
    parts: &mut Vec<Part>,
    foreign: &mut Foreign,
    field: &dyn Fn(&str) -> String,
) -> Result<(), Invalid> {
    match part {
        PartIn::Text { text, thought } => {
            if !thought {
                parts.push(Part::Text { text: text.into() });
            }
        }
        PartIn::InlineData(blob) => {
            if blob.mime_type.to_ascii_lowercase().starts_with("image/") {
                parts.push(Part::Image {
                    url: format!("data:{};base64,{}", blob.mime_type, blob.data),
                    detail: None,
                });
            } else {
                foreign.only("inline data that is not an image");
            }
        }
        PartIn::FileData(file) => file_part(&file, parts, foreign, field)?,
        PartIn::Native(NativePart::ExecutableCode | NativePart::CodeExecutionResult) => {
            foreign.only("code execution parts");
        }
        PartIn::Native(NativePart::ToolCall | NativePart::ToolResponse) => {
            foreign.only("server tool parts");
        }
        PartIn::FunctionCall(_) => {
            return Err(Invalid::new(
                field("functionCall"),
                "a function call is the model's: it belongs in a `model` turn",
            ));
        }
        PartIn::FunctionResponse(_) => {
            return Err(Invalid::new(
                field("functionResponse"),
                "a function response is the user's: it belongs in a `user` turn",
            ));
        }
    }
    Ok(())
}

/// A `fileData` part: an image at an `https` URL is an image; a file of
/// the Files API is the operator's account's; anything else only Gemini
/// reads.
fn file_part(
    file: &FileData,
    parts: &mut Vec<Part>,
    foreign: &mut Foreign,
    field: &dyn Fn(&str) -> String,
) -> Result<(), Invalid> {
    let uri = file.file_uri.as_str();
    if uri.contains("generativelanguage.googleapis.com/") && uri.contains("/files/") {
        foreign.gate(Gated::Files);
        foreign.only("files of the Files API");
        return Ok(());
    }
    let image = file
        .mime_type
        .as_deref()
        .is_some_and(|m| m.to_ascii_lowercase().starts_with("image/"));
    match uri.get(..8) {
        Some(scheme) if scheme.eq_ignore_ascii_case("https://") && image => {
            parts.push(Part::Image {
                url: uri.to_owned(),
                detail: None,
            });
        }
        Some(scheme) if scheme.eq_ignore_ascii_case("https://") => {
            foreign.only("files that are not images");
        }
        _ if uri.starts_with("gs://") => foreign.only("gs:// files"),
        _ => {
            return Err(Invalid::new(
                field("fileData.fileUri"),
                "expected an https:// URL or a file of the Files API",
            ));
        }
    }
    Ok(())
}

/// Function declarations as neutral tools; Google's own tools only Gemini
/// runs (those that fetch or run something, on the operator's key, are
/// gated).
fn tools(tools: &[ToolIn], foreign: &mut Foreign) -> Result<Vec<Tool>, Invalid> {
    let mut out = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        for (j, d) in tool.function_declarations.iter().enumerate() {
            let parameters = match (&d.parameters, &d.parameters_json_schema) {
                (Some(_), Some(_)) => {
                    return Err(Invalid::new(
                        format!("tools[{i}].functionDeclarations[{j}]"),
                        "`parameters` and `parametersJsonSchema` exclude each other",
                    ));
                }
                (Some(p), None) | (None, Some(p)) => Some(schema::to_json_schema(p)),
                (None, None) => None,
            };
            out.push(Tool {
                name: d.name.clone(),
                description: d.description.clone(),
                parameters,
                strict: None,
            });
        }
        // (present, gated on the operator's key as)
        let own = [
            (tool.google_search.is_some(), Some(Gated::WebSearch)),
            (
                tool.google_search_retrieval.is_some(),
                Some(Gated::WebSearch),
            ),
            (tool.google_maps.is_some(), Some(Gated::WebSearch)),
            (tool.enterprise_web_search.is_some(), Some(Gated::WebSearch)),
            (tool.retrieval.is_some(), Some(Gated::WebSearch)),
            (tool.url_context.is_some(), Some(Gated::WebFetch)),
            (tool.code_execution.is_some(), Some(Gated::CodeExecution)),
            (tool.mcp_servers.is_some(), Some(Gated::Mcp)),
            (tool.file_search.is_some(), Some(Gated::Files)),
            (tool.computer_use.is_some(), None),
        ];
        for (present, gated) in own {
            if present {
                if let Some(g) = gated {
                    foreign.gate(g);
                }
                foreign.only("Google's own tools");
            }
        }
    }
    Ok(out)
}

/// `toolConfig.functionCallingConfig` as the neutral tool choice.
fn tool_choice(config: &ToolConfig) -> Result<Option<ToolChoice>, Invalid> {
    let Some(calling) = &config.function_calling_config else {
        return Ok(None);
    };
    Ok(
        match calling
            .mode
            .as_deref()
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            None | Some("MODE_UNSPECIFIED" | "AUTO" | "VALIDATED") => Some(ToolChoice::Auto),
            Some("NONE") => Some(ToolChoice::None),
            Some("ANY") => match calling.allowed_function_names.as_slice() {
                [one] => Some(ToolChoice::Function(one.clone())),
                _ => Some(ToolChoice::Required),
            },
            Some(other) => {
                return Err(Invalid::new(
                    "toolConfig.functionCallingConfig.mode",
                    format!("`{other}` is not a mode: expected AUTO, ANY, NONE or VALIDATED"),
                ));
            }
        },
    )
}

/// `generationConfig` into the neutral request.
fn generation(
    config: &GenerationConfig,
    chat: &mut ChatRequest,
    foreign: &mut Foreign,
) -> Result<(), Invalid> {
    if config.candidate_count.is_some_and(|n| n != 1) {
        return Err(Invalid::new(
            "generationConfig.candidateCount",
            "the gateway answers with one candidate: expected 1",
        ));
    }
    chat.temperature = config.temperature;
    chat.top_p = config.top_p;
    chat.max_tokens = config.max_output_tokens;
    chat.stop = config.stop_sequences.clone();
    chat.presence_penalty = config.presence_penalty;
    chat.frequency_penalty = config.frequency_penalty;
    chat.seed = config.seed;
    let json = config
        .response_mime_type
        .as_deref()
        .is_some_and(|m| m.eq_ignore_ascii_case("application/json"));
    // Google's types are upper case in its own schemas, and the Gemini
    // CLI writes them so in `responseJsonSchema` too: both are read as
    // JSON Schema (lower-case types are left as they are).
    let schema = config
        .response_json_schema
        .as_ref()
        .or(config.response_schema.as_ref())
        .map(schema::to_json_schema);
    chat.response_format = match (json, schema) {
        (true, Some(schema)) => Some(ResponseFormat::JsonSchema {
            name: "response".into(),
            schema,
            strict: true,
        }),
        (true, None) => Some(ResponseFormat::JsonObject),
        (false, Some(_)) => {
            return Err(Invalid::new(
                "generationConfig.responseSchema",
                "a response schema needs `responseMimeType: \"application/json\"`",
            ));
        }
        (false, None) => None,
    };
    if let Some(mime) = config.response_mime_type.as_deref() {
        if !json && !mime.eq_ignore_ascii_case("text/plain") {
            foreign.only("response MIME types other than JSON and text");
        }
    }
    if config
        .response_modalities
        .iter()
        .any(|m| !m.eq_ignore_ascii_case("text"))
        || config.speech_config.is_some()
        || config.image_config.is_some()
        || config.audio_transcription_config.is_some()
        || config.audio_timestamp == Some(true)
    {
        foreign.only("image and audio output");
    }
    if config.routing_config.is_some() || config.model_selection_config.is_some() {
        foreign.only("Vertex's model routing");
    }
    if config.response_logprobs == Some(true) {
        foreign.only("log probabilities");
    }
    Ok(())
}

#[cfg(test)]
#[path = "inbound_tests.rs"]
mod tests;
