//! AWS Bedrock (`kind = "bedrock"`): one provider, two APIs by model
//! (`understudy_settings::bedrock_protocol`): Claude through
//! InvokeModel and InvokeModelWithResponseStream with Anthropic's Messages
//! body (here), every other model (Llama, Mistral, Nova, …) through
//! Converse and ConverseStream (`converse.rs`, the translation in
//! `understudy_wire::converse`). Both sign with one set of credentials.
//!
//! - The model id, inference profile (`us.anthropic.…`) or ARN goes in the
//!   path (`/model/{id}/invoke`), percent-encoded but for `:` as AWS's
//!   SDKs send it; the body carries `anthropic_version:
//!   "bedrock-2023-05-31"` and neither `model` nor `stream`; a client's
//!   betas go in the body's `anthropic_beta`, only those Bedrock takes.
//! - A stream is AWS's binary event stream: each `chunk` event's `bytes`
//!   is one Anthropic stream event's JSON, read by the Messages stream
//!   parser as if it had come as SSE; an exception message is the stream's
//!   failure (`error.rs`).
//! - Every request is signed (SigV4, service `bedrock`, the exact body
//!   bytes, the session token), or carries a Bedrock API key as a bearer
//!   (`auth.rs`).

mod auth;
pub(crate) mod converse;
mod error;

use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine as _;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use understudy_core::BoxFuture;
use understudy_settings::ProviderSettings;
use understudy_settings::{Bedrock, bedrock_protocol};
use understudy_types::{ChatRequest, Completion, Failure, FailureKind};
use understudy_wire::eventstream::{Kind, Message};
use understudy_wire::messages::native::{self, CloudBody};
use understudy_wire::messages::response::{WireResponse, completion};
use understudy_wire::messages::signed_by::{self, SignedStream};
use understudy_wire::messages::{max_tokens, request::wire_request};
use understudy_wire::sse::SseItem;

use crate::anthropic::AnthropicStream;
use crate::by_model::ByModel;
use crate::http::{Framing, HttpAdapter, Received, Upstream};
use crate::sigv4;

use auth::AwsKeys;
use converse::BedrockConverse;

/// The body's API version on Bedrock.
pub const BEDROCK_VERSION: &str = "bedrock-2023-05-31";

/// The platform's name in front of the thinking signatures it writes
/// (`understudy_wire::messages::signed_by`).
const PLATFORM: &str = "bedrock";

/// SigV4's name for the service (not the host's `bedrock-runtime`).
const SERVICE: &str = "bedrock";

/// The betas Bedrock's InvokeModel takes (by prefix, any date): Bedrock
/// answers `400 invalid beta flag` to any other, even to ones Anthropic's
/// own API takes.
const BETAS: [&str; 9] = [
    "computer-use-",
    "token-efficient-tools-",
    "interleaved-thinking-",
    "output-128k-",
    "context-1m-",
    "context-management-",
    "effort-",
    "tool-search-tool-",
    "tool-examples-",
];

/// A Bedrock provider: each request goes to the API its model speaks
/// (Claude's InvokeModel, else Converse). Two adapters over one set of
/// credentials (renewed once for both), as Vertex's are: each keeps its
/// own pooled clients, to the same host.
pub(crate) type BedrockAdapter =
    ByModel<HttpAdapter<BedrockMessages>, HttpAdapter<BedrockConverse>>;

/// What Bedrock's two APIs share for one provider: where it is, its
/// region and headers, its credentials, its models' output limits.
#[derive(Debug, Clone)]
pub(crate) struct Account {
    base: reqwest::Url,
    region: String,
    headers: HeaderMap,
    auth: Auth,
    limits: crate::OutputLimits,
}

/// Claude on Bedrock, bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct BedrockMessages {
    account: Account,
}

#[derive(Debug, Clone)]
enum Auth {
    /// A Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`), as the header value.
    Bearer(HeaderValue),
    SigV4(Arc<AwsKeys>),
}

/// Builds the adapter for a Bedrock provider.
pub(crate) fn adapter(
    settings: &ProviderSettings,
    bedrock: &Bedrock,
) -> Result<BedrockAdapter, String> {
    let mut headers = crate::extra_headers(settings)?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let auth = match (&settings.api_key, &bedrock.credentials) {
        (Some(key), _) => Auth::Bearer(crate::sensitive(&format!("Bearer {}", key.expose()))?),
        (None, Some(credentials)) => Auth::SigV4(Arc::new(AwsKeys::of(credentials))),
        (None, None) => {
            return Err("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile (`aws_profile`), or a Bedrock API key (AWS_BEARER_TOKEN_BEDROCK)".into());
        }
    };
    let account = Account {
        base: crate::http::endpoint(&settings.base_url)?,
        region: bedrock.region.clone(),
        headers,
        auth,
        limits: crate::OutputLimits::of(settings),
    };
    let converse = BedrockConverse {
        account: account.clone(),
    };
    Ok(ByModel {
        first: HttpAdapter::new(settings, BedrockMessages { account })?,
        second: HttpAdapter::new(settings, converse)?,
        takes: |model| bedrock_protocol(model) == understudy_types::Protocol::Messages,
    })
}

