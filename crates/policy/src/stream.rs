//! What a target's streamed events mean: the two rules of a
//! stream, as one pure state machine ([`Watch`]) that core's `run/stream/`
//! executes.
//!
//! - **Progress** satisfies the first-token deadline: text, a tool-call
//!   delta, a reasoning delta (whatever protocol it came in). A keep-alive
//!   (an empty delta, a provider's `ping`) is not progress. After the first
//!   progress, `stream_idle` bounds the silence between events: a model
//!   that thinks for a minute is working, not failing.
//! - **Commitment**: once the client has seen output it would act on (text
//!   that is not only whitespace, or a tool call that has a name), the
//!   stream belongs to that target. Until then every event is held (within
//!   a byte budget), and a failure moves to the next target with the client
//!   having seen nothing. Under [`StreamCommit::Complete`] nothing commits
//!   before the target finishes.
//! - **End of an attempt**: a finish before any output is an
//!   `empty_response` (reasoning alone is not an answer); a body that ends
//!   without its protocol's terminator is `stream_interrupted`; silence is a
//!   `timeout` before the commit and an interruption after it.
//!
//! No I/O, no clock reads: times are inputs, and the table below is tested
//! as data.

use std::time::{Duration, Instant};

use understudy_settings::StreamCommit;
use understudy_types::chat::StreamEvent;
use understudy_types::failure::{Disposition, Failure, FailureKind};

/// Bytes of events a stream may hold before its commit (reasoning, a
/// native stream's own events, an answer held whole under
/// [`StreamCommit::Complete`]). Past it the attempt fails: nothing is
/// dropped silently.
pub const HELD_BYTES: usize = 1024 * 1024;

/// What the executor does with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to pass on (a keep-alive, an empty delta).
    Drop,
    /// Keep it until the commit.
    Hold,
    /// Commit now: pass on what is held, then this event.
    Commit,
    /// Already committed: pass it on.
    Forward,
    /// The target finished its answer: (commit if not yet, pass on what is
    /// held, then) end the stream as complete.
    Finish,
    /// The attempt is over with this failure.
    Fail(Failure),
}

/// One attempt's stream, as the rules see it.
#[derive(Debug, Clone)]
pub struct Watch {
    commit: StreamCommit,
    budget: usize,
    progressed: bool,
    /// Output the client would act on has arrived.
    output: bool,
    committed: bool,
    held: usize,
    /// Tool calls (by index) whose name has arrived.
    named: Vec<u32>,
    /// A tool call was passed on (a continuation cannot carry it).
    tool_calls: bool,
}

// === impl Watch ===

impl Watch {
    /// A watch over one attempt, holding at most `budget` bytes.
    pub fn new(commit: StreamCommit, budget: usize) -> Self {
        Self {
            commit,
            budget,
            progressed: false,
            output: false,
            committed: false,
            held: 0,
            named: Vec::new(),
            tool_calls: false,
        }
    }

    /// A watch that is committed from the start: a continuation, whose
    /// client has already seen the answer's beginning.
    pub fn committed(budget: usize) -> Self {
        Self {
            progressed: true,
            output: true,
            committed: true,
            ..Self::new(StreamCommit::FirstOutput, budget)
        }
    }

    /// Whether the client has seen output from this target.
    pub fn is_committed(&self) -> bool {
        self.committed
    }

    /// Whether the target has made progress (its first token arrived).
    pub fn progressed(&self) -> bool {
        self.progressed
    }

    /// Whether a tool call was passed on to the client.
    pub fn sent_tool_calls(&self) -> bool {
        self.tool_calls
    }

    /// When silence ends the attempt: the first-token deadline until the
    /// first progress, then `idle` after the last event.
    pub fn silence_deadline(
        &self,
        first_token_by: Instant,
        last_event: Instant,
        idle: Duration,
    ) -> Instant {
        if self.progressed {
            last_event + idle
        } else {
            first_token_by
        }
    }

