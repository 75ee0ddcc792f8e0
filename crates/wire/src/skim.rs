//! A cursor over JSON text that checks its grammar as strictly as
//! `serde_json` while it finds member names and byte ranges, building
//! nothing: what the natively forwarded bodies and the quickly read
//! requests are read with.

use std::ops::Range;

/// A cursor over JSON text that checks its grammar as it goes (as
/// strictly as `serde_json`: no trailing commas, no control characters in
/// strings, only JSON's escapes and numbers, at most [`MAX_DEPTH`] levels);
/// every step is `None` on anything else.
pub(crate) struct Skim<'a> {
    s: &'a str,
    b: &'a [u8],
    /// Where the next byte is read.
    pub(crate) at: usize,
    depth: usize,
    /// The parts read so far: each object and array, and each member or
    /// item after its first (what the server's limit on parts counts).
    pub(crate) parts: usize,
}

/// The bytes that end a string's plain run: its closing quote, an escape,
/// and the control characters JSON forbids in it.
const STOPS: [bool; 256] = {
    let mut stops = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        stops[c] = true;
        c += 1;
    }
    stops[b'"' as usize] = true;
    stops[b'\\' as usize] = true;
    stops
};

/// Where the plain run of a string's bytes from `at` ends (the place of
/// its first [`STOPS`] byte), `None` when nothing ends it. Sixteen bytes
/// are tested at once while sixteen remain: the compiler makes one vector
/// compare of each test, and the first stop's place is the mask's trailing
/// zeros. A string is mostly shorter than a chunk, and one chunk costs
/// about what five bytes one at a time do. The tail goes a byte at a time.
fn plain_run(b: &[u8], mut at: usize) -> Option<usize> {
    while let Some(chunk) = b.get(at..).and_then(<[u8]>::first_chunk::<16>) {
        let mut stop = [0u8; 16];
        for (s, &c) in stop.iter_mut().zip(chunk) {
            *s = u8::from((c == b'"') | (c == b'\\') | (c < 0x20)).wrapping_neg();
        }
        let first = u128::from_le_bytes(stop).trailing_zeros() / 8;
        at += first as usize;
        if first < 16 {
            return Some(at);
        }
    }
    while !STOPS[usize::from(*b.get(at)?)] {
        at += 1;
    }
    Some(at)
}

/// The deepest nesting read (`serde_json`'s own limit).
pub(crate) const MAX_DEPTH: usize = 128;

impl<'a> Skim<'a> {
    pub(crate) fn new(s: &'a str) -> Self {
        Self {
            s,
            b: s.as_bytes(),
            at: 0,
            depth: 0,
            parts: 0,
        }
    }

