//! The settings' unit tests: loading as a whole, through [`Settings::load`]
//! and [`Settings::from_toml_str`] (defaults, the file, the environment
//! over it, and errors that name the setting and where it came from).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use understudy_types::refusal::RefusalPolicy;

use super::{Secret, Settings, Timeouts};

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn defaults() {
    let s = Settings::load(None, env(&[])).unwrap();
    assert_eq!(s.routing.default, "groq");
    assert_eq!(s.routing.order, ["groq", "gemini", "claude"]);
    assert_eq!(s.routing.refusal_policy, RefusalPolicy::SoftenThenFallback);
    assert_eq!(s.timeouts, Timeouts::default());
    assert_eq!(
        s.providers["groq"].base_url,
        "https://api.groq.com/openai/v1"
    );
    assert!(!s.providers["groq"].has_key());
    let route: Vec<_> = s
        .default_route()
        .iter()
        .map(|t| t.provider.to_string())
        .collect();
    assert_eq!(route, ["groq", "gemini", "claude"]);
}

#[test]
fn environment() {
    let s = Settings::load(
        None,
        env(&[
            ("AI_DEFAULT_PROVIDER", "openai"),
            ("AI_PROVIDER_FALLBACK_ORDER", "groq, openai ,claude"),
            ("GROQ_API_KEY", "gsk_secret"),
            ("GOOGLE_API_KEY", "g-secret"),
            ("GROQ_BASE_URL", "http://127.0.0.1:9/v1/"),
            ("OPENAI_MODEL", "gpt-x"),
        ]),
    )
    .unwrap();
    assert_eq!(s.routing.default, "openai");
    assert_eq!(s.routing.order, ["groq", "openai", "claude"]);
    assert_eq!(
        s.providers["groq"].api_key.as_ref().map(Secret::expose),
        Some("gsk_secret")
    );
    assert_eq!(
        s.providers["gemini"].api_key_env.as_deref(),
        Some("GOOGLE_API_KEY")
    );
    assert_eq!(s.providers["groq"].base_url, "http://127.0.0.1:9/v1");
    let route: Vec<_> = s.default_route().iter().map(|t| t.to_string()).collect();
    assert_eq!(
        route,
        [
            "openai:gpt-x",
            "groq:llama-3.1-8b-instant",
            "claude:claude-haiku-4-5"
        ]
    );
    assert!(!format!("{s:?}").contains("gsk_secret"));
}

#[test]
fn file_with_extra_provider_and_routes() {
    let text = r#"
        [routing]
        default = "local"
        order = ["local", "groq"]
        refusal_policy = "fallback_only"

        [providers.groq]
        model = "llama-3.3-70b-versatile"

        [providers.local]
        kind = "openai"
        base_url = "http://127.0.0.1:11434/v1"
        model = "llama3.2"
        headers = { "X-Title" = "understudy" }
        price = { input_per_mtok = 0.0, output_per_mtok = 0.0 }

        [routes]
        fast = ["groq:llama-3.1-8b-instant", "local"]

        [timeouts]
        connect = 2
        attempt = 30.5

        [server]
        listen = "0.0.0.0:9000"
    "#;
    let s = Settings::from_toml_str(text, env(&[("AI_DEFAULT_PROVIDER", "groq")])).unwrap();
    assert_eq!(
        s.routing.default, "groq",
        "the environment wins over the file"
    );
    assert_eq!(s.routing.refusal_policy, RefusalPolicy::FallbackOnly);
    assert!(
        s.providers["local"].has_key(),
        "no key configured means none needed"
    );
    assert_eq!(s.providers["groq"].model, "llama-3.3-70b-versatile");
    assert_eq!(
        s.providers["local"].timeouts.connect,
        Duration::from_secs(2)
    );
    assert_eq!(s.timeouts.attempt, Duration::from_secs_f64(30.5));
    let fast: Vec<_> = s.routes["fast"].iter().map(|t| t.to_string()).collect();
    assert_eq!(fast, ["groq:llama-3.1-8b-instant", "local:llama3.2"]);
    assert_eq!(s.server.listen.port(), 9000);
}

fn check_err(text: &str, env_pairs: &[(&str, &str)], setting: &str, needle: &str) {
    let err = Settings::from_toml_str(text, env(env_pairs)).unwrap_err();
    assert_eq!(err.setting, setting, "{err}");
    assert!(err.to_string().contains(needle), "{err}");
}

#[test]
fn errors_name_the_setting() {
    check_err(
        "[events]\nredis_buffer = 0",
        &[],
        "events.redis_buffer",
        "at least 1",
    );
    // A short admin token is blamed where it came from.
    check_err(
        "[server]\nadmin_token = \"short\"",
        &[],
        "server.admin_token",
        "at least 8 characters",
    );
    check_err(
        "[server]\nadmin_token = \"long enough token\"",
        &[("UNDERSTUDY_ADMIN_TOKEN", "short")],
        "UNDERSTUDY_ADMIN_TOKEN",
        "environment variable",
    );
    check_err(
        "[routing]\norder = [\"groq\", \"nope\"]",
        &[],
        "routing.order",
        "unknown provider `nope`",
    );
    check_err(
        "",
        &[("AI_PROVIDER_FALLBACK_ORDER", "groq,nope")],
        "AI_PROVIDER_FALLBACK_ORDER",
        "environment variable",
    );
    check_err(
        "",
        &[("AI_DEFAULT_PROVIDER", "nope")],
        "AI_DEFAULT_PROVIDER",
        "nope",
    );
    check_err(
        "[routing]\nrefusal_policy = \"maybe\"",
        &[],
        "routing.refusal_policy",
        "maybe",
    );
    check_err(
        "[timeouts]\nconnect = -1",
        &[],
        "timeouts.connect",
        "seconds",
    );
    check_err(
        "[providers.x]\nmodel = \"m\"",
        &[],
        "providers.x.base_url",
        "base_url",
    );
    check_err(
        "[providers.groq]\nbase_url = \"ftp://x\"",
        &[],
        "providers.groq.base_url",
        "http",
    );
    check_err(
        "[routes]\nfast = [\"nope:m\"]",
        &[],
        "routes.fast",
        "unknown provider",
    );
    check_err("[breakr]\nx = 1", &[], "breakr", "unknown field");
    check_err("[routing\n", &[], "config", "<config>");
    check_err(
        "",
        &[("GROQ_BASE_URL", "localhost:80")],
        "GROQ_BASE_URL",
        "not an http",
    );
    check_err(
        "[server]\nlisten = \"nowhere\"",
        &[],
        "server.listen",
        "socket address",
    );
}

#[test]
fn max_parts_has_a_default_a_file_value_and_a_floor() {
    let default = Settings::load(None, env(&[])).unwrap();
    assert_eq!(default.server.max_parts, super::DEFAULT_MAX_PARTS);
    let set = Settings::from_toml_str("[server]\nmax_parts = 5000", env(&[])).unwrap();
    assert_eq!(set.server.max_parts, 5000);
    check_err(
        "[server]\nmax_parts = 0",
        &[],
        "server.max_parts",
        "at least 1",
    );
    check_err(
        "[server]\nmax_parts = -3",
        &[],
        "server.max_parts",
        "expected usize",
    );
}

#[test]
fn missing_file_is_a_clear_error() {
    let err =
        Settings::load(Some(Path::new("/nonexistent/understudy.toml")), env(&[])).unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot read /nonexistent/understudy.toml"),
        "{err}"
    );
}
