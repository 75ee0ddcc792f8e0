//! JSON Schema reduced to what Gemini accepts.
//!
//! Function `parameters` take Gemini's `Schema`, "a select subset of an
//! OpenAPI 3.0 schema object" whose fields are `type`, `format`, `title`,
//! `description`, `nullable`, `enum` (strings), `maxItems`, `minItems`,
//! `properties`, `required`, `minProperties`, `maxProperties`, `minLength`,
//! `maxLength`, `pattern`, `example`, `anyOf`, `propertyOrdering`,
//! `default`, `items`, `minimum`, `maximum` (ai.google.dev/api/caching#Schema,
//! the generativelanguage v1beta discovery document). An unknown field makes
//! the request fail, so everything else is removed (or rewritten: `$ref`
//! inlined, `const` to `enum`, `oneOf` to `anyOf`, `allOf` merged, type
//! unions to `nullable`/`anyOf`).
//!
//! A JSON answer's schema goes in `responseJsonSchema`, which takes JSON
//! Schema itself; of it "only the following properties are supported":
//! `$id`, `$defs`, `$ref`, `$anchor`, `type`, `format`, `title`,
//! `description`, `enum` (strings and numbers), `items`, `prefixItems`,
//! `minItems`, `maxItems`, `minimum`, `maximum`, `anyOf`, `oneOf`,
//! `properties`, `additionalProperties`, `required`, and the non-standard
//! `propertyOrdering`; beside a `$ref` only `$` keywords may stand
//! (GenerationConfig.responseJsonSchema in the v1beta reference).

use serde_json::{Map, Value, json};

/// How deep a schema may nest (with `$ref`s inlined) before the rest is
/// cut off, and how many schema nodes the reduction may produce; a
/// schema past either is garbage or a reference bomb.
const MAX_DEPTH: usize = 32;
const MAX_NODES: usize = 10_000;

/// A function's `parameters`, or `None` when the function takes none
/// (Gemini rejects an `OBJECT` whose `properties` are empty).
pub fn parameters(schema: &Value) -> Option<Value> {
    let mut reducer = Reducer {
        root: schema,
        refs: Vec::new(),
        nodes: 0,
    };
    let reduced = reducer.reduce(schema, 0);
    let no_properties = reduced
        .get("properties")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty);
    let is_object = reduced.get("type").and_then(Value::as_str) == Some("OBJECT");
    (!(is_object && no_properties) && reduced.as_object().is_some_and(|o| !o.is_empty()))
        .then_some(reduced)
}

/// Google's OpenAPI subset (a client's `parameters` or `responseSchema`)
/// as the JSON Schema the neutral request carries: type names in lower
/// case (`OBJECT` is `object`), `nullable` as a union with `null`, and the
/// keywords JSON Schema lacks (`propertyOrdering`, `example`) left out.
pub fn to_json_schema(schema: &Value) -> Value {
    to_json_node(schema, 0)
}

