//! Gemini's `generateContent` request rules, with the
//! API's own messages:
//! - roles `user` and `model` only (a content's role may be left unset:
//!   "can be left blank or unset" for single-turn requests);
//! - a `functionResponse` only in the turn right after a model turn that
//!   called a function of that name, and every model turn with
//!   `functionCall` parts followed by a turn answering each of them: "the
//!   number of function response parts is equal to the number of function
//!   call parts of the function call turn", names matching;
//! - every `thoughtSignature` one this simulator minted, as it minted it,
//!   or Google's documented dummy; and for a thinking model (Gemini 3), the
//!   first `functionCall` part of each model turn in the current tool loop
//!   signed (ai.google.dev/gemini-api/docs/thought-signatures: "strict
//!   validation on all function calls within the current turn … we don't
//!   validate on previous turns");
//! - a function declaration's parameters given as `parameters` (OpenAPI)
//!   or `parametersJsonSchema` (JSON Schema), not both: the API reference
//!   says the latter "is mutually exclusive with parameters".
//!
//! - no field Google's JSON mapping does not know in the request, its
//!   contents and their parts ("Invalid JSON payload received. Unknown
//!   name …: Cannot find field."), and exactly one data field in a part
//!   (`Part.data` is a `oneof`);
//!
//! Google's JSON parser takes a field in camelCase or in snake_case (the
//! google-genai Python SDK sends `parameters_json_schema`), so every rule
//! reads both spellings.

use serde_json::Value;

use super::{Received, Violation};

/// The signature Google documents for calls the model did not make.
const DUMMY_SIGNATURE: &str = "skip_thought_signature_validator";

/// Where the thought-signature rules are documented (quoted in the API's
/// messages).
const SIGNATURE_DOCS: &str = "https://ai.google.dev/gemini-api/docs/thought-signatures";

/// Checks a `generateContent` / `streamGenerateContent` request; `minted`
/// says whether a signature is one this simulator made, `thinking` whether
/// the simulated model signs its calls and requires them back.
pub(super) fn check(
    req: &Received,
    thinking: bool,
    minted: &dyn Fn(&str) -> bool,
) -> Result<(), Violation> {
    let path = req.path.split('?').next().unwrap_or_default();
    if req.method != "POST"
        || !(path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent"))
    {
        return Ok(());
    }
    let body: Value = serde_json::from_slice(&req.body).map_err(|e| {
        Violation::gemini(format!(
            "Invalid JSON payload received. Unable to parse the request body: {e}"
        ))
    })?;
    let Some(contents) = body["contents"].as_array() else {
        return Err(Violation::gemini(
            "* GenerateContentRequest.contents: contents is not specified\n".into(),
        ));
    };
    known_fields(&body, contents)?;
    roles(contents)?;
    signatures(contents, minted)?;
    responses_follow_calls(contents)?;
    calls_answered(contents)?;
    declarations(&body)?;
    if thinking {
        current_loop_signed(contents)?;
    }
    Ok(())
}

/// The fields of a `GenerateContentRequest`, camelCase (snake_case is
/// read as its camelCase spelling).
const REQUEST_FIELDS: &[&str] = &[
    "model",
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "safetySettings",
    "generationConfig",
    "cachedContent",
    "labels",
    "serviceTier",
    "store",
    "continuationToken",
];

/// The fields of a `Part` that hold its data: exactly one is set.
const PART_DATA: &[&str] = &[
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
];

/// The other fields of a `Part`.
const PART_METADATA: &[&str] = &[
    "thought",
    "thoughtSignature",
    "partMetadata",
    "videoMetadata",
    "mediaResolution",
    "audioMetadata",
    "audioTranscription",
    "documentMetadata",
    "mediaProcessing",
    "speechMetadata",
    "spreadsheetMetadata",
];

/// A snake_case field name in camelCase (`inline_data` → `inlineData`).
fn camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' && !out.is_empty() {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Google's message for a field its JSON mapping does not know.
fn unknown(name: &str, at: &str) -> Violation {
    Violation::gemini(if at.is_empty() {
        format!("Invalid JSON payload received. Unknown name \"{name}\": Cannot find field.")
    } else {
        format!(
            "Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field."
        )
    })
}

/// Every field of the request, its contents and their parts is one Google
/// defines, and every part holds exactly one kind of data.
fn known_fields(body: &Value, contents: &[Value]) -> Result<(), Violation> {
    let Some(request) = body.as_object() else {
        return Err(Violation::gemini(
            "Invalid JSON payload received. Expected an object.".into(),
        ));
    };
    if let Some(name) = request
        .keys()
        .find(|k| !REQUEST_FIELDS.contains(&camel(k).as_str()))
    {
        return Err(unknown(name, ""));
    }
    for (i, content) in contents.iter().enumerate() {
        let Some(content) = content.as_object() else {
            return Err(Violation::gemini(format!(
                "Invalid value at 'contents[{i}]' (type.googleapis.com/google.ai.generativelanguage.v1beta.Content), {content}"
            )));
        };
        if let Some(name) = content
            .keys()
            .find(|k| !matches!(k.as_str(), "role" | "parts"))
        {
            return Err(unknown(name, &format!("contents[{i}]")));
        }
        let parts = content.get("parts").and_then(Value::as_array);
        for (j, part) in parts.into_iter().flatten().enumerate() {
            let at = format!("contents[{i}].parts[{j}]");
            let Some(part) = part.as_object() else {
                return Err(unknown("parts", &format!("contents[{i}]")));
            };
            let mut data = 0;
            for (name, value) in part {
                let name_camel = camel(name);
                if PART_DATA.contains(&name_camel.as_str()) {
                    data += usize::from(!value.is_null());
                } else if !PART_METADATA.contains(&name_camel.as_str()) {
                    return Err(unknown(name, &at));
                }
            }
            if data != 1 {
                return Err(Violation::gemini(if data == 0 {
                    format!(
                        "* GenerateContentRequest.{at}.data: required oneof field 'data' must have one initialized field\n"
                    )
                } else {
                    format!("Invalid value at '{at}' (oneof), oneof field 'data' is already set.")
                }));
            }
        }
    }
    Ok(())
}

/// The member `camel` of `v`, or its snake_case spelling `snake`.
fn field<'a>(v: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    v.get(camel).or_else(|| v.get(snake))
}

