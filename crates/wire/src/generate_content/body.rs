//! A client's `generateContent` body as typed data, read as strictly as
//! Google's JSON mapping reads it, and compactly.
//!
//! Strict: a field Google does not define, a role other than `user` and
//! `model`, a part with no data or with two (`Part.data` is a `oneof`), a
//! `thoughtSignature` that is not base64 (`bytes`), a value of the wrong
//! JSON type — each is refused with Google's own 400 message
//! ([`read`]), so that a client that works through the gateway does not
//! break when pointed at Google. Every field keeps both spellings Google
//! takes (`camelCase` and the proto's `snake_case`), and `null` is an
//! unset field, as in proto3 JSON. What Google defines but the gateway
//! does not translate (`labels`, `videoMetadata`, `speechConfig`…) is
//! accepted and checked only for being JSON: the body goes to Gemini
//! targets as sent, where Google reads it.
//!
//! Compact: a part is one enum variant (a boxed variant for what is
//! rare), a role one byte, a turn's parts a boxed slice, and what is only
//! forwarded (arguments, function responses) its raw JSON text; nothing
//! is kept as a `serde_json::Value` tree but the few schemas the
//! translation rewrites. A body of many small turns costs a small multiple
//! of its size.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use super::invalid;
use crate::Invalid;

/// A `generateContent` (or `countTokens`) body as a client sends it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerateContentRequest {
    /// Set inside a `countTokens` body's `generateContentRequest`.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub contents: Vec<Content>,
    #[serde(default, alias = "system_instruction")]
    pub system_instruction: Option<Instruction>,
    #[serde(default, deserialize_with = "nullable")]
    pub tools: Vec<ToolIn>,
    #[serde(default, alias = "tool_config")]
    pub tool_config: Option<ToolConfig>,
    #[serde(default, alias = "generation_config")]
    pub generation_config: Option<GenerationConfig>,
    #[serde(default, alias = "safety_settings", deserialize_with = "nullable")]
    pub safety_settings: Vec<SafetySetting>,
    #[serde(default, alias = "cached_content")]
    pub cached_content: Option<String>,
    /// `countTokens` wraps a whole request here.
    #[serde(default, alias = "generate_content_request")]
    pub generate_content_request: Option<Box<GenerateContentRequest>>,
    /// Vertex's billing labels (google-genai sends what it is given).
    #[serde(default)]
    pub labels: Option<IgnoredAny>,
    #[serde(default, alias = "service_tier")]
    pub service_tier: Option<IgnoredAny>,
    #[serde(default)]
    pub store: Option<bool>,
    /// Resumes an answer Google keeps: only Gemini can.
    #[serde(default, alias = "continuation_token")]
    pub continuation_token: Option<IgnoredAny>,
}

/// One turn of `contents`: a role (none means `user`) and its parts.
#[derive(Debug, Default)]
pub struct Content {
    pub role: Option<Speaker>,
    pub parts: Box<[PartIn]>,
}

/// The system instruction: a content whose role Google ignores (the
/// Gemini CLI sends `user`), so any role is taken.
#[derive(Debug, Default)]
pub struct Instruction {
    pub parts: Box<[PartIn]>,
}

/// Who wrote a turn: Google knows these two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaker {
    User,
    Model,
}

/// One part: exactly one kind of data (`Part.data` is a `oneof`). The
/// rare kinds are boxed so that a part costs 24 bytes.
#[derive(Debug)]
pub enum PartIn {
    /// Text; `thought` marks the model's reasoning.
    Text {
        text: Box<str>,
        thought: bool,
    },
    InlineData(Box<Blob>),
    FileData(Box<FileData>),
    FunctionCall(Box<FunctionCall>),
    FunctionResponse(Box<FunctionResponse>),
    /// What only Gemini reads: code it ran and the result, a server
    /// tool's call and response.
    Native(NativePart),
}

