//! OTLP/protobuf, written by hand: an `ExportTraceServiceRequest` of one
//! resource and one scope (the OpenTelemetry protocol's trace and common
//! messages). Only what the gateway sends is written; nested messages take
//! a one-byte length that is widened when the body turns out longer.
//! Checked against the official decoder by the gateway's trace tests (the
//! testkit's `collector`).

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    StrArray(Vec<String>),
}

/// A span event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub time_unix_nano: u64,
    pub name: &'static str,
    pub attributes: Vec<(&'static str, Value)>,
}

/// `Span.SpanKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Server = 2,
    Client = 3,
}

/// One span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub trace_state: Option<String>,
    pub parent_span_id: Option<[u8; 8]>,
    /// W3C flags (bit 0: sampled), and bit 8/9: whether the parent is
    /// remote.
    pub flags: u32,
    pub name: String,
    pub kind: Kind,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub attributes: Vec<(&'static str, Value)>,
    pub events: Vec<Event>,
    /// `Some((message))`: status ERROR with it; `None`: UNSET.
    pub error: Option<String>,
}

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn tag(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, u64::from(field << 3 | wire));
}

/// Field `field` as a length-delimited message that `body` writes.
fn message(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    tag(buf, field, 2);
    let at = buf.len();
    buf.push(0);
    body(buf);
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(5);
        varint(&mut prefix, len as u64);
        buf.splice(at..=at, prefix);
    }
}

fn bytes(buf: &mut Vec<u8>, field: u32, b: &[u8]) {
    if b.is_empty() {
        return;
    }
    tag(buf, field, 2);
    varint(buf, b.len() as u64);
    buf.extend_from_slice(b);
}

fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, 1);
    buf.extend_from_slice(&v.to_le_bytes());
}

fn value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Str(s) => {
            // Written even when empty: an empty string is a value.
            tag(buf, 1, 2);
            varint(buf, s.len() as u64);
            buf.extend_from_slice(s.as_bytes());
        }
        Value::Bool(b) => {
            tag(buf, 2, 0);
            varint(buf, u64::from(*b));
        }
        Value::Int(i) => {
            tag(buf, 3, 0);
            varint(buf, *i as u64);
        }
        Value::Double(d) => fixed64(buf, 4, d.to_bits()),
        Value::StrArray(items) => message(buf, 5, |b| {
            for s in items {
                message(b, 1, |b| value(b, &Value::Str(s.clone())));
            }
        }),
    }
}

fn attributes<K: AsRef<str>>(buf: &mut Vec<u8>, field: u32, attrs: &[(K, Value)]) {
    for (k, v) in attrs {
        message(buf, field, |b| {
            bytes(b, 1, k.as_ref().as_bytes());
            message(b, 2, |b| value(b, v));
        });
    }
}

/// An `ExportTraceServiceRequest` of `spans`, under one resource and the
/// scope `scope` (name, version).
pub fn export_request(
    resource: &[(String, Value)],
    scope: (&str, &str),
    spans: &[Span],
) -> Vec<u8> {
    let mut buf = Vec::with_capacity(400 * spans.len() + 256);
    // ResourceSpans.
    message(&mut buf, 1, |b| {
        message(b, 1, |b| attributes(b, 1, resource));
        // ScopeSpans.
        message(b, 2, |b| {
            message(b, 1, |b| {
                bytes(b, 1, scope.0.as_bytes());
                bytes(b, 2, scope.1.as_bytes());
            });
            for s in spans {
                message(b, 2, |b| span(b, s));
            }
        });
    });
    buf
}

fn span(b: &mut Vec<u8>, s: &Span) {
    bytes(b, 1, &s.trace_id);
    bytes(b, 2, &s.span_id);
    if let Some(state) = &s.trace_state {
        bytes(b, 3, state.as_bytes());
    }
    if let Some(p) = s.parent_span_id {
        bytes(b, 4, &p);
    }
    bytes(b, 5, s.name.as_bytes());
    tag(b, 6, 0);
    varint(b, s.kind as u64);
    fixed64(b, 7, s.start_time_unix_nano);
    fixed64(b, 8, s.end_time_unix_nano);
    attributes(b, 9, &s.attributes);
    for e in &s.events {
        message(b, 11, |b| {
            fixed64(b, 1, e.time_unix_nano);
            bytes(b, 2, e.name.as_bytes());
            attributes(b, 3, &e.attributes);
        });
    }
    if let Some(msg) = &s.error {
        message(b, 15, |b| {
            bytes(b, 2, msg.as_bytes());
            tag(b, 3, 0);
            varint(b, 2);
        });
    }
    if s.flags != 0 {
        tag(b, 16, 5);
        b.extend_from_slice(&s.flags.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_past_127_bytes_take_two_bytes() {
        let mut buf = Vec::new();
        message(&mut buf, 5, |b| b.extend_from_slice(&[7; 300]));
        // Tag (5 << 3 | 2), then 300 as a varint (0xac 0x02), then the body.
        assert_eq!(&buf[..3], &[0x2a, 0xac, 0x02]);
        assert_eq!(buf.len(), 303);
        let mut v = Vec::new();
        value(&mut v, &Value::Int(-1));
        assert_eq!(v.len(), 11, "a negative int is ten bytes of varint");
    }
}
