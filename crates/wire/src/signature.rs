//! Gemini's thought signatures, carried inside the tool-call ids the
//! gateway mints.
//!
//! Gemini 3 (and 2.5 thinking) models attach a `thoughtSignature` to the
//! part that holds a `functionCall` (on parallel calls only to the first),
//! and Gemini 3 refuses a history whose current tool loop does not return
//! it exactly (ai.google.dev/gemini-api/docs/thought-signatures). The
//! neutral [`ToolCall`](understudy_types::ToolCall) has only an id, a name
//! and arguments, and OpenAI's and Anthropic's clients hand back only the
//! id, so the signature travels in the id (as other gateways do it, e.g.
//! LiteLLM's `__thought__` suffix):
//!
//! ```text
//! call_0123456789abcdef01234567__thought__<tag><form><payload>
//! ```
//!
//! - `tag`: 12 hex digits of a hash of the provider's name and the model
//!   that made the signature. A signature is replayed only to that same
//!   target ([`Target::signature_of`]); any other Gemini target gets the
//!   history without it (Google's documented dummy instead), and other
//!   protocols never see it ([`unsigned`]).
//! - `form` and `payload`: the signature in Anthropic's id alphabet
//!   (`^[a-zA-Z0-9_-]+$`), so that a later turn can go to Anthropic as
//!   sent. Standard base64 (what Gemini sends) has `+` and `/` mapped to
//!   `-` and `_` and its padding counted in `form` (`0`, `1` or `2`);
//!   anything else is base64url of its bytes (`form` `u`). Both reverse
//!   exactly, so the signature comes back byte-identical.
//!
//! [`unsigned`] cuts the suffix off: the same id always gives the same
//! result, so a call and the tool result that answers it (which carry the
//! same id) stay paired, and the ids the gateway mints stay distinct (the
//! part before the suffix is 96 random bits).

use std::borrow::Cow;

/// What separates a minted id from the signature it carries.
const MARK: &str = "__thought__";

/// The length of a target's tag, in hex digits.
const TAG_LEN: usize = 12;

/// The longest signature carried: a longer one is not put in an id (the
/// call is then replayed with the dummy, as a foreign one is).
const MAX_SIGNATURE: usize = 64 * 1024;

const URL_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// One Gemini target (a provider and a model): the signatures it made and
/// may get back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    tag: String,
}

impl Target {
    /// The target `model` of provider `provider` (a `models/` prefix is
    /// the same model).
    pub fn new(provider: &str, model: &str) -> Self {
        let model = model.strip_prefix("models/").unwrap_or(model);
        // FNV-1a (64 bits): stable across builds and processes, since an id
        // minted by one gateway instance comes back to another.
        let hash = provider
            .bytes()
            .chain([0])
            .chain(model.bytes())
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        Self {
            tag: format!("{:012x}", hash >> 16),
        }
    }

    /// `id` carrying `signature` for this target; `id` as it is when there
    /// is no signature, or one too long to carry.
    pub fn sign(&self, id: String, signature: Option<&str>) -> String {
        let Some(signature) = signature.filter(|s| !s.is_empty() && s.len() <= MAX_SIGNATURE)
        else {
            return id;
        };
        if id.is_empty() || !id.bytes().all(is_id_byte) || id.contains(MARK) {
            return id;
        }
        let mut out = id;
        out.reserve(MARK.len() + TAG_LEN + 1 + signature.len() * 4 / 3 + 4);
        out.push_str(MARK);
        out.push_str(&self.tag);
        encode(signature, &mut out);
        out
    }

    /// The signature `id` carries when this target made it; `None` for an
    /// id without one, or with another target's.
    pub fn signature_of(&self, id: &str) -> Option<String> {
        let signed = Signed::parse(id)?;
        (signed.tag == self.tag).then(|| decode(signed.form, signed.payload))?
    }
}

impl Default for Target {
    /// The target of no provider and no model.
    fn default() -> Self {
        Self::new("", "")
    }
}

/// `id` without the signature it carries: what every target but the one
/// that made the signature gets. Deterministic, so a call and its result
/// stay paired; an id without a signature is returned as it is.
pub fn unsigned(id: &str) -> &str {
    Signed::parse(id).map_or(id, |s| s.base)
}

