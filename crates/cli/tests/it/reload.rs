//! The real binary reloads its settings file without a restart: a route
//! changed through a ConfigMap-style symlink swap serves new requests on
//! its new target while a stream begun before finishes on the old one
//! (whose provider is rebuilt under it); a
//! provider added serves, one removed is gone and one changed is rebuilt
//! from its new settings; a client record's `rpm`
//! changes; a key pool's key rotated out in the file is never used by a
//! new request, while the key kept serves on and the key added is used; a
//! file that does not load keeps the configuration in force, is counted
//! and logged without the key it holds; one that cannot be read
//! (deleted, a directory, a symlink loop) is counted and logged once, and
//! said when it is back; SIGHUP reloads too.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, StreamSpec, eventually};

use crate::common::{Gateway, Scratch, ask};

const CLIENT_KEY: &str = "sk-reload-client-0123456789";
/// A provider key the log must never show.
const FAKE_SECRET: &str = "sk-FAKE-RELOAD-SECRET-4242424242";

/// A provider table: `name` at `sim`, model `<name>-sim`.
fn provider(name: &str, sim: &SimProvider, key: &str) -> String {
    format!(
        "[providers.{name}]\nkind = \"openai\"\nbase_url = {:?}\napi_key = {key:?}\nmodel = \"{name}-sim\"\n\n",
        sim.base_url()
    )
}