    /// The failure when the deadline of [`Self::silence_deadline`] passes:
    /// `waited` is how long that was.
    pub fn on_silence(&self, waited: Duration) -> Failure {
        let secs = waited.as_secs_f64();
        if !self.progressed {
            Failure::new(
                FailureKind::Timeout,
                format!("no first token within {secs:.1} s"),
            )
        } else if self.committed {
            Failure::new(
                FailureKind::StreamInterrupted,
                format!("no data for {secs:.1} s"),
            )
        } else {
            Failure::new(
                FailureKind::Timeout,
                format!("no data for {secs:.1} s before the answer was complete"),
            )
        }
    }

    /// What the stream's next item means: `None` is the end of the body.
    pub fn on_item(&mut self, item: Option<&Result<StreamEvent, Failure>>) -> Step {
        match item {
            None => Step::Fail(Failure::new(
                FailureKind::StreamInterrupted,
                "the stream ended without its terminator",
            )),
            Some(Err(f)) => Step::Fail(f.clone()),
            Some(Ok(event)) => self.on_event(event),
        }
    }

    /// What one event means.
    pub fn on_event(&mut self, event: &StreamEvent) -> Step {
        let (bytes, progress, output) = match event {
            StreamEvent::Delta(text) if text.is_empty() => return Step::Drop,
            StreamEvent::Reasoning(text) if text.is_empty() => return Step::Drop,
            StreamEvent::Delta(text) => (text.len(), true, !text.trim().is_empty()),
            StreamEvent::Reasoning(text) => (text.len(), true, false),
            StreamEvent::ToolCall(delta) => {
                if delta.name.as_deref().is_some_and(|n| !n.is_empty())
                    && !self.named.contains(&delta.index)
                {
                    self.named.push(delta.index);
                }
                let named = self.named.contains(&delta.index);
                self.tool_calls |= named && self.committed;
                let size = delta.arguments.len()
                    + delta.id.as_ref().map_or(0, String::len)
                    + delta.name.as_ref().map_or(0, String::len);
                (size, true, named)
            }
            // A provider's own event (a natively forwarded request): never
            // progress by itself — the neutral events parsed from it say
            // what it was — and never output.
            StreamEvent::Native(native) => (native.event.len() + native.data.len(), false, false),
            StreamEvent::Finish { .. } => return self.on_finish(),
        };
        self.progressed |= progress;
        if self.committed {
            return Step::Forward;
        }
        self.output |= output;
        if output && self.commit == StreamCommit::FirstOutput {
            self.committed = true;
            if let StreamEvent::ToolCall(_) = event {
                self.tool_calls = true;
            }
            return Step::Commit;
        }
        self.held += bytes;
        if self.held > self.budget {
            return Step::Fail(Failure::new(
                FailureKind::InvalidOutput,
                format!(
                    "the target sent more than {} KiB before its answer could be committed (the held-events budget)",
                    self.budget / 1024
                ),
            ));
        }
        Step::Hold
    }

    fn on_finish(&mut self) -> Step {
        if self.output {
            self.committed = true;
            return Step::Finish;
        }
        Step::Fail(Failure::new(
            FailureKind::EmptyResponse,
            if self.progressed {
                "the stream finished without an answer (reasoning or whitespace only)"
            } else {
                "the stream finished without text"
            },
        ))
    }
}

/// Whether a committed stream that failed with `kind` may continue on
/// another target (`continue_after_cut`): only a cut or a stall (the target
/// broke, not a refusal or a rejection), only when what the client has is
/// text (a tool call cannot be prefilled).
pub fn may_continue(kind: &FailureKind, sent_tool_calls: bool) -> bool {
    !sent_tool_calls && kind.disposition() == Disposition::Outage
}

/// The assistant prefill for a continuation: the text sent so far without
/// its trailing whitespace (Anthropic refuses a final assistant turn that
/// ends in whitespace), and whether whitespace was cut (the continuation's
/// first text then loses its leading whitespace, which the client already
/// has).
pub fn prefill(sent: &str) -> (&str, bool) {
    let trimmed = sent.trim_end();
    (trimmed, trimmed.len() < sent.len())
}

#[cfg(test)]
mod tests {
    //! Every protocol's event kinds, as the providers' parsers turn them
    //! into neutral events, run through the rules as data.

    use understudy_types::chat::{FinishReason, NativeEvent, ToolCallDelta};