fn parts(content: &Value) -> &[Value] {
    content["parts"].as_array().map_or(&[], Vec::as_slice)
}

fn function_call(part: &Value) -> Option<&Value> {
    field(part, "functionCall", "function_call")
}

fn function_response(part: &Value) -> Option<&Value> {
    field(part, "functionResponse", "function_response")
}

/// The names of the functions a content calls, in order.
fn called(content: &Value) -> Vec<&str> {
    parts(content)
        .iter()
        .filter_map(function_call)
        .map(|f| f["name"].as_str().unwrap_or_default())
        .collect()
}

/// The names of the functions a content answers, in order.
fn answered(content: &Value) -> Vec<&str> {
    parts(content)
        .iter()
        .filter_map(function_response)
        .map(|r| r["name"].as_str().unwrap_or_default())
        .collect()
}

fn roles(contents: &[Value]) -> Result<(), Violation> {
    for c in contents {
        match c.get("role").map(Value::as_str) {
            None | Some(Some("user" | "model")) => {}
            _ => {
                return Err(Violation::gemini(
                    "Please use a valid role: user, model.".into(),
                ));
            }
        }
    }
    Ok(())
}

/// `s` in the standard base64 alphabet, padded (proto3 JSON takes either
/// alphabet, with or without padding).
fn standard_base64(s: &str) -> String {
    let mut out: String = s
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while out.len() % 4 != 0 {
        out.push('=');
    }
    out
}

/// Every `thoughtSignature` must be one this model made (here: this
/// simulator) or the dummy.
fn signatures(contents: &[Value], minted: &dyn Fn(&str) -> bool) -> Result<(), Violation> {
    let signed = contents
        .iter()
        .flat_map(parts)
        .filter_map(|p| field(p, "thoughtSignature", "thought_signature"));
    for signature in signed {
        if !signature.is_string() {
            return Err(Violation::gemini(format!(
                "Invalid value at 'thought_signature' (TYPE_BYTES), {signature}"
            )));
        }
        match signature.as_str() {
            // Google reads `bytes` as base64 in either alphabet, and the
            // Python SDK sends back a signature it decoded in the URL-safe
            // one: the same bytes are the same signature.
            Some(s) if s == DUMMY_SIGNATURE || minted(s) || minted(&standard_base64(s)) => {}
            _ => return Err(Violation::gemini("Corrupted thought signature.".into())),
        }
    }
    Ok(())
}