/// The kinds of part only Gemini carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativePart {
    ExecutableCode,
    CodeExecutionResult,
    ToolCall,
    ToolResponse,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Blob {
    #[serde(alias = "mime_type")]
    pub mime_type: String,
    pub data: String,
    #[serde(default, alias = "display_name")]
    pub display_name: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileData {
    #[serde(default, alias = "mime_type")]
    pub mime_type: Option<String>,
    #[serde(alias = "file_uri")]
    pub file_uri: String,
    #[serde(default, alias = "display_name")]
    pub display_name: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FunctionCall {
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    /// The arguments' JSON object, as sent.
    #[serde(default, deserialize_with = "object")]
    pub args: Option<Box<RawValue>>,
    #[serde(default, alias = "partial_args")]
    pub partial_args: Option<IgnoredAny>,
    #[serde(default, alias = "will_continue")]
    pub will_continue: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FunctionResponse {
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    /// The response's JSON object, as sent.
    #[serde(default, deserialize_with = "object")]
    pub response: Option<Box<RawValue>>,
    /// Media a function returned (only Gemini reads it).
    #[serde(default)]
    pub parts: Option<IgnoredAny>,
    #[serde(default, alias = "will_continue")]
    pub will_continue: Option<bool>,
    #[serde(default)]
    pub scheduling: Option<IgnoredAny>,
}

/// One entry of `tools`: function declarations, and Google's own tools
/// (only Gemini targets can run them).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolIn {
    #[serde(
        default,
        alias = "function_declarations",
        deserialize_with = "nullable"
    )]
    pub function_declarations: Vec<FunctionDeclaration>,
    #[serde(default, alias = "google_search")]
    pub google_search: Option<IgnoredAny>,
    #[serde(default, alias = "google_search_retrieval")]
    pub google_search_retrieval: Option<IgnoredAny>,
    #[serde(default, alias = "url_context")]
    pub url_context: Option<IgnoredAny>,
    #[serde(default, alias = "code_execution")]
    pub code_execution: Option<IgnoredAny>,
    #[serde(default, alias = "computer_use")]
    pub computer_use: Option<IgnoredAny>,
    #[serde(default, alias = "file_search")]
    pub file_search: Option<IgnoredAny>,
    #[serde(default, alias = "google_maps")]
    pub google_maps: Option<IgnoredAny>,
    #[serde(default, alias = "mcp_servers")]
    pub mcp_servers: Option<IgnoredAny>,
    /// Vertex's retrieval tools.
    #[serde(default)]
    pub retrieval: Option<IgnoredAny>,
    #[serde(default, alias = "enterprise_web_search")]
    pub enterprise_web_search: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FunctionDeclaration {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Google's OpenAPI subset.
    #[serde(default)]
    pub parameters: Option<Value>,
    /// JSON Schema.
    #[serde(default, alias = "parameters_json_schema")]
    pub parameters_json_schema: Option<Value>,
    #[serde(default)]
    pub response: Option<IgnoredAny>,
    #[serde(default, alias = "response_json_schema")]
    pub response_json_schema: Option<IgnoredAny>,
    #[serde(default)]
    pub behavior: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolConfig {
    #[serde(default, alias = "function_calling_config")]
    pub function_calling_config: Option<FunctionCallingConfig>,
    #[serde(default, alias = "retrieval_config")]
    pub retrieval_config: Option<IgnoredAny>,
    #[serde(default, alias = "include_server_side_tool_invocations")]
    pub include_server_side_tool_invocations: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FunctionCallingConfig {
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(
        default,
        alias = "allowed_function_names",
        deserialize_with = "nullable"
    )]
    pub allowed_function_names: Vec<String>,
    #[serde(default, alias = "stream_function_call_arguments")]
    pub stream_function_call_arguments: Option<bool>,
}

/// One of `safetySettings` (Google applies them; others have none).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SafetySetting {
    #[serde(default)]
    pub category: Option<IgnoredAny>,
    #[serde(default)]
    pub threshold: Option<IgnoredAny>,
    /// Vertex's.
    #[serde(default)]
    pub method: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerationConfig {
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default, alias = "top_p")]
    pub top_p: Option<f32>,
    /// An int32 in Google's schema (a fraction is refused, as Google does).
    #[serde(default, alias = "top_k")]
    pub top_k: Option<i32>,
    #[serde(default, alias = "max_output_tokens")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, alias = "stop_sequences", deserialize_with = "nullable")]
    pub stop_sequences: Vec<String>,
    #[serde(default, alias = "candidate_count")]
    pub candidate_count: Option<u32>,
    #[serde(default, alias = "presence_penalty")]
    pub presence_penalty: Option<f32>,
    #[serde(default, alias = "frequency_penalty")]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default, alias = "response_mime_type")]
    pub response_mime_type: Option<String>,
    /// Google's OpenAPI subset.
    #[serde(default, alias = "response_schema")]
    pub response_schema: Option<Value>,
    /// JSON Schema.
    #[serde(default, alias = "response_json_schema", alias = "_responseJsonSchema")]
    pub response_json_schema: Option<Value>,
    #[serde(default, alias = "thinking_config")]
    pub thinking_config: Option<ThinkingConfig>,
    #[serde(default, alias = "response_modalities", deserialize_with = "nullable")]
    pub response_modalities: Vec<String>,
    #[serde(default, alias = "speech_config")]
    pub speech_config: Option<IgnoredAny>,
    #[serde(default, alias = "image_config")]
    pub image_config: Option<IgnoredAny>,
    #[serde(default, alias = "audio_transcription_config")]
    pub audio_transcription_config: Option<IgnoredAny>,
    #[serde(default, alias = "response_logprobs")]
    pub response_logprobs: Option<bool>,
    #[serde(default)]
    pub logprobs: Option<u32>,
    /// A hint for how finely media is read: other targets have none.
    #[serde(default, alias = "media_resolution")]
    pub media_resolution: Option<IgnoredAny>,
    #[serde(default, alias = "enable_enhanced_civic_answers")]
    pub enable_enhanced_civic_answers: Option<bool>,
    /// Vertex's.
    #[serde(default, alias = "audio_timestamp")]
    pub audio_timestamp: Option<bool>,
    #[serde(default, alias = "routing_config")]
    pub routing_config: Option<IgnoredAny>,
    #[serde(default, alias = "model_selection_config")]
    pub model_selection_config: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThinkingConfig {
    #[serde(default, alias = "include_thoughts")]
    pub include_thoughts: Option<bool>,
    #[serde(default, alias = "thinking_budget")]
    pub thinking_budget: Option<i64>,
    #[serde(default, alias = "thinking_level")]
    pub thinking_level: Option<String>,
}

/// Reads a body as Google does: the typed request, or Google's 400 (its
/// message, no field: the message names the place, in Google's words).
/// The plain parse is the fast path; only a body that fails is read again
/// to find where.
pub fn read(bytes: &[u8]) -> Result<GenerateContentRequest, Invalid> {
    // Google reads a request message: a JSON object (serde would also
    // take a struct written as an array).
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Invalid {
            field: None,
            message: "Invalid JSON payload received. Expected an object.".into(),
        });
    }
    match serde_json::from_slice(bytes) {
        Ok(request) => Ok(request),
        Err(_) => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let refused = match serde_path_to_error::deserialize(&mut de) {
                Ok(request) => match de.end() {
                    Ok(()) => return Ok(request),
                    Err(e) => invalid::syntax(&e),
                },
                Err(e) => {
                    let path = invalid::google_path(&e.path().to_string());
                    invalid::google_message(&path, e.inner())
                }
            };
            Err(Invalid {
                field: None,
                message: invalid::bounded(refused),
            })
        }
    }
}

