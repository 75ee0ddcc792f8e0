//! AWS's binary event-stream framing (`application/vnd.amazon.eventstream`),
//! which Bedrock streams in: decoded from bytes as they arrive, and
//! encoded (for an answer in Bedrock's shape, and for tests).
//!
//! A message is
//! `[total_len u32][headers_len u32][prelude_crc u32][headers][payload][message_crc u32]`,
//! big-endian, both CRCs CRC-32/IEEE (the prelude's over its first 8
//! bytes, the message's over everything before it). A header is
//! `name_len u8, name, type u8, value`; every value type is read (a header
//! of a type Bedrock does not send today must not break the stream).
//!
//! The decoder buffers until a whole message is there (a message split
//! across reads, or several in one read, is the normal case), checks
//! `total_len` against [`MAX_MESSAGE`] before it waits for or keeps that
//! many bytes, and verifies both CRCs. After an error the stream is
//! unusable: the framing is lost, and nothing after it can be trusted.

use std::fmt;

/// The overhead of a message: the prelude (12 bytes) and the message CRC.
const OVERHEAD: usize = 16;

/// The largest message accepted (AWS's own limit is 16 MiB, headers at
/// most 128 KiB).
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// The largest headers section accepted.
pub const MAX_HEADERS: usize = 128 * 1024;

/// One header's value, by its type byte (0 to 9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    Bool(bool),
    Byte(i8),
    Int16(i16),
    Int32(i32),
    Int64(i64),
    Bytes(Vec<u8>),
    String(String),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
}

/// A decoded message: its headers in order, and its payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    pub headers: Vec<(String, HeaderValue)>,
    pub payload: Vec<u8>,
}

/// What a message is, by its `:message-type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind<'a> {
    /// An event; `:event-type` names the union member (`chunk`,
    /// `contentBlockDelta`, …).
    Event(&'a str),
    /// A modelled exception; `:exception-type` names it
    /// (`throttlingException`, `modelStreamErrorException`, …).
    Exception(&'a str),
    /// A generic error, with `:error-code` (its message is
    /// `:error-message`).
    Error(&'a str),
    /// No `:message-type`, or one this decoder does not know.
    Unknown,
}

/// Why the bytes are not a valid event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The prelude's CRC does not match its first 8 bytes.
    PreludeCrc,
    /// The message's CRC does not match its bytes.
    MessageCrc,
    /// `total_len` is below the overhead, or the headers do not fit in it.
    BadLength { total: u32, headers: u32 },
    /// `total_len` or `headers_len` is above the limit.
    TooLong { total: u32, headers: u32 },
    /// A header runs past the headers section, or its name is empty.
    BadHeader,
    /// A header value of an unknown type.
    HeaderType(u8),
    /// A header name or string value that is not UTF-8.
    NotUtf8,
    /// The stream ended inside a message.
    Truncated,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PreludeCrc => f.write_str("event stream: prelude checksum mismatch"),
            Self::MessageCrc => f.write_str("event stream: message checksum mismatch"),
            Self::BadLength { total, headers } => write!(
                f,
                "event stream: a message of {total} bytes cannot hold {headers} bytes of headers"
            ),
            Self::TooLong { total, headers } => write!(
                f,
                "event stream: a message of {total} bytes ({headers} of headers) is over the limit"
            ),
            Self::BadHeader => f.write_str("event stream: a header does not fit its section"),
            Self::HeaderType(t) => write!(f, "event stream: unknown header value type {t}"),
            Self::NotUtf8 => f.write_str("event stream: a header is not UTF-8"),
            Self::Truncated => f.write_str("event stream: the stream ended inside a message"),
        }
    }
}

impl std::error::Error for FrameError {}

// === impl Message ===