fn to_json_node(schema: &Value, depth: usize) -> Value {
    let Value::Object(s) = schema else {
        return schema.clone();
    };
    if depth > MAX_DEPTH {
        return json!({});
    }
    let nullable = s.get("nullable").and_then(Value::as_bool) == Some(true);
    let mut out = Map::new();
    for (key, value) in s {
        let value = match key.as_str() {
            "nullable" | "propertyOrdering" | "property_ordering" | "example" => continue,
            "type" => match value.as_str().map(str::to_ascii_lowercase) {
                Some(t) if nullable && t != "null" => json!([t, "null"]),
                Some(t) => Value::String(t),
                None => value.clone(),
            },
            "properties" => match value {
                Value::Object(props) => Value::Object(
                    props
                        .iter()
                        .map(|(k, v)| (k.clone(), to_json_node(v, depth + 1)))
                        .collect(),
                ),
                other => other.clone(),
            },
            "items" => to_json_node(value, depth + 1),
            "anyOf" => match value {
                Value::Array(all) => {
                    Value::Array(all.iter().map(|v| to_json_node(v, depth + 1)).collect())
                }
                other => other.clone(),
            },
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

/// Reduces one schema (with `root` as the document `$ref`s point into)
/// to the OpenAPI subset of Gemini's `Schema`.
struct Reducer<'a> {
    root: &'a Value,
    /// The `$ref`s being inlined, outermost first (a cycle stops here).
    refs: Vec<String>,
    nodes: usize,
}

impl Reducer<'_> {
    fn reduce(&mut self, schema: &Value, depth: usize) -> Value {
        self.nodes += 1;
        let Some(s) = schema.as_object() else {
            // `true` / `false` schemas and garbage: no constraint.
            return Value::Object(Map::new());
        };
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            return open_object(s);
        }
        if let Some(reference) = s.get("$ref").and_then(Value::as_str) {
            return self.inline(reference, s, depth);
        }
        let merged;
        let s = match s.get("allOf").and_then(Value::as_array) {
            Some(all) => {
                merged = merge_all_of(s, all, self.root);
                &merged
            }
            None => s,
        };
        self.reduce_object(s, depth)
    }

    /// A `$ref`'s target, inlined; siblings like `description` kept
    /// over the target's. A cycle or a reference that leads nowhere
    /// becomes an open object.
    fn inline(&mut self, reference: &str, s: &Map<String, Value>, depth: usize) -> Value {
        let target = resolve(self.root, reference);
        let Some(target) = target.filter(|_| !self.refs.iter().any(|r| r == reference)) else {
            return open_object(s);
        };
        self.refs.push(reference.to_owned());
        let mut out = self.reduce(target, depth + 1);
        self.refs.pop();
        if let Some(o) = out.as_object_mut() {
            for key in ["description", "title"] {
                if let Some(v @ Value::String(_)) = s.get(key) {
                    o.insert(key.to_owned(), v.clone());
                }
            }
        }
        out
    }

    fn reduce_object(&mut self, s: &Map<String, Value>, depth: usize) -> Value {
        let mut out = Map::new();
        let mut nullable = s.get("nullable") == Some(&Value::Bool(true));
        let any_of_types = reduce_type(s, &mut out, &mut nullable);
        let ty = out.get("type").and_then(Value::as_str).map(str::to_owned);
        copy_keywords(s, &mut out, ty.as_deref());
        reduce_enum(s, &mut out, &mut nullable, ty.as_deref());
        self.reduce_children(s, &mut out, depth);
        self.reduce_members(s, any_of_types, &mut out, &mut nullable, depth);
        if nullable {
            out.insert("nullable".into(), Value::Bool(true));
        }
        Value::Object(out)
    }

    /// `properties` (with the `required` and `propertyOrdering` that name
    /// them) and `items`, each reduced.
    fn reduce_children(
        &mut self,
        s: &Map<String, Value>,
        out: &mut Map<String, Value>,
        depth: usize,
    ) {
        if let Some(Value::Object(properties)) = s.get("properties") {
            let reduced: Map<String, Value> = properties
                .iter()
                .map(|(name, p)| (name.clone(), self.reduce(p, depth + 1)))
                .collect();
            if let Some(Value::Array(required)) = s.get("required") {
                let required: Vec<Value> = required
                    .iter()
                    .filter(|r| r.as_str().is_some_and(|r| reduced.contains_key(r)))
                    .cloned()
                    .collect();
                if !required.is_empty() {
                    out.insert("required".into(), Value::Array(required));
                }
            }
            if let Some(Value::Array(order)) = s.get("propertyOrdering") {
                if order
                    .iter()
                    .all(|o| o.as_str().is_some_and(|o| reduced.contains_key(o)))
                {
                    out.insert("propertyOrdering".into(), Value::Array(order.clone()));
                }
            }
            if !reduced.is_empty() {
                out.insert("properties".into(), Value::Object(reduced));
            }
        }
        if let Some(items @ Value::Object(_)) = s.get("items") {
            let reduced = self.reduce(items, depth + 1);
            out.insert("items".into(), reduced);
        }
    }

    /// `anyOf` (and `oneOf`, which Gemini lacks), with the members a type
    /// union left over: `null` members become `nullable`, and a single
    /// member left stands alone.
    fn reduce_members(
        &mut self,
        s: &Map<String, Value>,
        any_of_types: Vec<&str>,
        out: &mut Map<String, Value>,
        nullable: &mut bool,
        depth: usize,
    ) {
        let mut members: Vec<Value> = any_of_types
            .into_iter()
            .map(|t| json!({ "type": t }))
            .collect();
        for key in ["anyOf", "oneOf"] {
            for m in s.get(key).and_then(Value::as_array).into_iter().flatten() {
                let reduced = self.reduce(m, depth + 1);
                let null_only = reduced.get("type").is_none()
                    && (m.get("type").and_then(Value::as_str) == Some("null")
                        || m.get("const") == Some(&Value::Null));
                if null_only {
                    *nullable = true;
                } else {
                    *nullable |= reduced.get("nullable") == Some(&Value::Bool(true));
                    members.push(reduced);
                }
            }
        }
        match members.len() {
            0 => {}
            1 if out.get("type").is_none() => {
                if let Some(Value::Object(only)) = members.pop() {
                    for (k, v) in only {
                        out.entry(k).or_insert(v);
                    }
                }
            }
            _ => {
                out.insert("anyOf".into(), Value::Array(members));
            }
        }
    }
}

