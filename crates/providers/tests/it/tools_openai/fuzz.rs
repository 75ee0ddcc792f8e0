//! Fuzz of the streamed tool-call parser: any fragmentation of any calls
//! reassembles, and soups of tool-call fragments never panic.

use proptest::prelude::*;

use super::*;

/// Calls with JSON arguments.
fn calls_strategy() -> impl Strategy<Value = Vec<(String, Value)>> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Value::from),
        "[a-zé \"\\\\{}:,\u{1F600}]{0,12}".prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
    ];
    let arguments = prop::collection::btree_map("[a-z]{1,6}", leaf, 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()));
    prop::collection::vec(("[a-z_]{1,10}", arguments), 1..4)
}

proptest! {
    /// Any calls, their arguments cut anywhere (on character boundaries),
    /// fragments of different calls interleaved and packed several to a
    /// chunk, the bytes split anywhere: the same calls come out.
    #[test]
    fn any_fragmentation_reassembles(
        calls in calls_strategy(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        order in prop::collection::vec(any::<usize>(), 0..40),
        pack in 1usize..4,
        byte_cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        // Each call: a head, then its arguments in pieces.
        let mut pending: Vec<Vec<Value>> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                let text = args.to_string();
                let mut points: Vec<usize> = cuts
                    .iter()
                    .map(|c| c % (text.len() + 1))
                    .filter(|&p| text.is_char_boundary(p))
                    .collect();
                points.sort_unstable();
                points.dedup();
                let mut out = vec![json!({"index": i, "id": format!("call_{i}"), "type": "function",
                    "function": {"name": name, "arguments": ""}})];
                let mut last = 0;
                for p in points.into_iter().chain([text.len()]) {
                    if p > last {
                        out.push(json!({"index": i, "function": {"arguments": &text[last..p]}}));
                        last = p;
                    }
                }
                out.reverse();
                out
            })
            .collect();
        // Interleave: a call's fragments stay in order, and a call begins
        // only after the previous one began (indices appear in order).
        let mut fragments = Vec::new();
        let mut begun = 0;
        let mut picks = order.iter().chain(std::iter::repeat(&0));
        while pending.iter().any(|p| !p.is_empty()) {
            let mut candidates: Vec<usize> =
                (0..begun).filter(|&i| !pending[i].is_empty()).collect();
            if begun < pending.len() {
                candidates.push(begun);
            }
            let pick = candidates[picks.next().unwrap() % candidates.len()];
            if pick == begun {
                begun += 1;
            }
            fragments.extend(pending[pick].pop());
        }
        let deltas: Vec<Value> = fragments
            .chunks(pack)
            .map(|c| json!({"tool_calls": c}))
            .collect();
        let bytes = sse(&deltas, "tool_calls");
        let mut points: Vec<usize> = byte_cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut pieces = Vec::new();
        let mut last = 0;
        for p in points {
            pieces.push(&bytes[last..p]);
            last = p;
        }
        pieces.push(&bytes[last..]);
        let got = reassemble(decode_stream(Protocol::ChatCompletions, "m", &pieces));
        let want: Vec<(String, String, Value)> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| (format!("call_{i}"), name.clone(), args.clone()))
            .collect();
        let got_calls: Vec<(String, String, Value)> = got
            .calls
            .iter()
            .map(|(id, name, args)| (id.clone(), name.clone(), parse(args)))
            .collect();
        prop_assert_eq!(got_calls, want);
        prop_assert!(matches!(got.end, Some(Ok((FinishReason::ToolCalls, _)))));
    }

    /// Soups of tool-call fragments, valid or not: no panic, and exactly
    /// one terminal event, last.
    #[test]
    fn tool_call_soups_never_panic(
        parts in prop::collection::vec(prop::sample::select(SOUP), 0..60),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let data = parts.concat().into_bytes();
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        points.sort_unstable();
        let mut pieces = Vec::new();
        let mut last = 0;
        for p in points {
            pieces.push(&data[last..p]);
            last = p;
        }
        pieces.push(&data[last..]);
        let events = decode_stream(Protocol::ChatCompletions, "m", &pieces);
        let terminal = events
            .iter()
            .filter(|e| !matches!(e, Ok(StreamEvent::Delta(_) | StreamEvent::ToolCall(_))))
            .count();
        prop_assert_eq!(terminal, 1, "{:?}", events);
        prop_assert!(!matches!(
            events.last(),
            Some(Ok(StreamEvent::Delta(_) | StreamEvent::ToolCall(_)))
        ));
    }
}

const SOUP: &[&str] = &[
    "data: ",
    "\n\n",
    "\n",
    "[DONE]",
    "{\"choices\":[{\"delta\":{\"tool_calls\":[",
    "]},\"finish_reason\":null}]}",
    "{\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}",
    "{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"a\",\"arguments\":\"\"}}",
    "{\"index\":1,\"id\":\"call_b\",\"function\":{\"name\":\"b\",\"arguments\":\"{\"}}",
    "{\"index\":0,\"function\":{\"arguments\":\"{\\\"x\\\":\"}}",
    "{\"index\":4294967295,\"function\":{\"arguments\":\"1}\"}}",
    "{\"function\":{\"arguments\":{\"y\":2}}}",
    "{\"id\":\"\",\"function\":null}",
    "{\"index\":-1}",
    "{\"index\":0,\"id\":\"call_c\"}",
    ",",
    "null",
    "{\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}",
    "{\"error\":{\"message\":\"x\",\"type\":\"invalid_request_error\",\"code\":\"tool_use_failed\"}}",
    "event: error\n",
];
