//! The error codes an error answer names, in any API's shape (a probe's
//! verdict reads them): AWS's `x-amzn-ErrorType` header and the code
//! fields of a JSON body.

/// The fields of an error answer that hold a code, in any API's shape:
/// OpenAI's `error.code` and `error.type`, Anthropic's `error.type`,
/// AWS's `__type`, Google's `error.status` and a detail's `reason`.
const CODE_FIELDS: [&str; 4] = ["code", "type", "__type", "reason"];

/// The error codes an answer names (see
/// [`understudy_core::ProbeFailure::said`]): AWS's `x-amzn-ErrorType`
/// header, and the code fields of its JSON body ([`CODE_FIELDS`], and
/// Google's `status`), a few levels deep; each without an AWS namespace
/// (`com.amazon…#Name`) or suffix (`Name:http://…`). Only short words
/// are kept: a code, never a sentence.
pub(crate) fn said(headers: &reqwest::header::HeaderMap, body: &[u8]) -> Vec<String> {
    fn walk(value: &serde_json::Value, depth: usize, out: &mut Vec<String>) {
        if depth == 0 || out.len() >= 16 {
            return;
        }
        match value {
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    match v.as_str() {
                        Some(code) if CODE_FIELDS.contains(&key.as_str()) || key == "status" => {
                            push(code, out);
                        }
                        _ => walk(v, depth - 1, out),
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for v in items {
                    walk(v, depth - 1, out);
                }
            }
            _ => {}
        }
    }
    fn push(code: &str, out: &mut Vec<String>) {
        let code = code.split(':').next().unwrap_or(code);
        let code = code.rsplit('#').next().unwrap_or(code).trim();
        let word = !code.is_empty()
            && code.len() <= 64
            && code
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
        if word && !out.iter().any(|c| c == code) {
            out.push(code.to_owned());
        }
    }
    let mut out = Vec::new();
    if let Some(kind) = headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
    {
        push(kind, &mut out);
    }
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        walk(&value, 5, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answers_codes_are_read_in_every_shape() {
        let none = reqwest::header::HeaderMap::new();
        let cases: [(&str, &[&str]); 5] = [
            (
                r#"{"error":{"message":"The model `x` does not exist","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#,
                &["invalid_request_error", "model_not_found"],
            ),
            (
                r#"{"type":"error","error":{"type":"not_found_error","message":"model: x"}}"#,
                &["error", "not_found_error"],
            ),
            (
                r#"{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}"#,
                &["INVALID_ARGUMENT", "API_KEY_INVALID"],
            ),
            (
                r#"{"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."}"#,
                &["UnrecognizedClientException"],
            ),
            ("<html>404 Not Found</html>", &[]),
        ];
        for (body, want) in cases {
            let mut got = said(&none, body.as_bytes());
            got.sort();
            let mut want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
            want.sort();
            assert_eq!(got, want, "{body}");
        }
        let mut aws = reqwest::header::HeaderMap::new();
        aws.insert(
            "x-amzn-errortype",
            reqwest::header::HeaderValue::from_static(
                "ResourceNotFoundException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            ),
        );
        assert_eq!(said(&aws, b"{}"), ["ResourceNotFoundException"]);
    }
}
