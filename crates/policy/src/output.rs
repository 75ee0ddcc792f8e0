//! Whether an answer is usable as the request asked for it: tool-call
//! arguments that parse as JSON, and (with `json_object` or `json_schema`)
//! text that parses and validates against the request's schema. An answer
//! that is not is the target's failure (`invalid_output`), and the plan
//! moves on: the client never receives an answer that breaks its schema.
//!
//! Pure: the schema is compiled in memory (the validator crate is built
//! without remote `$ref` resolution, so nothing is ever fetched).
//!
//! A client's schema cannot be turned into a weapon: one beyond the limits
//! below (size, depth, `$ref`s, and the nodes it stands for with every
//! `$ref` inlined, which bounds the work of validating one value) is
//! refused before any provider is called; `pattern`s run on the `regex`
//! engine (linear time: a backreference or lookaround does not compile,
//! and the schema is refused); a failed validation is found with
//! `is_valid` (no error is collected) and explained only for a small
//! schema, by its first error, never by enumerating all of them. The run
//! also validates off the serving threads under a time budget
//! (core's `run/validate.rs`).

use std::collections::HashMap;

use serde_json::Value;
use understudy_types::chat::{ChatRequest, Completion, ResponseFormat};
use understudy_types::error::Error;
use understudy_types::failure::{Failure, FailureKind};

/// The largest schema accepted: bytes of its keys and strings.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// The deepest nesting of a schema, `$ref`s followed.
pub const MAX_SCHEMA_DEPTH: usize = 48;
/// The most `$ref`s in a schema.
pub const MAX_SCHEMA_REFS: usize = 256;
/// The most schema nodes a schema stands for with every `$ref` inlined (a
/// recursive one counted once): what one value may be checked against.
pub const MAX_SCHEMA_EXPANSION: usize = 20_000;
/// Up to this many nodes (inlined), an answer that breaks the schema is
/// explained by its first error; a larger schema says only that it broke.
const EXPLAINED_EXPANSION: usize = 2_000;
/// The largest compiled `pattern` (bytes), and its DFA cache.
const MAX_PATTERN_BYTES: usize = 1 << 20;

