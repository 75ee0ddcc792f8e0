//! The body of `POST /v1/responses` and its translation onto the neutral
//! [`ChatRequest`]: input items (messages, function and custom tool calls
//! and their outputs; reasoning items are dropped, no translated target can
//! verify them), `instructions`, tools (function tools; Codex's `custom`
//! freeform tools as functions taking one `input` string; `namespace`
//! groups flattened into functions under a reversible name), `tool_choice`,
//! `text.format` and the sampling fields. Hosted tools (`web_search` and
//! the like) no translated target can run are left out and named in
//! [`Translated::omitted`]; a `tool_choice` that forces one is refused,
//! since no target could honour it.
//!
//! Items are kept as JSON values: they are stored as the client sent them
//! (normalised with a `type` and an `id`), so a later turn on another
//! target translates the same history again.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};
use understudy_types::{
    ChatRequest, Message, Part, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
};

use crate::Invalid;

/// The body of `POST /v1/responses`. Unknown fields are ignored (clients
/// send many: `client_metadata`, `prompt_cache_key`, `include`…).
#[derive(Debug, Deserialize)]
pub struct CreateRequest {
    pub model: Option<String>,
    pub input: Option<Input>,
    pub instructions: Option<Value>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub text: Option<TextConfig>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub reasoning: Option<Value>,
    pub metadata: Option<Value>,
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    /// Names the conversation for OpenAI's cache (and the gateway's
    /// session affinity).
    pub prompt_cache_key: Option<String>,
    #[serde(default)]
    pub stream: bool,
    pub background: Option<bool>,
    /// Boxed, as it is rarely sent.
    pub conversation: Option<Box<Value>>,
    /// Routing the client asks for (OpenRouter's `models` and `provider`,
    /// LiteLLM's `fallbacks`: [`crate::caller`]); boxed, as they are
    /// rarely sent. Never forwarded.
    pub models: Option<Box<crate::caller::ModelsIn>>,
    pub provider: Option<Box<crate::caller::ProviderField>>,
    pub fallbacks: Option<Box<crate::caller::FallbacksIn>>,
}

/// `input`: a string (one user message) or a list of items.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Items(Vec<Value>),
}

/// `text`: the answer's format (`verbosity` is accepted and ignored).
#[derive(Debug, Deserialize)]
pub struct TextConfig {
    pub format: Option<Value>,
}

/// Where a tool the model sees came from: the name the client knows it
/// by, its namespace, and whether it is a freeform (`custom`) tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub name: String,
    pub namespace: Option<String>,
    pub custom: bool,
}

/// The tools of one request by the name the model sees (flattened).
#[derive(Debug, Clone, Default)]
pub struct ToolNames(HashMap<String, Origin>);

/// The request in neutral terms, and what the answer needs to be told
/// back in the client's terms.
#[derive(Debug)]
pub struct Translated {
    pub chat: ChatRequest,
    pub names: ToolNames,
    /// Hosted tools left out (no target here can run them).
    pub omitted: Vec<String>,
}

/// The hosted (server-side) tool types a translated target cannot run.
const HOSTED: &[&str] = &[
    "web_search",
    "web_search_preview",
    "web_search_2025_08_26",
    "web_search_preview_2025_03_11",
    "file_search",
    "computer",
    "computer_use_preview",
    "code_interpreter",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "tool_search",
];

/// History items no translated target can use, dropped: reasoning (only
/// the model that wrote it can verify it) and hosted tools' calls.
const DROPPED_ITEMS: &[&str] = &[
    "reasoning",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "tool_search_call",
    "tool_search_output",
    "compaction",
];

// === impl ToolNames ===

impl ToolNames {
    /// The client's view of the tool the model called by `flat`.
    pub fn origin(&self, flat: &str) -> Origin {
        self.0.get(flat).cloned().unwrap_or_else(|| Origin {
            name: flat.to_owned(),
            namespace: None,
            custom: false,
        })
    }

    fn insert(&mut self, flat: String, origin: Origin) {
        self.0.insert(flat, origin);
    }