/// `GET path` with the client key, as JSON or text.
async fn get(gateway: &Gateway, path: &str) -> String {
    understudy_testkit::http_client()
        .get(format!("{}{path}", gateway.url))
        .bearer_auth(CLIENT_KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The `understudy_config_reloads_total` sample of `result` (0: none).
async fn reloads(gateway: &Gateway, result: &str) -> u64 {
    let text = get(gateway, "/metrics").await;
    let sample = format!("understudy_config_reloads_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&sample))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// `/v1/status`'s configuration: its hash and load time.
async fn config_of(gateway: &Gateway) -> Value {
    let status: Value = serde_json::from_str(&get(gateway, "/v1/status").await).unwrap();
    status["config"].clone()
}

fn sha256_hex(bytes: &[u8]) -> String {
    understudy_settings::sha256(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes `text` over `path` as an editor does: a new file renamed over it.
fn replace(path: &Path, text: &str) {
    let next = path.with_extension("toml.next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// The layout a Kubernetes ConfigMap volume has: `understudy.toml` a
/// symlink to `..data/understudy.toml`, `..data` a symlink to a versioned
/// folder; [`swap`] points `..data` at a new version atomically.
fn configmap(root: &Path) {
    std::fs::create_dir_all(root.join("..v0")).unwrap();
    std::os::unix::fs::symlink("..v0", root.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/understudy.toml", root.join("understudy.toml")).unwrap();
}

/// A ConfigMap update: version `n` holds `text`, then `..data` is renamed
/// to point at it (the file's path never changes, its target does).
fn swap(root: &Path, n: u32, text: &str) {
    let version = format!("..v{n}");
    std::fs::create_dir_all(root.join(&version)).unwrap();
    std::fs::write(root.join(&version).join("understudy.toml"), text).unwrap();
    let tmp = root.join("..data_tmp");
    std::os::unix::fs::symlink(&version, &tmp).unwrap();
    std::fs::rename(&tmp, root.join("..data")).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_route_swapped_in_a_configmap_serves_new_requests_while_an_old_stream_finishes() {
    let a = SimProvider::openai().await.unwrap();
    let words: Vec<String> = (0..60).map(|i| format!(" a{i}")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    a.push(
        StreamSpec::new(&words)
            .every(Duration::from_millis(100))
            .reply(),
    );
    a.always(Reply::text("From a"));
    let b = SimProvider::openai().await.unwrap();
    b.always(Reply::text("From b"));
    let base = format!(
        "[routing]\ndefault = \"a\"\n\n{}{}",
        provider("a", &a, "sim-key"),
        provider("b", &b, "sim-key")
    );
    let scratch = Scratch::new("reload", "configmap");
    configmap(&scratch.root);
    let gateway = Gateway::start(
        &scratch,
        &format!("{base}[routes]\nr = [\"a\"]\n"),
        CLIENT_KEY,
    );

    let mut stream = understudy_testkit::http_client()
        .post(format!("{}/v1/chat/completions", gateway.url))
        .bearer_auth(CLIENT_KEY)
        .header("content-type", "application/json")
        .body(
            json!({"model": "r", "stream": true, "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut streamed =
        String::from_utf8_lossy(&stream.chunk().await.unwrap().unwrap()).into_owned();

    // `a`'s key changes too: its actor is rebuilt while its stream runs.
    let changed = format!(
        "{}[routes]\nr = [\"b\"]\n",
        base.replacen("\"sim-key\"", "\"sim-key-2\"", 1)
    );
    swap(&scratch.root, 1, &changed);
    let at = std::time::Instant::now();
    eventually("the reloaded route to serve on b", async || {
        match ask(&gateway, CLIENT_KEY, "r").await {
            (200, Some(p), _) if p == "b" => Ok(()),
            other => Err(format!("{other:?}; log:\n{}", gateway.log())),
        }
    })
    .await;
    eprintln!(
        "new requests on the new route {:?} after the swap",
        at.elapsed()
    );
    // The stream begun on the old route was still open when the new one
    // served (the simulator sends for six seconds), and ends whole on it.
    assert_eq!(
        a.streams_open(),
        1,
        "the old stream ended before the switch"
    );
    while let Some(chunk) = stream.chunk().await.unwrap() {
        streamed.push_str(&String::from_utf8_lossy(&chunk));
    }
    for word in ["a0", "a59", "[DONE]"] {
        assert!(streamed.contains(word), "{word} missing from {streamed}");
    }
    assert!(!streamed.contains("From b"), "{streamed}");
    let log = gateway.log();
    assert!(
        log.lines()
            .any(|l| l.contains("configuration reloaded") && l.contains(r#"["a"]"#)),
        "a was not rebuilt:\n{log}"
    );
    assert!(!log.contains("provider actor exited"), "{log}");
    let config = config_of(&gateway).await;
    assert_eq!(config["sha256"], sha256_hex(changed.as_bytes()), "{config}");
    assert_eq!(reloads(&gateway, "ok").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_added_serves_and_one_removed_is_gone() {
    let (a, b, c) = (
        SimProvider::openai().await.unwrap(),
        SimProvider::openai().await.unwrap(),
        SimProvider::openai().await.unwrap(),
    );
    a.always(Reply::text("From a"));
    b.always(Reply::text("From b"));
    c.always(Reply::text("From c"));
    // Where `a` moves to: its actor is rebuilt from its new settings.
    let moved = SimProvider::openai().await.unwrap();
    moved.always(Reply::text("From a, moved"));
    let head = "[routing]\ndefault = \"a\"\n\n";
    let first = format!(
        "{head}{}{}[routes]\nrb = [\"b\"]\n",
        provider("a", &a, "sim-key"),
        provider("b", &b, "sim-key")
    );
    let scratch = Scratch::new("reload", "providers");
    let gateway = Gateway::start(&scratch, &first, CLIENT_KEY);
    assert_eq!(
        ask(&gateway, CLIENT_KEY, "rb").await.1.as_deref(),
        Some("b")
    );

    assert!(
        ask(&gateway, CLIENT_KEY, "default")
            .await
            .2
            .contains("From a")
    );
    let metrics = get(&gateway, "/metrics").await;
    assert!(
        metrics.contains(r#"understudy_provider_up{provider="b"} 1"#),
        "{metrics}"
    );
    let second = format!(
        "{head}{}{}[routes]\nrc = [\"c\"]\n",
        provider("a", &moved, "sim-key"),
        provider("c", &c, "sim-key")
    );
    replace(&scratch.root.join("understudy.toml"), &second);
    eventually("the added provider to serve its route", async || match ask(
        &gateway, CLIENT_KEY, "rc",
    )
    .await
    {
        (200, Some(p), _) if p == "c" => Ok(()),
        other => Err(format!("{other:?}; log:\n{}", gateway.log())),
    })
    .await;
    let (status, provider, body) = ask(&gateway, CLIENT_KEY, "default").await;
    assert_eq!((status, provider.as_deref()), (200, Some("a")), "{body}");
    assert!(
        body.contains("From a, moved"),
        "the changed provider kept its old URL: {body}"
    );
    let served_by_b = b.request_count();
    // The removed provider and its route are names the file never had.
    for gone in ["b:b-sim", "rb"] {
        let (status, provider, body) = ask(&gateway, CLIENT_KEY, gone).await;
        assert_eq!(status, 404, "{gone}: {provider:?} {body}");
        assert!(body.contains("model_not_found"), "{gone}: {body}");
    }
    assert_eq!(
        b.request_count(),
        served_by_b,
        "the removed provider was called"
    );
    let providers: Value = serde_json::from_str(&get(&gateway, "/v1/status").await).unwrap();
    let names: Vec<&str> = providers["providers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(names.contains(&"c") && !names.contains(&"b"), "{names:?}");
    let metrics = get(&gateway, "/metrics").await;
    assert!(
        metrics.contains(r#"understudy_provider_up{provider="c"} 1"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"provider_up{provider="b"}"#),
        "{metrics}"
    );
    assert!(
        gateway.log().contains("configuration reloaded"),
        "{}",
        gateway.log()
    );
}

/// The keys of a pool's calls `sim` received from the `from`th on.
fn keys_called(sim: &SimProvider, from: usize) -> Vec<String> {
    sim.received()
        .iter()
        .skip(from)
        .map(|r| r.api_key().unwrap_or("none").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_rotated_out_of_a_pool_is_never_used_again() {
    const OLD: &str = "sk-pool-old-0123456789";
    const KEPT: &str = "sk-pool-kept-0123456789";
    const ADDED: &str = "sk-pool-added-0123456789";
    let a = SimProvider::openai().await.unwrap();
    a.always(Reply::text("From a"));
    let pool = |keys: [&str; 2]| {
        format!(
            "[routing]\ndefault = \"a\"\n\n{}",
            provider("a", &a, "sim-key").replacen(
                "api_key = \"sim-key\"",
                &format!("api_keys = [{:?}, {:?}]", keys[0], keys[1]),
                1
            )
        )
    };
    let scratch = Scratch::new("reload", "pool");
    let gateway = Gateway::start(&scratch, &pool([OLD, KEPT]), CLIENT_KEY);
    // Both keys serve (the pool draws among keys with as many in flight).
    eventually("both keys of the pool to serve", async || {
        assert_eq!(ask(&gateway, CLIENT_KEY, "default").await.0, 200);
        let called = keys_called(&a, 0);
        (called.iter().any(|k| k == OLD) && called.iter().any(|k| k == KEPT))
            .then_some(())
            .ok_or(format!("{called:?}"))
    })
    .await;

    // `OLD` rotated out (and `KEPT` moves to the first place), `ADDED` in.
    replace(&scratch.root.join("understudy.toml"), &pool([KEPT, ADDED]));
    eventually("the reload", async || reloads(&gateway, "ok").await == 1).await;
    let mark = a.received().len();
    eventually("the added key to serve", async || {
        assert_eq!(ask(&gateway, CLIENT_KEY, "default").await.0, 200);
        let called = keys_called(&a, mark);
        called
            .iter()
            .any(|k| k == ADDED)
            .then_some(())
            .ok_or(format!("{called:?}"))
    })
    .await;
    for _ in 0..10 {
        assert_eq!(ask(&gateway, CLIENT_KEY, "default").await.0, 200);
    }
    let called = keys_called(&a, mark);
    assert!(
        !called.iter().any(|k| k == OLD),
        "the removed key was used after the reload: {called:?}"
    );
    assert!(called.iter().any(|k| k == KEPT), "{called:?}");
    assert!(called.iter().all(|k| k == KEPT || k == ADDED), "{called:?}");
    // The status names the pool's keys as the file now does.
    let status: Value = serde_json::from_str(&get(&gateway, "/v1/status").await).unwrap();
    let keys: Vec<&str> = status["providers"][0]["keys"]
        .as_array()
        .map(|keys| keys.iter().filter_map(|k| k["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(keys, ["key-1", "key-2"], "{status}");
    let log = gateway.log();
    assert!(
        log.lines()
            .any(|l| l.contains("configuration reloaded") && l.contains(r#"["a"]"#)),
        "a was not rebuilt:\n{log}"
    );
    assert!(!log.contains("only a restart changes it"), "{log}");
    for secret in [OLD, KEPT, ADDED] {
        assert!(!log.contains(secret), "a key reached the log:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_records_rpm_changed_in_the_file_takes_effect() {
    let a = SimProvider::openai().await.unwrap();
    a.always(Reply::text("From a"));
    const TEAM: &str = "sk-team-key-0123456789";
    let with_rpm = |rpm: u32| {
        format!(
            "[routing]\ndefault = \"a\"\n\n{}[[server.clients]]\nname = \"team\"\nkey = {TEAM:?}\nrpm = {rpm}\n",
            provider("a", &a, "sim-key")
        )
    };
    let scratch = Scratch::new("reload", "rpm");
    let gateway = Gateway::start(&scratch, &with_rpm(1), CLIENT_KEY);
    assert_eq!(ask(&gateway, TEAM, "default").await.0, 200);
    assert_eq!(ask(&gateway, TEAM, "default").await.0, 429, "rpm = 1");

    replace(&scratch.root.join("understudy.toml"), &with_rpm(1000));
    eventually(
        "the new rpm to admit the record's requests",
        async || match ask(&gateway, TEAM, "default").await {
            (200, ..) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    assert_eq!(ask(&gateway, TEAM, "default").await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_file_keeps_the_configuration_counted_and_logged_without_its_secret() {
    let a = SimProvider::openai().await.unwrap();
    a.always(Reply::text("From a"));
    let good = format!(
        "[routing]\ndefault = \"a\"\n\n{}",
        provider("a", &a, FAKE_SECRET)
    );
    let scratch = Scratch::new("reload", "broken");
    let path = scratch.root.join("understudy.toml");
    let gateway = Gateway::start(&scratch, &good, CLIENT_KEY);
    let loaded = config_of(&gateway).await;
    assert_eq!(loaded["sha256"], sha256_hex(good.as_bytes()), "{loaded}");
    assert!(
        loaded["loaded_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{loaded}"
    );

    // A setting that does not exist, beside the key.
    replace(&path, &format!("{good}modle = \"typo\"\n"));
    eventually("the broken file to be counted", async || {
        reloads(&gateway, "error").await == 1
    })
    .await;
    let log = gateway.log();
    let line = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("did not load"))
        .unwrap_or_else(|| panic!("no ERROR line:\n{log}"));
    assert!(line.contains("modle"), "{line}");
    // A TOML error on the key's own line.
    let cut = good.replacen(&format!("{FAKE_SECRET:?}"), &format!("\"{FAKE_SECRET}"), 1);
    replace(&path, &cut);
    eventually("the second broken file to be counted", async || {
        reloads(&gateway, "error").await == 2
    })
    .await;
    // The configuration in force stayed, and so did its hash.
    assert_eq!(
        ask(&gateway, CLIENT_KEY, "default").await.1.as_deref(),
        Some("a")
    );
    assert_eq!(config_of(&gateway).await, loaded);
    assert_eq!(reloads(&gateway, "ok").await, 0);

    // SIGHUP reads the same broken bytes again (the poll does not) ...
    hangup(&gateway);
    eventually("SIGHUP to count the broken file again", async || {
        reloads(&gateway, "error").await == 3
    })
    .await;
    // ... and, once the file is good, puts it in force.
    replace(&path, &good);
    eventually("the repaired file to load", async || {
        reloads(&gateway, "ok").await == 1
    })
    .await;
    hangup(&gateway);
    eventually("SIGHUP to reload the good file", async || {
        reloads(&gateway, "ok").await == 2
    })
    .await;
    assert_eq!(ask(&gateway, CLIENT_KEY, "default").await.0, 200);
    let log = gateway.log();
    assert!(log.contains("SIGHUP"), "{log}");
    assert!(
        !log.contains(FAKE_SECRET),
        "the key reached the log:\n{log}"
    );
    assert!(
        !log.contains("FAKE-RELOAD"),
        "part of the key reached the log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_apis_stored_changes_stay_over_a_reloaded_file() {
    const ADMIN: &str = "admin-token-reload-0123456789";
    let (a, b) = (
        SimProvider::openai().await.unwrap(),
        SimProvider::openai().await.unwrap(),
    );
    a.always(Reply::text("From a"));
    b.always(Reply::text("From b"));
    let file = |rpm: u32| {
        format!(
            "[routing]\ndefault = \"a\"\norder = [\"a\", \"b\"]\n\n{}{}[[server.clients]]\nname = \"team\"\nkey = \"sk-team-key-0123456789\"\nrpm = {rpm}\n",
            provider("a", &a, "sim-key"),
            provider("b", &b, "sim-key")
        )
    };
    let scratch = Scratch::new("reload", "admin");
    let gateway = Gateway::start_with(
        &scratch,
        &file(1),
        CLIENT_KEY,
        &[("UNDERSTUDY_ADMIN_TOKEN", ADMIN)],
    );
    let admin = |method: &str, path: &str, body: Value| {
        understudy_testkit::http_client()
            .request(method.parse().unwrap(), format!("{}{path}", gateway.url))
            .bearer_auth(ADMIN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let made = admin(
        "POST",
        "/v1/admin/clients",
        json!({"name": "made-by-admin"}),
    )
    .await
    .unwrap();
    assert_eq!(made.status(), 201);
    let made: Value = serde_json::from_str(&made.text().await.unwrap()).unwrap();
    let key = made["key"].as_str().unwrap().to_owned();
    let routed = admin(
        "PUT",
        "/v1/admin/routing",
        json!({"default": "b", "order": ["b", "a"]}),
    )
    .await
    .unwrap();
    assert_eq!(routed.status(), 200);
    assert_eq!(
        ask(&gateway, CLIENT_KEY, "default").await.1.as_deref(),
        Some("b")
    );

    // The file changes a record; the admin API's routing and record stay.
    replace(&scratch.root.join("understudy.toml"), &file(1000));
    eventually("the reload", async || reloads(&gateway, "ok").await == 1).await;
    assert_eq!(
        ask(&gateway, CLIENT_KEY, "default").await.1.as_deref(),
        Some("b")
    );
    assert_eq!(ask(&gateway, &key, "default").await.0, 200);
    for _ in 0..2 {
        assert_eq!(
            ask(&gateway, "sk-team-key-0123456789", "default").await.0,
            200
        );
    }
    assert!(
        gateway.log().contains("stored routing is in force"),
        "{}",
        gateway.log()
    );

    // A file without `b`: the stored table (default `b`) does not fit, and
    // the file's routing is in force; with `b` back, the stored one is.
    let without_b = format!(
        "[routing]\ndefault = \"a\"\n\n{}",
        provider("a", &a, "sim-key")
    );
    replace(&scratch.root.join("understudy.toml"), &without_b);
    eventually("the reload without b", async || {
        reloads(&gateway, "ok").await == 2
    })
    .await;
    assert_eq!(
        ask(&gateway, CLIENT_KEY, "default").await.1.as_deref(),
        Some("a")
    );
    assert!(gateway.log().contains("does not fit"), "{}", gateway.log());
    replace(&scratch.root.join("understudy.toml"), &file(1000));
    eventually("the reload with b", async || {
        reloads(&gateway, "ok").await == 3
    })
    .await;
    assert_eq!(
        ask(&gateway, CLIENT_KEY, "default").await.1.as_deref(),
        Some("b")
    );
}

/// Sends the gateway SIGHUP.
fn hangup(gateway: &Gateway) {
    let pid = gateway.pid().to_string();
    let sent = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    assert!(sent.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_cannot_be_read_is_counted_once_and_said_when_it_is_back() {
    let a = SimProvider::openai().await.unwrap();
    a.always(Reply::text("From a"));
    let good = format!(
        "[routing]\ndefault = \"a\"\n\n{}",
        provider("a", &a, FAKE_SECRET)
    );
    let scratch = Scratch::new("reload", "unreadable");
    let path = scratch.root.join("understudy.toml");
    let gateway = Gateway::start(&scratch, &good, CLIENT_KEY);
    assert_eq!(
        config_of(&gateway).await["sha256"],
        sha256_hex(good.as_bytes())
    );

    // Deleted: one ERROR and one count, however many polls see it gone.
    std::fs::remove_file(&path).unwrap();
    eventually("the deleted file to be counted", async || {
        reloads(&gateway, "error").await == 1
    })
    .await;
    // A directory in its place, then a symlink loop: still unreadable,
    // counted only when a SIGHUP asks.
    std::fs::create_dir(&path).unwrap();
    hangup(&gateway);
    eventually("SIGHUP to count the directory", async || {
        reloads(&gateway, "error").await == 2
    })
    .await;
    std::fs::remove_dir(&path).unwrap();
    std::os::unix::fs::symlink(&path, &path).unwrap();
    hangup(&gateway);
    eventually("SIGHUP to count the symlink loop", async || {
        reloads(&gateway, "error").await == 3
    })
    .await;
    // Back, with new bytes: loaded, and said.
    std::fs::remove_file(&path).unwrap();
    let back = format!("{good}# back\n");
    std::fs::write(&path, &back).unwrap();
    eventually("the file back to load", async || {
        reloads(&gateway, "ok").await == 1
    })
    .await;
    assert_eq!(reloads(&gateway, "error").await, 3);
    let log = gateway.log();
    let looked = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("cannot look at it"))
        .count();
    assert_eq!(looked, 1, "{log}");
    assert!(log.contains("can be read again"), "{log}");
    assert_eq!(ask(&gateway, CLIENT_KEY, "default").await.0, 200);
}