// === impl Account ===

impl Account {
    /// Signs (or bears) a built request.
    fn authorize<'a>(
        &'a self,
        request: &'a mut reqwest::Request,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move { self.auth.authorize(request, &self.region).await })
    }

    /// Expired keys read again, once.
    fn renew<'a>(&'a self, failure: &'a Failure) -> BoxFuture<'a, bool> {
        Box::pin(async move { self.auth.renew(failure).await })
    }

    /// The credentials the provider's actor refreshes.
    fn credentials(&self) -> Option<Arc<dyn understudy_core::Credentials>> {
        self.auth.credentials()
    }

    /// The control plane's lookup of `model` (`crate::probe`), signed
    /// as every request is.
    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        Some(
            crate::probe::bedrock_lookup_url(&self.base, model)
                .map(|url| crate::probe::lookup(client, url, &self.headers)),
        )
    }
}

// === impl Auth ===

impl Auth {
    /// Adds the credentials to `request`, whose body is final.
    async fn authorize(&self, request: &mut reqwest::Request, region: &str) -> Result<(), Failure> {
        match self {
            Self::Bearer(value) => {
                request.headers_mut().insert(AUTHORIZATION, value.clone());
                Ok(())
            }
            Self::SigV4(keys) => sign(request, region, &*keys.current().await?),
        }
    }

    /// Whether `failure` says the credentials expired and fresh ones were
    /// read (the request goes once more).
    async fn renew(&self, failure: &Failure) -> bool {
        match self {
            Self::SigV4(keys) if error::expired(failure) => keys.reload().await,
            _ => false,
        }
    }

    /// The credentials the provider's actor refreshes.
    fn credentials(&self) -> Option<Arc<dyn understudy_core::Credentials>> {
        match self {
            Self::SigV4(keys) => Some(Arc::clone(keys) as Arc<dyn understudy_core::Credentials>),
            Self::Bearer(_) => None,
        }
    }
}

// === impl BedrockMessages ===

impl BedrockMessages {
    /// `…/model/{id}/invoke` (or `invoke-with-response-stream`).
    fn url(&self, model: &str, stream: bool) -> reqwest::Url {
        let op = if stream {
            "invoke-with-response-stream"
        } else {
            "invoke"
        };
        operation_url(&self.account.base, model, op)
    }

    /// The body for `model`: the client's own (native) edited for Bedrock,
    /// or the Messages translation of the neutral request.
    fn body(&self, model: &str, request: &ChatRequest, stream: bool) -> Result<String, Failure> {
        let limit = self.account.limits.limit(model);
        if let Some(native) = self.native(request) {
            if let Some(prepared) = native::prepare_for(&native.body, model, limit, Some(PLATFORM))
            {
                let betas = bedrock_betas(native);
                let body = crate::signature::unsigned_json_owned(prepared.body);
                let cloud = CloudBody {
                    version: BEDROCK_VERSION,
                    drop_stream: true,
                    betas: &betas,
                    // The beta behind mid-conversation system messages is
                    // not one Bedrock takes.
                    fold_system: true,
                };
                return native::for_cloud(&body, cloud).ok_or_else(|| {
                    Failure::new(
                        FailureKind::BadRequest,
                        "the request body is not a JSON object",
                    )
                });
            }
        }
        let max_tokens = max_tokens(request.max_tokens, limit);
        let wire = wire_request(model, request, stream, max_tokens)?;
        let mut body = serde_json::to_value(&wire).map_err(|e| {
            Failure::new(
                FailureKind::BadRequest,
                format!("cannot encode the request: {e}"),
            )
        })?;
        if let Some(body) = body.as_object_mut() {
            body.remove("model");
            body.remove("stream");
            body.insert("anthropic_version".into(), BEDROCK_VERSION.into());
        }
        Ok(body.to_string())
    }
}

