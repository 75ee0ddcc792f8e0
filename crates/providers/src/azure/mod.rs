//! Azure OpenAI (`kind = "azure"`): OpenAI's Chat Completions and
//! Responses protocols at Azure's URLs, behind Azure's key header, with
//! Azure's errors read on top of OpenAI's.
//!
//! - The v1 API (no `api_version`): `{resource}/openai/v1/chat/completions`
//!   and `/openai/v1/responses`, the deployment's name as the body's
//!   `model`.
//! - Classic deployments (`api_version` set):
//!   `{resource}/openai/deployments/{deployment}/chat/completions?api-version=…`
//!   and `{resource}/openai/responses?api-version=…` (the deployment in
//!   the body, as openai-python's `AzureOpenAI` sends it).
//! - The key in an `api-key` header (no `Bearer`), or a Microsoft Entra ID
//!   token as `Authorization: Bearer` (`auth = "entra"`); either marked
//!   sensitive, so no `Debug` output shows it.
//! - The protocol code is OpenAI's own (`openai_compat`,
//!   `openai_responses`): Azure's content filter is a content-policy code
//!   there, its stream preamble (empty `choices`) no text, and a stream
//!   that ends on `finish_reason: "content_filter"` without `[DONE]`
//!   complete. What is Azure's alone is in `error.rs`.

pub(crate) mod error;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use understudy_core::Adapter;
use understudy_settings::Azure;
use understudy_settings::ProviderSettings;
use understudy_types::Protocol;

use crate::http::HttpAdapter;
use crate::openai_compat::{Dialect, Endpoint, OpenAiProtocol};
use crate::openai_responses::ResponsesProtocol;

/// Azure's key header.
const API_KEY: HeaderName = HeaderName::from_static("api-key");

/// Builds the adapter for an Azure OpenAI provider: Chat Completions, or
/// the Responses API (`responses_api = true`).
pub(crate) fn adapter(
    settings: &ProviderSettings,
    azure: &Azure,
) -> Result<Arc<dyn Adapter>, String> {
    let resource = resource(&settings.base_url)?;
    let headers = headers(settings, azure)?;
    let errors = || Dialect::Azure(settings.name.clone());
    Ok(match settings.kind {
        Protocol::Responses => {
            let url = responses_url(&resource, azure.api_version.as_deref())?;
            let protocol = ResponsesProtocol::with(settings, url, headers, errors());
            Arc::new(HttpAdapter::new(settings, protocol)?)
        }
        _ => {
            let endpoint = chat_endpoint(resource, azure.api_version.as_deref())?;
            let protocol = OpenAiProtocol::with(settings, endpoint, headers, errors());
            Arc::new(HttpAdapter::new(settings, protocol)?)
        }
    })
}

/// The resource's URL (`https://NAME.openai.azure.com`): `base_url` without
/// a trailing `/`, nor an `/openai` or `/openai/v1` a user copied from a
/// client's configuration.
pub(crate) fn resource(base_url: &str) -> Result<reqwest::Url, String> {
    let trimmed = base_url.trim_end_matches('/');
    let trimmed = trimmed
        .strip_suffix("/openai/v1")
        .or_else(|| trimmed.strip_suffix("/openai"))
        .unwrap_or(trimmed);
    let url = crate::http::endpoint(trimmed)?;
    if url.cannot_be_a_base() || url.query().is_some() {
        return Err(format!(
            "`{}` is not an Azure resource URL (`https://NAME.openai.azure.com`)",
            understudy_settings::redact_url(base_url)
        ));
    }
    Ok(url)
}

/// `url` with `segments` appended to its path.
fn joined(url: &reqwest::Url, segments: &[&str]) -> Result<reqwest::Url, String> {
    let mut url = url.clone();
    url.path_segments_mut()
        .map_err(|()| "the base URL cannot take a path".to_owned())?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

/// Where Chat Completions requests go.
pub(crate) fn chat_endpoint(
    resource: reqwest::Url,
    api_version: Option<&str>,
) -> Result<Endpoint, String> {
    Ok(match api_version {
        None => Endpoint::Fixed(joined(&resource, &["openai", "v1", "chat", "completions"])?),
        Some(version) => Endpoint::Deployment {
            resource,
            api_version: version.to_owned(),
        },
    })
}

/// Where Responses API requests go.
pub(crate) fn responses_url(
    resource: &reqwest::Url,
    api_version: Option<&str>,
) -> Result<reqwest::Url, String> {
    Ok(match api_version {
        None => joined(resource, &["openai", "v1", "responses"])?,
        Some(version) => {
            let mut url = joined(resource, &["openai", "responses"])?;
            url.query_pairs_mut().append_pair("api-version", version);
            url
        }
    })
}

/// The extra headers, JSON, and the key: `api-key: KEY`, or with Entra ID
/// `Authorization: Bearer TOKEN` (marked sensitive either way).
fn headers(settings: &ProviderSettings, azure: &Azure) -> Result<HeaderMap, String> {
    let mut headers = crate::extra_headers(settings)?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let var = settings
        .api_key_env
        .as_deref()
        .unwrap_or("AZURE_OPENAI_API_KEY");
    let key = settings.api_key.as_ref().ok_or_else(|| {
        format!("no Azure OpenAI key: set {var} (or the provider's `api_key_env` or `api_key`)")
    })?;
    if azure.entra {
        headers.insert(
            AUTHORIZATION,
            crate::sensitive(&format!("Bearer {}", key.expose()))?,
        );
    } else {
        headers.insert(API_KEY, crate::sensitive(key.expose())?);
    }
    Ok(headers)
}
