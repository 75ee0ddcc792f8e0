//! Fallbacks proven ready without spending tokens: two real `understudy
//! serve` instances on one `redis-server`, a route whose primary fails,
//! then a fallback whose model was retired (404), one whose key was
//! revoked (401) and a healthy spare. Within a probe interval both bad
//! fallbacks are "not ready" in each instance's `/v1/status` and in
//! `understudy providers --check`; requests skip them; the prober made no
//! generation call; and only one instance of the two probed.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use understudy_testkit::{RedisServer, Reply, SimProvider, eventually};

use crate::common::plain;

/// A running `understudy serve`, its URL and its log; killed when
/// dropped.
struct Serve {
    child: Child,
    url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Serve {
    /// How many of its log lines hold every one of `parts`.
    fn logged(&self, parts: &[&str]) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .count()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn command(config: &std::path::Path, redis: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_understudy"));
    cmd.env_clear()
        .env("UNDERSTUDY_CONFIG", config)
        .env("REDIS_URL", redis.url());
    cmd
}

async fn serve(config: &std::path::Path, redis: &RedisServer) -> Serve {
    let mut cmd = command(config, redis);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&log);
    let url = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("serve exited before listening")
                .unwrap();
            if let Some(url) = line.split("listening on ").nth(1) {
                break url.trim().to_owned();
            }
        };
        // Keep reading (the gateway never blocks on a full pipe), keeping
        // the log.
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(plain(&line));
            }
        });
        url
    })
    .await
    .unwrap();
    Serve { child, url, log }
}

/// Each probed target's state in `url`'s `/v1/status`, as `provider:
/// state[:reason]`.
async fn readiness(url: &str) -> Vec<String> {
    let client = understudy_testkit::http_client();
    let Ok(resp) = client.get(format!("{url}/v1/status")).send().await else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
    v["readiness"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let mut s = format!(
                "{}:{}",
                r["provider"].as_str().unwrap_or(""),
                r["state"].as_str().unwrap_or("")
            );
            if let Some(reason) = r["reason"].as_str() {
                s.push(':');
                s.push_str(reason);
            }
            s
        })
        .collect()
}

/// The probes `url`'s instance made itself (its `understudy_probes_total`).
async fn probes_made(url: &str) -> f64 {
    let client = understudy_testkit::http_client();
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("understudy_probes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The settings file of a route of four targets: `primary`, then the
/// fallbacks `retired` (its model `old-model`), `revoked` (an Anthropic
/// one) and `spare`, probed every half second.
fn write_config(sims: [&SimProvider; 4]) -> std::path::PathBuf {
    let provider = |name: &str, kind: &str, sim: &SimProvider, model: &str| {
        format!(
            "[providers.{name}]\nkind = \"{kind}\"\nbase_url = {:?}\napi_key = \"key-{name}-0123456789\"\nmodel = \"{model}\"\n",
            sim.base_url()
        )
    };
    let [primary, retired, revoked, spare] = sims;
    let config = std::env::temp_dir().join(format!(
        "understudy-cli-{}-readiness.toml",
        std::process::id()
    ));
    std::fs::write(
        &config,
        [
            "[routing]\ndefault = \"primary\"\norder = [\"primary\", \"retired\", \"revoked\", \"spare\"]\n[probe]\ninterval = 0.5\n".to_owned(),
            provider("primary", "openai", primary, "gpt-test"),
            provider("retired", "openai", retired, "old-model"),
            provider("revoked", "anthropic", revoked, "claude-test"),
            provider("spare", "openai", spare, "gpt-spare"),
        ]
        .concat(),
    )
    .unwrap();
    config
}

/// `understudy providers --check` names the retired and the revoked
/// fallbacks not ready (and why), the spare ready, leaks no key, and
/// exits 1.
async fn check_names_them(config: &std::path::Path, redis: &RedisServer) {
    let mut check = command(config, redis);
    check.args(["providers", "--check"]);
    let out = tokio::task::spawn_blocking(move || check.output().unwrap())
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = |target: &str| {
        text.lines()
            .find(|l| l.starts_with(target))
            .unwrap_or_else(|| panic!("{target} missing: {text}"))
            .to_owned()
    };
    assert!(
        line("retired:old-model").contains("not_ready (model_missing)"),
        "{text}"
    );
    assert!(
        line("revoked:claude-test").contains("not_ready (auth)"),
        "{text}"
    );
    assert!(line("spare:gpt-spare").contains("ready"), "{text}");
    assert!(
        !text.contains("key-revoked-0123456789"),
        "a key leaked: {text}"
    );
}

/// Each instance logged each change once at WARN, not once per probe:
/// waits for a few more rounds of the prober (`made`: the probes each
/// had made), then counts.
async fn warned_once_each(a: &Serve, b: &Serve, made: [f64; 2]) {
    let prober = if made[0] > 0.0 { a } else { b };
    eventually("three more rounds", async || {
        probes_made(&prober.url).await >= made[0].max(made[1]) + 12.0
    })
    .await;
    for gateway in [a, b] {
        for target in ["provider=retired", "provider=revoked"] {
            assert_eq!(
                gateway.logged(&["WARN", "target not ready", target]),
                1,
                "{target}: {:?}",
                gateway.log.lock().unwrap()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retired_model_and_a_revoked_key_are_not_ready_and_skipped_without_a_token() {
    let redis = RedisServer::start().unwrap();
    let primary = SimProvider::openai().await.unwrap();
    let retired = SimProvider::openai().await.unwrap();
    let revoked = SimProvider::anthropic().await.unwrap();
    let spare = SimProvider::openai().await.unwrap();
    primary.always(Reply::status(503));
    retired.retire_model("old-model");
    revoked.revoke_key();
    let config = write_config([&primary, &retired, &revoked, &spare]);

    let a = serve(&config, &redis).await;
    let b = serve(&config, &redis).await;
    let want = [
        "primary:ready",
        "retired:not_ready:model_missing",
        "revoked:not_ready:auth",
        "spare:ready",
    ];
    for gateway in [&a, &b] {
        eventually("both bad fallbacks not ready in /v1/status", async || {
            let seen = readiness(&gateway.url).await;
            (seen == want).then_some(()).ok_or(format!("{seen:?}"))
        })
        .await;
    }

    // A request skips them: the primary fails, the spare serves.
    let client = understudy_testkit::http_client();
    let resp = client
        .post(format!("{}/v1/generate", a.url))
        .header("content-type", "application/json")
        .body(r#"{"prompt": "hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(v["provider"], "spare", "{v}");

    // `providers --check` says the same, and fails.
    check_names_them(&config, &redis).await;

    // The prober generated nothing: the bad fallbacks saw lookups only.
    for (name, sim) in [("retired", &retired), ("revoked", &revoked)] {
        assert!(sim.lookups() > 0, "{name} was never probed");
        assert_eq!(sim.generation_calls(), 0, "{name}: {:?}", sim.received());
    }
    // The spare served the one request; its lookups were not generations.
    assert_eq!(spare.generation_calls(), 1);
    // One instance of the two probed; the other took its results.
    let made = [probes_made(&a.url).await, probes_made(&b.url).await];
    assert!(
        (made[0] > 0.0) != (made[1] > 0.0),
        "exactly one instance probes: {made:?}"
    );

    // A change is logged once per instance at WARN, not once per probe.
    warned_once_each(&a, &b, made).await;
    let _ = std::fs::remove_file(&config);
}
