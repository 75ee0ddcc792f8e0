//! A request's session: what names it ([`SessionHint`], set by a front end
//! from the headers and body fields it already reads; the client's `user`
//! where the operator allows; else the stable prefix's hash), and its key,
//! scoped by client key and route (the same on every instance of a fleet).

use understudy_types::RouteSelector;
use understudy_types::chat::{ChatRequest, Part};

use crate::generation::{ClientTag, GenerateRequest};
pub use crate::generation::{SESSION_HEADERS, SessionHint, SessionSource};

/// A session's key: a keyed hash of its client, route and value (not of
/// the source: Codex's header and its `prompt_cache_key` carry one id, and
/// a stored response's session is the one its first turn named).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionKey([u8; 16]);

/// A key is a hash already: a map hashes it as one 128-bit word.
impl std::hash::Hash for SessionKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u128(u128::from_le_bytes(self.0));
    }
}

/// The session of `request`: the hint its front end read, else (when
/// `from_user`) its `user` — the `session_id` inside Claude Code's JSON
/// `metadata.user_id` where there is one — else its prefix's hash.
pub(crate) fn session_of(
    request: &GenerateRequest,
    from_user: bool,
) -> (SessionSource, SessionKey) {
    let scope = |source: SessionSource, value: &[u8]| {
        (source, key(request.client.as_ref(), &request.route, value))
    };
    if let Some(hint) = &request.session {
        return scope(hint.source, hint.value.as_bytes());
    }
    if let Some(user) = request.chat.user.as_deref().filter(|_| from_user) {
        let session = claude_code_session(user);
        return scope(SessionSource::User, session.unwrap_or(user).as_bytes());
    }
    let prefix = hash_start(&request.chat, true).to_le_bytes();
    scope(SessionSource::Prefix, &prefix)
}

/// The `session_id` of Claude Code's `metadata.user_id`, a JSON string
/// (`{"device_id":…,"account_uuid":…,"session_id":…}`).
fn claude_code_session(user: &str) -> Option<&str> {
    if !user.starts_with('{') {
        return None;
    }
    let at = user.find("\"session_id\"")? + "\"session_id\"".len();
    let rest = user[at..].trim_start().strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    rest.split('"').next().filter(|s| !s.is_empty())
}

/// The domain every session key's hash starts with.
const KEY_DOMAIN: &[u8] = b"understudy 2026-12 session\0";

/// The most bytes a key's input is gathered in on the stack and hashed in
/// one call; a longer one is fed to the hasher piece by piece (the same
/// hash either way).
const KEY_INPUT: usize = 256;

