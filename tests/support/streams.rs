//! Generated inputs: deterministic random cut points for replaying a stream in odd frames, and proptest
//! strategies for OpenAI-style event streams mixing well-formed events with hostile ones.

use proptest::prelude::*;

/// A deterministic generator for split points (no rand dependency).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % bound.max(1)
    }
}

/// Cuts `data` into frames at random points.
pub fn random_frames(data: &[u8], rng: &mut Lcg, max_frame: usize) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let n = 1 + rng.next(max_frame.min(rest.len()));
        let (head, tail) = rest.split_at(n.min(rest.len()));
        frames.push(head.to_vec());
        rest = tail;
    }
    frames
}

/// One piece of a stream, good or hostile: token, role, text-completion and usage chunks, [DONE],
/// comments with lone-CR endings, tool calls, error events, invalid JSON, invalid UTF-8, NUL bytes, a
/// BOM, padding events of varied size and plain random bytes.
pub fn piece() -> impl Strategy<Value = Vec<u8>> {
    let text = prop_oneof![
        "[a-z ]{0,8}",
        "[\\PC]{0,4}",
        Just("\\\"quoted\\\" \\u00e9 \\n".to_owned()),
    ];
    prop_oneof![
        text.clone().prop_map(|t| format!(
            "data: {{\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n"
        )
        .into_bytes()),
        Just(
            b"data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
                .to_vec()
        ),
        text.prop_map(|t| format!("data: {{\"choices\":[{{\"text\":\"{t}\"}}]}}\r\n\r\n").into_bytes()),
        (0u64..1000, 0u64..1000).prop_map(|(p, c)| format!(
            "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{p},\"completion_tokens\":{c}}}}}\n\n"
        )
        .into_bytes()),
        Just(b"data: [DONE]\n\n".to_vec()),
        Just(b": ping\r\r".to_vec()),
        Just(b"event: x\nid: 7\nretry: 10\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{}]}}]}\n\n".to_vec()),
        Just(b"data: {\"error\":{\"message\":\"boom\"}}\n\n".to_vec()),
        Just(b"data: {not json\n\n".to_vec()),
        Just(b"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}\n\n".to_vec()),
        Just(b"data: \x00\x00\n\n".to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        (0usize..600).prop_map(|n| format!("data: {{\"pad\":\"{}\"}}\n\n", "x".repeat(n)).into_bytes()),
        prop::collection::vec(any::<u8>(), 0..24),
    ]
}

/// A stream of up to `max_pieces` pieces.
pub fn stream(max_pieces: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(piece(), 0..max_pieces).prop_map(|pieces| pieces.concat())
}

/// Cut points, applied with [`cut`].
pub fn splits() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(any::<usize>(), 0..40)
}

/// Cuts `data` at the given points (taken modulo its length + 1, sorted, deduplicated).
pub fn cut<'a>(data: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = points
        .iter()
        .map(|p| p % (data.len() + 1))
        .chain([0, data.len()])
        .collect();
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| &data[w[0]..w[1]]).collect()
}