    /// The flattened name of `name` (in `namespace`, if any) among these
    /// tools; the plain flattening when no tool has it.
    fn find(&self, name: &str, namespace: Option<&str>) -> String {
        let flat = flat_name(namespace, name);
        if self.0.contains_key(&flat) || namespace.is_some() {
            return flat;
        }
        self.0
            .iter()
            .find(|(_, o)| o.name == name)
            .map_or(flat, |(f, _)| f.clone())
    }
}

/// The name a namespaced tool gets for the model: `namespace__name` when
/// that is a valid function name (letters, digits, `_`, `-`, at most 64),
/// else a readable prefix and a hash of both (the same every time, so the
/// history of an earlier turn maps to the same name).
pub fn flat_name(namespace: Option<&str>, name: &str) -> String {
    let Some(ns) = namespace else {
        return name.to_owned();
    };
    let joined = format!("{ns}__{name}");
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if valid(&joined) {
        return joined;
    }
    let hash = blake3::hash(joined.as_bytes()).to_hex();
    let prefix: String = joined
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(40)
        .collect();
    format!("{prefix}_{}", &hash[..16])
}

// === impl CreateRequest ===

impl CreateRequest {
    /// This request's input as normalised items (each with a `type`, and
    /// an `id` where the API gives one), for translation and the store.
    pub fn input_items(&mut self) -> Result<Vec<Value>, Invalid> {
        let items = match self.input.take() {
            None => return Err(Invalid::new("input", "input is required")),
            Some(Input::Text(text)) => vec![json!({
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            })],
            Some(Input::Items(items)) => items,
        };
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| normalise(i, item))
            .collect()
    }

    /// Refuses what the gateway does not do (background responses, the
    /// Conversations API).
    pub fn check(&self) -> Result<(), Invalid> {
        if self.background == Some(true) {
            return Err(Invalid::new(
                "background",
                "background responses are not supported: send the request in the foreground",
            ));
        }
        if self.conversation.as_ref().is_some_and(|c| !c.is_null()) {
            return Err(Invalid::new(
                "conversation",
                "the Conversations API is not supported: use previous_response_id",
            ));
        }
        if self.previous_response_id.is_some() && self.store == Some(false) {
            // Allowed by the API: the new turn is then not kept.
        }
        Ok(())
    }

    /// The neutral request over `history` (earlier turns' items) and
    /// `input` (this request's).
    pub fn translate(&self, history: &[Value], input: &[Value]) -> Result<Translated, Invalid> {
        let mut names = ToolNames::default();
        let mut omitted = Vec::new();
        let mut tools = Vec::new();
        for (i, t) in self.tools.iter().flatten().enumerate() {
            tool(i, t, &mut tools, &mut names, &mut omitted)?;
        }
        let mut chat = ChatRequest {
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens: self.max_output_tokens,
            parallel_tool_calls: self.parallel_tool_calls,
            user: self.user.clone().or_else(|| self.safety_identifier.clone()),
            ..ChatRequest::default()
        };
        chat.tool_choice = self.tool_choice(&mut tools, &names)?;
        chat.tools = tools;
        chat.response_format = self.format()?;
        let mut system = match &self.instructions {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) if s.is_empty() => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(_) => {
                return Err(Invalid::new(
                    "instructions",
                    "instructions must be a string",
                ));
            }
        };
        let mut messages: Vec<Message> = Vec::new();
        for (i, item) in history.iter().chain(input).enumerate() {
            let field = if i < history.len() {
                "previous_response_id".to_owned()
            } else {
                format!("input[{}]", i - history.len())
            };
            item_into(&field, item, &names, &mut system, &mut messages)?;
        }
        chat.system = (!system.is_empty()).then(|| system.join("\n\n"));
        chat.messages = messages;
        chat.validate().map_err(in_our_terms)?;
        Ok(Translated {
            chat,
            names,
            omitted,
        })
    }

    /// `tool_choice` in neutral terms; `allowed_tools` narrows `tools`.
    fn tool_choice(
        &self,
        tools: &mut Vec<Tool>,
        names: &ToolNames,
    ) -> Result<Option<ToolChoice>, Invalid> {
        let Some(choice) = &self.tool_choice else {
            return Ok(None);
        };
        let mode = |m: &str| match m {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(Invalid::new(
                "tool_choice",
                format!("unknown tool_choice `{other}` (expected auto, none or required)"),
            )),
        };
        let kind = choice.get("type").and_then(Value::as_str);
        let name = choice.get("name").and_then(Value::as_str);
        Ok(Some(match (choice, kind, name) {
            (Value::String(m), _, _) => mode(m)?,
            (_, Some("function" | "custom"), Some(name)) => {
                let ns = choice.get("namespace").and_then(Value::as_str);
                ToolChoice::Function(names.find(name, ns))
            }
            (_, Some("allowed_tools"), _) => {
                let allowed: Vec<String> = choice
                    .get("tools")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|t| {
                        let name = t.get("name")?.as_str()?;
                        let ns = t.get("namespace").and_then(Value::as_str);
                        Some(names.find(name, ns))
                    })
                    .collect();
                tools.retain(|t| allowed.contains(&t.name));
                mode(choice.get("mode").and_then(Value::as_str).unwrap_or("auto"))?
            }
            (_, Some(hosted), _) if HOSTED.contains(&hosted) => {
                return Err(Invalid::new(
                    "tool_choice",
                    format!(
                        "tool_choice forces the hosted tool `{hosted}`, which no target of this \
                         gateway can run (every target is unsupported)"
                    ),
                ));
            }
            _ => {
                return Err(Invalid::new(
                    "tool_choice",
                    "expected auto, none, required, {\"type\": \"function\", \"name\"} or allowed_tools",
                ));
            }
        }))
    }

    /// `text.format` as the neutral response format.
    fn format(&self) -> Result<Option<ResponseFormat>, Invalid> {
        let Some(format) = self.text.as_ref().and_then(|t| t.format.as_ref()) else {
            return Ok(None);
        };
        let field = "text.format";
        Ok(Some(match format.get("type").and_then(Value::as_str) {
            Some("text") => ResponseFormat::Text,
            Some("json_object") => ResponseFormat::JsonObject,
            Some("json_schema") => ResponseFormat::JsonSchema {
                name: format
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("response")
                    .to_owned(),
                schema: format
                    .get("schema")
                    .filter(|s| s.is_object())
                    .cloned()
                    .ok_or_else(|| Invalid::new(field, "json_schema needs a `schema` object"))?,
                strict: format
                    .get("strict")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            },
            _ => {
                return Err(Invalid::new(
                    field,
                    "expected a format of type text, json_object or json_schema",
                ));
            }
        }))
    }
}