fn key(client: Option<&ClientTag>, route: &RouteSelector, value: &[u8]) -> SessionKey {
    // A plain hash under a domain prefix (a derived key's context would
    // be hashed again for every request): the domain, the client, the
    // route's name as it displays (no string made, no formatting), a zero
    // byte, the value.
    let client = client.map_or(&[0u8; 32], ClientTag::as_bytes);
    let route: [&[u8]; 3] = match route {
        RouteSelector::Default => [b"default", b"", b""],
        RouteSelector::Named(name) | RouteSelector::Model(name) => [name.as_bytes(), b"", b""],
        RouteSelector::Pin { provider, model } => match model {
            Some(m) => [provider.as_bytes(), b":", m.as_bytes()],
            None => [provider.as_bytes(), b"", b""],
        },
    };
    let parts: [&[u8]; 7] = [
        KEY_DOMAIN,
        client.as_slice(),
        route[0],
        route[1],
        route[2],
        b"\0",
        value,
    ];
    let mut input = [0u8; KEY_INPUT];
    let mut len = 0;
    let hash = if parts.iter().map(|p| p.len()).sum::<usize>() <= KEY_INPUT {
        // Gathered and hashed at once: a hasher fed seven pieces spends
        // more on the feeding than on the hash.
        for part in parts {
            input[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        blake3::hash(&input[..len])
    } else {
        let mut h = blake3::Hasher::new();
        for part in parts {
            h.update(part);
        }
        h.finalize()
    };
    let mut out = [0u8; 16];
    out.copy_from_slice(&hash.as_bytes()[..16]);
    SessionKey(out)
}

// === impl SessionKey ===

impl SessionKey {
    /// The key in hex (Redis keys).
    pub(crate) fn hex(&self) -> String {
        hex(&self.0)
    }

    /// A short hash for events and spans (never the client's value).
    pub(crate) fn short(&self) -> crate::event::ShortHash {
        // Written as hex in place: no string to check, nothing copied.
        crate::event::ShortHash::hex_of(&self.0[..6])
    }
}

/// `bytes` in lower-case hex.
fn hex(bytes: &[u8]) -> String {
    // Written as bytes, then made a string at once (a key is 16 bytes).
    let mut out = [0u8; 32];
    let n = bytes.len().min(16);
    write_hex(&bytes[..n], &mut out);
    String::from_utf8_lossy(&out[..2 * n]).into_owned()
}

/// `bytes` in lower-case hex digits, two to a byte, into `out`.
fn write_hex(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
}

/// A conversation's hash: its `user`, system prompt and first message,
/// which every later turn repeats (the same on every instance of a fleet);
/// with `tools`, the tools' names and descriptions too (a session's
/// prefix). A pool's sticky key choice takes it without the tools.
pub(crate) fn hash_start(chat: &ChatRequest, tools: bool) -> u64 {
    let mut h = blake3::Hasher::new();
    if let Some(user) = &chat.user {
        h.update(b"user\0").update(user.as_bytes());
    }
    if let Some(system) = &chat.system {
        h.update(b"system\0").update(system.as_bytes());
    }
    if let Some(first) = chat.messages.first() {
        for part in &first.content {
            if let Part::Text { text } = part {
                h.update(b"text\0").update(text.as_bytes());
            }
        }
    }
    if tools {
        for tool in &chat.tools {
            h.update(b"tool\0").update(tool.name.as_bytes());
            let description = tool.description.as_deref().unwrap_or("");
            h.update(b"\0").update(description.as_bytes());
        }
    }
    if let (true, Some(native)) = (chat.messages.is_empty(), &chat.native) {
        // A natively forwarded body: its first 4 KiB stand for its start.
        let head = native.body.get(..native.body.len().min(4096)).unwrap_or("");
        h.update(b"native\0").update(head.as_bytes());
    }
    let bytes = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&bytes.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

#[cfg(test)]
mod tests {
    use understudy_types::RouteSelector;

    use super::*;

    fn request(hint: Option<SessionHint>, user: Option<&str>) -> GenerateRequest {
        let mut chat = ChatRequest::user("first");
        chat.system = Some("be brief".into());
        chat.user = user.map(str::to_owned);
        GenerateRequest {
            session: hint,
            ..GenerateRequest::new(chat)
        }
    }

    #[test]
    fn the_first_header_that_names_a_session_wins() {
        type Headers<'a> = &'a [(&'a str, &'a str)];
        // (headers present, the source and value taken)
        let cases: [(Headers<'_>, Option<(SessionSource, &str)>); 6] = [
            (&[], None),
            (
                &[("x-session-id", "s1"), ("x-understudy-session", "g1")],
                Some((SessionSource::Gateway, "g1")),
            ),
            (
                &[("x-claude-code-session-id", "cc"), ("session_id", "codex")],
                Some((SessionSource::ClientHeader, "cc")),
            ),
            (
                &[("session-id", "codex")],
                Some((SessionSource::ClientHeader, "codex")),
            ),
            (
                &[("x-session-affinity", " oc ")],
                Some((SessionSource::ClientHeader, "oc")),
            ),
            (&[("x-session-id", "  ")], None),
        ];
        for (headers, want) in cases {
            let got = SessionHint::of_headers(|name| {
                headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
            });
            let want = want.map(|(source, value)| SessionHint {
                source,
                value: value.into(),
            });
            assert_eq!(got, want, "{headers:?}");
        }
    }

    #[test]
    fn a_session_is_its_hint_else_the_user_where_allowed_else_the_prefix() {
        let cc = r#"{"device_id":"d","account_uuid":"a","session_id":"s-42"}"#;
        let hint = SessionHint::new(SessionSource::PromptCacheKey, "pck").unwrap();
        let (source, with_hint) = session_of(&request(Some(hint.clone()), Some(cc)), true);
        assert_eq!(source, SessionSource::PromptCacheKey);
        // Claude Code's JSON user names its session: two devices' users
        // with one session id are one session.
        let (source, cc_key) = session_of(&request(None, Some(cc)), true);
        assert_eq!(source, SessionSource::User);
        let other_device = r#"{"device_id":"e","session_id":"s-42"}"#;
        assert_eq!(
            session_of(&request(None, Some(other_device)), true).1,
            cc_key
        );
        // Not allowed: the prefix, which a different user changes.
        let (source, prefix) = session_of(&request(None, Some(cc)), false);
        assert_eq!(source, SessionSource::Prefix);
        assert_ne!(prefix, cc_key);
        assert_ne!(with_hint, cc_key);
        // Scoped by route and by client.
        let mut routed = request(Some(hint.clone()), None);
        routed.route = RouteSelector::Named("other".into());
        assert_ne!(session_of(&routed, true).1, with_hint);
        let mut client = request(Some(hint), None);
        client.client = Some(ClientTag::of_key("sk-client-0123456789"));
        assert_ne!(session_of(&client, true).1, with_hint);
    }

    #[test]
    fn a_key_hashes_the_route_as_it_displays() {
        // Fleets of mixed versions share pins: the key must not move.
        for route in [
            RouteSelector::Default,
            RouteSelector::Named("pair".into()),
            RouteSelector::Model("default".into()),
            RouteSelector::pin("groq"),
            RouteSelector::Pin {
                provider: "groq".into(),
                model: Some("m-1".into()),
            },
        ] {
            let mut h = blake3::Hasher::new();
            h.update(b"understudy 2026-12 session\0");
            h.update(&[0u8; 32]);
            h.update(route.to_string().as_bytes());
            h.update(b"\0");
            h.update(b"v");
            let mut want = [0u8; 16];
            want.copy_from_slice(&h.finalize().as_bytes()[..16]);
            assert_eq!(key(None, &route, b"v"), SessionKey(want), "{route}");
        }
    }

    #[test]
    fn a_long_session_value_hashes_as_a_short_one_would() {
        // Past the stack's room the pieces go to the hasher one by one:
        // the key is the hash of the same bytes.
        for n in [1, KEY_INPUT - 80, KEY_INPUT, 4 * KEY_INPUT] {
            let value = vec![b'v'; n];
            let mut h = blake3::Hasher::new();
            h.update(KEY_DOMAIN);
            h.update(&[0u8; 32]);
            h.update(b"pair\0");
            h.update(&value);
            let mut want = [0u8; 16];
            want.copy_from_slice(&h.finalize().as_bytes()[..16]);
            let route = RouteSelector::Named("pair".into());
            assert_eq!(key(None, &route, &value), SessionKey(want), "{n}");
        }
    }

    #[test]
    fn a_session_shows_as_twelve_hex_digits_of_its_key() {
        let key = SessionKey([0xab; 16]);
        assert_eq!(key.hex(), "ab".repeat(16));
        let short = key.short();
        assert_eq!(&*short, "abababababab");
        // Written and read back as a JSON string.
        let json = serde_json::to_string(&short).unwrap();
        assert_eq!(json, "\"abababababab\"");
        let back: crate::event::ShortHash = serde_json::from_str(&json).unwrap();
        assert_eq!(back, short);
        assert!(serde_json::from_str::<crate::event::ShortHash>("\"0123456789abcdef0\"").is_err());
    }

    #[test]
    fn later_turns_keep_the_prefix_hash() {
        let first = request(None, None);
        let mut later = request(None, None);
        let chat = std::sync::Arc::make_mut(&mut later.chat);
        chat.messages
            .push(understudy_types::Message::assistant("a"));
        chat.messages
            .push(understudy_types::Message::user("second"));
        assert_eq!(session_of(&first, false), session_of(&later, false));
    }
}