// === the hand-written readers ===

/// `null` as the default, as proto3 JSON reads it.
fn nullable<'de, D, T>(de: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(de)?.unwrap_or_default())
}

/// A map key, borrowed from the body where it holds no escape.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        de.deserialize_str(KeyVisitor)
    }
}

/// The fields of a `Content`.
const CONTENT_FIELDS: &[&str] = &["role", "parts"];

/// A content's parts, in as little memory as they take.
fn parts<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Box<[PartIn]>, A::Error> {
    Ok(map
        .next_value::<Option<Vec<PartIn>>>()?
        .unwrap_or_default()
        .into_boxed_slice())
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct ContentVisitor;
        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Content object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Content, A::Error> {
                let mut content = Content::default();
                while let Some(Key(key)) = map.next_key()? {
                    match &*key {
                        "role" => {
                            content.role = match map.next_value::<Option<Key<'de>>>()? {
                                None => None,
                                Some(Key(role)) => match &*role {
                                    "" => None,
                                    "user" => Some(Speaker::User),
                                    "model" => Some(Speaker::Model),
                                    _ => {
                                        return Err(de::Error::custom(
                                            "Please use a valid role: user, model.",
                                        ));
                                    }
                                },
                            }
                        }
                        "parts" => content.parts = parts(&mut map)?,
                        other => return Err(de::Error::unknown_field(other, CONTENT_FIELDS)),
                    }
                }
                Ok(content)
            }
        }
        de.deserialize_map(ContentVisitor)
    }
}

