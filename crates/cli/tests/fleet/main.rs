//! The Kubernetes manifests' fleet under `podman kube play`: the rendered
//! gateway Deployment played as two replicas, its ConfigMaps (the example
//! settings file) and the Redis StatefulSet, on the images `cargo xtask
//! test` made, in front of two simulated providers (OpenAI first, Claude
//! behind it, as the example routes). Through the one Redis pod the two
//! replicas share a client record's requests per minute (its `rpm` spent
//! over both, the next request is a 429 on either) and circuit breakers
//! (a breaker opened through one is open on the other, which then skips a
//! provider it never saw fail). Redis requires the Secret's password
//! (a connection without it is refused), which the gateways take from
//! `REDIS_URL`. `/readyz` is 200 `ready`, and while Redis is stopped 200
//! `degraded` (the shipped `ready_without_redis = true`: the replicas stay
//! in the Service, serving on local state) until Redis is back.
//!
//! Built only with the `container-tests` feature, and run by `cargo xtask
//! test` (after it rendered the manifests and made the images), which
//! says so loudly when Podman cannot run here. What is changed to play
//! the objects on one host is in `play.rs`.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod play;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, eventually, eventually_within};

use play::Plan;

/// The example client record's key (`UNDERSTUDY_KEY_EXAMPLE_TEAM`), and a
/// plain unlimited client key (`UNDERSTUDY_API_KEYS`).
const TEAM_KEY: &str = "sk-fleet-example-team-0123456789";
const PLAIN_KEY: &str = "sk-fleet-plain-client-0123456789";

/// The example record's `rpm`, lowered for the test.
const RPM: usize = 5;

/// Redis's password (the Secret's `REDIS_PASSWORD`).
const REDIS_PASSWORD: &str = "fleet-redis-password-0123456789";

/// How long a pod may take to start and turn ready, and Redis's loss or
/// return to show on `/readyz`: generous, since a loaded machine is slow
/// and a right fleet returns at once.
const PATIENCE: Duration = Duration::from_secs(120);

/// What `cargo xtask test` hands the test.
struct Given {
    /// The base's rendered objects, as JSON.
    objects: Vec<Value>,
    image: String,
    redis_image: String,
    podman: PathBuf,
}

impl Given {
    fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: `cargo xtask test` runs this test, with the manifests rendered and the images made")
            })
        };
        let objects = std::fs::read_to_string(var("UNDERSTUDY_FLEET_OBJECTS")).unwrap();
        Self {
            objects: serde_json::from_str(&objects).unwrap(),
            image: var("UNDERSTUDY_FLEET_IMAGE"),
            redis_image: var("UNDERSTUDY_FLEET_REDIS_IMAGE"),
            podman: std::env::var_os("PODMAN").map_or_else(|| "podman".into(), PathBuf::from),
        }
    }
}

/// The played fleet: its file and pods; taken down (pods and the volumes
/// Podman made of the ConfigMaps) when dropped, after showing the pods'
/// logs if the test failed.
struct Fleet {
    podman: PathBuf,
    file: PathBuf,
    plan: Plan,
    /// Each replica's URL, in the plan's order.
    urls: Vec<String>,
}

impl Fleet {
    fn play(given: &Given, plan: Plan) -> Self {
        let objects = play::play(&given.objects, &plan).unwrap();
        let file = std::env::temp_dir().join(format!("understudy-fleet-{}.yaml", plan.run));
        let docs: Vec<String> = objects.iter().map(Value::to_string).collect();
        std::fs::write(&file, docs.join("\n---\n")).unwrap();
        let urls = plan
            .replicas
            .iter()
            .map(|(_, port)| format!("http://127.0.0.1:{port}"))
            .collect();
        let fleet = Self {
            podman: given.podman.clone(),
            file,
            plan,
            urls,
        };
        fleet.podman(&["kube", "play", fleet.file.to_str().unwrap()]);
        fleet
    }

