//! Bedrock Converse's cache points: `{"cachePoint": {"type": "default",
//! "ttl"?}}` blocks in `system`, a message's content and
//! `toolConfig.tools`, checked as bedrock-runtime checks them and turned
//! into the Messages API's `cache_control` on the block before each, so the
//! prompt cache serves Converse as it serves Claude's own API.

use serde_json::{Value, json};

/// A `cachePoint`: `type: "default"`, `ttl` (if any) `5m` or `1h`.
pub(crate) fn cache_point(value: &Value, at: &str) -> Result<(), String> {
    if value["type"] != "default" {
        return Err(format!(
            "{at}.cachePoint.type: Member must satisfy enum value set: [default]"
        ));
    }
    match value.get("ttl").map(Value::as_str) {
        None | Some(Some("5m" | "1h")) => Ok(()),
        Some(_) => Err(format!(
            "{at}.cachePoint.ttl: Member must satisfy enum value set: [5m, 1h]"
        )),
    }
}

/// The `cachePoint` blocks of a list (system blocks, tools).
pub(crate) fn cache_points(list: &Value, at: &str) -> Result<(), String> {
    for (i, b) in list.as_array().into_iter().flatten().enumerate() {
        if let Some(point) = b.get("cachePoint") {
            cache_point(point, &format!("{at}.{i}"))?;
        }
    }
    Ok(())
}

/// Converse's `cachePoint` blocks as the Messages API's `cache_control`
/// on the block before each (a point with nothing before it marks
/// nothing).
pub(crate) fn with_cache_control(
    blocks: &[Value],
    as_block: impl Fn(&Value) -> Value,
) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for b in blocks {
        match (b.get("cachePoint"), out.last_mut()) {
            (Some(point), Some(last)) => {
                let mut control = json!({"type": "ephemeral"});
                if let Some(ttl) = point.get("ttl") {
                    control["ttl"] = ttl.clone();
                }
                last["cache_control"] = control;
            }
            (Some(_), None) => {}
            (None, _) => out.push(as_block(b)),
        }
    }
    out
}
