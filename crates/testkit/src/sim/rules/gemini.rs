//! Gemini's `generateContent` request rules (wire-formats §3, §7), with the
//! API's own messages: roles `user` and `model` only; a `functionResponse`
//! only in the turn right after a model turn that called a function of
//! that name; every `thoughtSignature` one this simulator minted or
//! Google's documented dummy; and for a thinking model (Gemini 3), the
//! first `functionCall` part of each model turn in the current tool loop
//! signed (ai.google.dev/gemini-api/docs/thought-signatures: "strict
//! validation on all function calls within the current turn … we don't
//! validate on previous turns").

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
    roles(contents)?;
    signatures(contents, minted)?;
    responses_follow_calls(contents)?;
    if thinking {
        current_loop_signed(contents)?;
    }
    Ok(())
}

fn parts(content: &Value) -> &[Value] {
    content["parts"].as_array().map_or(&[], Vec::as_slice)
}

fn roles(contents: &[Value]) -> Result<(), Violation> {
    for c in contents {
        match c["role"].as_str() {
            Some("user" | "model") => {}
            _ => {
                return Err(Violation::gemini(
                    "Please use a valid role: user, model.".into(),
                ));
            }
        }
    }
    Ok(())
}

/// Every `thoughtSignature` must be one this model made (here: this
/// simulator) or the dummy.
fn signatures(contents: &[Value], minted: &dyn Fn(&str) -> bool) -> Result<(), Violation> {
    let signed = contents
        .iter()
        .flat_map(parts)
        .filter_map(|p| p.get("thoughtSignature"));
    for signature in signed {
        match signature.as_str() {
            Some(s) if s == DUMMY_SIGNATURE || minted(s) => {}
            _ => return Err(Violation::gemini("Corrupted thought signature.".into())),
        }
    }
    Ok(())
}

/// A turn with `functionResponse` parts follows a model turn that called
/// each of those functions.
fn responses_follow_calls(contents: &[Value]) -> Result<(), Violation> {
    for (i, c) in contents.iter().enumerate() {
        let responses: Vec<&str> = parts(c)
            .iter()
            .filter_map(|p| p.get("functionResponse"))
            .map(|r| r["name"].as_str().unwrap_or_default())
            .collect();
        if responses.is_empty() {
            continue;
        }
        let previous = i.checked_sub(1).and_then(|p| contents.get(p));
        let Some(previous) = previous.filter(|p| p["role"] == "model") else {
            return Err(Violation::gemini(
                "Please ensure that function response turn comes immediately after a function call turn.".into(),
            ));
        };
        let called: Vec<&str> = parts(previous)
            .iter()
            .filter_map(|p| p.get("functionCall"))
            .map(|f| f["name"].as_str().unwrap_or_default())
            .collect();
        if let Some(name) = responses.iter().find(|n| !called.contains(n)) {
            return Err(Violation::gemini(format!(
                "Please ensure that the function response turn answers the function calls of the function call turn: no call of `{name}` in contents[{}].",
                i - 1
            )));
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
            c["role"] == "user" && parts(c).iter().any(|p| p.get("functionResponse").is_none())
        })
        .map_or(0, |i| i + 1);
    for (i, c) in contents.iter().enumerate().skip(start) {
        if c["role"] != "model" {
            continue;
        }
        let first_call = parts(c)
            .iter()
            .enumerate()
            .find(|(_, p)| p.get("functionCall").is_some());
        if let Some((position, part)) = first_call {
            if part.get("thoughtSignature").is_none() {
                let name = part["functionCall"]["name"].as_str().unwrap_or_default();
                return Err(Violation::gemini(format!(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{name}` , position {} of contents[{i}]. Please refer to {SIGNATURE_DOCS} for more details.",
                    position + 1
                )));
            }
        }
    }
    Ok(())
}