/// A turn with `functionResponse` parts follows a model turn that called
/// each of those functions.
fn responses_follow_calls(contents: &[Value]) -> Result<(), Violation> {
    for (i, c) in contents.iter().enumerate() {
        let responses = answered(c);
        if responses.is_empty() {
            continue;
        }
        let previous = i.checked_sub(1).and_then(|p| contents.get(p));
        let Some(previous) = previous.filter(|p| p["role"] == "model") else {
            return Err(Violation::gemini(
                "Please ensure that function response turn comes immediately after a function call turn.".into(),
            ));
        };
        let called = called(previous);
        if let Some(name) = responses.iter().find(|n| !called.contains(n)) {
            return Err(Violation::gemini(format!(
                "Please ensure that the function response turn answers the function calls of the function call turn: no call of `{name}` in contents[{}].",
                i - 1
            )));
        }
    }
    Ok(())
}

/// A model turn with `functionCall` parts is followed by a user turn with
/// as many `functionResponse` parts, one per call, names matching. (A call
/// turn that ends the contents is not checked: nothing answers it yet.)
fn calls_answered(contents: &[Value]) -> Result<(), Violation> {
    for (i, pair) in contents.windows(2).enumerate() {
        let calls = called(&pair[0]);
        if calls.is_empty() {
            continue;
        }
        let mut responses = answered(&pair[1]);
        if pair[1]["role"] == "model" || responses.len() != calls.len() {
            return Err(Violation::gemini(
                "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.".into(),
            ));
        }
        for name in calls {
            let Some(at) = responses.iter().position(|r| *r == name) else {
                return Err(Violation::gemini(format!(
                    "Please ensure that the function response turn answers the function calls of the function call turn: no response to `{name}` in contents[{}].",
                    i + 1
                )));
            };
            responses.swap_remove(at);
        }
    }
    Ok(())
}

/// No function declaration gives its parameters both ways.
fn declarations(body: &Value) -> Result<(), Violation> {
    let tools = body["tools"].as_array().map_or(&[][..], Vec::as_slice);
    for (t, tool) in tools.iter().enumerate() {
        let declared = field(tool, "functionDeclarations", "function_declarations")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for (d, declaration) in declared.iter().enumerate() {
            let json_schema = field(
                declaration,
                "parametersJsonSchema",
                "parameters_json_schema",
            );
            if declaration.get("parameters").is_some() && json_schema.is_some() {
                return Err(Violation::gemini(format!(
                    "* GenerateContentRequest.tools[{t}].function_declarations[{d}]: parameters_json_schema is mutually exclusive with parameters\n"
                )));
            }
        }
    }
    Ok(())
}

/// The current turn starts at the last user turn with ordinary content
/// (not only function responses); in it, each model turn's first
/// `functionCall` part must carry a signature.
fn current_loop_signed(contents: &[Value]) -> Result<(), Violation> {
    let start = contents
        .iter()
        .rposition(|c| {
            c["role"] != "model" && parts(c).iter().any(|p| function_response(p).is_none())
        })
        .map_or(0, |i| i + 1);
    for (i, c) in contents.iter().enumerate().skip(start) {
        if c["role"] != "model" {
            continue;
        }
        let first_call = parts(c)
            .iter()
            .enumerate()
            .find_map(|(at, p)| function_call(p).map(|call| (at, p, call)));
        if let Some((position, part, call)) = first_call {
            if field(part, "thoughtSignature", "thought_signature").is_none() {
                let name = call["name"].as_str().unwrap_or_default();
                return Err(Violation::gemini(format!(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{name}` , position {} of contents[{i}]. Please refer to {SIGNATURE_DOCS} for more details.",
                    position + 1
                )));
            }
        }
    }
    Ok(())
}
