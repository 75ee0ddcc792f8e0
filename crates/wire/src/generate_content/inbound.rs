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

use serde::Deserialize;
use serde_json::Value;
use understudy_core::passthrough::Gated;
use understudy_core::{
    ChatRequest, Message, Part, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
};

use super::schema;
use crate::Invalid;

/// A `generateContent` (or `countTokens`) body as a client sends it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateContentRequest {
    #[serde(default)]
    pub contents: Vec<Content>,
    #[serde(alias = "system_instruction")]
    pub system_instruction: Option<Content>,
    #[serde(default)]
    pub tools: Vec<ToolIn>,
    #[serde(alias = "tool_config")]
    pub tool_config: Option<ToolConfig>,
    #[serde(alias = "generation_config")]
    pub generation_config: Option<GenerationConfig>,
    #[serde(default, alias = "safety_settings")]
    pub safety_settings: Vec<Value>,
    #[serde(alias = "cached_content")]
    pub cached_content: Option<String>,
    /// `countTokens` wraps a whole request here.
    #[serde(alias = "generate_content_request")]
    pub generate_content_request: Option<Box<GenerateContentRequest>>,
}

/// One turn: a role (`user`, `model`; none means `user`) and its parts.
#[derive(Debug, Default, Deserialize)]
pub struct Content {
    pub role: Option<String>,
    #[serde(default)]
    pub parts: Vec<PartIn>,
}

