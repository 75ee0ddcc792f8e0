//! Client auth, the admin routing API (changed live under load), and the
//! `/v1/wit` endpoint, through a real HTTP client against the real server.

use std::time::Duration;

use serde_json::{Value, json};
use understudy_testkit::{Refusal, Reply, SimProvider, StreamSpec, TestGateway, eventually};
use understudy_types::chat::SOFTENING_SUFFIX;

use crate::common::TestServer;

const CLIENT_KEY: &str = "sk-client-0123456789";
const ADMIN_TOKEN: &str = "admin-token-0123456789";

async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn client_keys_guard_the_api() {
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .env(
            "UNDERSTUDY_API_KEYS",
            &format!("other-key-999, {CLIENT_KEY}"),
        )
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let url = s.url.clone();
    let c = understudy_testkit::http_client();
    let body = json!({"prompt": "hi"}).to_string();

    let (status, v) = send(
        c.post(format!("{url}/v1/generate"))
            .header("content-type", "application/json")
            .body(body.clone()),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (401, Some("invalid_api_key")),
        "{v}"
    );
    let (status, _) = send(
        c.post(format!("{url}/v1/generate"))
            .header("content-type", "application/json")
            .bearer_auth("wrong-key-123")
            .body(body.clone()),
    )
    .await;
    assert_eq!(status, 401);
    let (status, v) = send(
        c.post(format!("{url}/v1/generate"))
            .header("content-type", "application/json")
            .bearer_auth(CLIENT_KEY)
            .body(body.clone()),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    // The OpenAI-compatible routes answer in OpenAI's shape.
    let chat =
        json!({"model": "default", "messages": [{"role": "user", "content": "x"}]}).to_string();
    let (status, v) = send(
        c.post(format!("{url}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(chat),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(v["error"]["type"], "authentication_error");
    let (status, _) = send(c.get(format!("{url}/v1/models"))).await;
    assert_eq!(status, 401);
    // Health checks stay open.
    let (status, _) = send(c.get(format!("{url}/healthz"))).await;
    assert_eq!(status, 200);
    assert_eq!(groq.request_count(), 1);
}

#[tokio::test]
async fn without_keys_the_api_is_open_and_admin_is_off() {
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let url = s.url.clone();
    let c = understudy_testkit::http_client();
    let (status, _) = send(
        c.post(format!("{url}/v1/generate"))
            .header("content-type", "application/json")
            .body(json!({"prompt": "hi"}).to_string()),
    )
    .await;
    assert_eq!(status, 200);
    let (status, v) = send(
        c.get(format!("{url}/v1/admin/routing"))
            .bearer_auth(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(status, 404, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_changes_live_under_load() {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::text("groq").after(Duration::from_millis(5)));
    claude.always(Reply::text("claude").after(Duration::from_millis(5)));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .env("UNDERSTUDY_ADMIN_TOKEN", ADMIN_TOKEN)
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let url = s.url.clone();
    let c = understudy_testkit::http_client();

    // Admin auth and validation.
    let (status, v) = send(c.get(format!("{url}/v1/admin/routing"))).await;
    assert_eq!(status, 401, "{v}");
    let (status, v) = send(
        c.get(format!("{url}/v1/admin/routing"))
            .bearer_auth(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        v,
        json!({"default": "groq", "order": ["groq", "claude"], "refusal_policy": "soften_then_fallback", "routes": {}})
    );
    for bad in [
        json!({"default": "nope"}),
        json!({"order": ["groq", "groq"]}),
        json!({"refusal_policy": "maybe"}),
        json!({"routes": {"r": ["nope:m"]}}),
        json!({"colour": 1}),
    ] {
        let (status, v) = send(
            c.put(format!("{url}/v1/admin/routing"))
                .header("content-type", "application/json")
                .bearer_auth(ADMIN_TOKEN)
                .body(bad.to_string()),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {v}");
    }

    // Load: 4 clients, 60 sequential requests each, while the primary flips.
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let c = c.clone();
            let url = url.clone();
            tokio::spawn(async move {
                let mut served = Vec::new();
                for _ in 0..60 {
                    let (status, v) = send(
                        c.post(format!("{url}/v1/generate"))
                            .header("content-type", "application/json")
                            .body(json!({"prompt": "x"}).to_string()),
                    )
                    .await;
                    assert_eq!(status, 200, "{v}");
                    served.push(v["provider"].as_str().unwrap().to_owned());
                }
                served
            })
        })
        .collect();
    // Change the routing once the load is well under way, not before.
    eventually("the load to reach groq", async || {
        groq.request_count() >= 20
    })
    .await;
    let change = json!({"default": "claude", "order": ["claude", "groq"], "routes": {"cheap": ["groq:small"]}});
    let (status, v) = send(
        c.put(format!("{url}/v1/admin/routing"))
            .header("content-type", "application/json")
            .bearer_auth(ADMIN_TOKEN)
            .body(change.to_string()),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["default"], "claude");
    let mut all = Vec::new();
    for w in workers {
        let served = w.await.unwrap();
        // Each client sees groq, then claude, never back.
        let first_claude = served
            .iter()
            .position(|p| p == "claude")
            .unwrap_or(served.len());
        assert!(
            served[first_claude..].iter().all(|p| p == "claude"),
            "{served:?}"
        );
        all.extend(served);
    }
    assert_eq!(all.len(), 240, "no request was dropped");
    assert!(
        all.iter().any(|p| p == "groq") && all.iter().any(|p| p == "claude"),
        "{all:?}"
    );
    // The new route exists; and the change is reversible.
    let (status, _) = send(
        c.post(format!("{url}/v1/generate"))
            .header("content-type", "application/json")
            .body(json!({"prompt": "x", "route": "cheap"}).to_string()),
    )
    .await;
    assert_eq!(status, 200);
    let (status, v) = send(
        c.put(format!("{url}/v1/admin/routing"))
            .header("content-type", "application/json")
            .bearer_auth(ADMIN_TOKEN)
            .body(json!({"default": "groq"}).to_string()),
    )
    .await;
    assert_eq!((status, v["default"].as_str()), (200, Some("groq")));
    let (_, v) = send(
        c.post(format!("{url}/v1/generate"))
            .header("content-type", "application/json")
            .body(json!({"prompt": "x"}).to_string()),
    )
    .await;
    assert_eq!(v["provider"], "groq");
}

#[tokio::test]
async fn wit_in_every_style_and_a_softened_roast() {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    // Groq refuses roasts unless the request was softened.
    groq.respond_with(|r| {
        let system = r.json()["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        if system.contains("roast") && !system.ends_with(SOFTENING_SUFFIX) {
            Reply::Refuse(Refusal::Message("I can't be mean.".into()))
        } else {
            Reply::text("A gentle joke.")
        }
    });
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let url = s.url.clone();
    let c = understudy_testkit::http_client();
    for style in ["pun", "one-liner", "roast", "dad-joke", "limerick"] {
        let (status, v) = send(
            c.post(format!("{url}/v1/wit")).header("content-type", "application/json").body(
                json!({"topic": "Rust borrow checker", "style": style, "audience": "developers"})
                    .to_string(),
            ),
        )
        .await;
        assert_eq!(status, 200, "{style}: {v}");
        assert_eq!(v["text"], "A gentle joke.");
        assert_eq!(v["style"], style);
        assert_eq!(v["topic"], "Rust borrow checker");
        assert_eq!(v["provider"], "groq");
        assert_eq!(v["fell_back"], false);
        assert_eq!(v["content_filtered"], style == "roast", "{style}");
    }
    let sent = groq.received();
    let systems: Vec<String> = sent
        .iter()
        .map(|r| {
            r.json()["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(sent.len(), 6, "five styles, one softened retry");
    assert!(
        systems[0].contains("pun")
            && systems[4].contains("dad joke")
            && systems[5].contains("limerick"),
        "{systems:?}"
    );
    assert!(systems[3].ends_with(SOFTENING_SUFFIX));
    assert_eq!(
        sent[0].json()["messages"][1]["content"],
        "Topic: Rust borrow checker\nAudience: developers"
    );
    assert_eq!(claude.request_count(), 0);

    for bad in [
        json!({"topic": " ", "style": "pun"}),
        json!({"topic": "x", "style": "sonnet"}),
        json!({"style": "pun"}),
        json!({"topic": "x".repeat(600), "style": "pun"}),
    ] {
        let (status, v) = send(
            c.post(format!("{url}/v1/wit"))
                .header("content-type", "application/json")
                .body(bad.to_string()),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {v}");
    }
    // Streamed wit.
    let resp = c
        .post(format!("{url}/v1/wit"))
        .header("content-type", "application/json")
        .body(json!({"topic": "cats", "style": "pun", "stream": true}).to_string())
        .send()
        .await
        .unwrap();
    let body = resp.text().await.unwrap();
    assert!(
        body.contains("event: delta") && body.contains("event: done"),
        "{body}"
    );
}

#[tokio::test]
async fn per_request_overrides_on_every_api() {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .toml("[routes]\nfast = [\"claude\"]")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let url = s.url.clone();
    let c = understudy_testkit::http_client();
    let generate = || {
        c.post(format!("{url}/v1/generate"))
            .header("content-type", "application/json")
            .body(json!({"prompt": "x"}).to_string())
    };
    let chat = || {
        c.post(format!("{url}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(
                json!({"model": "default", "messages": [{"role": "user", "content": "x"}]})
                    .to_string(),
            )
    };

    // x-understudy-no-fallback: the primary's failure is the answer.
    groq.push(Reply::status(503));
    let (status, v) = send(generate().header("x-understudy-no-fallback", "true")).await;
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["error"]["attempts"].as_array().unwrap().len(), 1);
    groq.push(Reply::status(503));
    let (status, _) = send(chat().header("x-understudy-no-fallback", "1")).await;
    assert_eq!(status, 502);
    assert_eq!(claude.request_count(), 0);

    // x-understudy-route.
    let (status, v) = send(generate().header("x-understudy-route", "fast")).await;
    assert_eq!((status, v["provider"].as_str()), (200, Some("claude")));
    let (status, v) = send(chat().header("x-understudy-route", "claude:claude-x")).await;
    assert_eq!((status, v["model"].as_str()), (200, Some("claude-x")));

    // x-understudy-refusal-policy.
    groq.push(Reply::Refuse(Refusal::FinishReason));
    let (status, v) = send(generate().header("x-understudy-refusal-policy", "surface")).await;
    assert_eq!(status, 422, "{v}");

    // x-understudy-timeout-ms.
    groq.push(Reply::Hang);
    let started = std::time::Instant::now();
    let (status, v) = send(generate().header("x-understudy-timeout-ms", "300")).await;
    assert_eq!(status, 504, "{v}");
    assert!(started.elapsed() < Duration::from_secs(3));

    // /v1/wit takes them too.
    let (status, v) = send(
        c.post(format!("{url}/v1/wit"))
            .header("content-type", "application/json")
            .header("x-understudy-route", "fast")
            .body(json!({"topic": "tea", "style": "pun"}).to_string()),
    )
    .await;
    assert_eq!((status, v["provider"].as_str()), (200, Some("claude")));

    // Bad values are clear 4xx errors.
    for (name, value, want) in [
        ("x-understudy-no-fallback", "perhaps", 400),
        ("x-understudy-timeout-ms", "0", 400),
        ("x-understudy-timeout-ms", "soon", 400),
        ("x-understudy-refusal-policy", "maybe", 400),
        ("x-understudy-route", "nope", 404),
    ] {
        let (status, v) = send(generate().header(name, value)).await;
        assert_eq!(status, want, "{name}: {value}: {v}");
    }
    // Body fields on the neutral API.
    let (status, _) = send(
        c.post(format!("{url}/v1/generate"))
            .header("content-type", "application/json")
            .body(json!({"prompt": "x", "timeout_ms": 0}).to_string()),
    )
    .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn shutdown_lets_requests_in_flight_finish_then_stops() {
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        // No grace period: the drain (stop accepting, finish what is in
        // flight) is the subject here.
        .toml("[server]\ndrain_grace = 0")
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(understudy_server::serve(listener, gw.engine, async move {
        let _ = stopped.await;
    }));
    // The server is signalled by the upstream itself, when the request
    // reaches it and before it answers (400 ms later): the request is in
    // flight when the signal comes, however slow the machine.
    let stop = std::sync::Mutex::new(Some(stop));
    let signalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signalled_by_groq = std::sync::Arc::clone(&signalled);
    groq.respond_with(move |_| {
        if let Some(stop) = stop.lock().unwrap().take() {
            let sent = stop.send(()).is_ok();
            signalled_by_groq.store(sent, std::sync::atomic::Ordering::SeqCst);
        }
        Reply::text("late but whole").after(Duration::from_millis(400))
    });
    let c = understudy_testkit::http_client();
    let in_flight = tokio::spawn(
        c.post(format!("http://{addr}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(json!({"messages": [{"role": "user", "content": "hi"}]}).to_string())
            .send(),
    );
    let resp = in_flight.await.unwrap().unwrap();
    assert!(
        signalled.load(std::sync::atomic::Ordering::SeqCst),
        "the server was not signalled while the request was in flight"
    );
    assert_eq!(resp.status(), 200);
    let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "late but whole");
    assert_eq!(groq.request_count(), 1, "signalled by that one request");
    // `serve` returns once the connection is drained, and nothing is
    // accepted any more.
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("serve did not return after the drain")
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn idle_and_slow_connections_are_closed_after_the_idle_timeout() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .toml("[server]\nidle_timeout = 0.5")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let addr = s.addr().to_owned();
    let request = "GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n";

    // A keep-alive connection answers, stays usable for a second request
    // well within the timeout, and is closed once idle for longer.
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut buf = vec![0u8; 4096];
    for _ in 0..2 {
        tcp.write_all(request.as_bytes()).await.unwrap();
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let closed = tokio::time::timeout(Duration::from_secs(3), tcp.read(&mut buf))
        .await
        .expect("an idle connection was kept open");
    assert_eq!(closed.unwrap_or(0), 0, "expected the server to close");

    // A client that never finishes its request head is closed too. The
    // clock starts before the connection exists, so the server's timer
    // (started once it accepts) cannot have run longer than it has,
    // however long this task waits to be scheduled.
    let started = std::time::Instant::now();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost:")
        .await
        .unwrap();
    let n = tokio::time::timeout(Duration::from_secs(3), slow.read(&mut buf))
        .await
        .expect("a half-sent request head held the connection open");
    // Hyper may answer 408 before closing; either way the connection ends.
    if let Ok(n) = n {
        if n > 0 {
            let rest = tokio::time::timeout(Duration::from_secs(3), slow.read(&mut buf))
                .await
                .expect("the connection stayed open after the answer");
            assert_eq!(rest.unwrap_or(0), 0);
        }
    }
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn answers_longer_than_the_idle_timeout_are_not_cut() {
    // idle_timeout bounds the wait for a request head only: a slow answer
    // and a stream that outlast it must finish.
    let groq = SimProvider::openai().await.unwrap();
    groq.push(Reply::text("slow but whole").after(Duration::from_millis(1200)));
    let words: Vec<String> = (0..10).map(|i| format!(" w{i}")).collect();
    let chunks: Vec<&str> = words.iter().map(String::as_str).collect();
    groq.push(
        StreamSpec::new(&chunks)
            .every(Duration::from_millis(150))
            .reply(),
    );
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .toml("[server]\nidle_timeout = 0.5")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let url = s.url.clone();
    let c = understudy_testkit::http_client();
    let ask = |stream: bool| {
        c.post(format!("{url}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(
                json!({"stream": stream, "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            )
    };
    let (status, v) = send(ask(false)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "slow but whole");
    let text = ask(true).send().await.unwrap().text().await.unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert!(text.contains(" w9"), "{text}");
}
