//! OpenAI Responses API request rules (the openai SDK's
//! `types/responses/response_create_params.py`), with OpenAI's messages:
//! `model` present; no Chat Completions or Anthropic fields (`messages`,
//! `system`, `max_tokens`…: "Unknown parameter"); `max_output_tokens`
//! from 16 to the model's limit; no `previous_response_id` (the simulator
//! keeps no responses: a gateway's own ids must not reach it); a `reasoning` input item only as this
//! simulator produced it (its id known, its `encrypted_content` the one
//! it minted for that id); every `function_call_output` answering a
//! `function_call` earlier in the input; item ids with their type's
//! prefix (`fc`, `msg`, `rs`).

use std::collections::HashSet;

use serde_json::Value;

use super::{Received, Violation};

/// Fields of other APIs that the Responses API refuses.
const FOREIGN_FIELDS: [&str; 6] = [
    "messages",
    "system",
    "max_tokens",
    "max_completion_tokens",
    "response_format",
    "stream_options",
];

/// Checks a Responses API request (`POST …/responses`); `minted` says
/// whether this simulator handed out a reasoning id (`id:rs_…`) or an
/// encrypted content.
pub(super) fn check(
    req: &Received,
    max_output_tokens: u64,
    minted: &dyn Fn(&str) -> bool,
) -> Result<(), Violation> {
    let path = req.path.split('?').next().unwrap_or_default();
    if req.method != "POST" || !path.ends_with("/responses") {
        return Ok(());
    }
    let invalid = |message: String, param: &str, code: Option<&str>| {
        Violation::openai(message, Some(param.to_owned()), code)
    };
    let body: Value = serde_json::from_slice(&req.body).map_err(|_| {
        Violation::openai(
            "We could not parse the JSON body of your request.".into(),
            None,
            None,
        )
    })?;
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err(invalid(
            "Missing required parameter: 'model'.".into(),
            "model",
            Some("missing_required_parameter"),
        ));
    }
    if let Some(field) = FOREIGN_FIELDS.iter().find(|f| body.get(**f).is_some()) {
        return Err(invalid(
            format!("Unknown parameter: '{field}'."),
            field,
            Some("unknown_parameter"),
        ));
    }
    if let Some(n) = body["max_output_tokens"].as_u64() {
        if !(16..=max_output_tokens).contains(&n) {
            return Err(invalid(
                format!(
                    "Invalid 'max_output_tokens': integer {n} out of range (16 to \
                     {max_output_tokens})."
                ),
                "max_output_tokens",
                Some("integer_out_of_range"),
            ));
        }
    }
    if let Some(id) = body["previous_response_id"].as_str() {
        return Err(invalid(
            format!("Previous response with id '{id}' not found."),
            "previous_response_id",
            Some("previous_response_not_found"),
        ));
    }
    match &body["input"] {
        Value::String(_) => Ok(()),
        Value::Array(items) => check_items(items, minted),
        _ => Err(invalid(
            "Missing required parameter: 'input'.".into(),
            "input",
            Some("missing_required_parameter"),
        )),
    }
}

/// The input items' rules.
fn check_items(items: &[Value], minted: &dyn Fn(&str) -> bool) -> Result<(), Violation> {
    let mut calls = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let param = |field: &str| Some(format!("input[{i}].{field}"));
        let prefix = match item["type"].as_str() {
            Some("function_call") => Some("fc"),
            Some("message") => Some("msg"),
            Some("reasoning") => Some("rs"),
            _ => None,
        };
        if let (Some(prefix), Some(id)) = (prefix, item["id"].as_str()) {
            if !id.starts_with(prefix) {
                return Err(Violation::openai(
                    format!(
                        "Invalid 'input[{i}].id': '{id}'. Expected an ID that begins with '{prefix}'."
                    ),
                    param("id"),
                    Some("invalid_value"),
                ));
            }
        }
        match item["type"].as_str() {
            Some("reasoning") => {
                let id = item["id"].as_str().unwrap_or_default();
                if !minted(&format!("id:{id}")) {
                    return Err(Violation::openai(
                        format!(
                            "Item with id '{id}' not found. Items are not persisted when `store` \
                             is set to false. Try again with `store` set to true, or remove this \
                             item from your input."
                        ),
                        param("id"),
                        None,
                    ));
                }
                if let Some(sealed) = item["encrypted_content"].as_str() {
                    let theirs = sealed.strip_prefix(id).is_some_and(|r| r.starts_with('.'));
                    if !theirs || !minted(sealed) {
                        return Err(Violation::openai(
                            format!(
                                "The encrypted content for item {id} could not be verified. \
                                 Reason: Encrypted content organization_id did not match the \
                                 target organization_id."
                            ),
                            param("encrypted_content"),
                            Some("invalid_encrypted_content"),
                        ));
                    }
                }
            }
            Some("function_call") => {
                if let Some(id) = item["call_id"].as_str() {
                    calls.insert(id.to_owned());
                }
            }
            Some("function_call_output") => {
                let id = item["call_id"].as_str().unwrap_or_default();
                if !calls.contains(id) {
                    return Err(Violation::openai(
                        format!("No tool call found for function call output with call_id {id}."),
                        param("call_id"),
                        None,
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
