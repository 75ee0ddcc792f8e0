//! Client records in the settings (`[[server.clients]]`): what a good
//! record reads as, and bad records as configuration errors that name the
//! setting and never show a key.

use understudy_core::Settings;
use understudy_core::settings::{ClientWindow, sha256};

const KEY: &str = "sk-client-secret-0001";
const OTHER: &str = "sk-client-secret-0002";

fn load(toml: &str, env: &[(&str, &str)]) -> Result<Settings, String> {
    crate::settings_with(toml, env).map_err(|e| format!("{e}\n{e:?}"))
}

/// The error `toml` makes; it shows no key.
fn error(toml: &str) -> String {
    let text = load(toml, &[]).expect_err(toml);
    for secret in [KEY, OTHER, "short-key"] {
        assert!(!text.contains(secret), "a key in: {text}");
    }
    text
}

fn record(extra: &str) -> String {
    format!("[[server.clients]]\nname = \"team\"\nkey = \"{KEY}\"\n{extra}")
}

#[test]
fn a_record_reads_its_limits() {
    let s = load(
        &record(
            "budget_usd = 0.01\nwindow = \"12h\"\nrpm = 60\ntpm = 1000\nmodels = [\"fast\"]\n\
             expires = \"2027-01-01T00:00:00Z\"\n\
             [[server.clients]]\nname = \"env\"\nkey_env = \"TEAM_KEY\"\n",
        ),
        &[("TEAM_KEY", OTHER)],
    )
    .unwrap();
    let [team, env] = &s.server.clients[..] else {
        panic!("{:?}", s.server.clients);
    };
    assert_eq!(&*team.name, "team");
    assert_eq!(team.key_sha256, sha256(KEY.as_bytes()));
    assert_eq!(team.budget_usd(), Some(0.01));
    assert_eq!(
        team.window,
        ClientWindow::Every(std::time::Duration::from_secs(43_200))
    );
    assert_eq!((team.rpm, team.tpm), (Some(60), Some(1000)));
    assert_eq!(env.key_sha256, sha256(OTHER.as_bytes()));
    let shown = format!("{:?}", s.server);
    assert!(!shown.contains(KEY) && !shown.contains(OTHER), "{shown}");
}

#[test]
fn bad_records_name_the_field_and_show_no_secret() {
    let cases = [
        (record("colour = \"blue\"\n"), "server.clients[0]", "colour"),
        (
            record("budget_usd = -1.0\n"),
            "server.clients[0].budget_usd",
            "USD",
        ),
        (
            format!(
                "{}[[server.clients]]\nname = \"twin\"\nkey = \"{KEY}\"\n",
                record("")
            ),
            "server.clients[1].key",
            "the same key as the record `team`",
        ),
        (
            "[[server.clients]]\nname = \"team\"\nkey = \"short-key\"\n".to_owned(),
            "server.clients[0].key",
            "at least 16 characters",
        ),
        (
            format!("[server]\napi_keys = [\"{KEY}\"]\n{}", record("")),
            "server.clients[0].key",
            "server.api_keys",
        ),
        (
            format!(
                "{}[[server.clients]]\nname = \"team\"\nkey = \"{OTHER}\"\n",
                record("")
            ),
            "server.clients[1].name",
            "two client records",
        ),
        (
            record("key_sha256 = \"abc\"\n"),
            "server.clients[0].key",
            "exactly one",
        ),
        (record("rpm = -5\n"), "server.clients[0].rpm", ""),
        (
            record("expires = \"next year\"\n"),
            "server.clients[0].expires",
            "RFC 3339",
        ),
    ];
    for (toml, setting, words) in cases {
        let text = error(&toml);
        assert!(text.contains(setting), "{setting} not named: {text}");
        assert!(text.contains(words), "{words:?} not said: {text}");
    }
    // A key of the wrong type does not echo what was written.
    let text = error(&format!(
        "[[server.clients]]\nname = \"team\"\nkey = [\"{KEY}\"]\n"
    ));
    assert!(text.contains("server.clients[0].key"), "{text}");
}

#[test]
fn the_docs_example_loads_as_it_says() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    let section = doc.split("## Client records").nth(1).unwrap();
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    let toml = &section[start..][..section[start..].find("```").unwrap()];
    let s = load(toml, &[("SEARCH_TEAM_KEY", KEY)]).unwrap();
    let r = &s.server.clients[0];
    assert_eq!(&*r.name, "search-team");
    assert_eq!(r.budget_usd(), Some(25.0));
    assert_eq!(r.window, ClientWindow::Month);
    assert_eq!((r.rpm, r.tpm), (Some(60), Some(200_000)));
    assert!(r.allows("fast") && r.allows("groq") && r.allows("openai:gpt-4o-mini"));
    assert!(!r.allows("anthropic:claude-sonnet-4-5"));
    assert!(r.expires.is_some());
}
