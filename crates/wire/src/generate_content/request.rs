//! The `generateContent` body for a neutral request: the conversation as
//! Gemini turns, tools as `functionDeclarations`, the tool choice, the
//! generation config, and the wire types the body serializes from.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use understudy_types::{
    ChatRequest, Failure, FailureKind, Message, Part, ResponseFormat, Role, ToolChoice,
};

use super::schema;
use crate::signature::{self, Target};

/// The thought signature Google documents for function calls the model did
/// not produce itself (another provider's turns, a rebuilt history). Gemini 3
/// answers 400 when the first `functionCall` of a step comes back without a
/// signature (ai.google.dev/gemini-api/docs/thought-signatures). A call
/// turn this target made carries its own signature back (kept in the call's
/// id, see [`crate::signature`]); any other call turn carries this one.
pub const FOREIGN_THOUGHT_SIGNATURE: &str = "skip_thought_signature_validator";

/// The whole `generateContent` body for `request`.
pub fn wire_request<'a>(
    request: &'a ChatRequest,
    max_output_tokens: Option<u32>,
    target: &Target,
) -> Result<WireRequest<'a>, Failure> {
    let tools = (!request.tools.is_empty()).then(|| {
        [WireTool {
            function_declarations: request
                .tools
                .iter()
                .map(|t| WireFunctionDeclaration {
                    name: &t.name,
                    description: t.description.as_deref().unwrap_or(""),
                    parameters: t.parameters.as_ref().and_then(schema::parameters),
                })
                .collect(),
        }]
    });
    let tool_config = match (&request.tool_choice, tools.is_some()) {
        (Some(choice), true) => Some(WireToolConfig {
            function_calling_config: match choice {
                ToolChoice::Auto => WireFunctionCallingConfig::mode("AUTO"),
                ToolChoice::None => WireFunctionCallingConfig::mode("NONE"),
                ToolChoice::Required => WireFunctionCallingConfig::mode("ANY"),
                ToolChoice::Function(name) => WireFunctionCallingConfig {
                    mode: "ANY",
                    allowed_function_names: Some([name.as_str()]),
                },
            },
        }),
        _ => None,
    };
    let (response_mime_type, response_json_schema) = match &request.response_format {
        None | Some(ResponseFormat::Text) => (None, None),
        Some(ResponseFormat::JsonObject) => (Some("application/json"), None),
        Some(ResponseFormat::JsonSchema { schema, .. }) => (
            Some("application/json"),
            Some(schema::response_json_schema(schema)),
        ),
    };
    let config = WireGenerationConfig {
        temperature: request.temperature,
        top_p: request.top_p,
        max_output_tokens,
        stop_sequences: &request.stop,
        // Gemini's seed is an int32; a wider one is folded (truncated), so
        // the same seed always asks for the same sampling.
        seed: request.seed.map(|s| s as i32),
        presence_penalty: request.presence_penalty,
        frequency_penalty: request.frequency_penalty,
        response_mime_type,
        response_json_schema,
    };
    Ok(WireRequest {
        contents: contents(&request.messages, target)?,
        system_instruction: request.system.as_deref().map(|text| WireSystem {
            parts: [WirePart::text(Cow::Borrowed(text))],
        }),
        tools,
        tool_config,
        generation_config: (!config.is_empty()).then_some(config),
    })
}

/// The conversation as Gemini turns: assistant turns are `model`, tool
/// results are `functionResponse` parts of a `user` turn, and consecutive
/// turns of one role become one turn (so parallel results share a turn, as
/// Gemini requires). A call carries its thought signature only back to
/// the `target` that made it (see [`crate::signature`]); the first call of
/// any other turn carries Google's dummy, and ids go out without
/// signatures.
fn contents<'a>(messages: &'a [Message], target: &Target) -> Result<Vec<WireContent<'a>>, Failure> {
    // The function each call id named, for the results that answer them.
    let names: HashMap<&str, &str> = if messages.iter().any(|m| m.role == Role::Tool) {
        messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect()
    } else {
        HashMap::new()
    };
    let mut out: Vec<WireContent<'_>> = Vec::with_capacity(messages.len());
    for m in messages {
        let (role, parts) = match m.role {
            Role::User => ("user", content_parts(m)?),
            Role::Assistant => {
                let mut parts = content_parts(m)?;
                for (i, call) in m.tool_calls.iter().enumerate() {
                    let thought_signature = match target.signature_of(&call.id) {
                        Some(own) => Some(Cow::Owned(own)),
                        None => (i == 0).then_some(Cow::Borrowed(FOREIGN_THOUGHT_SIGNATURE)),
                    };
                    parts.push(WirePart {
                        function_call: Some(WireFunctionCall {
                            id: signature::unsigned(&call.id),
                            name: &call.name,
                            args: crate::arguments_object(call)?,
                        }),
                        thought_signature,
                        ..WirePart::default()
                    });
                }
                ("model", parts)
            }
            // Gemini has no system turn inside `contents`: the message's
            // text, marked as the system's, joins the user turn it sits by.
            Role::System => (
                "user",
                vec![WirePart::text(Cow::Owned(m.marked_system_text()))],
            ),
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or_default();
                let Some(&name) = names.get(id) else {
                    return Err(Failure::new(
                        FailureKind::BadRequest,
                        format!("tool result `{id}` answers no tool call in the conversation"),
                    ));
                };
                let part = WirePart {
                    function_response: Some(WireFunctionResponse {
                        id: signature::unsigned(id),
                        name,
                        response: tool_response(&crate::text_of(m)),
                    }),
                    ..WirePart::default()
                };
                ("user", vec![part])
            }
        };
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.parts.extend(parts),
            _ => out.push(WireContent { role, parts }),
        }
    }
    Ok(out)
}