impl Upstream for BedrockMessages {
    type Parser = SignedStream;
    const NATIVE: Option<understudy_types::Protocol> = Some(understudy_types::Protocol::Messages);
    const AUTHORIZES: bool = true;

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let body = self.body(model, request, stream)?;
        let mut headers = self.account.headers.clone();
        let accept = if stream {
            "x-amzn-bedrock-accept"
        } else {
            ACCEPT.as_str()
        };
        headers.insert(accept, HeaderValue::from_static("application/json"));
        Ok(crate::http::raw_post(
            client,
            self.url(model, stream),
            headers,
            body,
        ))
    }

    fn authorize<'a>(
        &'a self,
        request: &'a mut reqwest::Request,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        self.account.authorize(request)
    }

    fn renew<'a>(&'a self, failure: &'a Failure, _: Option<HeaderValue>) -> BoxFuture<'a, bool> {
        self.account.renew(failure)
    }

    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        self.account.probe_request(client, model)
    }

    fn credentials(&self) -> Option<Arc<dyn understudy_core::Credentials>> {
        self.account.credentials()
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        let parsed: WireResponse =
            crate::http::answer_body(received, "an Anthropic message", error::classify)?;
        let mut completion = completion(&parsed, model, received.status, &received.headers)?;
        // A client of the same protocol gets the answer as sent, its
        // thinking signatures named as Bedrock's.
        completion.native = std::str::from_utf8(&received.body)
            .ok()
            .and_then(|body| signed_by::tag_answer(body, PLATFORM));
        Ok(completion)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        error::classify(status, headers, body)
    }

    fn parser(&self, model: &str, native: bool) -> SignedStream {
        SignedStream::new(
            AnthropicStream::for_model(model).with_native(native),
            PLATFORM,
        )
    }

    fn framing(&self) -> Framing {
        Framing::aws_event_stream(chunk_item)
    }
}

/// Signs `request` (its final body) with `keys` for `region`.
fn sign(
    request: &mut reqwest::Request,
    region: &str,
    keys: &sigv4::Credentials,
) -> Result<(), Failure> {
    let url = request.url();
    let host = match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => return Err(Failure::new(FailureKind::BadRequest, "the URL has no host")),
    };
    let body = request
        .body()
        .and_then(reqwest::Body::as_bytes)
        .unwrap_or_default();
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let signed = sigv4::sign(
        &sigv4::Request {
            method: request.method().as_str(),
            path: url.path(),
            query: url.query().unwrap_or(""),
            headers: &[("host", &host), ("content-type", &content_type)],
            body,
        },
        &sigv4::Scope {
            region,
            service: SERVICE,
            time: SystemTime::now(),
            normalize_path: true,
            double_encode_path: true,
            content_sha256_header: false,
        },
        keys,
    );
    for (name, value) in signed.headers {
        let value = crate::sensitive(&value)
            .map_err(|e| Failure::new(FailureKind::Auth, format!("cannot sign: {e}")))?;
        request.headers_mut().insert(name, value);
    }
    Ok(())
}

/// `{base}/model/{id}/{op}`, the id one path segment.
fn operation_url(base: &reqwest::Url, model: &str, op: &str) -> reqwest::Url {
    let mut url = base.clone();
    let path = url.path().trim_end_matches('/').to_owned();
    url.set_path(&format!("{path}/model/{}/{op}", encode_model(model)));
    url
}

/// A model id as one path segment: every byte but the unreserved ones and
/// `:` percent-encoded (an ARN's `/` becomes `%2F`), as AWS's SDKs write it.
fn encode_model(model: &str) -> String {
    let mut out = String::with_capacity(model.len());
    for b in model.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The client's `anthropic-beta` header values that Bedrock takes.
fn bedrock_betas(native: &understudy_types::NativeRequest) -> Vec<&str> {
    native
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("anthropic-beta"))
        .flat_map(|(_, value)| value.split(','))
        .map(str::trim)
        .filter(|beta| BETAS.iter().any(|prefix| beta.starts_with(prefix)))
        .collect()
}

/// One event-stream message as the Messages parser's item: a `chunk`'s
/// decoded bytes (one Anthropic stream event), nothing for other events,
/// the failure an exception or error message is.
fn chunk_item(message: Message) -> Result<Option<SseItem>, Failure> {
    #[derive(serde::Deserialize)]
    struct Chunk {
        bytes: String,
    }
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: String,
    }
    let malformed = |why: &str| {
        Failure::new(
            FailureKind::MalformedResponse,
            format!("a Bedrock stream chunk {why}"),
        )
    };
    match message.kind() {
        Kind::Event("chunk") => {
            let chunk: Chunk = serde_json::from_slice(&message.payload)
                .map_err(|_| malformed("is not JSON with `bytes`"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(chunk.bytes.as_bytes())
                .map_err(|_| malformed("holds bytes that are not base64"))?;
            let data = String::from_utf8(bytes).map_err(|_| malformed("is not UTF-8"))?;
            let event = serde_json::from_str::<Typed>(&data).ok().map(|t| t.kind);
            Ok(Some(SseItem::Event { event, data }))
        }
        Kind::Event(_) | Kind::Unknown => Ok(None),
        Kind::Exception(kind) => Err(error::exception(kind, &message.payload)),
        Kind::Error(code) => Err(Failure::new(
            FailureKind::Unavailable { retry_after: None },
            format!(
                "{code}: {}",
                message.header_str(":error-message").unwrap_or_default()
            ),
        )),
    }
}

#[cfg(test)]
mod tests;
