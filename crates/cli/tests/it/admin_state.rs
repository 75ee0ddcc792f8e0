//! The real binary without Redis keeps what the admin API changed: a
//! client record and a routing `PUT` made before a SIGTERM are in force
//! after the restart (the state file beside the settings file, by
//! default), and a state file that cannot be read stops `serve` with a
//! message naming it.

use std::process::Command;

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider};

use crate::common::{Gateway, Scratch, providers};

const ADMIN: &str = "admin-token-0123456789";
const CLIENT_KEY: &str = "sk-plain-client-0123456789";

async fn admin(gateway: &Gateway, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = understudy_testkit::http_client()
        .request(method.parse().unwrap(), format!("{}{path}", gateway.url))
        .header("authorization", format!("Bearer {ADMIN}"));
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (
        status,
        serde_json::from_str(&resp.text().await.unwrap()).unwrap(),
    )
}

/// A chat request with `key`: its status and the provider that served it.
async fn ask(gateway: &Gateway, key: &str) -> (u16, Option<String>) {
    let (status, provider, _) = crate::common::ask(gateway, key, "default").await;
    (status, provider)
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_changes_outlive_a_restart_of_the_binary() {
    let groq = SimProvider::openai().await.unwrap();
    groq.always(Reply::text("From groq"));
    let openai = SimProvider::openai().await.unwrap();
    openai.always(Reply::text("From openai"));
    let toml = providers(&[("groq", "openai", &groq), ("openai", "openai", &openai)]);
    let scratch = Scratch::new("admin-state", "restart");
    let env = [("UNDERSTUDY_ADMIN_TOKEN", ADMIN)];
    let mut first = Gateway::start_with(&scratch, &toml, CLIENT_KEY, &env);
    let (status, made) = admin(
        &first,
        "POST",
        "/v1/admin/clients",
        Some(json!({"name": "kept-team"})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["kept_in"], "state_file");
    let key = made["key"].as_str().unwrap().to_owned();
    let (status, routed) = admin(
        &first,
        "PUT",
        "/v1/admin/routing",
        Some(json!({"default": "openai", "order": ["openai", "groq"]})),
    )
    .await;
    assert_eq!(status, 200, "{routed}");
    assert!(first.terminate().await.success(), "{}", first.log());
    let state = scratch.root.join("understudy-state.json");
    assert!(state.exists(), "beside the settings file by default");

    let second = Gateway::start_with(&scratch, &toml, CLIENT_KEY, &env);
    assert_eq!(ask(&second, &key).await, (200, Some("openai".into())));
    assert_eq!(ask(&second, CLIENT_KEY).await, (200, Some("openai".into())));
    drop(second);

    // A state file cut short: `serve` refuses to start, naming it.
    let text = std::fs::read_to_string(&state).unwrap();
    std::fs::write(&state, &text[..text.len() / 2]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_understudy"))
        .env_clear()
        .env("UNDERSTUDY_API_KEYS", CLIENT_KEY)
        .env("UNDERSTUDY_ADMIN_TOKEN", ADMIN)
        .arg("--config")
        .arg(scratch.root.join("understudy.toml"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&state.display().to_string()), "{err}");
    assert!(!err.contains("listening on"), "{err}");
}
