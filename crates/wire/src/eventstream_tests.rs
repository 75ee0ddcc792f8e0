//! The event-stream decoder against smithy-rs's reference messages
//! (`tests/data/aws-eventstream/`), fed whole and in pieces.

use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/data/aws-eventstream/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const VALID: [&str; 3] = [
    "valid_empty_payload",
    "valid_no_headers",
    "valid_with_all_headers_and_payload",
];

#[test]
fn the_reference_message_with_every_header_type_decodes() {
    let m = decode(&fixture("valid_with_all_headers_and_payload")).unwrap();
    let uuid = [
        0xb7, 0x9b, 0xc9, 0x14, 0xde, 0x21, 0x4e, 0x13, 0xb8, 0xb2, 0xbc, 0x47, 0xe8, 0x5b, 0x7f,
        0x0b,
    ];
    let want = vec![
        ("true".to_owned(), HeaderValue::Bool(true)),
        ("false".to_owned(), HeaderValue::Bool(false)),
        ("byte".to_owned(), HeaderValue::Byte(50)),
        ("short".to_owned(), HeaderValue::Int16(20_000)),
        ("int".to_owned(), HeaderValue::Int32(500_000)),
        ("long".to_owned(), HeaderValue::Int64(50_000_000_000)),
        (
            "bytes".to_owned(),
            HeaderValue::Bytes(b"some bytes".to_vec()),
        ),
        ("str".to_owned(), HeaderValue::String("some str".into())),
        ("time".to_owned(), HeaderValue::Timestamp(5_000_000_000)),
        ("uuid".to_owned(), HeaderValue::Uuid(uuid)),
    ];
    assert_eq!(m.headers, want);
    assert_eq!(m.payload, b"some payload");
    assert_eq!(m.header_str("str"), Some("some str"));
    assert_eq!(m.kind(), Kind::Unknown);
}

#[test]
fn every_valid_reference_message_decodes_and_encodes_back_to_its_bytes() {
    for name in VALID {
        let bytes = fixture(name);
        let m = decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(m.encode(), bytes, "{name}");
    }
    assert!(
        decode(&fixture("valid_no_headers"))
            .unwrap()
            .headers
            .is_empty()
    );
    assert!(
        decode(&fixture("valid_empty_payload"))
            .unwrap()
            .payload
            .is_empty()
    );
}

#[test]
fn every_invalid_reference_message_is_refused() {
    let cases = [
        ("invalid_prelude_checksum", Some(FrameError::PreludeCrc)),
        ("invalid_message_checksum", Some(FrameError::MessageCrc)),
        ("invalid_header_name_length", None),
        ("invalid_header_name_length_too_long", None),
        ("invalid_header_string_length_cut_off", None),
        ("invalid_header_string_value_length", None),
        ("invalid_header_value_type", None),
        ("invalid_headers_length", None),
    ];
    for (name, want) in cases {
        let bytes = fixture(name);
        let got = decode(&bytes);
        assert!(got.is_err(), "{name} decoded: {got:?}");
        if let Some(want) = want {
            assert_eq!(got, Err(want), "{name}");
        }
        // Fed to the streaming decoder, the same: an error or a message
        // that never completes, never a message.
        let mut d = Decoder::new();
        d.push(&bytes);
        match d.next_message() {
            Some(Ok(m)) => panic!("{name} streamed as {m:?}"),
            Some(Err(_)) => assert_eq!(d.next_message(), None, "{name}: the stream stays ended"),
            None => assert!(d.finish().is_err(), "{name}: cut off is an error"),
        }
    }
}

#[test]
fn messages_split_across_reads_or_several_in_one_read_come_out_whole() {
    let messages: Vec<Message> = VALID.iter().map(|n| decode(&fixture(n)).unwrap()).collect();
    let stream: Vec<u8> = VALID.iter().flat_map(|n| fixture(n)).collect();
    for piece in 1..=stream.len() {
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for chunk in stream.chunks(piece) {
            d.push(chunk);
            while let Some(m) = d.next_message() {
                got.push(m.unwrap());
            }
        }
        assert_eq!(got, messages, "pieces of {piece} bytes");
        assert_eq!(d.finish(), Ok(()));
    }
}

#[test]
fn a_message_over_the_limit_is_refused_from_its_prelude() {
    let total = (MAX_MESSAGE + 1) as u32;
    let mut prelude = total.to_be_bytes().to_vec();
    prelude.extend_from_slice(&0u32.to_be_bytes());
    let crc = crc32fast::hash(&prelude);
    prelude.extend_from_slice(&crc.to_be_bytes());
    let mut d = Decoder::new();
    d.push(&prelude);
    assert!(matches!(
        d.next_message(),
        Some(Err(FrameError::TooLong { .. }))
    ));
    // Nothing more is kept once the framing is lost.
    d.push(&[0; 64]);
    assert_eq!(d.next_message(), None);
    assert_eq!(d.finish(), Ok(()));
}

#[test]
fn a_length_below_the_overhead_is_refused() {
    for (total, headers) in [(15u32, 0u32), (20, 5), (16, 1)] {
        let mut prelude = total.to_be_bytes().to_vec();
        prelude.extend_from_slice(&headers.to_be_bytes());
        let crc = crc32fast::hash(&prelude);
        prelude.extend_from_slice(&crc.to_be_bytes());
        prelude.resize(total.max(16) as usize, 0);
        assert_eq!(
            decode(&prelude),
            Err(FrameError::BadLength { total, headers }),
            "{total}/{headers}"
        );
    }
}

#[test]
fn a_stream_cut_inside_a_message_is_an_error() {
    let bytes = fixture("valid_with_all_headers_and_payload");
    let mut d = Decoder::new();
    d.push(&bytes[..bytes.len() - 1]);
    assert_eq!(d.next_message(), None);
    assert_eq!(d.finish(), Err(FrameError::Truncated));
}

#[test]
fn bedrock_s_exception_frame_reads_as_an_exception() {
    let string = |s: &str| HeaderValue::String(s.into());
    let m = Message {
        headers: vec![
            (":message-type".into(), string("exception")),
            (":exception-type".into(), string("modelStreamErrorException")),
            (":content-type".into(), string("application/json")),
        ],
        payload: br#"{"message":"Model Stream Error","originalStatusCode":500,"originalMessage":"The model stream failed."}"#.to_vec(),
    };
    let bytes = m.encode();
    // The frame as a real Bedrock stream sends it: 221 bytes,
    // 103 of headers, prelude CRC 0xc791907a, message CRC 0x57334313.
    assert_eq!(bytes.len(), 221);
    assert_eq!(&bytes[4..8], &103u32.to_be_bytes());
    assert_eq!(&bytes[8..12], &0xc791_907a_u32.to_be_bytes());
    assert_eq!(&bytes[217..], &0x5733_4313_u32.to_be_bytes());
    let back = decode(&bytes).unwrap();
    assert_eq!(back.kind(), Kind::Exception("modelStreamErrorException"));
    let event = Message {
        headers: vec![
            (":message-type".into(), string("event")),
            (":event-type".into(), string("chunk")),
        ],
        payload: Vec::new(),
    };
    assert_eq!(
        decode(&event.encode()).unwrap().kind(),
        Kind::Event("chunk")
    );
}
