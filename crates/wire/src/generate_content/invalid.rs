//! Google's 400 messages for a `generateContent` body its JSON mapping
//! refuses, from serde's errors and the place serde_path_to_error found
//! (Google's wording, the place in the proto's snake_case names): an
//! unknown name, a value of the wrong type, a list where one value goes;
//! the messages the body's readers write themselves carry `{path}` for
//! the place.

/// A serde path (`contents[0].parts[0].thoughtSignature`) as Google
/// writes it: the proto's snake_case names.
pub(super) fn google_path(path: &str) -> String {
    if path == "." {
        return String::new();
    }
    let mut out = String::with_capacity(path.len() + 8);
    for c in path.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// serde's message for `e`, without serde_json's position.
fn bare(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&position).unwrap_or(&text).to_owned()
}

/// A body that is not JSON, or holds something after its object.
pub(super) fn syntax(e: &serde_json::Error) -> String {
    format!("Invalid JSON payload received. {}.", capitalized(&bare(e)))
}

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// Google's message for serde's error `e` at `path` (Google's spelling).
pub(super) fn google_message(path: &str, e: &serde_json::Error) -> String {
    if e.is_syntax() || e.is_eof() {
        return syntax(e);
    }
    let message = bare(e);
    let at = |what: &str| {
        if path.is_empty() {
            format!("Invalid JSON payload received. {what}.")
        } else {
            format!("Invalid JSON payload received. {what} at '{path}'.")
        }
    };
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let name = rest.split('`').next().unwrap_or_default();
        // A derived struct's path ends in the unknown key; Google names
        // the message it is not a field of.
        let key = google_path(name);
        let path = match path.rsplit_once('.') {
            _ if path == key => "",
            Some((parent, last)) if last == key => parent,
            _ => path,
        };
        return if path.is_empty() {
            format!("Invalid JSON payload received. Unknown name \"{name}\": Cannot find field.")
        } else {
            format!(
                "Invalid JSON payload received. Unknown name \"{name}\" at '{path}': \
                 Cannot find field."
            )
        };
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or_default();
        let field = if path.is_empty() {
            google_path(name)
        } else {
            format!("{path}.{}", google_path(name))
        };
        return format!("* GenerateContentRequest.{field}: {name} is required\n");
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        return invalid_type(path, rest);
    }
    if message.contains("{path}") {
        return message.replace("{path}", path);
    }
    if message.starts_with("Please use a valid role") {
        return message;
    }
    at(&capitalized(&message))
}

/// `invalid type: string "hot", expected f32` as Google's `Invalid value
/// at 'generation_config.temperature' (TYPE_FLOAT), "hot"`.
fn invalid_type(path: &str, rest: &str) -> String {
    let (found, expected) = rest.rsplit_once(", expected ").unwrap_or((rest, ""));
    if found == "sequence" {
        let (parent, name) = path.rsplit_once('.').unwrap_or(("", path));
        return if parent.is_empty() {
            format!(
                "Invalid JSON payload received. Unknown name \"{name}\": Proto field is not \
                 repeating, cannot start list."
            )
        } else {
            format!(
                "Invalid JSON payload received. Unknown name \"{name}\" at '{parent}': Proto \
                 field is not repeating, cannot start list."
            )
        };
    }
    let kind = match expected {
        "a string" | "a field name" => "TYPE_STRING",
        "a boolean" => "TYPE_BOOL",
        "f32" | "f64" => "TYPE_FLOAT",
        "u32" | "i32" => "TYPE_INT32",
        "u64" | "i64" => "TYPE_INT64",
        "base64 text (TYPE_BYTES)" => "TYPE_BYTES",
        "a sequence" => "list",
        _ => "object",
    };
    // serde writes `string "x"`, `integer `5``, `boolean `true``,
    // `floating point `1.5``, `map`, `null`; Google writes the JSON.
    let value = if let Some(s) = found.strip_prefix("string ") {
        s
    } else if found == "map" {
        "{…}"
    } else {
        let v = found.rsplit_once(' ').map_or(found, |(_, v)| v);
        v.trim_matches('`')
    };
    format!("Invalid value at '{path}' ({kind}), {value}")
}

/// The longest message: Google repeats a refused value whole, but a log
/// line and an answer need not carry a megabyte of it.
const MAX_MESSAGE: usize = 1024;

/// `message`, cut to [`MAX_MESSAGE`] bytes (on a character boundary).
pub(super) fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut at = MAX_MESSAGE;
        while !message.is_char_boundary(at) {
            at -= 1;
        }
        message.truncate(at);
        message.push('…');
    }
    message
}
