//! Property-based fuzzing of every parser: the SSE decoder, each protocol's
//! stream parser and each non-streamed classifier never panic, on arbitrary
//! bytes and on byte soups built from the protocols' own fragments.
//!
//! CI runs the default number of cases; for a long run:
//! `PROPTEST_CASES=200000 cargo test --release -p understudy-providers --test it fuzz::`.

use proptest::prelude::*;
use reqwest::header::HeaderMap;
use understudy_providers::sse::{SseDecoder, SseItem};
use understudy_providers::{decode_response, decode_stream};
use understudy_types::{Protocol, StreamEvent};

use crate::common::split;

const KINDS: [Protocol; 3] = [
    Protocol::ChatCompletions,
    Protocol::GenerateContent,
    Protocol::Messages,
];

/// Fragments of the three protocols, so random inputs reach deep paths.
const FRAGMENTS: &[&str] = &[
    "data: ",
    "data:",
    "event: ",
    "event: error\n",
    "event: message_delta\n",
    "event: message_stop\n",
    ": ping\n",
    "\n",
    "\r\n",
    "\r",
    "\n\n",
    "\r\n\r\n",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "true",
    "0",
    "-1",
    "1e999",
    "[DONE]",
    "\"error\"",
    "\"message\"",
    "\"type\"",
    "\"code\"",
    "\"status\"",
    "\"choices\"",
    "\"delta\"",
    "\"content\"",
    "\"refusal\"",
    "\"finish_reason\"",
    "\"stop\"",
    "\"content_filter\"",
    "\"usage\"",
    "\"x_groq\"",
    "\"candidates\"",
    "\"parts\"",
    "\"text\"",
    "\"finishReason\"",
    "\"STOP\"",
    "\"SAFETY\"",
    "\"promptFeedback\"",
    "\"blockReason\"",
    "\"usageMetadata\"",
    "\"details\"",
    "\"retryDelay\"",
    "\"26s\"",
    "\"message_start\"",
    "\"content_block_delta\"",
    "\"text_delta\"",
    "\"stop_reason\"",
    "\"refusal\"",
    "\"overloaded_error\"",
    "\"invalid_request_error\"",
    "\"Output blocked by content filtering policy\"",
    "{\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}",
    "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"hi\"}]},\"finishReason\":\"STOP\"}]}",
    "{\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}",
    "{\"error\":{\"code\":503,\"status\":\"UNAVAILABLE\",\"message\":\"x\"}}",
    "\u{feff}",
    "é",
    "\u{0}",
];

fn soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..80)
        .prop_map(|parts| parts.concat().into_bytes())
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![prop::collection::vec(any::<u8>(), 0..2048), soup()]
}

fn decode_all(chunks: &[Vec<u8>]) -> Vec<SseItem> {
    let mut d = SseDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        if d.feed(c, &mut out).is_err() {
            return out;
        }
    }
    let _ = d.finish(&mut out);
    out
}

proptest! {
    #[test]
    fn sse_decoder_is_total_and_chunking_invariant(data in bytes(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let whole = decode_all(std::slice::from_ref(&data));
        let pieces = decode_all(&split(&data, &cuts));
        prop_assert_eq!(whole, pieces);
    }

    #[test]
    fn stream_parsers_never_panic_and_end_once(data in bytes(), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let chunks = split(&data, &cuts);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        for kind in KINDS {
            let events = decode_stream(kind, "m", &refs);
            // Exactly one terminal event, and it is the last.
            let terminal = events.iter().filter(|e| !matches!(e, Ok(StreamEvent::Delta(_) | StreamEvent::ToolCall(_)))).count();
            prop_assert_eq!(terminal, 1, "{:?}: {:?}", kind, events);
            prop_assert!(!matches!(events.last(), Some(Ok(StreamEvent::Delta(_) | StreamEvent::ToolCall(_)))));
        }
    }

    #[test]
    fn response_classifiers_never_panic(data in bytes(), status in prop_oneof![Just(200u16), Just(400), Just(429), Just(503), 100u16..600]) {
        for kind in KINDS {
            let result = decode_response(kind, "m", status, HeaderMap::new(), &data);
            if let Err(f) = result {
                prop_assert!(f.detail.len() <= understudy_types::error::DETAIL_LIMIT + 3);
            } else {
                prop_assert!((200..300).contains(&status));
            }
        }
    }
}
