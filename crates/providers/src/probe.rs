//! Readiness probes: per protocol, the call that proves a target ready
//! without generating anything ([`understudy_core::Adapter::probe`]).
//!
//! - OpenAI, Groq and other OpenAI-compatible servers: `GET
//!   {base}/models/{model}` (404 for a model the key cannot use).
//! - Anthropic: `GET {base}/v1/models/{model}`.
//! - Gemini: `GET {base}/models/{model}` with the `x-goog-api-key`.
//! - Azure OpenAI: its data plane has no deployment lookup (the one it
//!   had was retired; the management plane's wants an Entra token and the
//!   subscription's names, which the provider's settings do not hold).
//!   So the probe is the deployment's own Chat Completions URL with a body
//!   that cannot generate (no `messages`): an existing deployment answers
//!   400 (`'messages' is a required property`), a missing one 404
//!   `DeploymentNotFound` (the deployment is resolved before the body is
//!   read), a refused key 401.
//! - Bedrock: the control plane (`bedrock.{region}.amazonaws.com`,
//!   SigV4's service `bedrock`): `GET /foundation-models/{id}`, or
//!   `GET /inference-profiles/{id}` for a cross-region profile
//!   (`us.anthropic.…`) or an ARN.
//! - Vertex: the project's free token count — Claude's
//!   `count-tokens:rawPredict`, Gemini's `:countTokens` — proves the
//!   token, the project, the region and the model at once (a publisher
//!   model lookup is not project-scoped).

use serde_json::json;
use understudy_types::{Failure, FailureKind};

/// `url` without its last `drop` path segments and with `add` appended.
pub(crate) fn sibling(
    url: &reqwest::Url,
    drop: usize,
    add: &[&str],
) -> Result<reqwest::Url, Failure> {
    let mut url = url.clone();
    {
        let mut segments = url.path_segments_mut().map_err(|()| {
            Failure::new(FailureKind::BadRequest, "the base URL cannot take a path")
        })?;
        segments.pop_if_empty();
        for _ in 0..drop {
            segments.pop();
        }
        segments.extend(add);
    }
    Ok(url)
}

/// `url` without its last `drop` segments, then `models/{model}` with a
/// `/` in the model kept as a path separator (as the OpenAI SDK writes
/// `/models/{model}`: Groq's `openai/gpt-oss-120b`).
pub(crate) fn models_url(
    url: &reqwest::Url,
    drop: usize,
    model: &str,
) -> Result<reqwest::Url, Failure> {
    let mut add = vec!["models"];
    add.extend(model.split('/'));
    sibling(url, drop, &add)
}

/// A model lookup: `GET url` with the provider's headers (its key).
pub(crate) fn lookup(
    client: &reqwest::Client,
    url: reqwest::Url,
    headers: &reqwest::header::HeaderMap,
) -> reqwest::RequestBuilder {
    client.get(url).headers(headers.clone())
}

/// Azure's probe: `url` (a deployment's Chat Completions) with a body
/// that names the deployment (the v1 API reads it from the body) but has
/// no `messages`, so nothing can be generated.
pub(crate) fn azure_empty(
    client: &reqwest::Client,
    url: reqwest::Url,
    model: &str,
    headers: &reqwest::header::HeaderMap,
) -> Result<reqwest::RequestBuilder, Failure> {
    crate::http::json_post(client, url, headers, &json!({ "model": model }))
}

/// Whether an Azure probe's `status` proves the deployment ready: the
/// body was read (400: it is missing `messages`), so the deployment
/// exists and the key was taken.
pub(crate) fn azure_ready(status: u16) -> bool {
    status == 400 || (200..300).contains(&status)
}

/// The free token count's body for a Vertex Claude model.
pub(crate) fn claude_count_body(model: &str) -> String {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": "ping"}],
    })
    .to_string()
}

/// The free token count's body for a Vertex Gemini model.
pub(crate) fn gemini_count_body() -> String {
    json!({"contents": [{"role": "user", "parts": [{"text": "ping"}]}]}).to_string()
}

/// The Bedrock control plane's lookup of `model`: a foundation model,
/// or (a cross-region profile `us.…`, an ARN) an inference profile;
/// `base` is the runtime's URL, whose host `bedrock-runtime.…` becomes
/// `bedrock.…` (any other host, a proxy's, is kept).
pub(crate) fn bedrock_lookup_url(
    base: &reqwest::Url,
    model: &str,
) -> Result<reqwest::Url, Failure> {
    let mut url = base.clone();
    if let Some(host) = url
        .host_str()
        .and_then(|h| h.strip_prefix("bedrock-runtime."))
    {
        let host = format!("bedrock.{host}");
        url.set_host(Some(&host))
            .map_err(|e| Failure::new(FailureKind::BadRequest, format!("bad host: {e}")))?;
    }
    let profile = model.starts_with("arn:")
        || [
            "us.", "eu.", "apac.", "global.", "jp.", "au.", "ca.", "us-gov.",
        ]
        .iter()
        .any(|p| model.starts_with(p));
    let collection = if profile {
        "inference-profiles"
    } else {
        "foundation-models"
    };
    sibling(&url, 0, &[collection, model])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bedrock_looks_models_up_on_the_control_plane() {
        let runtime =
            reqwest::Url::parse("https://bedrock-runtime.us-east-1.amazonaws.com").unwrap();
        let cases = [
            (
                "anthropic.claude-sonnet-4-5-20250929-v1:0",
                "https://bedrock.us-east-1.amazonaws.com/foundation-models/anthropic.claude-sonnet-4-5-20250929-v1:0",
            ),
            (
                "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                "https://bedrock.us-east-1.amazonaws.com/inference-profiles/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            ),
        ];
        for (model, want) in cases {
            assert_eq!(bedrock_lookup_url(&runtime, model).unwrap().as_str(), want);
        }
        // A proxy's (or a simulator's) host is kept.
        let proxy = reqwest::Url::parse("http://127.0.0.1:9/").unwrap();
        assert_eq!(
            bedrock_lookup_url(&proxy, "meta.llama3-70b-instruct-v1:0")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:9/foundation-models/meta.llama3-70b-instruct-v1:0"
        );
    }

    #[test]
    fn siblings_replace_the_last_segments() {
        let url = reqwest::Url::parse("https://api.openai.com/v1/chat/completions").unwrap();
        assert_eq!(
            sibling(&url, 2, &["models", "gpt-4o"]).unwrap().as_str(),
            "https://api.openai.com/v1/models/gpt-4o"
        );
        // A `/` in a model name stays a separator, as the SDK sends it.
        let groq = reqwest::Url::parse("https://api.groq.com/openai/v1/chat/completions").unwrap();
        assert_eq!(
            models_url(&groq, 2, "openai/gpt-oss-120b")
                .unwrap()
                .as_str(),
            "https://api.groq.com/openai/v1/models/openai/gpt-oss-120b"
        );
    }
}