impl<'de> Deserialize<'de> for Instruction {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct InstructionVisitor;
        impl<'de> Visitor<'de> for InstructionVisitor {
            type Value = Instruction;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Content object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Instruction, A::Error> {
                let mut instruction = Instruction::default();
                while let Some(Key(key)) = map.next_key()? {
                    match &*key {
                        "role" => {
                            map.next_value::<Option<Key<'de>>>()?;
                        }
                        "parts" => instruction.parts = parts(&mut map)?,
                        other => return Err(de::Error::unknown_field(other, CONTENT_FIELDS)),
                    }
                }
                Ok(instruction)
            }
        }
        de.deserialize_map(InstructionVisitor)
    }
}

/// The fields of a `Part`, in Google's spelling (both are read).
const PART_FIELDS: &[&str] = &[
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
    "thought",
    "thoughtSignature",
    "partMetadata",
    "videoMetadata",
    "mediaResolution",
];

/// Google's metadata fields of a part that the gateway only forwards.
const PART_METADATA: &[&str] = &[
    "partMetadata",
    "part_metadata",
    "videoMetadata",
    "video_metadata",
    "mediaResolution",
    "media_resolution",
    "audioMetadata",
    "audio_metadata",
    "audioTranscription",
    "audio_transcription",
    "documentMetadata",
    "document_metadata",
    "mediaProcessing",
    "media_processing",
    "speechMetadata",
    "speech_metadata",
    "spreadsheetMetadata",
    "spreadsheet_metadata",
];

/// Google's message for a second data field in one part.
fn second_data<E: de::Error>(key: &str) -> E {
    E::custom(format_args!(
        "Invalid value at '{{path}}' (oneof), oneof field 'data' is already set. \
         Cannot set '{key}'"
    ))
}

impl<'de> Deserialize<'de> for PartIn {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_map(PartVisitor)
    }
}

struct PartVisitor;