/// One part: exactly one of its data fields is set.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartIn {
    pub text: Option<String>,
    pub thought: Option<bool>,
    #[serde(alias = "inline_data")]
    pub inline_data: Option<Blob>,
    #[serde(alias = "file_data")]
    pub file_data: Option<FileData>,
    #[serde(alias = "function_call")]
    pub function_call: Option<FunctionCall>,
    #[serde(alias = "function_response")]
    pub function_response: Option<FunctionResponse>,
    #[serde(alias = "executable_code")]
    pub executable_code: Option<Value>,
    #[serde(alias = "code_execution_result")]
    pub code_execution_result: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Blob {
    #[serde(alias = "mime_type")]
    pub mime_type: String,
    pub data: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileData {
    #[serde(default, alias = "mime_type")]
    pub mime_type: Option<String>,
    #[serde(alias = "file_uri")]
    pub file_uri: String,
}

#[derive(Debug, Deserialize)]
pub struct FunctionCall {
    pub id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub args: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct FunctionResponse {
    pub id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub response: Option<Value>,
}

/// One entry of `tools`: function declarations, or one of Google's own
/// tools (kept by name: only Gemini targets can run them).
#[derive(Debug, Deserialize)]
pub struct ToolIn {
    #[serde(
        default,
        rename = "functionDeclarations",
        alias = "function_declarations"
    )]
    pub function_declarations: Vec<FunctionDeclaration>,
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionDeclaration {
    pub name: String,
    pub description: Option<String>,
    /// Google's OpenAPI subset.
    pub parameters: Option<Value>,
    /// JSON Schema.
    #[serde(alias = "parameters_json_schema")]
    pub parameters_json_schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolConfig {
    #[serde(alias = "function_calling_config")]
    pub function_calling_config: Option<FunctionCallingConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCallingConfig {
    pub mode: Option<String>,
    #[serde(default, alias = "allowed_function_names")]
    pub allowed_function_names: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationConfig {
    pub temperature: Option<f32>,
    #[serde(alias = "top_p")]
    pub top_p: Option<f32>,
    #[serde(alias = "top_k")]
    pub top_k: Option<f32>,
    #[serde(alias = "max_output_tokens")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, alias = "stop_sequences")]
    pub stop_sequences: Vec<String>,
    #[serde(alias = "candidate_count")]
    pub candidate_count: Option<u32>,
    #[serde(alias = "presence_penalty")]
    pub presence_penalty: Option<f32>,
    #[serde(alias = "frequency_penalty")]
    pub frequency_penalty: Option<f32>,
    pub seed: Option<i64>,
    #[serde(alias = "response_mime_type")]
    pub response_mime_type: Option<String>,
    /// Google's OpenAPI subset.
    #[serde(alias = "response_schema")]
    pub response_schema: Option<Value>,
    /// JSON Schema.
    #[serde(alias = "response_json_schema", alias = "_responseJsonSchema")]
    pub response_json_schema: Option<Value>,
    #[serde(alias = "thinking_config")]
    pub thinking_config: Option<ThinkingConfig>,
    #[serde(default, alias = "response_modalities")]
    pub response_modalities: Vec<String>,
    #[serde(alias = "speech_config")]
    pub speech_config: Option<Value>,
    #[serde(alias = "response_logprobs")]
    pub response_logprobs: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThinkingConfig {
    #[serde(alias = "include_thoughts")]
    pub include_thoughts: Option<bool>,
    #[serde(alias = "thinking_budget")]
    pub thinking_budget: Option<i64>,
}

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
    /// translated; what it cannot, named in `native_only`.
    pub fn translate(&self) -> Result<Translated, Invalid> {
        let mut foreign = Foreign::default();
        let mut chat = ChatRequest {
            system: self.system_instruction.as_ref().and_then(system_text),
            messages: messages(&self.contents, &mut foreign)?,
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
        let text = |c: &Content| -> usize {
            c.parts
                .iter()
                .map(|p| {
                    p.text.as_deref().map_or(0, str::len)
                        + p.function_call.as_ref().map_or(0, |f| {
                            f.name.len() + f.args.as_ref().map_or(0, |a| a.to_string().len())
                        })
                        + p.function_response.as_ref().map_or(0, |f| {
                            f.response.as_ref().map_or(0, |r| r.to_string().len())
                        })
                })
                .sum()
        };
        let chars: usize = self.contents.iter().map(text).sum::<usize>()
            + self.system_instruction.as_ref().map_or(0, text);
        (chars as u64).div_ceil(4)
    }
}

/// What the neutral request cannot carry, and what the body would switch
/// on at Google.
#[derive(Debug, Default)]
struct Foreign {
    only: Option<&'static str>,
    gated: understudy_core::passthrough::GatedSet,
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
fn system_text(content: &Content) -> Option<String> {
    let text: Vec<&str> = content
        .parts
        .iter()
        .filter_map(|p| p.text.as_deref())
        .collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// The conversation as neutral turns.
fn messages(contents: &[Content], foreign: &mut Foreign) -> Result<Vec<Message>, Invalid> {
    let mut out = Vec::with_capacity(contents.len());
    let mut ids: HashSet<String> = HashSet::new();
    // The calls of the latest model turn not answered yet: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    for (i, content) in contents.iter().enumerate() {
        let field = |j: usize, what: &str| format!("contents[{i}].parts[{j}].{what}");
        match content.role.as_deref() {
            None | Some("user" | "function") => {
                user_turn(content, &mut pending, foreign, &mut out, &field)?
            }
            Some("model") => {
                pending.clear();
                let mut m = Message::text(Role::Assistant, String::new());
                m.content.clear();
                for (j, part) in content.parts.iter().enumerate() {
                    if let Some(call) = &part.function_call {
                        let id = call_id(call.id.as_deref(), i, j, &mut ids);
                        pending.push((id.clone(), call.name.clone()));
                        m.tool_calls.push(ToolCall {
                            id,
                            name: call.name.clone(),
                            arguments: call
                                .args
                                .as_ref()
                                .map_or_else(|| "{}".to_owned(), Value::to_string),
                        });
                    } else if part.thought == Some(true) {
                        // Reasoning: only Gemini reads its own back.
                    } else {
                        content_part(part, &mut m.content, foreign, &|w| field(j, w))?;
                    }
                }
                if !m.is_empty() {
                    out.push(m);
                }
            }
            Some(other) => {
                return Err(Invalid::new(
                    format!("contents[{i}].role"),
                    format!("`{other}` is not a role: expected `user` or `model`"),
                ));
            }
        }
    }
    Ok(out)
}

/// A user turn: its function responses first (each a tool turn answering
/// its call), then its text and images as one user turn.
fn user_turn(
    content: &Content,
    pending: &mut Vec<(String, String)>,
    foreign: &mut Foreign,
    out: &mut Vec<Message>,
    field: &dyn Fn(usize, &str) -> String,
) -> Result<(), Invalid> {
    let mut user = Message::text(Role::User, String::new());
    user.content.clear();
    for (j, part) in content.parts.iter().enumerate() {
        let Some(response) = &part.function_response else {
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
        out.push(Message::tool_result(id, response_text(response)));
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
    match &response.response {
        None => String::new(),
        Some(Value::Object(map)) if map.len() == 1 => {
            match map.get("output").or_else(|| map.get("result")) {
                Some(Value::String(s)) => s.clone(),
                _ => Value::Object(map.clone()).to_string(),
            }
        }
        Some(v) => v.to_string(),
    }
}

/// One text, image or file part into `parts`; anything else only Gemini
/// can carry.
fn content_part(
    part: &PartIn,
    parts: &mut Vec<Part>,
    foreign: &mut Foreign,
    field: &dyn Fn(&str) -> String,
) -> Result<(), Invalid> {
    if let Some(text) = &part.text {
        if part.thought != Some(true) {
            parts.push(Part::Text { text: text.clone() });
        }
    } else if let Some(blob) = &part.inline_data {
        if blob.mime_type.to_ascii_lowercase().starts_with("image/") {
            parts.push(Part::Image {
                url: format!("data:{};base64,{}", blob.mime_type, blob.data),
                detail: None,
            });
        } else {
            foreign.only("inline data that is not an image");
        }
    } else if let Some(file) = &part.file_data {
        file_part(file, parts, foreign, field)?;
    } else if part.executable_code.is_some() || part.code_execution_result.is_some() {
        foreign.only("code execution parts");
    } else if part.function_call.is_some() {
        return Err(Invalid::new(
            field("functionCall"),
            "a function call is the model's: it belongs in a `model` turn",
        ));
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
        for name in tool.other.keys() {
            match name.as_str() {
                "googleSearch"
                | "google_search"
                | "googleSearchRetrieval"
                | "google_search_retrieval" => foreign.gate(Gated::WebSearch),
                "urlContext" | "url_context" => foreign.gate(Gated::WebFetch),
                "codeExecution" | "code_execution" => foreign.gate(Gated::CodeExecution),
                _ => {}
            }
            foreign.only("Google's own tools");
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
    {
        foreign.only("image and audio output");
    }
    if config.response_logprobs == Some(true) {
        foreign.only("log probabilities");
    }
    Ok(())
}

#[cfg(test)]
#[path = "inbound_tests.rs"]
mod tests;
