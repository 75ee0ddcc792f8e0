//! Configuration errors about settings that can hold a secret name the
//! setting and what was expected, never the value.

use understudy_settings::Settings;

const SECRET: &str = "sk-live-0123456789abcdef";

/// Loads `toml` and returns the full error text (Display and Debug).
fn error_text(toml: &str, env: &[(&str, &str)]) -> String {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let err = match Settings::from_toml_str(toml, move |name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }) {
        Ok(_) => panic!("expected a configuration error for:\n{toml}"),
        Err(e) => e,
    };
    format!("{err}\n{err:?}")
}

fn assert_secret_free(text: &str, secret: &str) {
    assert!(!text.contains(secret), "the error shows the secret: {text}");
}

#[test]
fn api_keys_given_as_a_string() {
    let text = error_text(&format!("[server]\napi_keys = \"{SECRET}\"\n"), &[]);
    assert_secret_free(&text, SECRET);
    assert!(text.contains("server.api_keys"), "{text}");
    assert!(text.contains("expected"), "{text}");
}

#[test]
fn syntax_errors_do_not_quote_the_value() {
    for toml in [
        format!("[server]\nadmin_token = {SECRET}\n"),
        format!("[providers.groq]\napi_key = \"{SECRET}\\q\"\n"),
        format!("[providers.groq]\napi_key = \"{SECRET}\n"),
    ] {
        let text = error_text(&toml, &[]);
        assert_secret_free(&text, SECRET);
    }
}

#[test]
fn admin_token_given_as_a_list() {
    let text = error_text(&format!("[server]\nadmin_token = [\"{SECRET}\"]\n"), &[]);
    assert_secret_free(&text, SECRET);
    assert!(text.contains("server.admin_token"), "{text}");
}

#[test]
fn provider_headers_given_as_a_string() {
    let text = error_text(
        &format!("[providers.groq]\nheaders = \"Authorization: Bearer {SECRET}\"\n"),
        &[],
    );
    assert_secret_free(&text, SECRET);
    assert!(text.contains("providers.groq.headers"), "{text}");
    assert!(text.contains("expected"), "{text}");
}

#[test]
fn provider_header_value_of_the_wrong_type() {
    let text = error_text(
        "[providers.groq]\nheaders = { Authorization = 123456789987654321 }\n",
        &[],
    );
    assert_secret_free(&text, "123456789987654321");
    assert!(text.contains("providers.groq.headers"), "{text}");
}

#[test]
fn provider_api_key_of_the_wrong_type() {
    let text = error_text(
        &format!("[providers.groq]\napi_key = [\"{SECRET}\"]\n"),
        &[],
    );
    assert_secret_free(&text, SECRET);
    assert!(text.contains("providers.groq.api_key"), "{text}");
}

#[test]
fn base_url_with_a_password_is_not_echoed() {
    // A bad URL in the file...
    let text = error_text(
        &format!("[providers.groq]\nbase_url = \"ftp://user:{SECRET}@example.com/v1\"\n"),
        &[],
    );
    assert_secret_free(&text, SECRET);
    assert!(text.contains("providers.groq.base_url"), "{text}");
    // ... of the wrong type ...
    let text = error_text(
        &format!("[providers.groq]\nbase_url = [\"https://user:{SECRET}@example.com\"]\n"),
        &[],
    );
    assert_secret_free(&text, SECRET);
    // ... and in the environment.
    let text = error_text(
        "",
        &[(
            "GROQ_BASE_URL",
            &format!("https://user:{SECRET}@ example.com/v1"),
        )],
    );
    assert_secret_free(&text, SECRET);
    assert!(text.contains("GROQ_BASE_URL"), "{text}");
}

#[test]
fn a_valid_base_url_keeps_its_userinfo_for_requests() {
    let url = format!("https://user:{SECRET}@example.com/v1");
    let s = Settings::from_toml_str(&format!("[providers.groq]\nbase_url = \"{url}\"\n"), |_| {
        None
    })
    .expect("a URL with userinfo is accepted");
    assert_eq!(s.providers["groq"].base_url, url);
}

#[test]
fn redacted_urls_lose_their_userinfo() {
    use understudy_settings::redact_url;
    assert_eq!(
        redact_url("https://user:pw@example.com/v1"),
        "https://***@example.com/v1"
    );
    assert_eq!(
        redact_url("https://token@example.com"),
        "https://***@example.com"
    );
    assert_eq!(
        redact_url("redis://:pw@127.0.0.1:6379/0"),
        "redis://***@127.0.0.1:6379/0"
    );
    assert_eq!(
        redact_url("https://example.com/v1?x=a@b"),
        "https://example.com/v1?x=a@b"
    );
    assert_eq!(
        redact_url("https://example.com/v1"),
        "https://example.com/v1"
    );
    assert_eq!(redact_url("user:pw@host:80/v1"), "***@host:80/v1");
    assert_eq!(redact_url("localhost:80"), "localhost:80");
}
