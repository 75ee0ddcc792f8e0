//! Traces, as the engine records them while a request runs: its
//! [`TraceContext`] (the caller's W3C `traceparent` continued, or a new
//! trace, sampled) and the [`notes::TraceNotes`] its spans will need. The
//! spans themselves are made and exported off the request path, by a
//! [`crate::sink::Sink`] handed to the engine from above core.

pub mod notes;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use understudy_settings::{RootSampler, Sampler};

/// One request's place in a trace.
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// The request's own span (the server span).
    pub span_id: [u8; 8],
    /// The caller's span, when it sent a valid `traceparent`.
    pub parent: Option<[u8; 8]>,
    /// The trace's sampled flag: the sampler's decision (with no exporter,
    /// the caller's), passed on to providers that receive `traceparent`.
    pub sampled: bool,
    /// Whether this gateway exports the request's spans: sampled, and an
    /// exporter is configured.
    pub recording: bool,
    /// The caller's `tracestate`, passed on unchanged.
    pub state: Option<String>,
    /// When the request arrived (Unix nanoseconds).
    pub start_unix_nano: u64,
    /// The HTTP status the request was answered with (0 until known).
    status: AtomicU16,
    /// When the run published its event (Unix nanoseconds; 0 until then):
    /// the spans' end, to the nanosecond (the event's time is in ms).
    ended: AtomicU64,
    /// The request reached the engine's run, so it makes an event and
    /// (when recording) spans; one refused before (a 401, a 400) makes
    /// none, and `traceresponse` then says it was not recorded.
    ran: AtomicBool,
    /// The route template of the front end the request came through, as
    /// its table in the wire crate names it for spans (set by the server;
    /// unset: the neutral API's).
    route: std::sync::OnceLock<&'static str>,
}

// === impl TraceContext ===

impl TraceContext {
    /// The context of a request that came with `traceparent` and
    /// `tracestate` (either may be absent or invalid: then a new trace),
    /// sampled by `sampler`.
    pub fn new(traceparent: Option<&str>, tracestate: Option<&str>, sampler: Sampler) -> Self {
        let parent = traceparent.and_then(parse_traceparent);
        let (trace_id, parent_span, parent_sampled) = match parent {
            Some((t, s, flags)) => (t, Some(s), Some(flags & 1 == 1)),
            None => (new_trace_id(), None, None),
        };
        let sampled = match (sampler, parent_sampled) {
            (Sampler::AlwaysOn, _) => true,
            (Sampler::AlwaysOff, _) => false,
            (Sampler::Ratio(r), _) => by_ratio(&trace_id, r),
            (Sampler::ParentBased(_) | Sampler::ParentBasedAlwaysOn, Some(p)) => p,
            (Sampler::ParentBasedAlwaysOn, None) => true,
            (Sampler::ParentBased(RootSampler::AlwaysOff), None) => false,
            (Sampler::ParentBased(RootSampler::Ratio(r)), None) => by_ratio(&trace_id, r),
        };
        Self {
            trace_id,
            span_id: new_span_id(),
            parent: parent_span,
            sampled,
            recording: sampled,
            state: parent
                .and(tracestate)
                .map(str::trim)
                .filter(|s| !s.is_empty() && s.len() <= 512)
                .map(str::to_owned),
            start_unix_nano: unix_nano(SystemTime::now()),
            status: AtomicU16::new(0),
            ran: AtomicBool::new(false),
            route: std::sync::OnceLock::new(),
            ended: AtomicU64::new(0),
        }
    }

    /// Notes that the request's run ends now (it publishes its event).
    pub fn end_now(&self) {
        self.ended
            .store(unix_nano(SystemTime::now()), Ordering::Relaxed);
    }

    /// When the request's run ended, once it has.
    pub fn ended(&self) -> Option<u64> {
        Some(self.ended.load(Ordering::Relaxed)).filter(|t| *t != 0)
    }

    /// The context with `recording` off whatever was sampled (no exporter
    /// is configured: the context is only passed on).
    #[must_use]
    pub fn not_recorded(mut self) -> Self {
        self.recording = false;
        self
    }

    /// Whether the request's spans are made: recording, and the request
    /// reached the engine's run.
    pub fn recorded(&self) -> bool {
        self.recording && self.ran.load(Ordering::Relaxed)
    }

    /// Notes that the request reached the engine's run.
    pub fn ran(&self) {
        self.ran.store(true, Ordering::Relaxed);
    }