/// A request body in JSON with every JSON string that is exactly a signed
/// id replaced by [`unsigned`] of it, all other bytes kept: for a request
/// forwarded as the client wrote it to a target that must not see the
/// signatures (a signed id needs no JSON escape, so it stands in the text
/// as it is).
pub fn unsigned_json(body: &str) -> Cow<'_, str> {
    if !body.contains(MARK) {
        return Cow::Borrowed(body);
    }
    let bytes = body.as_bytes();
    let mut out = String::with_capacity(body.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = body[from..].find(MARK) {
        let at = from + found;
        // The id around the mark: id bytes on both sides, up to quotes.
        let start = bytes[..at]
            .iter()
            .rposition(|&b| !is_id_byte(b))
            .map_or(0, |p| p + 1);
        let end = bytes[at..]
            .iter()
            .position(|&b| !is_id_byte(b))
            .map_or(bytes.len(), |p| at + p);
        let quoted = start > 0
            && bytes[start - 1] == b'"'
            && (start < 2 || bytes[start - 2] != b'\\')
            && bytes.get(end) == Some(&b'"');
        if let Some(signed) = quoted.then(|| Signed::parse(&body[start..end])).flatten() {
            out.push_str(&body[copied..start]);
            out.push_str(signed.base);
            copied = end;
        }
        from = end.max(at + MARK.len());
    }
    if copied == 0 {
        return Cow::Borrowed(body);
    }
    out.push_str(&body[copied..]);
    Cow::Owned(out)
}

/// [`unsigned_json`] of an owned body (no copy when nothing changes).
pub fn unsigned_json_owned(body: String) -> String {
    match unsigned_json(&body) {
        Cow::Borrowed(_) => body,
        Cow::Owned(changed) => changed,
    }
}

// === the id's parts ===

/// A signed id, split.
struct Signed<'a> {
    base: &'a str,
    tag: &'a str,
    form: u8,
    payload: &'a str,
}

impl<'a> Signed<'a> {
    fn parse(id: &'a str) -> Option<Self> {
        let at = id.find(MARK)?;
        let (base, rest) = (&id[..at], &id[at + MARK.len()..]);
        if base.is_empty() || !base.bytes().all(is_id_byte) {
            return None;
        }
        let tag = rest.get(..TAG_LEN)?;
        let form = *rest.as_bytes().get(TAG_LEN)?;
        let payload = rest.get(TAG_LEN + 1..)?;
        let ok = tag.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            && matches!(form, b'0' | b'1' | b'2' | b'u')
            && !payload.is_empty()
            && payload.bytes().all(is_id_byte);
        ok.then_some(Self {
            base,
            tag,
            form,
            payload,
        })
    }
}

fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

// === the signature's encoding ===

/// Appends `form` and `payload` for `signature`.
fn encode(signature: &str, out: &mut String) {
    let body = signature.trim_end_matches('=');
    let padding = signature.len() - body.len();
    let standard = padding <= 2
        && !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    if standard {
        out.push(char::from(b'0' + padding as u8));
        out.extend(body.chars().map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        }));
    } else {
        out.push('u');
        base64url(signature.as_bytes(), out);
    }
}

/// The signature that `form` and `payload` stand for.
fn decode(form: u8, payload: &str) -> Option<String> {
    match form {
        b'0'..=b'2' => {
            let mut s: String = payload
                .chars()
                .map(|c| match c {
                    '-' => '+',
                    '_' => '/',
                    c => c,
                })
                .collect();
            s.extend(std::iter::repeat_n('=', usize::from(form - b'0')));
            Some(s)
        }
        b'u' => String::from_utf8(un_base64url(payload)?).ok(),
        _ => None,
    }
}

/// Base64url without padding.
fn base64url(bytes: &[u8], out: &mut String) {
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(
                URL_ALPHABET[((n >> (18 - 6 * i)) & 63) as usize],
            ));
        }
    }
}

