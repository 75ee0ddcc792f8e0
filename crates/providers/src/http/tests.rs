//! The request builders' tests.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use reqwest::header::{self, HeaderMap, HeaderValue};

/// A forwarded body's request to a parsed URL is the builder's own: the
/// same method, URL, headers and body; credentials in the URL become
/// basic auth, as the builder makes them.
#[test]
fn a_post_to_a_parsed_url_is_the_builders_post() {
    crate::install_tls_provider();
    let client = reqwest::Client::new();
    let mut headers = HeaderMap::new();
    headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k"));
    headers.insert("x-extra", HeaderValue::from_static("1"));
    headers.append("x-extra", HeaderValue::from_static("2"));
    for url in [
        "http://127.0.0.1:1/v1/chat/completions",
        "https://user:pass@proxy.example/v1/chat/completions",
    ] {
        let url = reqwest::Url::parse(url).unwrap();
        let built = super::raw_post(&client, url.clone(), headers.clone(), "{}")
            .build()
            .unwrap();
        let expected = super::raw_post_unparsed(&client, url, headers.clone(), "{}")
            .build()
            .unwrap();
        assert_eq!(built.method(), reqwest::Method::POST);
        assert_eq!(built.url(), expected.url());
        // Credentials never travel in the URL.
        assert!(built.url().username().is_empty() && built.url().password().is_none());
        assert_eq!(built.headers(), expected.headers());
        let body = |r: &reqwest::Request| r.body().and_then(|b| b.as_bytes()).map(<[u8]>::to_vec);
        assert_eq!(body(&built), Some(b"{}".to_vec()));
        assert_eq!(body(&built), body(&expected));
    }
}
