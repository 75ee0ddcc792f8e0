//! Values that must not be shown: [`Secret`] (a key, a token, a URL with a
//! password) and [`redact_url`] for URLs that are shown without their
//! userinfo.

use std::fmt;

/// A secret string (an API key, a URL with a password). Its `Debug` and
/// `Display` never show the value; only [`Secret::expose`] does.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

/// `url` without its userinfo (`https://user:pw@host/` → `https://***@host/`),
/// for showing a URL in errors, listings and logs.
pub fn redact_url(url: &str) -> String {
    // Without a scheme (`user:pw@host`) the authority starts the text.
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}***@{host}{tail}"),
        None => url.to_owned(),
    }
}

// === impl Secret ===

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}
