//! Ids minted the way each provider's look (their prefix, length and
//! alphabet), distinct for every answer in the process: a test that sees
//! the same id twice sees the same answer twice.

use std::sync::atomic::{AtomicU64, Ordering};

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const BASE64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A Chat Completions answer's id: `chatcmpl-` and 29 letters and digits
/// (`chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT`).
pub(super) fn chat_completion() -> String {
    mint("chatcmpl-", 29, BASE62)
}

/// A Messages answer's id: `msg_01` and 22 letters and digits
/// (`msg_01XFDUDYJgAACzvnptvVoYEL`).
pub(super) fn message() -> String {
    mint("msg_01", 22, BASE62)
}

/// A generateContent answer's `responseId`: 22 characters of URL-safe
/// base64 (`UxQ6aM_sKbjFnvgPocrJaA`).
pub(super) fn gemini_response() -> String {
    mint("", 22, BASE64URL)
}

/// An OpenAI tool call's id: `call_` and 24 letters and digits.
pub(super) fn openai_call() -> String {
    mint("call_", 24, BASE62)
}

/// A fallback credit token (opaque; the API's shape is not published).
pub(super) fn credit() -> String {
    mint("fct_sim_", 40, BASE62)
}

/// `prefix` and `len` characters of `alphabet`: a process-wide counter run
/// through a 64-bit mixer (splitmix64), so that every id differs and looks
/// as random as the providers' do.
fn mint(prefix: &str, len: usize, alphabet: &[u8]) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let mut x = NEXT
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut id = String::with_capacity(prefix.len() + len);
    id.push_str(prefix);
    let base = alphabet.len() as u64;
    for _ in 0..len {
        x ^= x >> 30;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 27;
        id.push(char::from(alphabet[(x % base) as usize]));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_providers_shapes_and_never_repeat() {
        let ids: Vec<String> = (0..1000).map(|_| chat_completion()).collect();
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        for (id, prefix, len) in [
            (chat_completion(), "chatcmpl-", 38),
            (message(), "msg_01", 28),
            (openai_call(), "call_", 29),
        ] {
            assert!(id.starts_with(prefix) && id.len() == len, "{id}");
            assert!(
                id[prefix.len()..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric()),
                "{id}"
            );
        }
        let gemini = gemini_response();
        assert_eq!(gemini.len(), 22);
        assert!(gemini.bytes().all(|b| BASE64URL.contains(&b)), "{gemini}");
    }
}
