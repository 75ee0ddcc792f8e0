//! [`TestServer`]: the real server (`understudy_server::serve`) on a free
//! loopback port over an engine — usually a `TestGateway`'s — stopped when
//! dropped; and [`Answer`], one HTTP answer read whole. It lives here, not
//! in the testkit, because the testkit cannot depend on the server crate
//! (a dev-dependency cycle would link two copies of it).
//!
//! ```ignore
//! let s = TestServer::start(gw.engine).await;
//! let a = s.post("/v1/generate", json!({"prompt": "hi"}).to_string()).await;
//! assert_eq!(a.status, 200, "{}", a.body);
//! ```

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use understudy_core::Engine;

/// The real server on `127.0.0.1:0`, serving an engine until dropped.
#[derive(Debug)]
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The engine it serves (a handle: the server has a clone).
    pub engine: Engine,
    client: reqwest::Client,
    /// Dropping it stops the server.
    _stop: oneshot::Sender<()>,
}

/// One answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

// === impl TestServer ===

impl TestServer {
    /// Serves `engine` on a free loopback port.
    pub async fn start(engine: Engine) -> Self {
        let (url, stop) = serve(engine.clone()).await;
        Self {
            url,
            engine,
            client: understudy_testkit::http_client(),
            _stop: stop,
        }
    }

    /// `host:port`, for tests that speak raw TCP.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// The URL of `path` (which starts with `/`).
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// A plain client, for requests the helpers below do not make.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// POSTs `body` to `path` as `application/json`.
    pub async fn post(&self, path: &str, body: impl Into<String>) -> Answer {
        self.post_with(path, &[], body).await
    }

    /// POSTs `body` to `path` as `application/json`, with `headers` too.
    pub async fn post_with(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<String>,
    ) -> Answer {
        Answer::read(self.stream_with(path, headers, body).await).await
    }

    /// GETs `path`.
    pub async fn get(&self, path: &str) -> Answer {
        self.get_with(path, &[]).await
    }

    /// GETs `path` with `headers`.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let mut req = self.client.get(self.at(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Answer::read(req.send().await.unwrap()).await
    }

    /// Like [`Self::post_with`], but returns the response once its head
    /// has arrived, for a test that reads the body piece by piece (or
    /// leaves it unread).
    pub async fn stream_with(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<String>,
    ) -> reqwest::Response {
        let mut req = self
            .client
            .post(self.at(path))
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(body.into()).send().await.unwrap()
    }
}

/// Serves `engine` on `127.0.0.1:0`; returns its base URL and the sender
/// whose drop shuts it down.
async fn serve(engine: Engine) -> (String, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free loopback port");
    let url = format!("http://{}", listener.local_addr().expect("a bound address"));
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(understudy_server::serve(listener, engine, async move {
        let _ = stopped.await;
    }));
    (url, stop)
}

// === impl Answer ===

impl Answer {
    /// Reads `resp` whole.
    pub async fn read(resp: reqwest::Response) -> Self {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.text().await.unwrap();
        Self {
            status,
            headers,
            body,
        }
    }

    /// The body as JSON; fails the test, showing the body, when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// A header's value, when it is there and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON, or as a JSON string when it is not JSON.
    pub fn json_or_text(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|_| Value::String(self.body.clone()))
    }
}
