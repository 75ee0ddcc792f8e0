//! [`ShortHash`]: a short hex string held in place, as an event carries a
//! session's and a request id is first written.

use serde::{Deserialize, Serialize};

/// A short hash in hex, as an event carries a session's (at most 16
/// digits, held in place: no allocation per event). It reads as a `&str`
/// and is written and read as a JSON string.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct ShortHash {
    len: u8,
    digits: [u8; 16],
}

impl ShortHash {
    /// `text` (ASCII, at most 16 bytes); `None` for anything else.
    pub fn new(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        if bytes.len() > 16 || !text.is_ascii() {
            return None;
        }
        let mut digits = [0u8; 16];
        digits[..bytes.len()].copy_from_slice(bytes);
        Some(Self {
            len: bytes.len() as u8,
            digits,
        })
    }

    /// `bytes` (their first 8) in lower-case hex, two digits to a byte,
    /// written in place (no string made and checked).
    pub fn hex_of(bytes: &[u8]) -> Self {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let bytes = &bytes[..bytes.len().min(8)];
        let mut digits = [0u8; 16];
        for (pair, b) in digits.chunks_exact_mut(2).zip(bytes) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 15)];
        }
        Self {
            len: 2 * bytes.len() as u8,
            digits,
        }
    }
}

impl std::ops::Deref for ShortHash {
    type Target = str;

    fn deref(&self) -> &str {
        std::str::from_utf8(&self.digits[..usize::from(self.len)]).unwrap_or("")
    }
}

impl std::fmt::Debug for ShortHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for ShortHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl Serialize for ShortHash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self)
    }
}

impl<'de> Deserialize<'de> for ShortHash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::new(&text)
            .ok_or_else(|| serde::de::Error::custom("a short hash: at most 16 ASCII characters"))
    }
}
