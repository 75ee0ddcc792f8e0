//! Whether an answer is usable as the request asked for it: tool-call
//! arguments that parse as JSON, and (with `json_object` or `json_schema`)
//! text that parses and validates against the request's schema. An answer
//! that is not is the target's failure (`invalid_output`), and the plan
//! moves on: the client never receives an answer that breaks its schema.
//!
//! Pure: the schema is compiled in memory (the validator crate is built
//! without remote `$ref` resolution, so nothing is ever fetched).

use crate::chat::{ChatRequest, Completion, ResponseFormat};
use crate::error::Error;
use crate::failure::{Failure, FailureKind};

/// What a request expects of an answer, with its schema compiled once.
#[derive(Debug)]
pub struct Expected {
    /// A JSON answer (`json_object` or `json_schema`).
    json: bool,
    validator: Option<jsonschema::Validator>,
}

impl Expected {
    /// What `request` expects; a `json_schema` that does not compile is the
    /// client's error, found before any provider is called.
    pub fn of(request: &ChatRequest) -> Result<Self, Error> {
        let (json, schema) = match &request.response_format {
            None | Some(ResponseFormat::Text) => (false, None),
            Some(ResponseFormat::JsonObject) => (true, None),
            Some(ResponseFormat::JsonSchema { schema, .. }) => (true, Some(schema)),
        };
        let validator = match schema {
            Some(schema) => Some(jsonschema::validator_for(schema).map_err(|e| {
                Error::invalid(
                    "response_format",
                    format!("json_schema.schema is not a usable JSON Schema: {e}"),
                )
            })?),
            None => None,
        };
        Ok(Self { json, validator })
    }

    /// Checks `completion` against what the request asked for.
    pub fn check(&self, completion: &Completion) -> Result<(), Failure> {
        for call in &completion.tool_calls {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(&call.arguments) {
                return Err(invalid(format!(
                    "the arguments of tool call `{}` ({}) are not JSON: {e}",
                    call.id, call.name
                )));
            }
        }
        // A model that calls tools has not answered yet: its text is not the
        // structured answer.
        if !completion.tool_calls.is_empty() || !self.json {
            return Ok(());
        }
        let value: serde_json::Value = serde_json::from_str(&completion.text)
            .map_err(|e| invalid(format!("the answer is not JSON: {e}")))?;
        match &self.validator {
            None if !value.is_object() => {
                Err(invalid("the answer is JSON but not an object".into()))
            }
            None => Ok(()),
            Some(validator) => match validator.iter_errors(&value).next() {
                None => Ok(()),
                Some(e) => Err(invalid(format!(
                    "the answer breaks the schema at `{}`: {e}",
                    e.instance_path()
                ))),
            },
        }
    }
}

/// Rejects a request whose `json_schema` is not a schema the validator can
/// compile, before any provider is called.
pub fn check_request(request: &ChatRequest) -> Result<(), Error> {
    Expected::of(request).map(|_| ())
}

/// Tidies what providers vary on without changing its meaning: empty
/// tool-call arguments become `{}`, and a JSON answer wrapped in a
/// Markdown code fence loses the fence.
pub fn normalize(request: &ChatRequest, completion: &mut Completion) {
    for call in &mut completion.tool_calls {
        if call.arguments.trim().is_empty() {
            call.arguments = "{}".into();
        }
    }
    let wants_json = matches!(
        request.response_format,
        Some(ResponseFormat::JsonObject | ResponseFormat::JsonSchema { .. })
    );
    if wants_json {
        if let Some(inner) = unfence(&completion.text) {
            completion.text = inner.to_owned();
        }
    }
}

/// Checks `completion` against what `request` asked for (compiling its
/// schema; a run keeps an [`Expected`] instead).
pub fn check(request: &ChatRequest, completion: &Completion) -> Result<(), Failure> {
    match Expected::of(request) {
        Ok(expected) => expected.check(completion),
        Err(e) => Err(invalid(format!(
            "the request's schema does not compile: {e}"
        ))),
    }
}

