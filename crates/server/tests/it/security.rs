//! The request hardening, over real HTTP against the real server: a body
//! that trickles in is cut at `server.body_timeout` (408, connection
//! closed); at most `server.max_connections` connections are served; the
//! JSON endpoints refuse other content types (415); an open loopback
//! gateway answers only its own `Host` (421, the DNS-rebinding defence);
//! CORS headers only for `server.cors_origins`; the status page's CSP and
//! `X-Frame-Options`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use understudy_testkit::{Reply, SimProvider, TestGateway};

use crate::common::TestServer;

const ADMIN_TOKEN: &str = "admin-token-for-security-tests";
const CLIENT_KEY: &str = "sk-client-key-for-security-tests";

/// A gateway over one healthy simulated groq, with `toml` added; returns
/// its `host:port` and the server, which stops when dropped.
async fn gateway(toml: &str) -> (SimProvider, String, TestServer) {
    let groq = SimProvider::openai().await.unwrap();
    groq.respond_with(|_| Reply::text("ok"));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .toml(toml)
        .env("UNDERSTUDY_ADMIN_TOKEN", ADMIN_TOKEN)
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    (groq, s.addr().to_owned(), s)
}

/// One answer read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// A response header's value (names lowercase).
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

/// Sends one request on a fresh connection (`Connection: close`) with
/// exactly the headers given (`host` included) and reads the answer.
async fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut request = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" || method == "PUT" {
        request.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut raw))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    parse(&raw)
}

fn parse(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    Answer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

fn generate_body() -> String {
    json!({"prompt": "hi"}).to_string()
}

fn chat_body() -> String {
    json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}).to_string()
}

