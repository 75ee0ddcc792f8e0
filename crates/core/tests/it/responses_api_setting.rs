//! The `responses_api` provider setting: off by default, on for an
//! OpenAI-compatible provider (built-in or extra), refused for any other
//! protocol.

use understudy_core::Settings;

fn load(toml: &str) -> Result<Settings, String> {
    Settings::from_toml_str(toml, |_| None).map_err(|e| e.to_string())
}

#[test]
fn responses_api_is_an_openai_compatible_providers_setting() {
    let s = load("[providers.openai]\nresponses_api = true\n").unwrap();
    assert!(s.providers["openai"].responses_api);
    assert!(!s.providers["groq"].responses_api);
    let s = load(
        "[providers.mine]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\nresponses_api = true\n",
    )
    .unwrap();
    assert!(s.providers["mine"].responses_api);
    let err = load("[providers.claude]\nresponses_api = true\n").unwrap_err();
    assert!(err.contains("responses_api"), "{err}");
    let err = load(
        "[providers.g]\nkind = \"gemini\"\nbase_url = \"http://127.0.0.1:1\"\nmodel = \"m\"\nresponses_api = true\n",
    )
    .unwrap_err();
    assert!(err.contains("only an OpenAI-compatible provider"), "{err}");
}
