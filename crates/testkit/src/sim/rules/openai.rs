//! OpenAI Chat Completions request rules, with
//! OpenAI's own messages: an output budget (`max_tokens`,
//! `max_completion_tokens`) within the model's limit; `user` at most 64
//! characters; roles `system`, `developer`, `user`, `assistant`, `tool`;
//! an assistant message with `tool_calls` followed by `tool` messages that
//! answer each call, and every `tool` message answering a call of the
//! assistant message before its run of tool messages.

use serde_json::Value;

use super::{Received, Violation};

/// The most characters OpenAI takes in `user`.
const MAX_USER_CHARS: usize = 64;

/// Checks a Chat Completions request (`POST …/chat/completions`).
pub(super) fn check(req: &Received, max_output_tokens: u64) -> Result<(), Violation> {
    let path = req.path.split('?').next().unwrap_or_default();
    if req.method != "POST" || !path.ends_with("/chat/completions") {
        return Ok(());
    }
    let body: Value = serde_json::from_slice(&req.body).map_err(|_| {
        Violation::openai(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't \
             using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was \
             sent was not valid JSON. If you have trouble figuring out how to fix this, please \
             contact us through our help center at help.openai.com.)"
                .into(),
            None,
            None,
        )
    })?;
    for field in ["max_tokens", "max_completion_tokens"] {
        if let Some(n) = body[field].as_u64().filter(|n| *n > max_output_tokens) {
            return Err(Violation::openai(
                format!(
                    "{field} is too large: {n}. This model supports at most {max_output_tokens} \
                     completion tokens, whereas you provided {n}."
                ),
                Some(field.into()),
                Some("invalid_value"),
            ));
        }
    }
    if let Some(user) = body["user"].as_str() {
        let n = user.chars().count();
        if n > MAX_USER_CHARS {
            return Err(Violation::openai(
                format!(
                    "Invalid 'user': string too long. Expected a string with maximum length \
                     {MAX_USER_CHARS}, but got a string with length {n} instead."
                ),
                Some("user".into()),
                Some("string_above_max_length"),
            ));
        }
    }
    let Some(messages) = body["messages"].as_array() else {
        return Err(Violation::openai(
            "Missing required parameter: 'messages'.".into(),
            Some("messages".into()),
            Some("missing_required_parameter"),
        ));
    };
    roles(messages)?;
    tool_pairing(messages)
}

fn roles(messages: &[Value]) -> Result<(), Violation> {
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if !matches!(role, "system" | "developer" | "user" | "assistant" | "tool") {
            return Err(Violation::openai(
                format!(
                    "Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', \
                     'tool', and 'developer'."
                ),
                Some(format!("messages[{i}].role")),
                Some("invalid_value"),
            ));
        }
    }
    Ok(())
}

/// The ids of an assistant message's `tool_calls`.
fn call_ids(message: &Value) -> Vec<&str> {
    message["tool_calls"]
        .as_array()
        .map(|calls| calls.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default()
}

fn tool_pairing(messages: &[Value]) -> Result<(), Violation> {
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str() {
            Some("assistant") => {
                let calls = call_ids(m);
                let answered: Vec<&str> = messages[i + 1..]
                    .iter()
                    .take_while(|next| next["role"] == "tool")
                    .filter_map(|next| next["tool_call_id"].as_str())
                    .collect();
                let missing: Vec<&str> = calls
                    .into_iter()
                    .filter(|id| !answered.contains(id))
                    .collect();
                if !missing.is_empty() {
                    return Err(Violation::openai(
                        format!(
                            "An assistant message with 'tool_calls' must be followed by tool messages \
                             responding to each 'tool_call_id'. The following tool_call_ids did not have \
                             response messages: {}",
                            missing.join(", ")
                        ),
                        Some(format!("messages.[{i}].role")),
                        None,
                    ));
                }
            }
            Some("tool") => {
                // The message before this run of tool messages must have
                // made the call.
                let caller = messages[..i].iter().rev().find(|p| p["role"] != "tool");
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                let answers = caller
                    .filter(|p| p["role"] == "assistant")
                    .is_some_and(|p| call_ids(p).contains(&id));
                if !answers {
                    return Err(Violation::openai(
                        "Invalid parameter: messages with role 'tool' must be a response to a \
                         preceeding message with 'tool_calls'."
                            .into(),
                        Some(format!("messages.[{i}].role")),
                        None,
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