/// What a request expects of an answer, with its schema compiled once.
#[derive(Debug)]
pub struct Expected {
    /// A JSON answer (`json_object` or `json_schema`).
    json: bool,
    validator: Option<jsonschema::Validator>,
    /// The schema is small enough to explain a failure by its first error.
    explain: bool,
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
        let Some(schema) = schema else {
            return Ok(Self {
                json,
                validator: None,
                explain: false,
            });
        };
        let expansion = schema_limits(schema).map_err(|why| {
            Error::invalid(
                "response_format",
                format!("json_schema.schema is refused: {why}"),
            )
        })?;
        let patterns = jsonschema::PatternOptions::regex()
            .size_limit(MAX_PATTERN_BYTES)
            .dfa_size_limit(MAX_PATTERN_BYTES);
        let validator = jsonschema::options()
            .with_pattern_options(patterns)
            .build(schema)
            .map_err(|e| {
                Error::invalid(
                    "response_format",
                    format!(
                        "json_schema.schema is not a usable JSON Schema: {} (patterns take \
                         no backreferences or lookaround)",
                        bounded(&e.to_string())
                    ),
                )
            })?;
        Ok(Self {
            json,
            validator: Some(validator),
            explain: expansion <= EXPLAINED_EXPANSION,
        })
    }

    /// Whether checking an answer validates it against a schema (the
    /// costly part, which the run does off the serving threads).
    pub fn has_schema(&self) -> bool {
        self.validator.is_some()
    }

    /// Checks `completion` against what the request asked for.
    pub fn check(&self, completion: &Completion) -> Result<(), Failure> {
        for call in &completion.tool_calls {
            match serde_json::from_str::<serde_json::Value>(&call.arguments) {
                Ok(serde_json::Value::Object(_)) => {}
                Ok(_) => {
                    return Err(invalid(format!(
                        "the arguments of tool call `{}` ({}) are not a JSON object",
                        call.id, call.name
                    )));
                }
                Err(e) => {
                    return Err(invalid(format!(
                        "the arguments of tool call `{}` ({}) are not JSON: {e}",
                        call.id, call.name
                    )));
                }
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
            Some(validator) if validator.is_valid(&value) => Ok(()),
            Some(validator) if self.explain => match validator.validate(&value) {
                Err(e) => Err(invalid(format!(
                    "the answer breaks the schema at `{}`: {}",
                    e.instance_path(),
                    bounded(&e.to_string())
                ))),
                Ok(()) => Err(invalid("the answer does not match the schema".into())),
            },
            Some(_) => Err(invalid("the answer does not match the schema".into())),
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

/// The start of `text` (at most 300 characters), for a message.
fn bounded(text: &str) -> String {
    match text.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Checks `schema` against the limits; its size with every `$ref` inlined.
fn schema_limits(schema: &Value) -> Result<usize, String> {
    let mut walk = Walk {
        root: schema,
        memo: HashMap::new(),
        stack: Vec::new(),
        refs: 0,
        bytes: 0,
    };
    walk.size(schema, 0)
}

/// One walk of a schema for [`schema_limits`].
struct Walk<'a> {
    root: &'a Value,
    /// The inlined size of each `$ref` target met, by its JSON pointer.
    memo: HashMap<&'a str, usize>,
    /// The `$ref` targets being inlined (a `$ref` to one of them recurses).
    stack: Vec<&'a str>,
    refs: usize,
    bytes: usize,
}

impl<'a> Walk<'a> {
    fn size(&mut self, v: &'a Value, depth: usize) -> Result<usize, String> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(format!("it nests deeper than {MAX_SCHEMA_DEPTH} levels"));
        }
        let mut n = 0usize;
        match v {
            Value::Object(map) => {
                n += 1;
                for (key, child) in map {
                    self.bytes += key.len();
                    n += match key.as_str() {
                        "$ref" => self.reference(child, depth)?,
                        "$id" if depth > 0 && child.is_string() => {
                            return Err("only the root may set `$id`".into());
                        }
                        "$dynamicRef" | "$recursiveRef" => {
                            return Err(format!("`{key}` is not supported"));
                        }
                        _ => self.size(child, depth + 1)?,
                    };
                }
            }
            Value::Array(items) => {
                for item in items {
                    n += self.size(item, depth + 1)?;
                }
            }
            Value::String(s) => self.bytes += s.len(),
            _ => self.bytes += 8,
        }
        if self.bytes > MAX_SCHEMA_BYTES {
            return Err(format!("it is larger than {MAX_SCHEMA_BYTES} bytes"));
        }
        if n > MAX_SCHEMA_EXPANSION {
            return Err(format!(
                "with its `$ref`s inlined it stands for more than {MAX_SCHEMA_EXPANSION} schemas"
            ));
        }
        Ok(n)
    }

    /// The inlined size of the `$ref` `target`.
    fn reference(&mut self, target: &'a Value, depth: usize) -> Result<usize, String> {
        self.refs += 1;
        if self.refs > MAX_SCHEMA_REFS {
            return Err(format!("it has more than {MAX_SCHEMA_REFS} `$ref`s"));
        }
        let Some(pointer) = target.as_str().and_then(|r| r.strip_prefix('#')) else {
            return Err("a `$ref` must be a local JSON pointer (`#/…`)".into());
        };
        if !(pointer.is_empty() || pointer.starts_with('/')) {
            return Err("a `$ref` must be a local JSON pointer (`#/…`)".into());
        }
        if self.stack.contains(&pointer) {
            // Recursion: bounded by the value's own depth.
            return Ok(1);
        }
        if let Some(&n) = self.memo.get(pointer) {
            return Ok(n);
        }
        let Some(resolved) = self.root.pointer(pointer) else {
            return Err(format!("`$ref` `#{pointer}` points at nothing"));
        };
        self.stack.push(pointer);
        let n = self.size(resolved, depth + 1);
        self.stack.pop();
        let n = n?;
        self.memo.insert(pointer, n);
        Ok(n)
    }
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
    use understudy_types::chat::{FinishReason, ToolCall};

    use super::*;

    fn answer(text: &str) -> Completion {
        Completion {
            text: text.into(),
            tool_calls: Vec::new(),
            model: "m".into(),
            finish_reason: FinishReason::Stop,
            usage: None,
            response_id: None,
            native: None,
            rate_limits: None,
            fallback_credit: None,
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

    /// A 1.4 KB schema: twelve levels of `anyOf` over four
    /// `$ref`s to the level below (16.7 million paths).
    fn nested_any_of() -> serde_json::Value {
        let mut defs = serde_json::Map::new();
        defs.insert(
            "a0".into(),
            json!({"type": "object", "required": ["x"], "properties": {"x": {"type": "integer"}}}),
        );
        for i in 1..=12 {
            let below = json!({"$ref": format!("#/$defs/a{}", i - 1)});
            defs.insert(
                format!("a{i}"),
                json!({"anyOf": [below, below, below, below]}),
            );
        }
        json!({"$defs": defs, "$ref": "#/$defs/a12"})
    }

    fn schema(schema: serde_json::Value) -> ChatRequest {
        asking(Some(ResponseFormat::JsonSchema {
            name: "s".into(),
            schema,
            strict: false,
        }))
    }

    /// (schema, accepted)
    #[test]
    fn schemas_beyond_the_limits_are_refused_up_front() {
        let deep = (0..60).fold(
            json!({"type": "string"}),
            |inner, _| json!({"type": "object", "properties": {"a": inner}}),
        );
        let many_refs: serde_json::Map<String, serde_json::Value> = (0..300)
            .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/s"})))
            .collect();
        let cases = [
            (nested_any_of(), false),
            (json!({"type": "string", "pattern": "^(a|aa)+\\1$"}), false),
            (json!({"type": "string", "pattern": "^(?=a)a$"}), false),
            (json!({"type": "string", "pattern": "^[a-z]{2,8}$"}), true),
            (deep, false),
            (
                json!({"$defs": {"s": {"type": "string"}}, "properties": many_refs}),
                false,
            ),
            (json!({"$ref": "https://example.com/schema.json"}), false),
            (
                json!({"properties": {"a": {"$id": "urn:x", "type": "string"}}}),
                false,
            ),
            (json!({"$ref": "#/$defs/missing"}), false),
            (json!({"type": "string", "maxLength": 5}), true),
            // A recursive schema (a tree) is fine: its depth is the value's.
            (
                json!({"$defs": {"node": {"type": "object", "properties": {
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
                    "$ref": "#/$defs/node"}),
                true,
            ),
        ];
        for (s, accepted) in cases {
            let got = check_request(&schema(s.clone()));
            assert_eq!(got.is_ok(), accepted, "{s}: {got:?}");
            if let Err(e) = got {
                assert!(
                    matches!(
                        e,
                        Error::InvalidRequest {
                            field: "response_format",
                            ..
                        }
                    ),
                    "{e:?}"
                );
            }
        }
    }

    #[test]
    fn a_large_schema_says_only_that_it_broke_and_a_small_one_why() {
        // 4 × 4 × … well under the limits, but above the explained size.
        let mut defs = serde_json::Map::new();
        defs.insert("a0".into(), json!({"type": "object", "required": ["x"]}));
        for i in 1..=5 {
            let below = json!({"$ref": format!("#/$defs/a{}", i - 1)});
            defs.insert(
                format!("a{i}"),
                json!({"anyOf": [below, below, below, below]}),
            );
        }
        let large = schema(json!({"$defs": defs, "$ref": "#/$defs/a5"}));
        let got = check(&large, &answer(r#"{"y": 1}"#)).expect_err("it does not match");
        assert_eq!(got.kind, FailureKind::InvalidOutput);
        assert!(got.detail.contains("does not match the schema"), "{got:?}");
        assert!(check(&large, &answer(r#"{"x": 1}"#)).is_ok());
        let small = asking(Some(weather_schema()));
        let got = check(&small, &answer(r#"{"city": 1, "celsius": 2}"#)).expect_err("a wrong type");
        assert!(
            got.detail.contains("breaks the schema at `/city`"),
            "{got:?}"
        );
    }

    #[test]
    fn tool_arguments_must_be_an_object() {
        let req = asking(None);
        for (arguments, ok) in [
            ("{}", true),
            (r#"{"a": 1}"#, true),
            ("[1]", false),
            ("\"x\"", false),
            ("5", false),
            ("{", false),
        ] {
            let mut c = answer("");
            c.tool_calls = vec![ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: arguments.into(),
            }];
            let got = check(&req, &c);
            assert_eq!(got.is_ok(), ok, "{arguments}: {got:?}");
        }
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
