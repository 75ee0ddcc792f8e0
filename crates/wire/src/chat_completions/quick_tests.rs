//! The quick read against the typed one: whatever it takes, it reads as
//! the typed read and its conversion do; what it leaves, the typed read
//! handles (or refuses) as before.

use std::borrow::Cow;

use understudy_types::ChatRequest;

use super::read;
use crate::chat_completions::inbound::ChatCompletionRequest;
use crate::chat_completions::native;

/// What the typed read makes of `body`: the neutral request, the model,
/// the stream flags; or its error.
fn typed(body: &str) -> Result<(ChatRequest, Option<String>, bool, bool), String> {
    let mut request: ChatCompletionRequest =
        serde_json::from_str(body).map_err(|e| e.to_string())?;
    let chat = request.take_chat().map_err(|e| format!("{e:?}"))?;
    let include_usage = request.include_usage();
    Ok((chat, request.model, request.stream, include_usage))
}

/// The parts `body` (valid JSON) holds, counted as the server's limit
/// counts them: each `{`, `[` and `,` outside a string.
fn parts(body: &str) -> usize {
    let (mut n, mut in_string, mut escaped) = (0, false, false);
    for b in body.bytes() {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') | (false, _, b'"') => in_string = !in_string,
            (false, _, b'{' | b'[' | b',') => n += 1,
            _ => {}
        }
    }
    n
}

/// Checks `body` both ways: `true` when the quick read took it (and then
/// read it exactly as the typed read did).
#[track_caller]
fn agrees(body: &str) -> bool {
    let Some(quick) = read(body, usize::MAX) else {
        return false;
    };
    let (chat, model, stream, include_usage) =
        typed(body).unwrap_or_else(|e| panic!("taken quickly, refused typed ({e}): {body}"));
    assert_eq!(quick.chat, chat, "{body}");
    assert_eq!(quick.model, model.as_deref(), "{body}");
    assert_eq!(quick.stream, stream, "{body}");
    assert_eq!(quick.include_usage, include_usage, "{body}");
    assert_eq!(quick.parts, parts(body), "{body}");
    if quick.forwardable {
        assert!(
            matches!(native::forwarded(body), Some(Cow::Borrowed(_))),
            "forwardable, yet not forwarded as it is: {body}"
        );
    }
    // A target's edit is the same from the spans found as from a read of
    // its own.
    for (limit, completion_tokens) in [(None, false), (Some(7), false), (Some(7), true)] {
        assert_eq!(
            native::prepare(body, Some(&quick.spans), "t", limit, completion_tokens),
            native::prepare(body, None, "t", limit, completion_tokens),
            "{body}"
        );
    }
    true
}

#[test]
fn a_plain_body_is_read_as_the_typed_read_reads_it() {
    let taken = [
        r#"{"model":"default","messages":[{"role":"user","content":"Tell me a joke."}]}"#,
        r#"{"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":null,"messages":[{"role":"user","content":"hi"}]}"#,
        r#" { "model" : "gpt-4o" , "messages" : [ { "content" : "hi" , "role" : "user" } ] } "#,
        r#"{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"say \"hi\"\n\u00e9\ud83d\ude00 \\ /"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"ünïcødé 😀"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":""},{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","temperature":0.7,"top_p":1,"presence_penalty":-0.5,"frequency_penalty":0,"max_tokens":100,"seed":-3,"user":"u\"1","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","max_tokens":100,"max_completion_tokens":50,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","temperature":null,"max_tokens":null,"user":null,"seed":null,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","stream":false,"stream_options":null,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","stream":true,"stream_options":{"include_usage":false,"other":1},"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","temperature":1e0,"top_p":1E-1,"messages":[{"role":"user","content":"hi"}]}"#,
    ];
    for body in taken {
        assert!(agrees(body), "not taken quickly: {body}");
    }
    let forwardable = read(taken[0], usize::MAX).map(|q| q.forwardable);
    assert_eq!(forwardable, Some(true));
    let streamed = read(taken[11], usize::MAX).map(|q| (q.forwardable, q.include_usage));
    assert_eq!(streamed, Some((false, true)));
}