    use super::*;
    use StreamCommit::{Complete, FirstOutput};

    fn text(t: &str) -> StreamEvent {
        StreamEvent::Delta(t.into())
    }
    fn thinking(t: &str) -> StreamEvent {
        StreamEvent::Reasoning(t.into())
    }
    fn call(index: u32, name: Option<&str>, args: &str) -> StreamEvent {
        StreamEvent::ToolCall(ToolCallDelta {
            index,
            id: name.map(|_| format!("call_{index}")),
            name: name.map(str::to_owned),
            arguments: args.into(),
        })
    }
    fn native(event: &str) -> StreamEvent {
        StreamEvent::Native(NativeEvent {
            event: event.into(),
            data: format!("{{\"type\":\"{event}\"}}"),
        })
    }
    fn finish() -> StreamEvent {
        StreamEvent::Finish {
            finish_reason: FinishReason::Stop,
            usage: None,
            model: None,
        }
    }

    /// A short name for a step, for tables.
    fn short(step: &Step) -> String {
        match step {
            Step::Drop => "drop".into(),
            Step::Hold => "hold".into(),
            Step::Commit => "commit".into(),
            Step::Forward => "forward".into(),
            Step::Finish => "finish".into(),
            Step::Fail(f) => format!("fail:{}", f.code()),
        }
    }

    /// Runs `events` (then `end`: `None` for the end of the body) through a
    /// watch and checks each step and whether the first token came.
    fn check(commit: StreamCommit, events: &[StreamEvent], expected: &[&str], progressed: bool) {
        let mut watch = Watch::new(commit, HELD_BYTES);
        let mut got: Vec<String> = Vec::new();
        for e in events {
            let step = watch.on_event(e);
            let end = matches!(step, Step::Finish | Step::Fail(_));
            got.push(short(&step));
            if end {
                break;
            }
        }
        assert_eq!(got, expected, "{commit:?} {events:?}");
        assert_eq!(watch.progressed(), progressed, "{commit:?} {events:?}");
    }

    #[test]
    fn progress_commit_and_the_end_for_every_protocol() {
        // Anthropic: message_start, ping, a thinking block (thinking_delta
        // → Reasoning), then text. Natively forwarded, each event also
        // comes as itself, ahead of what was parsed from it.
        check(
            FirstOutput,
            &[
                native("message_start"),
                native("ping"),
                thinking("Let me"),
                text("Hi"),
                finish(),
            ],
            &["hold", "hold", "hold", "commit", "finish"],
            true,
        );
        // OpenAI-compatible: reasoning_content / reasoning deltas, then content.
        check(
            FirstOutput,
            &[
                thinking("hmm"),
                thinking(" ok"),
                text(""),
                text("Answer"),
                text(" more"),
                finish(),
            ],
            &["hold", "hold", "drop", "commit", "forward", "finish"],
            true,
        );
        // Gemini: thought parts (thought: true), then a function call,
        // whole in one chunk.
        check(
            FirstOutput,
            &[
                thinking("**Planning**"),
                call(0, Some("get_weather"), "{}"),
                finish(),
            ],
            &["hold", "commit", "finish"],
            true,
        );
        // OpenAI tool calls in fragments: the first carries the name.
        check(
            FirstOutput,
            &[
                call(0, Some("f"), ""),
                call(0, None, "{\"a\""),
                call(0, None, ":1}"),
                finish(),
            ],
            &["commit", "forward", "forward", "finish"],
            true,
        );
    }

    #[test]
    fn thinking_only_prefixes_never_commit() {
        // Thinking, then a finish: no answer.
        check(
            FirstOutput,
            &[thinking("a"), thinking("b"), finish()],
            &["hold", "hold", "fail:empty_response"],
            true,
        );
        // Keep-alives alone are not progress.
        check(
            FirstOutput,
            &[native("ping"), text("")],
            &["hold", "drop"],
            false,
        );
        // Whitespace is progress but not output, in both modes alike: a
        // finish after it is an empty answer.
        check(
            FirstOutput,
            &[text("  "), text("\n"), finish()],
            &["hold", "hold", "fail:empty_response"],
            true,
        );
        // A tool call without a name is nothing the client can act on.
        check(
            FirstOutput,
            &[call(0, None, "{}"), finish()],
            &["hold", "fail:empty_response"],
            true,
        );
        // Whitespace before text is held and passed on at the commit.
        check(
            FirstOutput,
            &[text(" "), text("Hi")],
            &["hold", "commit"],
            true,
        );
    }