/// `type`: one name, upper case, into `out`; `null` in a union is
/// `nullable`. The names of a union of several types are returned, to
/// become `anyOf` members.
fn reduce_type(
    s: &Map<String, Value>,
    out: &mut Map<String, Value>,
    nullable: &mut bool,
) -> Vec<&'static str> {
    let mut any_of_types = Vec::new();
    match s.get("type") {
        Some(Value::String(t)) => match gemini_type(t) {
            Some("NULL") => *nullable = true,
            Some(t) => {
                out.insert("type".into(), json!(t));
            }
            None => {}
        },
        Some(Value::Array(types)) => {
            let named: Vec<&str> = types
                .iter()
                .filter_map(Value::as_str)
                .filter_map(gemini_type)
                .collect();
            *nullable |= named.contains(&"NULL");
            let named: Vec<&str> = named.into_iter().filter(|t| *t != "NULL").collect();
            match named.as_slice() {
                [] => {}
                [one] => {
                    out.insert("type".into(), json!(one));
                }
                many => any_of_types = many.to_vec(),
            }
        }
        _ => {}
    }
    any_of_types
}

/// The keywords Gemini takes as they are: text, numeric bounds, `example`,
/// and a `format` Gemini knows for the type `ty`.
fn copy_keywords(s: &Map<String, Value>, out: &mut Map<String, Value>, ty: Option<&str>) {
    for key in ["title", "description", "pattern"] {
        if let Some(v @ Value::String(_)) = s.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    for key in [
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "minProperties",
        "maxProperties",
    ] {
        if let Some(v @ Value::Number(_)) = s.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(v) = s.get("example") {
        out.insert("example".into(), v.clone());
    }
    // Gemini accepts few formats and fails on others (Firebase's
    // `Schema.format`: "must be either 'enum' or 'date-time'" for
    // strings); the number formats are OpenAPI's.
    if let Some(f) = s.get("format").and_then(Value::as_str) {
        let known = match ty {
            Some("STRING") => matches!(f, "enum" | "date-time"),
            Some("NUMBER") => matches!(f, "float" | "double"),
            Some("INTEGER") => matches!(f, "int32" | "int64"),
            _ => false,
        };
        if known {
            out.insert("format".into(), json!(f));
        }
    }
}

/// `enum` (and `const`): strings only, on a string; a `null` among the
/// values is `nullable`.
fn reduce_enum(
    s: &Map<String, Value>,
    out: &mut Map<String, Value>,
    nullable: &mut bool,
    ty: Option<&str>,
) {
    let values = match (s.get("enum"), s.get("const")) {
        (Some(Value::Array(values)), _) => Some(values.clone()),
        (None, Some(c)) => Some(vec![c.clone()]),
        _ => None,
    };
    if let Some(values) = values {
        *nullable |= values.contains(&Value::Null);
        let values: Vec<&Value> = values.iter().filter(|v| !v.is_null()).collect();
        let strings = !values.is_empty() && values.iter().all(|v| v.is_string());
        if strings && matches!(ty, None | Some("STRING")) {
            out.insert("type".into(), json!("STRING"));
            out.insert(
                "enum".into(),
                Value::Array(values.into_iter().cloned().collect()),
            );
        }
    }
}

/// What stands where a schema cannot be inlined (a cycle, a reference
/// that leads nowhere, too deep): an object, keeping its description.
fn open_object(s: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!("OBJECT"));
    if let Some(d @ Value::String(_)) = s.get("description") {
        out.insert("description".into(), d.clone());
    }
    Value::Object(out)
}

/// Gemini's name for a JSON Schema type.
fn gemini_type(t: &str) -> Option<&'static str> {
    Some(match t {
        "string" => "STRING",
        "number" => "NUMBER",
        "integer" => "INTEGER",
        "boolean" => "BOOLEAN",
        "array" => "ARRAY",
        "object" => "OBJECT",
        "null" => "NULL",
        _ => return None,
    })
}

