//! The floor of the gateway's fixed shape: a relay on the same stack as
//! `understudy serve` (hyper's HTTP/1.1 server, an axum router, a pooled
//! reqwest client built with the providers' settings) that does nothing
//! else. What the do-nothing hyper relay costs is what any proxy process
//! pays; what this one costs on top is what axum and reqwest cost before the
//! gateway does any work of its own. `--parse` also reads both bodies as JSON
//! and writes them again, as any gateway that reads the answer must.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::{Error, GATEWAY_PATH};

struct Stack {
    client: reqwest::Client,
    /// The upstream URL of each path the bench sends (parsed once, as the
    /// gateway's adapters parse theirs).
    urls: HashMap<&'static str, reqwest::Url>,
    parse: bool,
}

/// `--stack-relay [--parse] <upstream> <listen>`.
pub(crate) async fn relay(args: &[String]) -> Result<(), Error> {
    let usage = "--stack-relay [--parse] <upstream> <listen>";
    let parse = args.first().map(String::as_str) == Some("--parse");
    let args = &args[usize::from(parse)..];
    let upstream: SocketAddr = args.first().ok_or(usage)?.parse()?;
    let listen: SocketAddr = args.get(1).ok_or(usage)?.parse()?;
    let mut urls = HashMap::new();
    for prefix in ["/fast", "/fail", "/slow"] {
        let path: &'static str = format!("{prefix}{GATEWAY_PATH}").leak();
        urls.insert(path, format!("http://{upstream}{path}").parse()?);
    }
    understudy_providers::install_tls_provider();
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(55))
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never().max_retries_per_request(0))
        .build()?;
    let state = Arc::new(Stack {
        client,
        urls,
        parse,
    });
    let app = Router::new()
        .route("/{*path}", axum::routing::post(forward))
        .with_state(state);
    let listener = TcpListener::bind(listen).await?;
    let http = hyper::server::conn::http1::Builder::new();
    loop {
        let (tcp, _) = listener.accept().await?;
        let _ = tcp.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = http.serve_connection(TokioIo::new(tcp), service);
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}

/// One request forwarded (`/fallback/…`: the failing path first, as the
/// gateway's fallback does), the answer streamed back as it arrives, or
/// read whole, parsed and written again with `--parse`.
async fn forward(State(stack): State<Arc<Stack>>, uri: Uri, body: Bytes) -> Response {
    match relay_one(&stack, uri.path(), body).await {
        Ok(response) => response,
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

async fn relay_one(stack: &Stack, path: &str, body: Bytes) -> Result<Response, Error> {
    let body = match stack.parse {
        true => Bytes::from(serde_json::to_vec(&serde_json::from_slice::<
            serde_json::Value,
        >(&body)?)?),
        false => body,
    };
    let fast;
    let path = match path.strip_prefix("/fallback") {
        Some(rest) => {
            let failing = stack.post(&format!("/fail{rest}"), body.clone())?;
            let _ = failing.send().await?.bytes().await?;
            fast = format!("/fast{rest}");
            fast.as_str()
        }
        None => path,
    };
    let answer = stack.post(path, body)?.send().await?;
    let status = answer.status();
    let content_type = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("application/json"));
    let body = match stack.parse {
        true => {
            let value: serde_json::Value = serde_json::from_slice(&answer.bytes().await?)?;
            Body::from(serde_json::to_vec(&value)?)
        }
        false => Body::new(reqwest::Body::from(answer)),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    Ok(response)
}

impl Stack {
    fn post(&self, path: &str, body: Bytes) -> Result<reqwest::RequestBuilder, Error> {
        let url = self.urls.get(path).ok_or("no such upstream path")?;
        Ok(self
            .client
            .post(url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .body(body))
    }
}