    /// `podman ARGS`, which must succeed; its stdout.
    fn podman(&self, args: &[&str]) -> String {
        let out = Command::new(&self.podman).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "podman {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn redis_pod(&self) -> String {
        play::pod("understudy-redis", &self.plan)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let pods: Vec<String> = self
            .plan
            .replicas
            .iter()
            .map(|(name, _)| play::pod(&format!("understudy-{name}"), &self.plan))
            .chain([self.redis_pod()])
            .collect();
        if std::thread::panicking() {
            for pod in &pods {
                let out = Command::new(&self.podman)
                    .args(["pod", "logs", pod])
                    .output();
                if let Ok(out) = out {
                    let shown = format!(
                        "--- {pod}:\n{}{}\n",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let _ = std::io::Write::write_all(&mut std::io::stderr(), shown.as_bytes());
                }
            }
        }
        let _ = Command::new(&self.podman)
            .args(["kube", "down"])
            .arg(&self.file)
            .output();
        for name in ["understudy-config", "understudy-keys", "state", "data"] {
            let _ = Command::new(&self.podman)
                .args(["volume", "rm", "--force"])
                .arg(format!("{name}-{}", self.plan.run))
                .output();
        }
        let _ = std::fs::remove_file(&self.file);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_share_a_clients_rpm_and_breakers_through_redis() {
    let given = Given::from_env();
    let openai = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let failing = Arc::new(AtomicBool::new(false));
    let fails = Arc::clone(&failing);
    openai.respond_with(move |r| {
        if fails.load(Ordering::SeqCst) && r.path.ends_with("/chat/completions") {
            Reply::status(503)
        } else {
            Reply::text("from openai")
        }
    });
    claude.always(Reply::text("from claude"));
    let [redis_port, a, b] = free_ports();
    let redis_url = format!("redis://:{REDIS_PASSWORD}@127.0.0.1:{redis_port}/0");
    let plan = Plan {
        run: format!("{}", std::process::id()),
        image: given.image.clone(),
        redis_image: given.redis_image.clone(),
        redis_port,
        replicas: vec![("a".to_owned(), a), ("b".to_owned(), b)],
        secret: [
            ("OPENAI_API_KEY", "sk-fleet-openai-0123456789"),
            ("ANTHROPIC_API_KEY", "sk-fleet-claude-0123456789"),
            ("OPENAI_BASE_URL", &openai.base_url()),
            ("ANTHROPIC_BASE_URL", &claude.base_url()),
            ("UNDERSTUDY_KEY_EXAMPLE_TEAM", TEAM_KEY),
            ("UNDERSTUDY_API_KEYS", PLAIN_KEY),
            ("REDIS_PASSWORD", REDIS_PASSWORD),
            ("REDIS_URL", &redis_url),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec(),
        edits: vec![("rpm = 600".to_owned(), format!("rpm = {RPM}"))],
        // Long enough that the breaker cannot cool down mid-test.
        append: "\n[breaker]\ncooldown = 600\n".to_owned(),
    };
    let fleet = Fleet::play(&given, plan);
    for url in &fleet.urls {
        eventually_within(
            PATIENCE,
            &format!("{url}/readyz to say ready"),
            async || readyz(url).await == Some((200, "ready".to_owned())),
        )
        .await;
        // Until it reaches Redis a replica counts alone (the pods start
        // in any order).
        eventually_within(PATIENCE, &format!("{url} to reach Redis"), async || {
            metric(url, "understudy_redis_degraded").await == Some(0.0)
        })
        .await;
    }
    redis_refuses_a_client_without_its_password(redis_port);
    a_clients_rpm_holds_across_the_fleet(&fleet).await;
    a_breaker_opened_on_one_is_open_on_the_other(&fleet, &openai, &failing).await;
    readyz_follows_redis(&fleet).await;
}

/// `RPM` requests spread over both replicas succeed; the next is a 429 on
/// either. The window is the UTC minute: a run that straddles two is
/// done again in the next.
async fn a_clients_rpm_holds_across_the_fleet(fleet: &Fleet) {
    let mut tries = 0;
    let statuses = loop {
        tries += 1;
        // A fresh minute when this one is nearly spent.
        if SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            % 60
            > 45
            || tries > 1
        {
            let now = minute();
            eventually_within(Duration::from_secs(70), "the next UTC minute", async || {
                minute() != now
            })
            .await;
        }
        let start = minute();
        let mut statuses = Vec::new();
        for i in 0..RPM + 2 {
            let url = &fleet.urls[i % 2];
            statuses.push(chat(url, TEAM_KEY, &format!("rpm {tries} {i}")).await.0);
        }
        if minute() == start || tries == 3 {
            break statuses;
        }
    };
    let mut want = vec![200; RPM];
    want.extend([429, 429]);
    assert_eq!(statuses, want, "requests alternating between the replicas");
}

/// Three failures through `a` open OpenAI's breaker there (each request
/// falls back to Claude); OpenAI answers again, and `b`, which never saw
/// it fail, skips it too.
async fn a_breaker_opened_on_one_is_open_on_the_other(
    fleet: &Fleet,
    openai: &SimProvider,
    failing: &AtomicBool,
) {
    let [a, b] = [&fleet.urls[0], &fleet.urls[1]];
    failing.store(true, Ordering::SeqCst);
    for i in 0..3 {
        let (status, provider) = chat(a, PLAIN_KEY, &format!("failing {i}")).await;
        assert_eq!((status, provider.as_str()), (200, "claude"), "request {i}");
    }
    failing.store(false, Ordering::SeqCst);
    let called = chat_calls(openai);
    let (status, provider) = chat(a, PLAIN_KEY, "after the failures").await;
    assert_eq!((status, provider.as_str()), (200, "claude"));
    assert_eq!(
        chat_calls(openai),
        called,
        "a called OpenAI behind its open breaker"
    );
    let mut n = 0;
    eventually("b to skip OpenAI, open in Redis", async || {
        n += 1;
        chat(b, PLAIN_KEY, &format!("through b {n}")).await.1 == "claude"
    })
    .await;
    let called = chat_calls(openai);
    let (status, provider) = chat(b, PLAIN_KEY, "b again").await;
    assert_eq!((status, provider.as_str()), (200, "claude"));
    assert_eq!(
        chat_calls(openai),
        called,
        "b called OpenAI behind the fleet's open breaker"
    );
}

/// A command without the password is refused (`NOAUTH`): the played
/// Redis requires the Secret's password, which the replicas, ready and
/// counting through it, therefore use.
fn redis_refuses_a_client_without_its_password(port: u16) {
    use std::io::{BufRead as _, BufReader, Write as _};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(PATIENCE)).unwrap();
    conn.write_all(b"PING\r\n").unwrap();
    let mut reply = String::new();
    BufReader::new(conn).read_line(&mut reply).unwrap();
    assert!(
        reply.starts_with("-NOAUTH"),
        "Redis answered {reply:?} without its password"
    );
}

/// Redis stopped: both replicas stay ready, `degraded` (200: the shipped
/// settings keep them serving on local state); started again: `ready`.
async fn readyz_follows_redis(fleet: &Fleet) {
    let redis = fleet.redis_pod();
    fleet.podman(&["pod", "stop", &redis]);
    for url in &fleet.urls {
        eventually_within(
            PATIENCE,
            &format!("{url}/readyz 200 degraded without Redis"),
            async || readyz(url).await == Some((200, "degraded".to_owned())),
        )
        .await;
    }
    fleet.podman(&["pod", "start", &redis]);
    for url in &fleet.urls {
        eventually_within(
            PATIENCE,
            &format!("{url}/readyz 200 ready with Redis back"),
            async || readyz(url).await == Some((200, "ready".to_owned())),
        )
        .await;
    }
}

/// A chat completion on the default route through `url` with client key
/// `key` (`content` makes it unique: no cached answer): its status and
/// the provider that served it (`x-understudy-provider`).
async fn chat(url: &str, key: &str, content: &str) -> (u16, String) {
    let resp = understudy_testkit::http_client()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(key)
        .header("cache-control", "no-cache")
        .header("content-type", "application/json")
        .body(
            json!({"model": "default", "messages": [{"role": "user", "content": content}]})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    let provider = resp
        .headers()
        .get("x-understudy-provider")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (resp.status().as_u16(), provider)
}

/// `/readyz`'s status and its body's `status` word, or `None` while the
/// replica does not answer.
async fn readyz(url: &str) -> Option<(u16, String)> {
    let resp = understudy_testkit::http_client()
        .get(format!("{url}/readyz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    let body: Value = serde_json::from_str(&resp.text().await.ok()?).ok()?;
    Some((status, body["status"].as_str()?.to_owned()))
}

/// The value of the unlabelled metric `name` on `url`'s `/metrics`.
async fn metric(url: &str, name: &str) -> Option<f64> {
    let text = understudy_testkit::http_client()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The chat completions OpenAI's simulator received (its readiness probes
/// left out).
fn chat_calls(sim: &SimProvider) -> usize {
    sim.received()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .count()
}

/// The current UTC minute since the epoch.
fn minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60
}

/// Three free loopback ports (bound, then released for the pods to take).
fn free_ports() -> [u16; 3] {
    let listeners = [(); 3].map(|()| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    listeners.map(|l| l.local_addr().unwrap().port())
}