/// A local `$ref` (`#`, `#/$defs/…`, `#/definitions/…`, any JSON
/// pointer into the document); remote ones resolve to nothing (the
/// gateway never fetches URLs).
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    let decoded = percent_decode(pointer)?;
    root.pointer(&decoded)
}

/// `%XX` escapes of a URI fragment, decoded.
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A schema with its `allOf` members folded in: properties and
/// `required` united, other keywords kept from the first that says them.
fn merge_all_of(s: &Map<String, Value>, all: &[Value], root: &Value) -> Map<String, Value> {
    let mut out: Map<String, Value> = s
        .iter()
        .filter(|(k, _)| *k != "allOf")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for member in all {
        // One level of `$ref` in a member is followed.
        let member = match member.get("$ref").and_then(Value::as_str) {
            Some(r) => resolve(root, r).unwrap_or(member),
            None => member,
        };
        let Some(member) = member.as_object() else {
            continue;
        };
        for (k, v) in member {
            match (k.as_str(), out.get_mut(k), v) {
                ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                    for (name, p) in theirs {
                        mine.entry(name.clone()).or_insert_with(|| p.clone());
                    }
                }
                ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                    for r in theirs {
                        if !mine.contains(r) {
                            mine.push(r.clone());
                        }
                    }
                }
                (_, None, _) => {
                    out.insert(k.clone(), v.clone());
                }
                _ => {}
            }
        }
    }
    out
}

/// A JSON answer's schema for `responseJsonSchema`: JSON Schema, with
/// the keywords Gemini does not support removed (`const` becomes
/// `enum`, `definitions` becomes `$defs`).
pub fn response_json_schema(schema: &Value) -> Value {
    response_node(schema, 0)
}

