//! Azure OpenAI in front of the OpenAI simulators (Chat Completions or
//! the Responses API): what an Azure OpenAI resource checks and how it
//! answers.
//!
//! - Paths: the v1 API (`/openai/v1/chat/completions`,
//!   `/openai/v1/responses`, the deployment's name as the body's `model`)
//!   and classic deployments
//!   (`/openai/deployments/{deployment}/chat/completions`,
//!   `/openai/responses`), which need `?api-version=` (without it Azure
//!   answers 404 `Resource not found`: MicrosoftDocs/azure-docs#114602).
//! - Auth: the key in `api-key` (no `Bearer`), or an Entra ID token as
//!   `Authorization: Bearer` when the resource knows one; anything else is
//!   Azure's 401 "Access denied due to invalid subscription key…".
//! - A deployment the resource does not have is 404 `DeploymentNotFound`.
//! - The admitted request goes to the OpenAI simulator as OpenAI's own API
//!   takes it: `/v1/chat/completions` or `/v1/responses`, `model` the
//!   deployment, the key as a bearer.
//! - Answers: a Chat Completions stream begins with Azure's preamble (a
//!   chunk with empty `choices` and `prompt_filter_results`); a prompt the
//!   simulator refuses with a 400 comes back as Azure's 400
//!   `content_filter` with its `innererror`.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};

use super::body::{ChannelBody, response};
use super::cloud::{Cloud, Refused};
use super::{Received, SimBody};

/// The preamble Azure sends before a Chat Completions stream's first
/// chunk: empty `choices` with the prompt-filter results.
pub const PREAMBLE: &str = "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}\n\n";

const ACCESS_DENIED: &str = "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.";

/// The simulated resource: its key, its deployments, and the Entra ID
/// token it takes, if any. Clone it to keep a handle.
#[derive(Clone)]
pub struct AzureSim {
    inner: Arc<Resource>,
}

struct Resource {
    key: String,
    entra_token: Option<String>,
    deployments: Vec<String>,
}

impl std::fmt::Debug for AzureSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureSim")
            .field("deployments", &self.inner.deployments)
            .finish_non_exhaustive()
    }
}

impl AzureSim {
    /// A resource that takes this key and has these deployments.
    pub fn new(key: &str, deployments: &[&str]) -> Self {
        Self::with(key, None, deployments)
    }

    /// A resource that also takes this Entra ID token as a bearer.
    pub fn with_entra(key: &str, token: &str, deployments: &[&str]) -> Self {
        Self::with(key, Some(token), deployments)
    }

    fn with(key: &str, token: Option<&str>, deployments: &[&str]) -> Self {
        Self {
            inner: Arc::new(Resource {
                key: key.to_owned(),
                entra_token: token.map(str::to_owned),
                deployments: deployments.iter().map(|d| (*d).to_owned()).collect(),
            }),
        }
    }
}

impl super::SimProvider {
    /// Starts an Azure OpenAI simulator for `resource`, serving `protocol`
    /// (`ChatCompletions` or `Responses`).
    pub async fn azure(resource: &AzureSim, protocol: super::Protocol) -> std::io::Result<Self> {
        Self::start_behind(protocol, Some(Box::new(resource.clone()))).await
    }
}

/// A refusal in Azure's shape: `{"error":{"code","message"}}`.
fn refuse(status: u16, code: &str, message: &str) -> Box<Refused> {
    Box::new(Refused {
        response: response(
            status,
            &[("content-type", "application/json")],
            json!({"error": {"code": code, "message": message}}).to_string(),
        ),
        message: format!("{status} {code}: {message}"),
    })
}

/// Which operation a path names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Operation {
    Chat,
    Responses,
}

impl Cloud for AzureSim {
    /// A readiness probe: a deployment's Chat Completions with no
    /// `messages` (Azure has no data-plane deployment lookup). The key is
    /// checked, then the deployment (404 `DeploymentNotFound`, also for a
    /// retired one), then the body: 400, nothing generated.
    fn lookup(&self, req: &Received) -> Option<Result<hyper::Response<SimBody>, Box<Refused>>> {
        let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
        let body = serde_json::from_slice::<Value>(&req.body).ok()?;
        let (Operation::Chat, deployment) = route(path).ok()? else {
            return None;
        };
        if req.method != "POST" || body.get("messages").is_some() {
            return None;
        }
        Some((|| {
            if super::models::of(req).is_some_and(|m| m.revoked()) {
                return Err(refuse(401, "401", ACCESS_DENIED));
            }
            self.check_auth(req)?;
            if deployment.is_some() && !query.contains("api-version=") {
                return Err(refuse(404, "404", "Resource not found"));
            }
            let deployment = deployment
                .or_else(|| body.get("model")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            let retired = super::models::of(req).is_some_and(|m| m.retired(&deployment));
            if retired || !self.inner.deployments.contains(&deployment) {
                return Err(refuse(
                    404,
                    "DeploymentNotFound",
                    "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.",
                ));
            }
            Ok(response(
                400,
                &[("content-type", "application/json")],
                json!({"error": {
                    "message": "'messages' is a required property",
                    "type": "invalid_request_error", "param": null, "code": null,
                }})
                .to_string(),
            ))
        })())
    }

    fn admit(&self, req: &Received) -> Result<Received, Box<Refused>> {
        self.check_auth(req)?;
        let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
        let api_version = query
            .split('&')
            .find_map(|p| p.strip_prefix("api-version="))
            .filter(|v| !v.is_empty());
        let (operation, deployment) = route(path)?;
        if req.method != "POST" {
            return Err(refuse(405, "405", "Method not allowed"));
        }
        let classic = !path.starts_with("/openai/v1/");
        if classic && api_version.is_none() {
            return Err(refuse(404, "404", "Resource not found"));
        }
        let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(&req.body) else {
            return Err(refuse(400, "invalid_request_error", "the body is not JSON"));
        };
        let deployment = match deployment {
            Some(d) => d,
            None => body
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| refuse(400, "invalid_request_error", "model is required"))?,
        };
        if !self.inner.deployments.contains(&deployment) {
            return Err(refuse(
                404,
                "DeploymentNotFound",
                "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.",
            ));
        }
        body.insert("model".into(), Value::String(deployment));
        let path = match operation {
            Operation::Chat => "/v1/chat/completions",
            Operation::Responses => "/v1/responses",
        };
        let mut headers: Vec<(String, String)> = req
            .headers
            .iter()
            .filter(|(n, _)| n == "content-type" || n == "accept")
            .cloned()
            .collect();
        headers.push(("authorization".into(), "Bearer azure-sim".into()));
        Ok(Received {
            method: req.method.clone(),
            path: path.into(),
            headers,
            body: Bytes::from(Value::Object(body).to_string()),
            at: req.at,
            version: req.version,
            shared: req.shared.clone(),
            cached: Default::default(),
        })
    }