/// A validation error naming this API's field for the neutral one.
fn in_our_terms(e: understudy_types::Error) -> Invalid {
    let mut e = Invalid::from(e);
    if let Some(field) = &mut e.field {
        let ours = match field.as_str() {
            "messages" => "input",
            "max_tokens" => "max_output_tokens",
            "response_format" => "text.format",
            _ => "",
        };
        if !ours.is_empty() {
            *field = ours.to_owned();
        }
        e.message = e.message.replace("max_tokens", "max_output_tokens");
    }
    e
}

/// One tool of `tools`, added to the neutral list (hosted ones to
/// `omitted`).
fn tool(
    i: usize,
    t: &Value,
    tools: &mut Vec<Tool>,
    names: &mut ToolNames,
    omitted: &mut Vec<String>,
) -> Result<(), Invalid> {
    let field = || format!("tools[{i}]");
    let kind = t.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "function" | "custom" => {
            let (flat, origin, tool) = function(t, None)
                .ok_or_else(|| Invalid::new(field(), format!("a `{kind}` tool needs a `name`")))?;
            names.insert(flat, origin);
            tools.push(tool);
        }
        "namespace" => {
            let ns = t
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Invalid::new(field(), "a namespace needs a `name`"))?;
            for inner in t
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (flat, origin, mut tool) = function(inner, Some(ns)).ok_or_else(|| {
                    Invalid::new(field(), "every tool of a namespace needs a `name`")
                })?;
                if let Some(about) = t.get("description").and_then(Value::as_str) {
                    let own = tool.description.take().unwrap_or_default();
                    tool.description =
                        Some(format!("{own}\n\n(In the tool group `{ns}`: {about})"));
                }
                names.insert(flat, origin);
                tools.push(tool);
            }
        }
        hosted if HOSTED.contains(&hosted) => omitted.push(hosted.to_owned()),
        other => {
            return Err(Invalid::new(
                field(),
                format!("tools of type `{other}` are not supported"),
            ));
        }
    }
    Ok(())
}

