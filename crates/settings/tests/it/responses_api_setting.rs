//! A provider speaking the Responses API: `kind = "responses"`, or its
//! older spelling `responses_api = true`, for an OpenAI-compatible provider
//! (built-in or extra) only; refused for any other protocol.

use understudy_settings::Settings;
use understudy_types::Protocol;

fn load(toml: &str) -> Result<Settings, String> {
    Settings::from_toml_str(toml, |_| None).map_err(|e| e.to_string())
}

#[test]
fn responses_api_is_an_openai_compatible_providers_setting() {
    let s = load("[providers.openai]\nresponses_api = true\n").unwrap();
    assert_eq!(s.providers["openai"].kind, Protocol::Responses);
    assert_eq!(s.providers["groq"].kind, Protocol::ChatCompletions);
    let s = load(
        "[providers.mine]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\nresponses_api = true\n",
    )
    .unwrap();
    assert_eq!(s.providers["mine"].kind, Protocol::Responses);
    let err = load("[providers.claude]\nresponses_api = true\n").unwrap_err();
    assert!(err.contains("responses_api"), "{err}");
    let err = load(
        "[providers.g]\nkind = \"gemini\"\nbase_url = \"http://127.0.0.1:1\"\nmodel = \"m\"\nresponses_api = true\n",
    )
    .unwrap_err();
    assert!(err.contains("only an OpenAI-compatible provider"), "{err}");
}

#[test]
fn kind_responses_names_the_protocol_itself() {
    let s = load("[providers.openai]\nkind = \"responses\"\n").unwrap();
    assert_eq!(s.providers["openai"].kind, Protocol::Responses);
    let s = load(
        "[providers.mine]\nkind = \"responses\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    assert_eq!(s.providers["mine"].kind, Protocol::Responses);
    // The two spellings agree, or the table is refused.
    load("[providers.openai]\nkind = \"responses\"\nresponses_api = true\n").unwrap();
    let err =
        load("[providers.openai]\nkind = \"responses\"\nresponses_api = false\n").unwrap_err();
    assert!(err.contains("responses_api"), "{err}");
    // OpenAI's servers speak both of its APIs; a built-in's protocol
    // changes no further.
    let err = load("[providers.openai]\nkind = \"anthropic\"\n").unwrap_err();
    assert!(err.contains("kind"), "{err}");
    let err = load("[providers.claude]\nkind = \"responses\"\n").unwrap_err();
    assert!(err.contains("kind"), "{err}");
    let err = load(
        "[providers.mine]\nkind = \"soap\"\nbase_url = \"http://127.0.0.1:1\"\nmodel = \"m\"\n",
    )
    .unwrap_err();
    assert!(
        err.contains("responses"),
        "the error names the kinds: {err}"
    );
}