/// A message's text and images as parts (empty text left out: Gemini
/// rejects an empty text part).
fn content_parts(m: &Message) -> Result<Vec<WirePart<'_>>, Failure> {
    if let [Part::Text { text }] = m.content.as_slice() {
        // The common case: one text, borrowed.
        return Ok(if text.is_empty() {
            Vec::new()
        } else {
            vec![WirePart::text(Cow::Borrowed(text))]
        });
    }
    let mut parts = Vec::with_capacity(m.content.len() + m.tool_calls.len());
    for p in &m.content {
        match p {
            Part::Text { text } if text.is_empty() => {}
            Part::Text { text } => parts.push(WirePart::text(Cow::Borrowed(text))),
            Part::Image { url, .. } => {
                let Some((mime_type, data)) = Part::inline_image(url) else {
                    // The engine marks remote images unsupported for this
                    // protocol and never routes them here.
                    return Err(Failure::new(
                        FailureKind::BadRequest,
                        "Gemini takes images only as inline `data:` URLs, not remote URLs",
                    ));
                };
                parts.push(WirePart {
                    inline_data: Some(WireBlob { mime_type, data }),
                    ..WirePart::default()
                });
            }
        }
    }
    Ok(parts)
}

/// A tool's result as a `functionResponse.response` object: the text itself
/// when it is a JSON object, else `{"result": text}`.
fn tool_response(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => Value::Object(object),
        _ => serde_json::json!({ "result": text }),
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WireRequest<'a> {
    contents: Vec<WireContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<WireSystem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<[WireTool<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<WireToolConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<WireGenerationConfig<'a>>,
}

#[derive(Debug, Serialize)]
struct WireContent<'a> {
    role: &'static str,
    parts: Vec<WirePart<'a>>,
}

#[derive(Debug, Serialize)]
struct WireSystem<'a> {
    parts: [WirePart<'a>; 1],
}

/// One part of a turn: exactly one of its data fields is set.
#[derive(Debug, Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct WirePart<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_data: Option<WireBlob<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<WireFunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<WireFunctionResponse<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<Cow<'static, str>>,
}

impl<'a> WirePart<'a> {
    fn text(text: Cow<'a, str>) -> Self {
        Self {
            text: Some(text),
            ..Self::default()
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireBlob<'a> {
    mime_type: &'a str,
    data: &'a str,
}

/// A call as the history holds it; the `id` is optional on the Gemini
/// Developer API (ai.google.dev/api/caching#FunctionCall) and is the
/// client's own, so a result pairs with its call by id as well as by name.
#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    id: &'a str,
    name: &'a str,
    args: Value,
}

#[derive(Debug, Serialize)]
struct WireFunctionResponse<'a> {
    id: &'a str,
    name: &'a str,
    response: Value,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireTool<'a> {
    function_declarations: Vec<WireFunctionDeclaration<'a>>,
}

#[derive(Debug, Serialize)]
struct WireFunctionDeclaration<'a> {
    name: &'a str,
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolConfig<'a> {
    function_calling_config: WireFunctionCallingConfig<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireFunctionCallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_function_names: Option<[&'a str; 1]>,
}

impl WireFunctionCallingConfig<'_> {
    fn mode(mode: &'static str) -> Self {
        Self {
            mode,
            allowed_function_names: None,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireGenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<Value>,
}

impl WireGenerationConfig<'_> {
    fn is_empty(&self) -> bool {
        self.temperature.is_none()
            && self.top_p.is_none()
            && self.max_output_tokens.is_none()
            && self.stop_sequences.is_empty()
            && self.seed.is_none()
            && self.presence_penalty.is_none()
            && self.frequency_penalty.is_none()
            && self.response_mime_type.is_none()
    }
}