/// A `function` or `custom` tool as a neutral function (a custom tool
/// takes its free text as one `input` string).
fn function(t: &Value, namespace: Option<&str>) -> Option<(String, Origin, Tool)> {
    let name = t.get("name")?.as_str()?;
    let custom = t.get("type").and_then(Value::as_str) == Some("custom");
    let description = t
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let flat = flat_name(namespace, name);
    let tool = if custom {
        let mut about = description.unwrap_or_default();
        if let Some(format) = t
            .get("format")
            .filter(|f| f.get("type").and_then(Value::as_str) == Some("grammar"))
        {
            let syntax = format.get("syntax").and_then(Value::as_str).unwrap_or("");
            let definition = format
                .get("definition")
                .and_then(Value::as_str)
                .unwrap_or("");
            about.push_str(&format!(
                "\n\nThe input must follow this {syntax} grammar:\n{definition}"
            ));
        }
        Tool {
            name: flat.clone(),
            description: Some(about),
            parameters: Some(json!({
                "type": "object",
                "properties": {"input": {"type": "string", "description": "The tool's input, as free text"}},
                "required": ["input"],
                "additionalProperties": false,
            })),
            strict: None,
        }
    } else {
        Tool {
            name: flat.clone(),
            description,
            parameters: t.get("parameters").filter(|p| !p.is_null()).cloned(),
            strict: t.get("strict").and_then(Value::as_bool),
        }
    };
    let origin = Origin {
        name: name.to_owned(),
        namespace: namespace.map(str::to_owned),
        custom,
    };
    Some((flat, origin, tool))
}

/// An input item with its `type` (a message may omit it), an `id` and its
/// text as a part (as `input_items` lists them), or a 400 naming it.
fn normalise(i: usize, mut item: Value) -> Result<Value, Invalid> {
    let Some(obj) = item.as_object_mut() else {
        return Err(Invalid::new(
            format!("input[{i}]"),
            "an input item must be an object",
        ));
    };
    let kind = match obj.get("type").and_then(Value::as_str) {
        Some(k) => k.to_owned(),
        None if obj.contains_key("role") => {
            obj.insert("type".into(), "message".into());
            "message".to_owned()
        }
        None => {
            return Err(Invalid::new(
                format!("input[{i}].type"),
                "an input item needs a `type`",
            ));
        }
    };
    if !obj.get("id").is_some_and(Value::is_string) {
        let prefix = match kind.as_str() {
            "message" => "msg",
            "function_call" => "fc",
            "custom_tool_call" => "ctc",
            "reasoning" => "rs",
            _ => "item",
        };
        obj.insert("id".into(), super::new_id(prefix).into());
    }
    // A message's text as a part, as the API lists input items.
    if kind == "message" {
        if let Some(Value::String(text)) = obj.get("content") {
            let part = match obj.get("role").and_then(Value::as_str) {
                Some("assistant") => {
                    json!({"type": "output_text", "text": text, "annotations": []})
                }
                _ => json!({"type": "input_text", "text": text}),
            };
            obj.insert("content".into(), json!([part]));
        }
    }
    Ok(item)
}

/// Adds one item to the conversation (leading system and developer
/// messages to `system`).
fn item_into(
    field: &str,
    item: &Value,
    names: &ToolNames,
    system: &mut Vec<String>,
    messages: &mut Vec<Message>,
) -> Result<(), Invalid> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    match kind {
        "message" => {
            let message = message_item(field, item)?;
            if message.role == Role::System && messages.is_empty() {
                system.push(message.text_content());
            } else {
                messages.push(message);
            }
        }
        "function_call" | "custom_tool_call" => {
            let call = call_item(field, kind, item, names)?;
            // Calls follow the assistant's text (or each other) in one turn.
            match messages.last_mut() {
                Some(m) if m.role == Role::Assistant => m.tool_calls.push(call),
                _ => messages.push(Message {
                    role: Role::Assistant,
                    content: Vec::new(),
                    tool_calls: vec![call],
                    tool_call_id: None,
                }),
            }
        }
        "function_call_output" | "custom_tool_call_output" => {
            messages.push(output_item(field, kind, item)?);
        }
        "item_reference" => {
            return Err(Invalid::new(
                field,
                "item_reference items are not supported: send the item, or use previous_response_id",
            ));
        }
        dropped if DROPPED_ITEMS.contains(&dropped) => {}
        other => {
            return Err(Invalid::new(
                format!("{field}.type"),
                format!("input items of type `{other}` are not supported"),
            ));
        }
    }
    Ok(())
}