/// The bytes of base64url text without padding; `None` for text that
/// [`base64url`] does not produce.
fn un_base64url(text: &str) -> Option<Vec<u8>> {
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in text.bytes() {
        let v = URL_ALPHABET.iter().position(|&a| a == b)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // Leftover bits must be zero, so each byte string has one encoding.
    (acc == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    const GEMINI_SIGNATURE: &str = "CiQBc2ltdWxhdGVk+LXRob3VnaHQ/c2lnbmF0dXJl==";

    #[test]
    fn a_signed_id_reads_back_only_for_its_target() {
        let flash = Target::new("gemini", "gemini-3-flash-preview");
        let id = flash.sign(crate::mint_call_id(), Some(GEMINI_SIGNATURE));
        assert!(id.bytes().all(is_id_byte), "{id}");
        assert_eq!(flash.signature_of(&id).as_deref(), Some(GEMINI_SIGNATURE));
        assert_eq!(
            Target::new("gemini", "models/gemini-3-flash-preview").signature_of(&id),
            Some(GEMINI_SIGNATURE.to_owned())
        );
        for other in [
            Target::new("gemini", "gemini-3-pro-preview"),
            Target::new("vertex", "gemini-3-flash-preview"),
            Target::new("", "gemini-3-flash-preview"),
        ] {
            assert_eq!(other.signature_of(&id), None);
        }
        assert_eq!(unsigned(&id).len(), "call_".len() + 24);
        assert!(id.starts_with(unsigned(&id)));
    }

    #[test]
    fn what_cannot_be_carried_leaves_the_id_alone() {
        let t = Target::new("gemini", "m");
        for (id, signature) in [
            ("call_1", None),
            ("call_1", Some("")),
            ("call 1", Some("abc")),
            ("", Some("abc")),
            ("call_1__thought__x", Some("abc")),
        ] {
            assert_eq!(t.sign(id.to_owned(), signature), id);
        }
        let long = "A".repeat(MAX_SIGNATURE + 1);
        assert_eq!(t.sign("call_1".into(), Some(&long)), "call_1");
        for id in [
            "call_1",
            "toolu_01A09q90qw90lq917835lq9",
            "call_1__thought__",
            "call_1__thought__0123456789ab",
            "call_1__thought__0123456789abx",
            "call_1__thought__0123456789AB0abc",
            "__thought__0123456789ab0abc",
            "call.1__thought__0123456789ab0abc",
        ] {
            assert_eq!(unsigned(id), id);
            assert_eq!(t.signature_of(id), None);
        }
    }

    #[test]
    fn signed_ids_in_a_json_body_lose_their_signatures_and_nothing_else() {
        let t = Target::new("gemini", "m");
        let a = t.sign("call_a".into(), Some(GEMINI_SIGNATURE));
        let b = t.sign("call_b".into(), Some("zz zz"));
        let body = format!(
            r#"{{"messages":[{{"id":"{a}","x":"see {a} here"}},{{"tool_use_id":"{a}"}},{{"id": "{b}"}},{{"t":"\"{b}\""}}]}}"#
        );
        let want = format!(
            r#"{{"messages":[{{"id":"call_a","x":"see {a} here"}},{{"tool_use_id":"call_a"}},{{"id": "call_b"}},{{"t":"\"{b}\""}}]}}"#
        );
        assert_eq!(unsigned_json(&body), want);
        assert!(matches!(
            unsigned_json(r#"{"id":"call_1"}"#),
            Cow::Borrowed(_)
        ));
        assert!(matches!(
            unsigned_json(r#"{"x":"a__thought__b"}"#),
            Cow::Borrowed(_)
        ));
    }

    fn signature() -> impl Strategy<Value = String> {
        prop_oneof![
            // Standard base64, as Gemini sends it.
            ("[A-Za-z0-9+/]{1,300}", 0..3usize)
                .prop_map(|(body, pad)| format!("{body}{}", "=".repeat(pad))),
            // Anything else.
            any::<String>(),
        ]
    }

    proptest! {
        #[test]
        fn signatures_round_trip_exactly_in_the_id_alphabet(
            signature in signature(),
            provider in "[a-z0-9_-]{0,12}",
            model in "[a-z0-9.-]{1,24}",
        ) {
            let t = Target::new(&provider, &model);
            let base = crate::mint_call_id();
            let id = t.sign(base.clone(), Some(&signature));
            if signature.is_empty() {
                prop_assert_eq!(&id, &base);
            } else {
                prop_assert!(id.bytes().all(is_id_byte), "{}", id);
                prop_assert_eq!(t.signature_of(&id), Some(signature.clone()));
                prop_assert_eq!(unsigned(&id), base.as_str());
            }
        }

        /// Stripping is injective on the ids the gateway hands out (signed
        /// by any targets, or not signed), and the same for a call and its
        /// result; encoding is injective on signatures.
        #[test]
        fn stripping_and_encoding_are_injective(
            entries in prop::collection::vec(
                (prop::option::of(signature()), 0..3usize),
                1..40,
            ),
        ) {
            let targets = [
                Target::new("gemini", "gemini-3-flash-preview"),
                Target::new("gemini", "gemini-3-pro-preview"),
                Target::new("vertex", "gemini-3-flash-preview"),
            ];
            let ids: Vec<String> = entries
                .iter()
                .map(|(signature, t)| targets[*t].sign(crate::mint_call_id(), signature.as_deref()))
                .collect();
            let full: HashSet<&str> = ids.iter().map(String::as_str).collect();
            let stripped: HashSet<&str> = ids.iter().map(|id| unsigned(id)).collect();
            prop_assert_eq!(full.len(), ids.len());
            prop_assert_eq!(stripped.len(), ids.len());
            for id in &ids {
                let result_id = id.clone();
                prop_assert_eq!(unsigned(id), unsigned(&result_id));
                prop_assert_eq!(unsigned(unsigned(id)), unsigned(id));
            }
            let base = "call_0123456789abcdef01234567".to_owned();
            let mut encoded = HashSet::new();
            let mut signatures = HashSet::new();
            for (signature, _) in &entries {
                if let Some(s) = signature.as_deref().filter(|s| !s.is_empty()) {
                    if signatures.insert(s) {
                        prop_assert!(encoded.insert(targets[0].sign(base.clone(), Some(s))));
                    }
                }
            }
        }
    }
}
