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

#[test]
fn a_key_pool_is_the_starts() {
    let pooled = edited(
        "api_key = \"k-b-0123456789\"",
        "api_keys = [\"k-b1-0123456789\", \"k-b2-0123456789\"]",
        "",
    );
    let start = settings(BASE);
    let mut next = settings(&pooled);
    assert_eq!(hold_fixed(&start, &mut next), names(&["providers.b.keys"]));
    assert!(next.providers["b"].pool == start.providers["b"].pool);
}