/// A `message` item (a system or developer message as [`Role::System`]).
fn message_item(field: &str, item: &Value) -> Result<Message, Invalid> {
    let role = match item.get("role").and_then(Value::as_str).unwrap_or("") {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" | "developer" => Role::System,
        other => {
            return Err(Invalid::new(
                format!("{field}.role"),
                format!("unknown role `{other}` (expected user, assistant, system or developer)"),
            ));
        }
    };
    Ok(Message {
        role,
        content: content(field, item.get("content"), role)?,
        tool_calls: Vec::new(),
        tool_call_id: None,
    })
}

/// A `function_call` or `custom_tool_call` item as a neutral call (a
/// custom tool's `input` as `{"input": …}` arguments; a namespaced tool
/// under its flattened name).
fn call_item(
    field: &str,
    kind: &str,
    item: &Value,
    names: &ToolNames,
) -> Result<ToolCall, Invalid> {
    let str_of = |key: &str| item.get(key).and_then(Value::as_str);
    let (Some(call_id), Some(name)) = (str_of("call_id"), str_of("name")) else {
        return Err(Invalid::new(
            field,
            format!("a {kind} item needs `call_id` and `name`"),
        ));
    };
    let arguments = if kind == "custom_tool_call" {
        json!({"input": str_of("input").unwrap_or("")}).to_string()
    } else {
        str_of("arguments").unwrap_or("{}").to_owned()
    };
    Ok(ToolCall {
        id: call_id.to_owned(),
        name: names.find(name, str_of("namespace")),
        arguments,
    })
}

/// A tool's output item as a tool result (the text of its parts).
fn output_item(field: &str, kind: &str, item: &Value) -> Result<Message, Invalid> {
    let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
        return Err(Invalid::new(
            field,
            format!("a {kind} item needs a `call_id`"),
        ));
    };
    let text = match item.get("output") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    Ok(Message::tool_result(call_id, text))
}

/// A message's content: a string or a list of parts.
fn content(field: &str, content: Option<&Value>, role: Role) -> Result<Vec<Part>, Invalid> {
    let parts = match content {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(text)) => return Ok(vec![Part::Text { text: text.clone() }]),
        Some(Value::Array(parts)) => parts,
        Some(_) => {
            return Err(Invalid::new(
                format!("{field}.content"),
                "content must be a string or a list of parts",
            ));
        }
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.iter().enumerate() {
        let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
        let text = |key: &str| p.get(key).and_then(Value::as_str).map(str::to_owned);
        let part = match kind {
            "input_text" | "output_text" | "text" | "summary_text" => {
                text("text").map(|text| Part::Text { text })
            }
            "refusal" => text("refusal").map(|text| Part::Text { text }),
            "input_image" if role == Role::User => match text("image_url") {
                Some(url) => Some(Part::Image {
                    url,
                    detail: text("detail").filter(|d| d != "auto"),
                }),
                None => {
                    return Err(Invalid::new(
                        format!("{field}.content[{j}]"),
                        "an input_image needs an `image_url` (a data: or https: URL); file ids are not supported",
                    ));
                }
            },
            "input_image" => {
                return Err(Invalid::new(
                    format!("{field}.content[{j}]"),
                    "images are accepted in user messages only",
                ));
            }
            other => {
                return Err(Invalid::new(
                    format!("{field}.content[{j}]"),
                    format!(
                        "content parts of type `{other}` are not supported (expected input_text, input_image or output_text)"
                    ),
                ));
            }
        };
        match part {
            Some(part) => out.push(part),
            None => {
                return Err(Invalid::new(
                    format!("{field}.content[{j}]"),
                    format!("a `{kind}` part lacks its text"),
                ));
            }
        }
    }
    Ok(out)
}