    pub(crate) fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not white space.
    pub(crate) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.at).copied()
    }

    pub(crate) fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.at += 1)
    }

    /// Whether nothing but white space is left.
    pub(crate) fn end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// A string's contents as written, and whether it holds an escape.
    pub(crate) fn string(&mut self) -> Option<(&'a str, bool)> {
        self.eat(b'"')?;
        let (b, start) = (self.b, self.at);
        let mut at = start;
        let mut escaped = false;
        loop {
            at = plain_run(b, at)?;
            match b.get(at)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    at += match b.get(at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                        b'u' => {
                            let hex = b.get(at + 2..at + 6)?;
                            hex.iter().all(u8::is_ascii_hexdigit).then_some(6)?
                        }
                        _ => return None,
                    };
                }
                _ => return None,
            }
        }
        let s = self.s.get(start..at)?;
        self.at = at + 1;
        Some((s, escaped))
    }

    /// The text at `at` (a range a step read).
    pub(crate) fn text(&self, at: Range<usize>) -> Option<&'a str> {
        self.s.get(at)
    }

    /// A string written without escapes.
    pub(crate) fn plain_string(&mut self) -> Option<&'a str> {
        match self.string()? {
            (s, false) => Some(s),
            (_, true) => None,
        }
    }

    /// Whether the value is `null` (then read), or not (left unread).
    pub(crate) fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.literal(b"null")?;
        Some(true)
    }

    /// Whether the value (read) is `null` or `[]`.
    pub(crate) fn null_or_empty(&mut self) -> Option<bool> {
        if self.null()? {
            return Some(true);
        }
        if self.peek()? != b'[' {
            self.value()?;
            return Some(false);
        }
        let mut empty = true;
        self.nested(|s| {
            s.list(|s, _| {
                empty = false;
                s.value().map(drop)
            })
        })?;
        Some(empty)
    }

    /// A whole number (digits only, as a `u64` reads it).
    pub(crate) fn count(&mut self) -> Option<u64> {
        let at = self.value()?;
        self.b.get(at)?.iter().try_fold(0u64, |n, &d| {
            d.is_ascii_digit()
                .then(|| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))?
        })
    }

    /// A details object, or `null` (`None`): its count `name` (`null` or
    /// absent: `Some(None)`).
    pub(crate) fn detail(&mut self, name: &str) -> Option<Option<Option<u64>>> {
        if self.null()? {
            return Some(None);
        }
        let mut n = None;
        self.nested(|s| {
            s.object(|s, key, _| {
                if key? != name {
                    return s.value().map(drop);
                }
                if !s.null()? {
                    n = Some(s.count()?);
                }
                Some(())
            })
        })?;
        Some(Some(n))
    }

    /// Reads one value: its byte range.
    pub(crate) fn value(&mut self) -> Option<Range<usize>> {
        let first = self.peek()?;
        let start = self.at;
        match first {
            b'"' => {
                self.string()?;
            }
            b'{' => self.nested(|s| s.object(|s, _, _| s.value().map(drop)))?,
            b'[' => self.nested(|s| s.list(|s, _| s.value().map(drop)))?,
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            _ => self.number()?,
        }
        Some(start..self.at)
    }

    /// Passes over one value of a body the skimmer already checked,
    /// reading only its strings and brackets: its byte range. (Malformed
    /// text makes a range that is wrong, never a panic.)
    pub(crate) fn skip(&mut self) -> Option<Range<usize>> {
        let first = self.peek()?;
        let start = self.at;
        match first {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.b.get(self.at)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                self.at += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => self.value().map(drop)?,
        }
        Some(start..self.at)
    }

    /// Runs `f` one level deeper (`None` past [`MAX_DEPTH`]).
    pub(crate) fn nested(&mut self, f: impl FnOnce(&mut Self) -> Option<()>) -> Option<()> {
        if self.depth >= MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        f(self)?;
        self.depth -= 1;
        Some(())
    }

    pub(crate) fn literal(&mut self, word: &[u8]) -> Option<()> {
        (self.b.get(self.at..self.at + word.len())? == word).then(|| self.at += word.len())
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    pub(crate) fn number(&mut self) -> Option<()> {
        if self.b.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.b.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.b.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.digits1()?;
        }
        if let Some(b'e' | b'E') = self.b.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.b.get(self.at) {
                self.at += 1;
            }
            self.digits1()?;
        }
        Some(())
    }

    /// One digit or more.
    pub(crate) fn digits1(&mut self) -> Option<()> {
        self.b.get(self.at)?.is_ascii_digit().then(|| self.digits())
    }

    pub(crate) fn digits(&mut self) {
        while self.b.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }

    /// Walks an object's members: `f` gets each one's name (`None` when
    /// written with an escape) and where the member starts, and reads its
    /// value.
    pub(crate) fn object(
        &mut self,
        mut f: impl FnMut(&mut Self, Option<&'a str>, usize) -> Option<()>,
    ) -> Option<()> {
        self.items(b'{', b'}', |s, _| {
            s.ws();
            let start = s.at;
            let key = match s.string()? {
                (key, false) => Some(key),
                (_, true) => None,
            };
            s.eat(b':')?;
            f(s, key, start)
        })
    }

    /// Walks an array's items: `f` gets each one's index and reads it.
    pub(crate) fn list(&mut self, f: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<()> {
        self.items(b'[', b']', f)
    }

    /// Walks the comma-separated items between `open` and `close`, each
    /// read by `item` (given its index), counting the parts they make.
    fn items(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        self.eat(open)?;
        self.parts += 1;
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        let mut i = 0;
        loop {
            item(self, i)?;
            i += 1;
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.parts += 1;
                }
                c if c == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Skim;

    /// Strings read alike whatever their length and where their escape,
    /// control character or missing quote falls.
    #[test]
    fn strings_read_alike_at_every_length() {
        for n in 0..40 {
            let text = "x".repeat(n);
            let plain = format!(r#"{{"id":"{text}"}}"#);
            let mut s = Skim::new(&plain);
            s.eat(b'{').expect("an object");
            assert_eq!(s.string(), Some(("id", false)));
            s.eat(b':').expect("a colon");
            assert_eq!(s.string(), Some((text.as_str(), false)));
            let escaped = format!(r#""{text}\n{text}""#);
            let mut s = Skim::new(&escaped);
            let expected = format!(r"{text}\n{text}");
            assert_eq!(s.string(), Some((expected.as_str(), true)));
            let broken = format!("\"{text}\u{1}{text}\"");
            assert_eq!(Skim::new(&broken).string(), None, "a control character");
            // Bytes past ASCII (UTF-8's multi-byte characters) are plain.
            let wide = "é".repeat(n);
            let quoted = format!("\"{wide}\"");
            assert_eq!(Skim::new(&quoted).string(), Some((wide.as_str(), false)));
            let open = format!("\"{text}");
            assert_eq!(Skim::new(&open).string(), None, "no closing quote");
        }
    }
}