impl<'de> Visitor<'de> for PartVisitor {
    type Value = PartIn;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Part object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PartIn, A::Error> {
        let mut data: Option<PartIn> = None;
        let mut thought = false;
        while let Some(Key(key)) = map.next_key()? {
            let read = match &*key {
                "text" => map
                    .next_value::<Option<String>>()?
                    .map(|text| PartIn::Text {
                        text: text.into_boxed_str(),
                        thought: false,
                    }),
                "inlineData" | "inline_data" => map
                    .next_value::<Option<Box<Blob>>>()?
                    .map(PartIn::InlineData),
                "fileData" | "file_data" => map
                    .next_value::<Option<Box<FileData>>>()?
                    .map(PartIn::FileData),
                "functionCall" | "function_call" => map
                    .next_value::<Option<Box<FunctionCall>>>()?
                    .map(PartIn::FunctionCall),
                "functionResponse" | "function_response" => map
                    .next_value::<Option<Box<FunctionResponse>>>()?
                    .map(PartIn::FunctionResponse),
                "executableCode" | "executable_code" => {
                    native(&mut map, NativePart::ExecutableCode)?
                }
                "codeExecutionResult" | "code_execution_result" => {
                    native(&mut map, NativePart::CodeExecutionResult)?
                }
                "toolCall" | "tool_call" => native(&mut map, NativePart::ToolCall)?,
                "toolResponse" | "tool_response" => native(&mut map, NativePart::ToolResponse)?,
                "thought" => {
                    thought = map.next_value::<Option<bool>>()?.unwrap_or(false);
                    continue;
                }
                "thoughtSignature" | "thought_signature" => {
                    map.next_value::<Option<Signature>>()?;
                    continue;
                }
                other if PART_METADATA.contains(&other) => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                other => return Err(de::Error::unknown_field(other, PART_FIELDS)),
            };
            if read.is_some() {
                if data.is_some() {
                    return Err(second_data(&key));
                }
                data = read;
            }
        }
        match data {
            Some(PartIn::Text { text, .. }) => Ok(PartIn::Text { text, thought }),
            Some(part) => Ok(part),
            None => Err(de::Error::custom(
                "* GenerateContentRequest.{path}.data: required oneof field 'data' must \
                 have one initialized field\n",
            )),
        }
    }
}

/// A part only Gemini reads: checked for being JSON, kept as its kind.
fn native<'de, A: MapAccess<'de>>(
    map: &mut A,
    kind: NativePart,
) -> Result<Option<PartIn>, A::Error> {
    Ok(map
        .next_value::<Option<IgnoredAny>>()?
        .map(|_| PartIn::Native(kind)))
}

/// A `thoughtSignature`: proto `bytes`, so base64 text in either alphabet,
/// padded or not (the Gemini CLI's `skip_thought_signature_validator` is
/// URL-safe base64). Checked, not kept: Gemini targets get the body as
/// sent, and no other target reads it.
struct Signature;

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct SignatureVisitor;
        impl<'de> Visitor<'de> for SignatureVisitor {
            type Value = Signature;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("base64 text (TYPE_BYTES)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Signature, E> {
                if is_base64(v) {
                    Ok(Signature)
                } else {
                    Err(E::custom(format_args!(
                        "Invalid value at '{{path}}' (TYPE_BYTES), Base64 decoding failed for {}",
                        Value::from(v)
                    )))
                }
            }
        }
        de.deserialize_str(SignatureVisitor)
    }
}

/// A `google.protobuf.Struct` (a function call's arguments, a function's
/// response): a JSON object, kept as sent; anything else is Google's 400
/// (a number or a list would reach a neutral target as "arguments" no
/// tool could read).
fn object<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Box<RawValue>>, D::Error> {
    let raw: Option<Box<RawValue>> = Option::deserialize(de)?;
    match raw {
        Some(raw) if !raw.get().trim_start().starts_with('{') => {
            Err(de::Error::custom(format_args!(
                "Invalid value at '{{path}}' (type.googleapis.com/google.protobuf.Struct), {}",
                raw.get()
            )))
        }
        other => Ok(other),
    }
}

/// Base64 as proto3 JSON reads `bytes`: the standard or the URL-safe
/// alphabet, with or without padding.
fn is_base64(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    let padding = s.len() - body.len();
    body.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'))
        && body.len() % 4 != 1
        && (padding == 0 || (padding <= 2 && s.len() % 4 == 0))
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
