//! A server-sent events decoder that also keeps what is *not* SSE.
//!
//! Why not a crate: the well-kept decoders (`eventsource-stream`,
//! `sse-stream`) follow the WHATWG rules and silently drop lines that are
//! not fields. Gemini sheds load mid-stream by writing a raw, pretty-printed
//! JSON error *without* a `data:` prefix and closing the connection
//! right after it; the only way to classify that failure is to see those
//! lines. This decoder implements the same rules (CR, LF or CRLF line ends,
//! `:` comments, multi-line `data`, one optional space after the colon, a
//! leading BOM) and hands every non-field line back as [`SseItem::Stray`].
//!
//! It never panics on any input and bounds how much it buffers.
//! [`crate::framing::parse_stream_bytes`] runs a protocol's parser over
//! recorded bytes.

/// The most bytes one event (or one stray run) may hold before the stream
/// counts as garbage.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// One decoded item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// A dispatched event: its `event:` name (if any) and its data lines
    /// joined with `\n`.
    Event { event: Option<String>, data: String },
    /// A line that is not an SSE field (no known field name).
    Stray(String),
}

/// The input broke a bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge;

/// An incremental decoder: feed it bytes as they arrive.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    event: Option<String>,
    /// The previous chunk ended in `\r`: a leading `\n` belongs to it.
    after_cr: bool,
    /// A first line has been seen (a BOM can only precede it).
    started: bool,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes `bytes`, appending complete items to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseItem>) -> Result<(), TooLarge> {
        let mut rest = bytes;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let Some(stripped) = rest.strip_prefix(b"\n") {
                rest = stripped;
            }
        }
        while let Some(end) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.line.extend_from_slice(&rest[..end]);
            let was_cr = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if was_cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
        }
        self.line.extend_from_slice(rest);
        if self.line.len() > MAX_EVENT_BYTES {
            return Err(TooLarge);
        }
        Ok(())
    }

    /// The input ended. A last line without a line end is processed; an
    /// event that was never terminated by a blank line is dispatched too,
    /// since providers (Gemini) may close right after the last data line.
    pub fn finish(&mut self, out: &mut Vec<SseItem>) -> Result<(), TooLarge> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseItem>) -> Result<(), TooLarge> {
        // A byte-order mark may open the stream, and so its first line; it
        // is stripped here, where chunk boundaries no longer matter.
        let line = match std::mem::replace(&mut self.started, true) {
            false => line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line),
            true => line,
        };
        let line = String::from_utf8_lossy(line);
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() > MAX_EVENT_BYTES {
                    return Err(TooLarge);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            "id" | "retry" => {}
            _ => out.push(SseItem::Stray(line.into_owned())),
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseItem>) {
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out.push(SseItem::Event {
            event,
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<SseItem> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c, &mut out).unwrap();
        }
        d.finish(&mut out).unwrap();
        out
    }

    fn ev(event: Option<&str>, data: &str) -> SseItem {
        SseItem::Event {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn framing() {
        assert_eq!(
            decode(&[b"data: a\n\ndata: b\n\n"]),
            [ev(None, "a"), ev(None, "b")]
        );
        assert_eq!(
            decode(&[b"data: a\r\n\r\ndata: b\r\n\r\n"]),
            [ev(None, "a"), ev(None, "b")]
        );
        assert_eq!(
            decode(&[b"data: a\r", b"\n\r", b"\ndata: b\r\r"]),
            [ev(None, "a"), ev(None, "b")]
        );
        assert_eq!(
            decode(&[b"event: ping\ndata: {}\n\n"]),
            [ev(Some("ping"), "{}")]
        );
        assert_eq!(
            decode(&[b": keep-alive\n\ndata:x\ndata: y\n\n"]),
            [ev(None, "x\ny")]
        );
        assert_eq!(decode(&[b"\xef\xbb\xbfdata: bom\n\n"]), [ev(None, "bom")]);
        assert_eq!(
            decode(&[b"\xef", b"\xbb\xbfdata: split bom\n\n"]),
            [ev(None, "split bom")]
        );
        assert_eq!(
            decode(&[b"da", b"ta: sp", b"lit\n", b"\n"]),
            [ev(None, "split")]
        );
        assert_eq!(
            decode(&[b"data: no blank line at the end"]),
            [ev(None, "no blank line at the end")]
        );
        assert_eq!(decode(&[b"event: x\n\n"]), []);
    }

    #[test]
    fn stray_lines_are_kept() {
        let raw = b"data: {\"a\":1}\r\n\r\n{\n  \"error\": {\n    \"code\": 503\n  }\n}\n";
        assert_eq!(
            decode(&[raw]),
            [
                ev(None, "{\"a\":1}"),
                SseItem::Stray("{".into()),
                SseItem::Stray("  \"error\": {".into()),
                SseItem::Stray("    \"code\": 503".into()),
                SseItem::Stray("  }".into()),
                SseItem::Stray("}".into()),
            ]
        );
    }

    #[test]
    fn bounded() {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        let big = vec![b'a'; MAX_EVENT_BYTES + 1];
        assert_eq!(d.feed(&big, &mut out), Err(TooLarge));
    }
}
