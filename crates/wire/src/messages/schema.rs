//! A JSON Schema reduced to what Anthropic's structured outputs accept.

use serde_json::{Map, Value};

/// String formats structured outputs accept (anthropic-sdk-python
/// `lib/_parse/_transform.py`, `SupportedStringFormats`).
const STRING_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// How deep a schema may nest before it goes to the prompt instead.
const SCHEMA_DEPTH: usize = 64;

/// `schema` reduced to what structured outputs accept (platform docs,
/// structured-outputs "JSON Schema limitations"): every object closed with
/// `additionalProperties: false`, `oneOf` as `anyOf`, string formats and
/// `minItems` kept only where supported, and every other constraint
/// (`minimum`, `maxLength`, `pattern`, …) moved into the description, as
/// the SDK's `transform_schema` does. The gateway still validates the
/// answer against the original schema. `None` when a part of the schema has
/// no shape the API could take (a boolean schema, a schema without `type`,
/// `enum`, `const`, `anyOf`, `oneOf`, `allOf` or `$ref`, tuple `items`).
pub(super) fn structured_schema(schema: &Value) -> Option<Value> {
    reduce_schema(schema, 0)
}

fn reduce_schema(schema: &Value, depth: usize) -> Option<Value> {
    if depth > SCHEMA_DEPTH {
        return None;
    }
    let mut rest = schema.as_object()?.clone();
    let mut out = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(defs) = rest.remove(key) {
            let defs = defs
                .as_object()?
                .iter()
                .map(|(name, s)| Some((name.clone(), reduce_schema(s, depth + 1)?)))
                .collect::<Option<Map<_, _>>>()?;
            out.insert(key.into(), Value::Object(defs));
        }
    }
    if let Some(reference) = rest.remove("$ref") {
        out.insert("$ref".into(), reference);
        return Some(Value::Object(out));
    }
    let mut shaped = reduce_alternatives(&mut rest, &mut out, depth)?;
    let kind = rest.remove("type");
    let is = |name: &str| match &kind {
        Some(Value::String(k)) => k == name,
        Some(Value::Array(ks)) => ks.iter().any(|k| k == name),
        _ => false,
    };
    let (object, string, array) = (is("object"), is("string"), is("array"));
    if let Some(kind) = kind {
        out.insert("type".into(), kind);
        shaped = true;
    }
    if !shaped {
        return None;
    }
    for key in ["description", "title", "default"] {
        if let Some(v) = rest.remove(key) {
            out.insert(key.into(), v);
        }
    }
    for key in ["$schema", "$id", "$comment"] {
        rest.remove(key);
    }
    if object {
        reduce_object(&mut rest, &mut out, depth)?;
    }
    if string {
        if let Some(format) = rest.remove("format") {
            if format.as_str().is_some_and(|f| STRING_FORMATS.contains(&f)) {
                out.insert("format".into(), format);
            } else {
                rest.insert("format".into(), format);
            }
        }
    }
    if array {
        reduce_array(&mut rest, &mut out, depth)?;
    }
    describe_constraints(&rest, &mut out);
    Some(Value::Object(out))
}

/// `enum`, `const` and the combinators (`oneOf` as `anyOf`), moved from
/// `rest` to `out`: whether there was any, or `None` when one cannot be
/// reduced.
fn reduce_alternatives(
    rest: &mut Map<String, Value>,
    out: &mut Map<String, Value>,
    depth: usize,
) -> Option<bool> {
    let mut shaped = false;
    for key in ["enum", "const"] {
        if let Some(v) = rest.remove(key) {
            out.insert(key.into(), v);
            shaped = true;
        }
    }
    for (from, to) in [("anyOf", "anyOf"), ("oneOf", "anyOf"), ("allOf", "allOf")] {
        if let Some(list) = rest.remove(from) {
            if out.contains_key(to) {
                return None;
            }
            let list = list
                .as_array()?
                .iter()
                .map(|s| reduce_schema(s, depth + 1))
                .collect::<Option<Vec<_>>>()?;
            out.insert(to.into(), Value::Array(list));
            shaped = true;
        }
    }
    Some(shaped)
}

/// An object's properties, reduced, and the object closed with
/// `additionalProperties: false`.
fn reduce_object(
    rest: &mut Map<String, Value>,
    out: &mut Map<String, Value>,
    depth: usize,
) -> Option<()> {
    let properties = match rest.remove("properties") {
        Some(Value::Object(p)) => p
            .iter()
            .map(|(name, s)| Some((name.clone(), reduce_schema(s, depth + 1)?)))
            .collect::<Option<Map<_, _>>>()?,
        Some(_) => return None,
        None => Map::new(),
    };
    out.insert("properties".into(), Value::Object(properties));
    rest.remove("additionalProperties");
    out.insert("additionalProperties".into(), Value::Bool(false));
    if let Some(required) = rest.remove("required") {
        out.insert("required".into(), required);
    }
    Some(())
}

/// An array's `items`, reduced (tuple `items` have no shape the API
/// takes), and a `minItems` of 0 or 1.
fn reduce_array(
    rest: &mut Map<String, Value>,
    out: &mut Map<String, Value>,
    depth: usize,
) -> Option<()> {
    match rest.remove("items") {
        Some(items @ Value::Object(_)) => {
            out.insert("items".into(), reduce_schema(&items, depth + 1)?);
        }
        Some(_) => return None,
        None => {}
    }
    if let Some(min) = rest.remove("minItems") {
        if matches!(min.as_u64(), Some(0 | 1)) {
            out.insert("minItems".into(), min);
        } else {
            rest.insert("minItems".into(), min);
        }
    }
    Some(())
}

/// Every constraint left in `rest`, written into the description.
fn describe_constraints(rest: &Map<String, Value>, out: &mut Map<String, Value>) {
    if !rest.is_empty() {
        let constraints = rest
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let description = match out.get("description").and_then(Value::as_str) {
            Some(d) => format!("{d}\n\n{{{constraints}}}"),
            None => format!("{{{constraints}}}"),
        };
        out.insert("description".into(), Value::String(description));
    }
}