impl Message {
    /// The string value of header `name`, if it has one.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|(n, v)| match v {
            HeaderValue::String(s) if n == name => Some(s.as_str()),
            _ => None,
        })
    }

    /// What the message is.
    pub fn kind(&self) -> Kind<'_> {
        let typed = |header| self.header_str(header).unwrap_or("");
        match self.header_str(":message-type") {
            Some("event") => Kind::Event(typed(":event-type")),
            Some("exception") => Kind::Exception(typed(":exception-type")),
            Some("error") => Kind::Error(typed(":error-code")),
            _ => Kind::Unknown,
        }
    }

    /// The message as bytes on the wire.
    pub fn encode(&self) -> Vec<u8> {
        let mut headers = Vec::new();
        for (name, value) in &self.headers {
            encode_header(name, value, &mut headers);
        }
        let total = OVERHEAD + headers.len() + self.payload.len();
        let mut out = Vec::with_capacity(total);
        // Lengths past u32 cannot be framed; saturate so the decoder
        // refuses them rather than wrapping.
        out.extend_from_slice(&u32::try_from(total).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(
            &u32::try_from(headers.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        let prelude_crc = crc32fast::hash(&out);
        out.extend_from_slice(&prelude_crc.to_be_bytes());
        out.extend_from_slice(&headers);
        out.extend_from_slice(&self.payload);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }
}

fn encode_header(name: &str, value: &HeaderValue, out: &mut Vec<u8>) {
    let name = &name.as_bytes()[..name.len().min(255)];
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    let sized = |out: &mut Vec<u8>, kind: u8, bytes: &[u8]| {
        let bytes = &bytes[..bytes.len().min(usize::from(u16::MAX))];
        out.push(kind);
        out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    match value {
        HeaderValue::Bool(true) => out.push(0),
        HeaderValue::Bool(false) => out.push(1),
        HeaderValue::Byte(v) => {
            out.push(2);
            out.extend_from_slice(&v.to_be_bytes());
        }
        HeaderValue::Int16(v) => {
            out.push(3);
            out.extend_from_slice(&v.to_be_bytes());
        }
        HeaderValue::Int32(v) => {
            out.push(4);
            out.extend_from_slice(&v.to_be_bytes());
        }
        HeaderValue::Int64(v) => {
            out.push(5);
            out.extend_from_slice(&v.to_be_bytes());
        }
        HeaderValue::Bytes(b) => sized(out, 6, b),
        HeaderValue::String(s) => sized(out, 7, s.as_bytes()),
        HeaderValue::Timestamp(v) => {
            out.push(8);
            out.extend_from_slice(&v.to_be_bytes());
        }
        HeaderValue::Uuid(u) => {
            out.push(9);
            out.extend_from_slice(u);
        }
    }
}

// === the decoder ===

/// Decodes messages from bytes as they arrive.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Set after an error: the framing is lost.
    failed: bool,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if !self.failed {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// The next whole message, `None` while more bytes are needed; an error
    /// ends the stream (every later call repeats nothing and returns
    /// `None`).
    pub fn next_message(&mut self) -> Option<Result<Message, FrameError>> {
        if self.failed || self.buf.len() < 12 {
            return None;
        }
        let total = be32(&self.buf[0..4]);
        let headers = be32(&self.buf[4..8]);
        let checked = check_prelude(&self.buf[..12], total, headers);
        if let Err(e) = checked {
            return Some(Err(self.fail(e)));
        }
        let total = total as usize;
        if self.buf.len() < total {
            return None;
        }
        let decoded = decode_message(&self.buf[..total], headers as usize);
        self.buf.drain(..total);
        Some(decoded.map_err(|e| self.fail(e)))
    }

    /// Called when the stream ends: bytes left over are a message cut off.
    pub fn finish(&mut self) -> Result<(), FrameError> {
        if self.failed || self.buf.is_empty() {
            return Ok(());
        }
        Err(self.fail(FrameError::Truncated))
    }

    fn fail(&mut self, e: FrameError) -> FrameError {
        self.failed = true;
        self.buf = Vec::new();
        e
    }
}

/// Decodes one complete message (all of `bytes`).
pub fn decode(bytes: &[u8]) -> Result<Message, FrameError> {
    if bytes.len() < 12 {
        return Err(FrameError::Truncated);
    }
    let (total, headers) = (be32(&bytes[0..4]), be32(&bytes[4..8]));
    check_prelude(&bytes[..12], total, headers)?;
    if bytes.len() < total as usize {
        return Err(FrameError::Truncated);
    }
    decode_message(&bytes[..total as usize], headers as usize)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The prelude's CRC and lengths, before anything is buffered for them.
fn check_prelude(prelude: &[u8], total: u32, headers: u32) -> Result<(), FrameError> {
    if crc32fast::hash(&prelude[..8]) != be32(&prelude[8..12]) {
        return Err(FrameError::PreludeCrc);
    }
    if total as usize > MAX_MESSAGE || headers as usize > MAX_HEADERS {
        return Err(FrameError::TooLong { total, headers });
    }
    if (total as usize) < OVERHEAD || headers as usize > total as usize - OVERHEAD {
        return Err(FrameError::BadLength { total, headers });
    }
    Ok(())
}

/// A whole message whose prelude checked out.
fn decode_message(bytes: &[u8], headers_len: usize) -> Result<Message, FrameError> {
    let end = bytes.len() - 4;
    if crc32fast::hash(&bytes[..end]) != be32(&bytes[end..]) {
        return Err(FrameError::MessageCrc);
    }
    let headers = decode_headers(&bytes[12..12 + headers_len])?;
    Ok(Message {
        headers,
        payload: bytes[12 + headers_len..end].to_vec(),
    })
}

fn decode_headers(mut b: &[u8]) -> Result<Vec<(String, HeaderValue)>, FrameError> {
    let mut headers = Vec::new();
    while !b.is_empty() {
        let name_len = usize::from(b[0]);
        if name_len == 0 {
            return Err(FrameError::BadHeader);
        }
        let name = take(&mut b, 1, name_len)?;
        let name = std::str::from_utf8(name).map_err(|_| FrameError::NotUtf8)?;
        let kind = *take(&mut b, 0, 1)?.first().ok_or(FrameError::BadHeader)?;
        let value = decode_value(kind, &mut b)?;
        headers.push((name.to_owned(), value));
    }
    Ok(headers)
}

/// Skips `skip` bytes, then takes `n` more.
fn take<'a>(b: &mut &'a [u8], skip: usize, n: usize) -> Result<&'a [u8], FrameError> {
    let rest = b.get(skip..).ok_or(FrameError::BadHeader)?;
    if rest.len() < n {
        return Err(FrameError::BadHeader);
    }
    let (taken, rest) = rest.split_at(n);
    *b = rest;
    Ok(taken)
}

fn fixed<const N: usize>(b: &mut &[u8]) -> Result<[u8; N], FrameError> {
    let mut out = [0; N];
    out.copy_from_slice(take(b, 0, N)?);
    Ok(out)
}

fn decode_value(kind: u8, b: &mut &[u8]) -> Result<HeaderValue, FrameError> {
    let sized = |b: &mut &[u8]| -> Result<Vec<u8>, FrameError> {
        let len = u16::from_be_bytes(fixed(b)?);
        Ok(take(b, 0, usize::from(len))?.to_vec())
    };
    Ok(match kind {
        0 => HeaderValue::Bool(true),
        1 => HeaderValue::Bool(false),
        2 => HeaderValue::Byte(i8::from_be_bytes(fixed(b)?)),
        3 => HeaderValue::Int16(i16::from_be_bytes(fixed(b)?)),
        4 => HeaderValue::Int32(i32::from_be_bytes(fixed(b)?)),
        5 => HeaderValue::Int64(i64::from_be_bytes(fixed(b)?)),
        6 => HeaderValue::Bytes(sized(b)?),
        7 => HeaderValue::String(String::from_utf8(sized(b)?).map_err(|_| FrameError::NotUtf8)?),
        8 => HeaderValue::Timestamp(i64::from_be_bytes(fixed(b)?)),
        9 => HeaderValue::Uuid(fixed(b)?),
        other => return Err(FrameError::HeaderType(other)),
    })
}

#[cfg(test)]
#[path = "eventstream_tests.rs"]
mod tests;