    #[test]
    fn complete_holds_everything_until_the_finish() {
        check(
            Complete,
            &[
                thinking("t"),
                text("Hi"),
                call(0, Some("f"), "{}"),
                text(" there"),
                finish(),
            ],
            &["hold", "hold", "hold", "hold", "finish"],
            true,
        );
        check(
            Complete,
            &[thinking("t"), finish()],
            &["hold", "fail:empty_response"],
            true,
        );
    }

    #[test]
    fn ends_of_an_attempt() {
        let mut w = Watch::new(FirstOutput, HELD_BYTES);
        assert_eq!(
            short(&w.on_item(None)),
            "fail:stream_interrupted",
            "end of body without a terminator"
        );
        let f = Failure::new(FailureKind::Unavailable { retry_after: None }, "overloaded");
        assert_eq!(short(&w.on_item(Some(&Err(f)))), "fail:unavailable");
        assert_eq!(short(&w.on_item(Some(&Ok(text("x"))))), "commit");
        assert_eq!(short(&w.on_item(None)), "fail:stream_interrupted");
    }

    #[test]
    fn silence_is_bounded_by_first_token_then_by_idle() {
        let t0 = crate::test_now();
        let first_token_by = t0 + Duration::from_secs(10);
        let idle = Duration::from_secs(5);
        let mut w = Watch::new(FirstOutput, HELD_BYTES);
        assert_eq!(w.silence_deadline(first_token_by, t0, idle), first_token_by);
        assert_eq!(
            w.on_silence(Duration::from_secs(10)).code().as_str(),
            "timeout"
        );
        // A keep-alive does not move the deadline; thinking does.
        w.on_event(&native("ping"));
        assert_eq!(w.silence_deadline(first_token_by, t0, idle), first_token_by);
        w.on_event(&thinking("…"));
        let at = t0 + Duration::from_secs(30);
        assert_eq!(w.silence_deadline(first_token_by, at, idle), at + idle);
        assert_eq!(
            w.on_silence(idle).code().as_str(),
            "timeout",
            "before the commit"
        );
        w.on_event(&text("Hi"));
        assert_eq!(
            w.on_silence(idle).code().as_str(),
            "stream_interrupted",
            "after the commit"
        );
    }

    #[test]
    fn held_events_are_bounded() {
        let mut w = Watch::new(FirstOutput, 10);
        assert_eq!(short(&w.on_event(&thinking("12345"))), "hold");
        assert_eq!(
            short(&w.on_event(&thinking("123456"))),
            "fail:invalid_output"
        );
        let mut w = Watch::new(Complete, 10);
        assert_eq!(
            short(&w.on_event(&text("12345678901"))),
            "fail:invalid_output"
        );
        // After the commit nothing is held.
        let mut w = Watch::new(FirstOutput, 10);
        w.on_event(&text("x"));
        assert_eq!(short(&w.on_event(&text("12345678901"))), "forward");
    }

    #[test]
    fn continuations() {
        assert!(may_continue(&FailureKind::StreamInterrupted, false));
        assert!(may_continue(&FailureKind::Timeout, false));
        assert!(
            !may_continue(&FailureKind::StreamInterrupted, true),
            "a tool call was sent"
        );
        assert!(
            !may_continue(&FailureKind::ContentFilter, false),
            "a refusal stays one"
        );
        assert_eq!(prefill("one two "), ("one two", true));
        assert_eq!(prefill("one two"), ("one two", false));
        let mut w = Watch::committed(HELD_BYTES);
        assert_eq!(short(&w.on_event(&text(" three"))), "forward");
        assert_eq!(short(&w.on_event(&finish())), "finish");
        assert_eq!("complete".parse(), Ok(Complete));
        assert!("sometimes".parse::<StreamCommit>().is_err());
    }
}