fn messages_body() -> String {
    json!({"model": "default", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
}

#[tokio::test]
async fn a_body_that_trickles_in_is_cut_at_the_body_timeout() {
    let (_groq, addr, _stop) = gateway("[server]\nbody_timeout = 0.5").await;
    let head = "POST /v1/generate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n";
    // The clock starts before the connection exists, so the server's timer
    // cannot have run longer than it has, however late this task runs.
    let started = Instant::now();
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (mut read, mut write) = tcp.into_split();
    // One byte a second, for as long as the server keeps listening.
    let trickle = tokio::spawn(async move {
        loop {
            if write.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), read.read_to_end(&mut raw))
        .await
        .expect("the slow body was not cut within 5 s")
        .ok();
    let took = started.elapsed();
    trickle.abort();
    let answer = parse(&raw);
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.header("connection"), Some("close"), "{answer:?}");
    assert!(answer.header("x-request-id").is_some(), "{answer:?}");
    assert_eq!(
        answer.json()["error"]["code"],
        "invalid_request",
        "{answer:?}"
    );
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "cut after {took:?}"
    );

    // Each API answers in its own shape.
    for (path, check) in [
        ("/v1/chat/completions", "openai"),
        ("/v1/messages", "anthropic"),
    ] {
        let mut tcp = TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n{{"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut raw))
            .await
            .expect("cut within 5 s")
            .ok();
        let answer = parse(&raw);
        assert_eq!(answer.status, 408, "{answer:?}");
        let v = answer.json();
        match check {
            "openai" => assert_eq!(v["error"]["type"], "invalid_request_error", "{v}"),
            _ => assert_eq!(v["type"], "error", "{v}"),
        }
    }

    // A body that arrives in pieces, in time, is served as before.
    let body = generate_body();
    let (first, rest) = body.split_at(5);
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(
        format!(
            "POST /v1/generate HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{first}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    tcp.write_all(rest.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.unwrap();
    let answer = parse(&raw);
    assert_eq!(answer.status, 200, "{answer:?}");
}

#[tokio::test]
async fn connections_beyond_max_connections_wait_until_one_closes() {
    let (_groq, addr, _stop) = gateway("[server]\nmax_connections = 2").await;
    let request = b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n";
    let mut buf = vec![0u8; 4096];
    let mut served = Vec::new();
    for _ in 0..2 {
        let mut tcp = TcpStream::connect(&addr).await.unwrap();
        tcp.write_all(request).await.unwrap();
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        served.push(tcp);
    }
    // The third connects (the kernel's backlog) but is not served…
    let mut third = TcpStream::connect(&addr).await.unwrap();
    third.write_all(request).await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(700), third.read(&mut buf)).await;
    assert!(early.is_err(), "a third connection was served: {early:?}");
    // …until one of the two closes.
    drop(served.remove(0));
    let n = tokio::time::timeout(Duration::from_secs(3), third.read(&mut buf))
        .await
        .expect("the waiting connection was not served after one closed")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn json_endpoints_take_only_application_json() {
    let (groq, addr, _stop) = gateway("").await;
    let host = ("host", "localhost");
    for (path, body) in [
        ("/v1/generate", generate_body()),
        ("/v1/chat/completions", chat_body()),
        ("/v1/messages", messages_body()),
        ("/v1/messages/count_tokens", messages_body()),
        ("/v1/wit", json!({"topic": "x"}).to_string()),
    ] {
        for content_type in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            None,
        ] {
            let mut headers = vec![host];
            if let Some(ct) = content_type {
                headers.push(("content-type", ct));
            }
            let a = send(&addr, "POST", path, &headers, &body).await;
            assert_eq!(a.status, 415, "{path} {content_type:?}: {a:?}");
            let v = a.json();
            if path.starts_with("/v1/messages") {
                assert_eq!(v["type"], "error", "{v}");
                assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
            } else if path == "/v1/chat/completions" {
                assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
            } else {
                assert_eq!(v["error"]["code"], "invalid_request", "{v}");
            }
        }
    }
    assert_eq!(
        groq.request_count(),
        0,
        "a refused request reached a provider"
    );
    // JSON, with parameters and in any case, is served.
    for ct in ["application/json", "Application/JSON; charset=utf-8"] {
        let a = send(
            &addr,
            "POST",
            "/v1/generate",
            &[host, ("content-type", ct)],
            &generate_body(),
        )
        .await;
        assert_eq!(a.status, 200, "{ct}: {a:?}");
    }
    // The admin API's PUT too.
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let a = send(
        &addr,
        "PUT",
        "/v1/admin/routing",
        &[
            host,
            ("authorization", &auth),
            ("content-type", "text/plain"),
        ],
        "{}",
    )
    .await;
    assert_eq!(a.status, 415, "{a:?}");
}

#[tokio::test]
async fn an_open_loopback_gateway_answers_only_its_own_host() {
    let (groq, addr, _stop) =
        gateway("[server]\nallowed_hosts = [\"gateway.internal\", \"box.lan:9000\"]").await;
    let port = addr.rsplit_once(':').unwrap().1.to_owned();
    let json = ("content-type", "application/json");
    // A DNS-rebinding page's requests carry its own host name.
    for host in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        "localhost.evil.example".to_owned(),
        "box.lan:9001".to_owned(),
        "127.0.0.1.nip.io".to_owned(),
    ] {
        for (method, path, body) in [
            ("POST", "/v1/generate", generate_body()),
            ("POST", "/v1/chat/completions", chat_body()),
            ("GET", "/v1/models", String::new()),
            ("GET", "/v1/status", String::new()),
            ("GET", "/", String::new()),
            ("GET", "/metrics", String::new()),
        ] {
            let a = send(&addr, method, path, &[("host", &host), json], &body).await;
            assert_eq!(a.status, 421, "{host} {path}: {a:?}");
        }
    }
    assert_eq!(
        groq.request_count(),
        0,
        "a refused request reached a provider"
    );
    for host in [
        format!("localhost:{port}"),
        "localhost".to_owned(),
        "LOCALHOST:1".to_owned(),
        format!("127.0.0.1:{port}"),
        "[::1]:8080".to_owned(),
        "gateway.internal".to_owned(),
        "gateway.internal:443".to_owned(),
        "box.lan:9000".to_owned(),
    ] {
        let a = send(
            &addr,
            "POST",
            "/v1/generate",
            &[("host", &host), json],
            &generate_body(),
        )
        .await;
        assert_eq!(a.status, 200, "{host}: {a:?}");
    }

    // With client keys the Host is not checked (the key is the defence).
    let (_groq, keyed, _stop) = gateway(&format!("[server]\napi_keys = [\"{CLIENT_KEY}\"]")).await;
    let auth = format!("Bearer {CLIENT_KEY}");
    let a = send(
        &keyed,
        "POST",
        "/v1/generate",
        &[("host", "evil.example"), ("authorization", &auth), json],
        &generate_body(),
    )
    .await;
    assert_eq!(a.status, 200, "{a:?}");
}

#[tokio::test]
async fn cors_headers_only_for_listed_origins() {
    let origin = ("origin", "https://app.example");
    let host = ("host", "localhost");
    let json = ("content-type", "application/json");
    let preflight = [
        host,
        origin,
        ("access-control-request-method", "POST"),
        (
            "access-control-request-headers",
            "content-type, authorization",
        ),
    ];

    // None by default.
    let (_groq, addr, _stop) = gateway("").await;
    let a = send(
        &addr,
        "POST",
        "/v1/generate",
        &[host, origin, json],
        &generate_body(),
    )
    .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(
        !a.head.to_ascii_lowercase().contains("access-control-"),
        "{a:?}"
    );
    let a = send(&addr, "OPTIONS", "/v1/generate", &preflight, "").await;
    assert!(
        !a.head.to_ascii_lowercase().contains("access-control-"),
        "{a:?}"
    );

    // The listed origin gets them; another does not.
    let (_groq, addr, _stop) = gateway("[server]\ncors_origins = [\"https://app.example\"]").await;
    let a = send(&addr, "OPTIONS", "/v1/generate", &preflight, "").await;
    assert!(a.status == 204 || a.status == 200, "{a:?}");
    assert_eq!(
        a.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert!(
        a.header("access-control-allow-methods")
            .is_some_and(|m| m.contains("POST")),
        "{a:?}"
    );
    assert!(
        a.header("access-control-allow-headers")
            .is_some_and(|h| h.contains("authorization") && h.contains("content-type")),
        "{a:?}"
    );
    let a = send(
        &addr,
        "POST",
        "/v1/generate",
        &[host, origin, json],
        &generate_body(),
    )
    .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(
        a.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let evil = ("origin", "https://evil.example");
    let a = send(
        &addr,
        "POST",
        "/v1/generate",
        &[host, evil, json],
        &generate_body(),
    )
    .await;
    assert!(
        !a.head.to_ascii_lowercase().contains("access-control-"),
        "{a:?}"
    );
    let a = send(
        &addr,
        "OPTIONS",
        "/v1/generate",
        &[host, evil, ("access-control-request-method", "POST")],
        "",
    )
    .await;
    assert!(
        !a.head.to_ascii_lowercase().contains("access-control-"),
        "{a:?}"
    );
}

#[tokio::test]
async fn the_status_page_sends_a_strict_csp_and_no_framing() {
    let (_groq, addr, _stop) = gateway("").await;
    let a = send(&addr, "GET", "/", &[("host", "localhost")], "").await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.header("x-frame-options"), Some("DENY"));
    let csp = a
        .header("content-security-policy")
        .expect("a CSP")
        .to_owned();
    for directive in [
        "default-src 'none'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} missing from {csp}");
    }
    assert!(!csp.contains("unsafe-eval"), "{csp}");
    // The script is allowed by its hash, and the hash is the page's.
    let script = a
        .body
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(script, _)| script.to_owned())
        .expect("the page's inline script");
    let hash = sha256_base64(&script);
    assert!(
        csp.contains(&format!("script-src 'sha256-{hash}'")),
        "the CSP does not allow the page's script (sha256-{hash}): update it in routes/status.rs: {csp}"
    );
}

/// SHA-256 in base64, as a CSP names a script (by Python, which the SDK
/// tests need anyway).
fn sha256_base64(text: &str) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, hashlib, base64; print(base64.b64encode(hashlib.sha256(sys.stdin.buffer.read()).digest()).decode())",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 to hash the status page's script");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