fn response_node(schema: &Value, depth: usize) -> Value {
    let Some(s) = schema.as_object() else {
        return schema.clone(); // `true` / `false` schemas stand as they are
    };
    let mut out = Map::new();
    if depth > MAX_DEPTH {
        return Value::Object(out);
    }
    let has_ref = s.contains_key("$ref");
    for (k, v) in s {
        // Beside a `$ref`, only `$` keywords may stand.
        if has_ref && !k.starts_with('$') && k != "definitions" {
            continue;
        }
        let sub = |v: &Value| response_node(v, depth + 1);
        let map_of = |v: &Value| match v {
            Value::Object(m) => Some(Value::Object(
                m.iter().map(|(name, p)| (name.clone(), sub(p))).collect(),
            )),
            _ => None,
        };
        let reduced = match k.as_str() {
            "$id" | "$anchor" | "title" | "description" | "format" => {
                v.is_string().then(|| v.clone())
            }
            "$ref" => v
                .as_str()
                .map(|r| json!(r.replacen("#/definitions/", "#/$defs/", 1))),
            "type" | "required" | "propertyOrdering" => Some(v.clone()),
            "minItems" | "maxItems" | "minimum" | "maximum" => v.is_number().then(|| v.clone()),
            "enum" => v.as_array().map(|values| {
                Value::Array(
                    values
                        .iter()
                        .filter(|x| x.is_string() || x.is_number())
                        .cloned()
                        .collect(),
                )
            }),
            "const" if v.is_string() || v.is_number() => {
                out.entry("enum").or_insert_with(|| json!([v]));
                None
            }
            "items" | "additionalProperties" => Some(sub(v)),
            "prefixItems" | "anyOf" | "oneOf" => v
                .as_array()
                .map(|members| Value::Array(members.iter().map(sub).collect())),
            "properties" | "$defs" => map_of(v),
            "definitions" => {
                if let Some(defs) = map_of(v) {
                    out.entry("$defs").or_insert(defs);
                }
                None
            }
            _ => None,
        };
        if let Some(reduced) = reduced {
            out.insert(k.clone(), reduced);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::generate_content::schema;

    #[test]
    fn parameters_reduce_to_the_schema_subset() {
        let got = schema::parameters(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "unit": {"type": ["string", "null"], "enum": ["c", "f", null], "default": "c"},
                "n": {"type": "integer", "enum": [1, 2], "format": "int32", "exclusiveMinimum": 0},
                "when": {"type": "string", "format": "uri", "examples": ["x"]},
                "kind": {"const": "weather"},
                "where": {"$ref": "#/$defs/place", "description": "the place"},
                "tags": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                "tree": {"$ref": "#/$defs/tree"}
            },
            "required": ["unit", "ghost"],
            "$defs": {
                "place": {"type": "object", "properties": {"city": {"type": "string"}}},
                "tree": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}
            },
            "strict": true
        }))
        .unwrap_or_default();
        assert_eq!(
            got,
            json!({
                "type": "OBJECT",
                "properties": {
                    "unit": {"type": "STRING", "enum": ["c", "f"], "nullable": true},
                    "n": {"type": "INTEGER", "format": "int32"},
                    "when": {"type": "STRING"},
                    "kind": {"type": "STRING", "enum": ["weather"]},
                    "where": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "description": "the place"},
                    "tags": {"type": "ARRAY", "items": {"type": "STRING", "nullable": true}},
                    "tree": {"type": "OBJECT", "properties": {"kids": {"type": "ARRAY", "items": {"type": "OBJECT"}}}}
                },
                "required": ["unit"]
            })
        );
    }

    #[test]
    fn no_parameters_is_no_schema() {
        assert_eq!(
            schema::parameters(&json!({"type": "object", "properties": {}})),
            None
        );
        assert_eq!(schema::parameters(&json!({"type": "object"})), None);
        assert_eq!(schema::parameters(&json!({})), None);
    }

    #[test]
    fn reference_bombs_stay_bounded() {
        let mut defs = serde_json::Map::new();
        for i in 0..40 {
            defs.insert(
                format!("d{i}"),
                json!({"type": "object", "properties": {
                    "a": {"$ref": format!("#/$defs/d{}", i + 1)},
                    "b": {"$ref": format!("#/$defs/d{}", i + 1)}
                }}),
            );
        }
        let bomb =
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs});
        let got = schema::parameters(&bomb).unwrap_or_default();
        assert!(got.to_string().len() < 4_000_000);
    }

    #[test]
    fn response_schema_keeps_json_schema_minus_the_unsupported() {
        let got = schema::response_json_schema(&json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "pattern": "x"},
                "kind": {"const": "a"},
                "items": {"type": "array", "items": {"$ref": "#/definitions/item", "description": "x"}}
            },
            "definitions": {"item": {"type": ["integer", "null"], "default": 1}},
            "required": ["name"],
            "additionalProperties": false
        }));
        assert_eq!(
            got,
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "kind": {"enum": ["a"]},
                    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}}
                },
                "$defs": {"item": {"type": ["integer", "null"]}},
                "required": ["name"],
                "additionalProperties": false
            })
        );
    }

    #[test]
    fn google_schema_reads_as_json_schema() {
        let google = json!({
            "type": "OBJECT",
            "properties": {
                "city": {"type": "STRING", "description": "where"},
                "days": {"type": "INTEGER", "nullable": true},
                "tags": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["a", "b"]}},
                "either": {"anyOf": [{"type": "NUMBER"}, {"type": "BOOLEAN"}]}
            },
            "required": ["city"],
            "propertyOrdering": ["city", "days"]
        });
        assert_eq!(
            schema::to_json_schema(&google),
            json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "where"},
                    "days": {"type": ["integer", "null"]},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                    "either": {"anyOf": [{"type": "number"}, {"type": "boolean"}]}
                },
                "required": ["city"]
            })
        );
    }
}