    fn wrap(&self, req: &Received, answer: hyper::Response<SimBody>) -> hyper::Response<SimBody> {
        let status = answer.status().as_u16();
        if status == 400 {
            return content_filter(answer);
        }
        let streamed = answer
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let chat = req
            .path
            .split('?')
            .next()
            .unwrap_or_default()
            .ends_with("/chat/completions");
        if status == 200 && streamed && chat {
            return with_preamble(answer);
        }
        answer
    }
}

/// The operation and, on a classic deployment URL, the deployment.
fn route(path: &str) -> Result<(Operation, Option<String>), Box<Refused>> {
    let not_found = || refuse(404, "404", "Resource not found");
    match path {
        "/openai/v1/chat/completions" => return Ok((Operation::Chat, None)),
        "/openai/v1/responses" | "/openai/responses" => return Ok((Operation::Responses, None)),
        _ => {}
    }
    let rest = path
        .strip_prefix("/openai/deployments/")
        .ok_or_else(not_found)?;
    let (deployment, op) = rest.split_once('/').ok_or_else(not_found)?;
    if op != "chat/completions" || deployment.is_empty() {
        return Err(not_found());
    }
    let deployment = percent_decode(deployment).ok_or_else(not_found)?;
    Ok((Operation::Chat, Some(deployment)))
}

fn percent_decode(s: &str) -> Option<String> {
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

impl AzureSim {
    fn check_auth(&self, req: &Received) -> Result<(), Box<Refused>> {
        let key_ok = req.header("api-key") == Some(self.inner.key.as_str());
        let token_ok = match (&self.inner.entra_token, req.header("authorization")) {
            (Some(token), Some(auth)) => auth.strip_prefix("Bearer ") == Some(token.as_str()),
            _ => false,
        };
        if key_ok || token_ok {
            Ok(())
        } else {
            Err(refuse(401, "401", ACCESS_DENIED))
        }
    }
}

/// A 400 from the OpenAI simulator: its content-policy refusals become
/// Azure's `content_filter` 400 with `innererror`; any other 400 as it was.
fn content_filter(answer: hyper::Response<SimBody>) -> hyper::Response<SimBody> {
    let (parts, inner) = answer.into_parts();
    let (tx, body) = ChannelBody::channel(1);
    tokio::spawn(async move {
        let text = inner
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let code = serde_json::from_slice::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
        let out = if matches!(code.as_deref(), Some("content_filter" | "invalid_prompt")) {
            Bytes::from(azure_content_filter().to_string())
        } else {
            text
        };
        let _ = tx.send(Ok(out)).await;
    });
    let mut out = hyper::Response::from_parts(parts, body.boxed());
    out.headers_mut().remove("content-length");
    out
}

/// Azure's prompt-filter 400 (the older shape).
fn azure_content_filter() -> Value {
    json!({"error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
        "type": null, "param": "prompt", "code": "content_filter", "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                "hate": {"filtered": false, "severity": "safe"},
                "jailbreak": {"filtered": true, "detected": true},
                "self_harm": {"filtered": false, "severity": "safe"},
                "sexual": {"filtered": false, "severity": "safe"},
                "violence": {"filtered": false, "severity": "safe"}
            }
        }
    }})
}

/// A Chat Completions stream with Azure's preamble in front.
fn with_preamble(answer: hyper::Response<SimBody>) -> hyper::Response<SimBody> {
    let (parts, mut inner) = answer.into_parts();
    let (tx, body) = ChannelBody::channel(1);
    tokio::spawn(async move {
        if tx
            .send(Ok(Bytes::from_static(PREAMBLE.as_bytes())))
            .await
            .is_err()
        {
            return;
        }
        while let Some(frame) = inner.frame().await {
            let item = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => Ok(data),
                    Err(_) => continue,
                },
                Err(e) => Err(e),
            };
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
        }
    });
    let mut out = hyper::Response::from_parts(parts, body.boxed());
    out.headers_mut().remove("content-length");
    out
}
