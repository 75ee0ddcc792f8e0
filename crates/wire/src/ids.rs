//! Tool-call ids as each protocol takes them, mapped injectively: two
//! different ids of a conversation never reach a provider as one, and the
//! ids a client sent are the ids it gets back.
//!
//! - [`anthropic`]: Anthropic takes only `^[a-zA-Z0-9_-]+$`. Letters,
//!   digits and `_` stand for themselves; the escape character `-` is
//!   written `--`, and every other byte (of the UTF-8) `-` and two
//!   lowercase hex digits; the empty id is `-`. So every id Anthropic
//!   mints (`toolu_…`, `srvtoolu_…`: no `-`) and every id the gateway mints
//!   (`call_…`) maps to itself, and [`from_anthropic`] reverses the mapping
//!   exactly. An id carrying a Gemini thought signature
//!   ([`crate::signature`]) keeps its signature for Gemini: here it becomes
//!   its base, `-g`, and 32 hex digits of the BLAKE3 hash of the whole id
//!   (`-g` is no escape, so no other id maps there; the same id gives the
//!   same result, so a call and the result answering it stay paired).
//! - [`openai`]: OpenAI takes any id up to 40 bytes. One that fits (and
//!   carries no signature) goes as it is; any other becomes `call_` and 32
//!   hex digits of its BLAKE3 hash: cryptographic, so no two ids a client
//!   did not construct for the purpose meet (no mapping into 40 bytes can
//!   be injective on longer ids).
//!
//! Answers carry ids the provider minted, never the ones sent; an
//! Anthropic answer's ids go through [`from_anthropic`] all the same, so an
//! id that ever came back escaped would reach the client as it sent it.

use std::borrow::Cow;

/// The escape character of [`anthropic`].
const ESCAPE: u8 = b'-';

/// What follows the base of a signed id in [`anthropic`].
const SIGNED: &str = "-g";

/// Hex digits of the hash in a digest id.
const DIGEST_HEX: usize = 32;

/// `id` in Anthropic's id alphabet (`^[a-zA-Z0-9_-]+$`), injectively.
pub fn anthropic(id: &str) -> Cow<'_, str> {
    let base = crate::signature::unsigned(id);
    if base.len() != id.len() {
        let mut out = escape(base).into_owned();
        out.push_str(SIGNED);
        out.push_str(&digest(id));
        return Cow::Owned(out);
    }
    if id.is_empty() {
        return Cow::Borrowed("-");
    }
    escape(id)
}

/// The id that [`anthropic`] maps to `wire` (an id no mapping produced, or
/// a signed id's digest form, is returned as it is).
pub fn from_anthropic(wire: &str) -> Cow<'_, str> {
    if !wire.as_bytes().contains(&ESCAPE) {
        return Cow::Borrowed(wire);
    }
    if wire == "-" {
        return Cow::Borrowed("");
    }
    unescape(wire).map_or(Cow::Borrowed(wire), Cow::Owned)
}

/// `id` as an OpenAI-compatible server takes it: as it is when it fits in
/// `max` bytes and carries no Gemini signature, else a digest id.
pub fn openai(id: &str, max: usize) -> Cow<'_, str> {
    let signed = crate::signature::unsigned(id).len() != id.len();
    if !signed && id.len() <= max {
        return Cow::Borrowed(id);
    }
    Cow::Owned(format!("call_{}", digest(id)))
}

/// A byte that stands for itself in [`anthropic`]'s encoding.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn escape(id: &str) -> Cow<'_, str> {
    if id.bytes().all(plain) {
        return Cow::Borrowed(id);
    }
    let mut out = String::with_capacity(id.len() + 8);
    for b in id.bytes() {
        if plain(b) {
            out.push(char::from(b));
        } else if b == ESCAPE {
            out.push_str("--");
        } else {
            out.push(char::from(ESCAPE));
            out.push_str(&format!("{b:02x}"));
        }
    }
    Cow::Owned(out)
}

/// The inverse of [`escape`]; `None` for text it never produces (an
/// unknown escape, an escaped byte that needed none, bytes that are not
/// UTF-8).
fn unescape(wire: &str) -> Option<String> {
    let bytes = wire.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if plain(b) {
            out.push(b);
            i += 1;
            continue;
        }
        if b != ESCAPE {
            return None;
        }
        match bytes.get(i + 1) {
            Some(&ESCAPE) => {
                out.push(ESCAPE);
                i += 2;
            }
            Some(_) => {
                let hex = wire.get(i + 1..i + 3)?;
                if !hex.bytes().all(|h| matches!(h, b'0'..=b'9' | b'a'..=b'f')) {
                    return None;
                }
                let byte = u8::from_str_radix(hex, 16).ok()?;
                if plain(byte) || byte == ESCAPE {
                    return None;
                }
                out.push(byte);
                i += 3;
            }
            None => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// 32 hex digits of BLAKE3 of `id`.
fn digest(id: &str) -> String {
    let hash = blake3::hash(id.as_bytes());
    hash.to_hex()[..DIGEST_HEX].to_owned()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Ids a client may send: anything, and the shapes that collided
    /// before (`a.b`, `a:b`, `a_b`, ``), escapes, and signed ids.
    fn id() -> impl Strategy<Value = String> {
        let signed = ("[a-z0-9_]{1,6}", "[a-z]{0,3}", "[a-zA-Z0-9+/]{1,8}={0,2}").prop_map(
            |(base, model, sig)| {
                crate::signature::Target::new("gemini", &model).sign(base, Some(&sig))
            },
        );
        prop_oneof![
            any::<String>(),
            "[-_.:a-b]{0,4}",
            "(-|--|-[0-9a-g]{1,2}|_|a){0,4}",
            signed,
        ]
    }

    #[test]
    fn the_old_collisions_are_distinct() {
        let ids = ["a.b", "a:b", "a_b", "", "_", "-", "a-b", "a--b", "a-2eb"];
        let wires: std::collections::HashSet<String> =
            ids.iter().map(|i| anthropic(i).into_owned()).collect();
        assert_eq!(wires.len(), ids.len(), "{wires:?}");
        for id in ids {
            let wire = anthropic(id);
            assert!(
                !wire.is_empty()
                    && wire
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{id:?} → {wire:?}"
            );
            assert_eq!(from_anthropic(&wire), id);
        }
        // Every id Anthropic and the gateway mint maps to itself.
        for minted in [
            "toolu_01A09q90qw90lq917835lq9",
            "call_0123456789abcdef01234567",
        ] {
            assert_eq!(anthropic(minted), minted);
            assert_eq!(from_anthropic(minted), minted);
            assert_eq!(openai(minted, 40), minted);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        /// No two distinct ids map to one, for either alphabet, and an
        /// unsigned id comes back from Anthropic's as it was.
        #[test]
        fn the_mappings_are_injective_and_reversible(a in id(), b in id()) {
            let wire = anthropic(&a);
            prop_assert!(!wire.is_empty());
            prop_assert!(wire.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-'));
            if crate::signature::unsigned(&a) == a {
                prop_assert_eq!(from_anthropic(&wire), a.as_str());
            }
            if a != b {
                prop_assert_ne!(anthropic(&a), anthropic(&b));
                prop_assert_ne!(openai(&a, 40), openai(&b, 40));
            }
        }
    }
}
