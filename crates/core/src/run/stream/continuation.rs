//! Continuing a cut stream (`continue_after_cut`): the next target that
//! accepts an assistant prefill gets the text sent so far and continues
//! the answer on the same stream; and [`Sent`], that text, kept only when
//! it may be needed.

use std::sync::Arc;
use std::time::Instant;

use understudy_policy::decide::Call;
use understudy_policy::stream::{HELD_BYTES, Watch, prefill};
use understudy_settings::StreamCommit;
use understudy_types::StreamItem;
use understudy_types::attempt::{Attempt, AttemptKind, Outcome};
use understudy_types::chat::{Message, StreamEvent};
use understudy_types::failure::{Failure, FailureKind};

use super::{Finish, client_left, item_of, judged, send};
use crate::adapter::BoxEventStream;
use crate::key_pools::KeyInUse;
use crate::run::Run;
use crate::run::key_choice::KeyChoice;
use crate::stream::feed;

impl Run {
    /// Continues a cut answer on the next target that accepts an assistant
    /// prefill (`continue_after_cut`). Returns who continued, how the
    /// answer ended and (for a recorded trace) the continuation's answer id;
    /// what it relays is added to `sent`. A target that refuses the prefill
    /// (or fails before its first text) is never hidden: the stream then
    /// ends in its error.
    pub(super) async fn continuation(
        &mut self,
        cut: usize,
        sent: &mut Sent,
        tx: &feed::Sender,
        attempts: &mut Vec<Attempt>,
    ) -> Result<(String, Finish, Option<String>), Failure> {
        let Some(idx) = (0..self.plan.targets.len())
            .filter(|&i| i != cut)
            .find(|&i| self.leases.get(i).is_some_and(|s| s.provider.prefill))
        else {
            return Err(Failure::new(
                FailureKind::StreamInterrupted,
                "the stream was cut, and no other target accepts an assistant prefill",
            ));
        };
        let call = Call {
            target: idx,
            kind: AttemptKind::Continuation,
            force: false,
        };
        if !self.admit(call).await {
            return Err(Failure::new(
                FailureKind::StreamInterrupted,
                "the stream was cut, and the target to continue it is unavailable",
            ));
        }
        let ticket = match self.pick_key(call) {
            KeyChoice::Single => None,
            KeyChoice::Pooled(ticket) => Some(ticket),
            KeyChoice::None | KeyChoice::RateLimited(_) => {
                self.release_held_probe();
                return Err(Failure::new(
                    FailureKind::StreamInterrupted,
                    "the stream was cut, and every key of the target to continue it is out",
                ));
            }
        };
        let key = ticket.as_ref().map_or(0, KeyInUse::key);
        let key_name = ticket.as_ref().and_then(KeyInUse::name);
        let (prefix, trimmed) = prefill(&sent.text);
        let mut chat = (*self.chat).clone();
        // The prefill is the neutral history's last turn: a native body
        // (the client's own bytes) could not carry it.
        chat.native = None;
        chat.messages.push(Message::assistant(prefix));
        let mut response_id = None;
        let started = crate::runtime_clock::now();
        let first_token_by = (started + self.timeouts(idx).first_token).min(self.deadline);
        let provider = String::from(&*self.plan.targets[idx].provider);
        let span = self.attempt_span(idx);
        let result = match self
            .open(idx, key, Arc::new(chat), first_token_by, span, None)
            .await
        {
            Ok(mut stream) => {
                let result = self
                    .continue_on(&mut stream, idx, trimmed, tx, first_token_by, sent)
                    .await;
                response_id = self.notes.as_ref().and_then(|_| stream.response_id());
                drop(stream);
                let outcome = match &result {
                    Ok(_) => Ok(()),
                    Err(_) if tx.is_closed() => Ok(()),
                    Err(f) => Err(f.code()),
                };
                self.stream_ended(idx, outcome, crate::runtime_clock::since(started));
                result
            }
            Err(f) => {
                self.outcome(idx, Err(f.code()));
                Err(f)
            }
        };
        let (outcome, failure) = match &result {
            Ok(_) => (Outcome::Ok, None),
            Err(f) => (Outcome::Failed(f.code()), Some(f)),
        };
        let mut record = self.attempt_record(
            idx,
            call.kind,
            outcome,
            crate::runtime_clock::since(started),
            failure,
        );
        record.key = key_name;
        record.span_id = span;
        attempts.push(record);
        let _ = self.key_outcome(idx, ticket, None, failure);
        match result {
            Ok(finish) => Ok((provider, finish, response_id)),
            Err(f) => Err(Failure::new(
                FailureKind::StreamInterrupted,
                format!(
                    "the stream was cut, and {provider} could not continue it: {}",
                    f.describe()
                ),
            )),
        }
    }

    /// Reads a continuation: its first text loses the whitespace the
    /// prefill gave up; everything goes to the reader.
    async fn continue_on(
        &self,
        stream: &mut BoxEventStream,
        idx: usize,
        mut trim_start: bool,
        tx: &feed::Sender,
        first_token_by: Instant,
        sent: &mut Sent,
    ) -> Result<Finish, Failure> {
        let idle = self.timeouts(idx).stream_idle;
        let mut watch = Watch::committed(HELD_BYTES);
        let mut started = Watch::new(StreamCommit::FirstOutput, HELD_BYTES);
        let mut last = crate::runtime_clock::now();
        loop {
            let by = started.silence_deadline(first_token_by, last, idle);
            let Ok(next) = tokio::time::timeout_at(by.into(), stream.next()).await else {
                return Err(started.on_silence(by.saturating_duration_since(last)));
            };
            last = crate::runtime_clock::now();
            // Progress (for its deadline) is read from a fresh watch; what
            // to do with the event from the committed one.
            if let Some(Ok(event)) = &next {
                started.on_event(event);
            }
            let step = watch.on_item(next.as_ref());
            let event = match judged(step, next) {
                Ok(Some(event)) => event,
                Ok(None) => continue,
                Err(end) => return end,
            };
            let event = match event {
                StreamEvent::Delta(text) if trim_start => {
                    let text = text.trim_start();
                    if text.is_empty() {
                        continue;
                    }
                    trim_start = false;
                    StreamEvent::Delta(text.to_owned())
                }
                // A continuation's reasoning is its own; the client has
                // the answer's.
                StreamEvent::Reasoning(_) | StreamEvent::Native(_) => continue,
                other => other,
            };
            let Some(item) = item_of(event) else { continue };
            sent.note(&item);
            if !send(tx, item).await {
                return Err(client_left());
            }
        }
    }
}

/// The text the client has received, kept only when a cut may be
/// continued (it becomes the prefill) or the trace captures content.
pub(super) struct Sent {
    /// A cut may be continued.
    pub(super) on: bool,
    /// The text is kept (`on`, or content is captured).
    keep: bool,
    pub(super) text: String,
}

impl Sent {
    pub(super) fn new(on: bool, capture: bool) -> Self {
        Self {
            on,
            keep: on || capture,
            text: String::new(),
        }
    }

    pub(super) fn note(&mut self, item: &StreamItem) {
        if let (true, StreamItem::Delta(text)) = (self.keep, item) {
            self.text.push_str(text);
        }
    }
}
