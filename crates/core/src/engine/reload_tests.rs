//! The reload's decisions as data: which providers stop, start anew or
//! stay, and which settings wait for a restart.

use understudy_settings::Settings;

use super::{ProviderChanges, hold_fixed};

const BASE: &str = r#"
[routing]
default = "a"
order = ["a", "b"]
[providers.a]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key = "k-a-0123456789"
model = "a-model"
[providers.b]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key = "k-b-0123456789"
model = "b-model"
[routes]
fast = ["a", "b"]
"#;

fn settings(toml: &str) -> Settings {
    Settings::from_toml_str(toml, |_| None).unwrap()
}

/// `BASE` with `from` replaced by `to`, then `extra` appended.
fn edited(from: &str, to: &str, extra: &str) -> String {
    format!("{}{extra}", BASE.replacen(from, to, 1))
}

/// What changed, the new file, and the providers added, removed and
/// rebuilt.
type Case = (&'static str, String, Names, Names, Names);
type Names = &'static [&'static str];

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn providers_stop_start_anew_or_stay_as_their_settings_say() {
    const C: &str = r#"
[providers.c]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key = "k-c-0123456789"
model = "c-model"
"#;
    // (what changed, the new file, added, removed, rebuilt)
    let cases: Vec<Case> = vec![
        ("nothing", BASE.to_owned(), &[], &[], &[]),
        (
            "a route only",
            edited(r#"fast = ["a", "b"]"#, r#"fast = ["b"]"#, ""),
            &[],
            &[],
            &[],
        ),
        ("a provider added", format!("{BASE}{C}"), &["c"], &[], &[]),
        (
            "a model changed",
            edited("b-model", "b-model-2", ""),
            &[],
            &[],
            &["b"],
        ),
        (
            "a key changed",
            edited("k-a-0123456789", "k-a-9876543210", ""),
            &[],
            &[],
            &["a"],
        ),
        (
            "a base URL changed",
            edited(
                "127.0.0.1:9\"\napi_key = \"k-b",
                "127.0.0.1:10\"\napi_key = \"k-b",
                "",
            ),
            &[],
            &[],
            &["b"],
        ),
    ];
    let old = settings(BASE);
    for (what, new, added, removed, rebuilt) in cases {
        let changes = ProviderChanges::between(&old, &settings(&new));
        let expected = ProviderChanges {
            added: names(added),
            removed: names(removed),
            rebuilt: names(rebuilt),
        };
        assert_eq!(changes, expected, "{what}");
        assert_eq!(
            changes.is_empty(),
            expected == ProviderChanges::default(),
            "{what}"
        );
    }
    // A provider removed: `b` leaves the file (and the routes naming it).
    let without_b = r#"
[routing]
default = "a"
[providers.a]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key = "k-a-0123456789"
model = "a-model"
"#;
    let changes = ProviderChanges::between(&old, &settings(without_b));
    assert_eq!(changes.removed, names(&["b"]));
    assert_eq!(changes.gone().len(), 1);
}

#[test]
fn settings_only_a_restart_changes_are_held_and_named() {
    // (the file's addition, the names held)
    let cases: Vec<(&str, &[&str])> = vec![
        ("", &[]),
        (
            "[server]\nlisten = \"127.0.0.1:9999\"\n",
            &["server.listen"],
        ),
        ("[server]\nmax_parts = 1000\n", &["server.max_parts"]),
        ("[server]\ndrain_grace = 1\n", &["server.drain_grace"]),
        ("[server]\ndrain_timeout = 2\n", &["server.drain_timeout"]),
        (
            "[server]\nready_without_redis = true\n",
            &["server.ready_without_redis"],
        ),
        ("[breaker]\nfailure_threshold = 9\n", &["[breaker]"]),
        ("[probe]\nenabled = false\n", &["[probe]"]),
        (
            "[[server.clients]]\nname = \"team\"\nkey = \"sk-team-0123456789\"\nrpm = 5\n",
            &[],
        ),
    ];
    let start = settings(BASE);
    for (extra, held) in cases {
        let mut next = settings(&format!("{BASE}{extra}"));
        let clients = next.server.clients.clone();
        assert_eq!(hold_fixed(&start, &mut next), names(held), "{extra}");
        // What is held is the start's; the client records are the file's.
        assert_eq!(next.server.listen, start.server.listen, "{extra}");
        assert_eq!(next.server.max_parts, start.server.max_parts, "{extra}");
        assert_eq!(next.breaker, start.breaker, "{extra}");
        assert_eq!(next.probe, start.probe, "{extra}");
        assert_eq!(next.server.clients, clients, "{extra}");
    }
}

/// `BASE` with `b`'s one key replaced by the pool `keys` (TOML).
fn pooled(keys: &str) -> Settings {
    settings(&edited(
        "api_key = \"k-b-0123456789\"",
        &format!("api_keys = {keys}"),
        "",
    ))
}

#[test]
fn a_changed_key_pool_rebuilds_its_provider_and_waits_for_no_restart() {
    let start = pooled(r#"["k-b1-0123456789", "k-b2-0123456789"]"#);
    let mut next = pooled(r#"["k-b2-0123456789", "k-b3-0123456789"]"#);
    assert_eq!(hold_fixed(&start, &mut next), Vec::<String>::new());
    assert!(next.providers["b"].pool != start.providers["b"].pool);
    let changes = ProviderChanges::between(&start, &next);
    assert_eq!(changes.rebuilt, names(&["b"]));
    let pooled_b = ProviderChanges::between(&settings(BASE), &start);
    assert_eq!(pooled_b.rebuilt, names(&["b"]), "a single key to a pool");
}

#[test]
fn a_reload_keeps_the_keys_whose_secret_stays() {
    // (what changed, the pool before, after, each new key's place before)
    let cases: Vec<(&str, &str, &str, Vec<Option<usize>>)> = vec![
        (
            "nothing",
            r#"["k1-0123456789", "k2-0123456789"]"#,
            r#"["k1-0123456789", "k2-0123456789"]"#,
            vec![Some(0), Some(1)],
        ),
        (
            "the first rotated out, one added",
            r#"["k1-0123456789", "k2-0123456789"]"#,
            r#"["k2-0123456789", "k3-0123456789"]"#,
            vec![Some(1), None],
        ),
        (
            "reordered",
            r#"["k1-0123456789", "k2-0123456789"]"#,
            r#"["k2-0123456789", "k1-0123456789"]"#,
            vec![Some(1), Some(0)],
        ),
        (
            "every key replaced",
            r#"["k1-0123456789"]"#,
            r#"["k8-0123456789", "k9-0123456789"]"#,
            vec![None, None],
        ),
        (
            "one removed",
            r#"["k1-0123456789", "k2-0123456789", "k3-0123456789"]"#,
            r#"["k1-0123456789", "k3-0123456789"]"#,
            vec![Some(0), Some(2)],
        ),
    ];
    for (what, before, after, kept) in cases {
        let (before, after) = (pooled(before), pooled(after));
        let found = crate::key_pools::kept_keys(&before.providers["b"], &after.providers["b"]);
        assert_eq!(found, kept, "{what}");
    }
    // Named keys are known by their secret too: a name kept over a new
    // secret is a new key; a key renamed is the same key.
    let tables = |a: &str, b: &str| {
        settings(&format!(
            "{}\n[[providers.b.keys]]\nname = \"{a}\"\napi_key = \"k1-0123456789\"\n\
             [[providers.b.keys]]\nname = \"{b}\"\napi_key = \"k2-0123456789\"\n",
            BASE.replace("api_key = \"k-b-0123456789\"\n", "")
        ))
    };
    let renamed = crate::key_pools::kept_keys(
        &tables("one", "two").providers["b"],
        &tables("first", "two").providers["b"],
    );
    assert_eq!(renamed, vec![Some(0), Some(1)]);
}

#[test]
fn pools_are_kept_whole_made_anew_or_carried_key_by_key() {
    use crate::key_pools::{KeyPool, KeyPools, key_id};
    use understudy_types::failure::FailureCode;
    let start = pooled(r#"["k1-0123456789", "k2-0123456789"]"#);
    let pools = KeyPools::new(start.providers.values().filter_map(KeyPool::of));
    let old = std::sync::Arc::clone(pools.get("b").unwrap());
    let now = crate::runtime_clock::now();
    let later = now + std::time::Duration::from_secs(600);
    old.sync(0, later, FailureCode::Auth);
    old.sync(1, later, FailureCode::RateLimited);

    // The pool unchanged (another setting of `b` changed): the same pool.
    let model = settings(
        &edited(
            "api_key = \"k-b-0123456789\"",
            r#"api_keys = ["k1-0123456789", "k2-0123456789"]"#,
            "",
        )
        .replacen("b-model", "b-model-2", 1),
    );
    let same = pools.reloaded(&start, &model);
    assert!(std::sync::Arc::ptr_eq(same.get("b").unwrap(), &old));

    // `k1` rotated out, `k3` in: `k2` keeps its state and its fleet id
    // (though its name and place changed); `k1` is in no new pool.
    let next = pooled(r#"["k2-0123456789", "k3-0123456789"]"#);
    let rebuilt = pools.reloaded(&start, &next);
    let new = rebuilt.get("b").unwrap();
    assert!(!std::sync::Arc::ptr_eq(new, &old));
    let status = new.status(now);
    assert_eq!(status.len(), 2);
    assert_eq!(
        (status[0].out, status[0].available),
        (Some("rate_limited"), false),
        "the kept key keeps its time out"
    );
    assert!(status[1].available, "the added key starts fresh");
    let secret = |s: &Settings, i: usize| s.providers["b"].pool.keys[i].secret.clone().unwrap();
    assert_eq!(new.ids[0], key_id(&secret(&start, 1)));
    assert_eq!(old.ids[1], new.ids[0]);
    assert!(
        !new.ids.contains(&old.ids[0]),
        "the removed key's id is gone"
    );
    assert_eq!(new.names[0].as_ref(), "key-1");
    for id in new.ids.iter().chain(&old.ids) {
        assert_eq!(id.len(), 16, "{id}");
        assert!(!id.contains("0123456789"), "an id shows no secret");
    }
    // A provider new to the file, or pooled anew, gets its pool.
    let none = KeyPools::new(std::iter::empty());
    assert!(none.reloaded(&settings(BASE), &next).get("b").is_some());
}