/// Bodies the quick read leaves to the typed read: those it takes but
/// converts otherwise, and those it refuses (with the field at fault).
#[test]
fn anything_else_is_left_to_the_typed_read() {
    let left = [
        // Taken by the typed read, with more to convert.
        r#"{"model":"m","n":1,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","stop":"x","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","tools":[{"type":"function","function":{"name":"t"}}],"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","prompt_cache_key":"k","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","vendor_extension":1,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m\u002d1","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","name":"ann","content":"hi"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":null},{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","messages":[{"role":"developer","content":"x"},{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"system","content":"x"}]}"#,
        r#"{"model":"m","messages":[{"role":"tool","tool_call_id":"c","content":"x"}]}"#,
        r#"{"mod\u0065l":"m","messages":[{"role":"user","content":"hi"}]}"#,
        // Refused by the typed read.
        r#"{"model":"m","model":"n","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","role":"user","content":"hi"}]}"#,
        r#"{"model":"m","temperature":3,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","max_tokens":1.5,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","max_tokens":4294967296,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","temperature":1E400,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","stream":null,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","stream":"yes","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","seed":1.5,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","messages":[]}"#,
        r#"{"model":"m","messages":[{"role":"system","content":"x"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"   "}]}"#,
        r#"{"model":"m"}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"},]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}x"#,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]"#,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\tb\"}]}",
        r#"{"model":"m","messages":[{"role":"user","content":"\x"}]}"#,
        r#"{"model":01,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"[{"role":"user","content":"hi"}]"#,
        "",
    ];
    for body in left {
        assert!(!agrees(body), "taken quickly: {body}");
    }
}

/// Every number the fields take, in every form JSON writes it, reads as
/// the typed read reads it (or is left to it).
#[test]
fn numbers_read_as_their_fields_types_read_them() {
    let numbers = [
        "0",
        "-0",
        "1",
        "2",
        "0.5",
        "0.1",
        "1.0",
        "2.0000001",
        "1.9999999",
        "1e0",
        "1E-1",
        "5e-324",
        "1e38",
        "3.5e38",
        "100",
        "65536",
        "4294967295",
        "4294967296",
        "-1",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "00",
        "1.",
        ".5",
        "+1",
        "0x10",
        "NaN",
        "true",
        "\"1\"",
        "null",
    ];
    // `temperature` to `seed`: the members that take a number.
    let fields = &super::MEMBERS[2..9];
    assert_eq!((fields[0], fields[6]), ("temperature", "seed"));
    let mut taken = 0;
    for field in fields {
        for n in numbers {
            let body = format!(
                r#"{{"model":"m","{field}":{n},"messages":[{{"role":"user","content":"hi"}}]}}"#
            );
            taken += usize::from(agrees(&body));
        }
    }
    // Most forms are numbers each field takes; none is a guess.
    assert!(taken > 70, "only {taken} taken");
}

#[test]
fn strings_with_escapes_read_as_serde_reads_them() {
    let texts = [
        r"plain",
        r#"a \"quote\""#,
        r"back\\slash",
        r"\/",
        r"\b\f\n\r\t",
        r"\u0041\u00e9\u4e2d",
        r"\ud83d\ude00",
        r"\ud83d",
        r"\u12",
        r"\uZZZZ",
        "tab\there",
        "\u{7f}del",
    ];
    let mut taken = 0;
    for text in texts {
        for body in [
            format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}]}}"#),
            format!(
                r#"{{"model":"m","user":"{text}","messages":[{{"role":"user","content":"x"}}]}}"#
            ),
        ] {
            taken += usize::from(agrees(&body));
        }
    }
    assert!(taken >= 14, "only {taken} taken");
}

/// A body past the parts limit is left to the typed read, which refuses
/// it unparsed.
#[test]
fn a_body_past_the_parts_limit_is_not_built() {
    let turns = vec![r#"{"role":"user","content":"hi"}"#; 1_000].join(",");
    let body = format!(r#"{{"model":"m","messages":[{turns}]}}"#);
    let all = read(&body, usize::MAX).map(|q| (q.parts, q.chat.messages.len()));
    assert_eq!(all, Some((parts(&body), 1_000)));
    assert_eq!(
        read(&body, parts(&body)).map(|q| q.parts),
        Some(parts(&body))
    );
    assert!(read(&body, parts(&body) - 1).is_none());
    assert!(read(&body, 10).is_none());
}