fn invalid(detail: String) -> Failure {
    Failure::new(FailureKind::InvalidOutput, detail)
}

/// The inside of a Markdown code fence around the whole text, if any.
fn unfence(text: &str) -> Option<&str> {
    let t = text.trim();
    let rest = t.strip_prefix("```")?.strip_suffix("```")?;
    let body = match rest.split_once('\n') {
        Some((lang, body)) if !lang.trim_start().starts_with(['{', '[']) => body,
        _ => rest,
    };
    Some(body.trim())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::chat::{FinishReason, ToolCall};

    fn answer(text: &str) -> Completion {
        Completion {
            text: text.into(),
            tool_calls: Vec::new(),
            model: "m".into(),
            finish_reason: FinishReason::Stop,
            usage: None,
            native: None,
        }
    }

    fn asking(format: Option<ResponseFormat>) -> ChatRequest {
        ChatRequest {
            response_format: format,
            ..ChatRequest::user("x")
        }
    }

    fn weather_schema() -> ResponseFormat {
        ResponseFormat::JsonSchema {
            name: "weather".into(),
            schema: json!({
                "type": "object",
                "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
                "required": ["city", "celsius"],
                "additionalProperties": false
            }),
            strict: true,
        }
    }

    #[test]
    fn answers_against_formats() {
        // (format, text, valid)
        let cases = [
            (None, "not json at all", true),
            (Some(ResponseFormat::Text), "plain", true),
            (Some(ResponseFormat::JsonObject), r#"{"a": 1}"#, true),
            (Some(ResponseFormat::JsonObject), "[1, 2]", false),
            (Some(ResponseFormat::JsonObject), "{\"a\": ", false),
            (
                Some(weather_schema()),
                r#"{"city": "Oslo", "celsius": -3.5}"#,
                true,
            ),
            (Some(weather_schema()), r#"{"city": "Oslo"}"#, false),
            (
                Some(weather_schema()),
                r#"{"city": "Oslo", "celsius": "cold"}"#,
                false,
            ),
            (Some(weather_schema()), "Sure! Here it is.", false),
        ];
        for (format, text, valid) in cases {
            let req = asking(format.clone());
            let got = check(&req, &answer(text));
            assert_eq!(got.is_ok(), valid, "{format:?} {text}: {got:?}");
            if let Err(f) = got {
                assert_eq!(f.kind, FailureKind::InvalidOutput);
            }
        }
    }

    #[test]
    fn tool_arguments_must_parse_and_empty_ones_become_an_object() {
        let req = asking(Some(weather_schema()));
        let mut c = answer("");
        c.tool_calls = vec![ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: String::new(),
        }];
        normalize(&req, &mut c);
        assert_eq!(c.tool_calls[0].arguments, "{}");
        assert!(
            check(&req, &c).is_ok(),
            "tool calls are not the JSON answer"
        );
        c.tool_calls[0].arguments = "{\"city\": ".into();
        assert!(check(&req, &c).is_err());
    }

    #[test]
    fn fenced_json_is_unwrapped_only_for_json_requests() {
        let fenced = "```json\n{\"city\": \"Oslo\", \"celsius\": 1}\n```";
        let mut c = answer(fenced);
        normalize(&asking(Some(weather_schema())), &mut c);
        assert_eq!(c.text, "{\"city\": \"Oslo\", \"celsius\": 1}");
        let mut plain = answer(fenced);
        normalize(&asking(None), &mut plain);
        assert_eq!(plain.text, fenced);
    }

    #[test]
    fn a_schema_that_does_not_compile_is_the_client_s_error() {
        let req = asking(Some(ResponseFormat::JsonSchema {
            name: "bad".into(),
            schema: json!({"type": "no-such-type"}),
            strict: false,
        }));
        assert!(matches!(
            check_request(&req),
            Err(Error::InvalidRequest {
                field: "response_format",
                ..
            })
        ));
        assert!(check_request(&asking(Some(weather_schema()))).is_ok());
    }
}