    /// `traceparent` for a call made in span `span` of this trace.
    pub fn traceparent_for(&self, span: &[u8; 8]) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id_hex(),
            understudy_settings::hex(span),
            u8::from(self.sampled)
        )
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        understudy_settings::hex(&self.trace_id)
    }

    /// `traceresponse` (W3C Trace Context level 2): this request's span in
    /// the trace, for the client to find it; its sampled flag says whether
    /// the span was recorded.
    pub fn traceresponse(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id_hex(),
            understudy_settings::hex(&self.span_id),
            u8::from(self.recorded())
        )
    }

    /// Records the HTTP status of the answer.
    pub fn answered(&self, status: u16) {
        self.status.store(status, Ordering::Relaxed);
    }

    /// The HTTP status of the answer, once known.
    pub fn status(&self) -> Option<u16> {
        Some(self.status.load(Ordering::Relaxed)).filter(|s| *s != 0)
    }

    /// Records the route template of the front end the request came
    /// through (the first one recorded stays).
    pub fn through(&self, route: &'static str) {
        let _ = self.route.set(route);
    }

    /// The route template of the request's API: its front end's, else the
    /// neutral API's.
    pub fn http_route(&self) -> &'static str {
        self.route.get().copied().unwrap_or("/v1/generate")
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceContext")
            .field("trace_id", &self.trace_id_hex())
            .field("sampled", &self.sampled)
            .field("recording", &self.recording)
            .finish_non_exhaustive()
    }
}

impl PartialEq for TraceContext {
    fn eq(&self, other: &Self) -> bool {
        self.trace_id == other.trace_id && self.span_id == other.span_id
    }
}

/// `00-<trace id>-<span id>-<flags>`: the trace id, the caller's span and
/// the flags; `None` for anything W3C says to ignore (a wrong length,
/// upper-case or non-hex digits, an all-zero id, version `ff`). A later
/// version is read by its first four fields.
pub fn parse_traceparent(header: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let h = header.trim();
    let mut parts = h.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lower_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if version.len() != 2 || !lower_hex(version) || version == "ff" {
        return None;
    }
    if version == "00" && (parts.next().is_some() || h.len() != 55) {
        return None;
    }
    if trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    if !lower_hex(trace) || !lower_hex(span) || !lower_hex(flags) {
        return None;
    }
    let t: [u8; 16] = understudy_settings::unhex(trace)?;
    let s: [u8; 8] = understudy_settings::unhex(span)?;
    if t == [0; 16] || s == [0; 8] {
        return None;
    }
    Some((t, s, u8::from_str_radix(flags, 16).ok()?))
}

/// Whether a trace id falls in the sampled share: its low 56 bits (W3C's
/// random part) against the ratio.
fn by_ratio(trace_id: &[u8; 16], ratio: f64) -> bool {
    let mut low = [0u8; 8];
    low[1..].copy_from_slice(&trace_id[9..]);
    let r = u64::from_be_bytes(low);
    let threshold = ((1.0 - ratio.clamp(0.0, 1.0)) * (1u64 << 56) as f64) as u64;
    r >= threshold
}

/// A new trace id (random, never all zero).
pub fn new_trace_id() -> [u8; 16] {
    loop {
        let id = fastrand::u128(..).to_be_bytes();
        if id != [0; 16] {
            return id;
        }
    }
}

/// A new span id (random, never all zero).
pub fn new_span_id() -> [u8; 8] {
    loop {
        let id = fastrand::u64(..).to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

/// `at` as Unix nanoseconds.
pub fn unix_nano(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_caller_s_trace_is_continued() {
        let c = TraceContext::new(Some(CALLER), Some("congo=t61rcWkgMzE"), Sampler::default());
        assert_eq!(c.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            c.parent,
            Some([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
        );
        assert!(c.sampled);
        assert_eq!(c.state.as_deref(), Some("congo=t61rcWkgMzE"));
        assert!(
            c.traceresponse()
                .starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-")
        );
        // Not sampled by the caller: not recorded (parent-based).
        let off = CALLER.replace("-01", "-00");
        assert!(!TraceContext::new(Some(&off), None, Sampler::default()).sampled);
        assert!(TraceContext::new(Some(&off), None, Sampler::AlwaysOn).sampled);
    }

    #[test]
    fn what_w3c_says_to_ignore_starts_a_new_trace() {
        for bad in [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
            let c = TraceContext::new(Some(bad), Some("a=b"), Sampler::default());
            assert_eq!(c.parent, None);
            assert_eq!(
                c.state, None,
                "tracestate goes with a valid traceparent only"
            );
        }
        // A later version: its first four fields.
        assert!(parse_traceparent(&format!("01-{}-what", &CALLER[3..])).is_some());
    }

    #[test]
    fn ratios_sample_their_share() {
        let n = 10_000;
        let kept = (0..n).filter(|_| by_ratio(&new_trace_id(), 0.25)).count();
        assert!((2_000..3_000).contains(&kept), "{kept}");
        assert!(by_ratio(&new_trace_id(), 1.0));
        assert!(!by_ratio(&[0xff; 16], 0.0), "a ratio of 0 keeps nothing");
    }
}
