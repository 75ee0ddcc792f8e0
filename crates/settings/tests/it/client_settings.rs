//! Client records in the settings (`[[server.clients]]`): what a good
//! record reads as, and bad records as configuration errors that name the
//! setting and never show a key.

use std::path::PathBuf;

use understudy_settings::Settings;
use understudy_settings::{ClientWindow, sha256};

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
            "16 to 256 characters",
        ),
        (
            "[[server.clients]]\nname = \"team\"\nkey = \"sk team 0123456789\"\n".to_owned(),
            "server.clients[0].key",
            "printable ASCII without spaces",
        ),
        (
            format!("[server]\nadmin_token = \"{KEY}\"\n{}", record("")),
            "server.clients[0].key",
            "the same key as the admin token",
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

#[test]
fn the_state_file_is_beside_the_settings_file_unless_set() {
    let dir = std::env::temp_dir().join(format!("understudy-state-setting-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    let at = |toml: &str, env: &[(&str, &str)]| {
        std::fs::write(&config, toml).unwrap();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        Settings::load(Some(&config), move |k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
        .map(|s| s.server.state_file)
    };
    // (the file's [server], the environment, where the state is kept)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], PathBuf);
    let cases: [Case<'_>; 4] = [
        ("", &[], dir.join("understudy-state.json")),
        (
            "state_file = \"data/kept.json\"",
            &[],
            dir.join("data/kept.json"),
        ),
        (
            "state_file = \"/var/lib/us/kept.json\"",
            &[],
            "/var/lib/us/kept.json".into(),
        ),
        (
            "state_file = \"data/kept.json\"",
            &[("UNDERSTUDY_STATE_FILE", "elsewhere.json")],
            "elsewhere.json".into(),
        ),
    ];
    for (server, env, path) in cases {
        assert_eq!(
            at(&format!("[server]\n{server}\n"), env).unwrap(),
            path,
            "{server}"
        );
    }
    let e = at("[server]\nstate_file = \" \"\n", &[]).unwrap_err();
    assert_eq!(e.setting, "server.state_file", "{e}");
    // Without a settings file: in the working directory.
    let bare = Settings::load(None, |_| None).unwrap();
    assert_eq!(
        bare.server.state_file,
        PathBuf::from("understudy-state.json")
    );
}
