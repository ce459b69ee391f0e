//! Incremental server-sent-events parsing of an OpenAI streaming response.
//!
//! Two layers:
//! - [`SseParser`] turns bytes, split at arbitrary points (inside a line, a
//!   `data:` prefix or a UTF-8 character), into complete events, following
//!   the SSE spec (WHATWG HTML, "Server-sent events", event stream
//!   interpretation): lines end with `\n`, `\r\n` or `\r`; a blank line ends
//!   an event; `data:` lines are joined with `\n`; lines starting with `:` are
//!   comments (`: ping`); one space after the field's colon is dropped.
//! - [`StreamMessage::parse`] classifies an event's data as an OpenAI
//!   completions chunk the way vLLM's `async_request_openai_completions`
//!   (vllm/benchmarks/lib/endpoint_request_func.py) reads it: `[DONE]`, a
//!   chunk with non-empty `choices` (a token chunk, whose text may be empty),
//!   otherwise a `usage` chunk; plus error events, which vLLM's server sends
//!   as `data: {"error": {...}}` (or an `event: error`).

use serde_json::Value;

/// One complete server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the event had one (OpenAI streams do not).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental SSE parser: feed it the body's bytes as they arrive.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` starting the next chunk
    /// belongs to that line ending.
    after_cr: bool,
    event: Option<String>,
    data: String,
    /// At least one `data:` line in the current event.
    has_data: bool,
    /// A line was not valid UTF-8.
    invalid_utf8: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes `bytes` and returns the events they complete, in order.
    ///
    /// Errors: a line that is not valid UTF-8 (checked per complete line, so
    /// characters split across chunks are fine).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut out = Vec::new();
        let mut rest = bytes;
        if self.after_cr {
            self.after_cr = false;
            if let Some(b'\n') = rest.first() {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..pos]);
            if rest[pos] == b'\r' {
                match rest.get(pos + 1) {
                    Some(b'\n') => rest = &rest[pos + 2..],
                    Some(_) => rest = &rest[pos + 1..],
                    None => {
                        self.after_cr = true;
                        rest = &[];
                    }
                }
            } else {
                rest = &rest[pos + 1..];
            }
            let line = std::mem::take(&mut self.line);
            if let Some(ev) = self.line_done(&line) {
                out.push(ev);
            }
        }
        self.line.extend_from_slice(rest);
        if self.invalid_utf8 {
            return Err("stream is not valid UTF-8".to_string());
        }
        Ok(out)
    }

    /// End of the body: returns an event left without its terminating blank
    /// line (lenient, as vLLM's `StreamedResponseHandler` accepts a trailing
    /// complete `data:` message), or `None`.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            if let Some(ev) = self.line_done(&line) {
                return Some(ev);
            }
        }
        self.dispatch()
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        let Ok(line) = std::str::from_utf8(line) else {
            self.invalid_utf8 = true;
            return None;
        };
        if line.starts_with(':') {
            return None; // comment, e.g. ": ping"
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {} // id, retry, unknown fields: ignored
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(SseEvent { event, data: std::mem::take(&mut self.data) })
    }
}

/// Token usage from a stream's usage chunk (`stream_options.include_usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
}

/// What one OpenAI completions stream event means to the benchmark client.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamMessage {
    /// A chunk with non-empty `choices`: the arrival of generated tokens
    /// (`text` of the first choice, possibly empty, e.g. for special tokens).
    Token { text: String },
    /// A chunk with empty `choices` and a `usage` object (the final chunk).
    Usage(Usage),
    /// `data: [DONE]`: the server ended the stream normally.
    Done,
    /// An error event: `{"error": ...}` data, or `event: error`.
    Error(String),
    /// A JSON chunk with neither choices nor usage.
    Other,
}

impl StreamMessage {
    /// Classifies one event as vLLM's client does: non-empty `choices` first,
    /// else `usage`. Data that is not JSON is an error.
    pub fn parse(ev: &SseEvent) -> StreamMessage {
        let data = ev.data.trim();
        if data == "[DONE]" {
            return StreamMessage::Done;
        }
        let value: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => {
                if ev.event.as_deref() == Some("error") {
                    return StreamMessage::Error(data.to_string());
                }
                return StreamMessage::Error(format!("invalid JSON in stream ({e}): {}", clip(data, 200)));
            }
        };
        if ev.event.as_deref() == Some("error") {
            return StreamMessage::Error(error_text(&value));
        }
        if let Some(err) = value.get("error").filter(|e| !e.is_null()) {
            return StreamMessage::Error(error_text(err));
        }
        if let Some(choices) = value.get("choices").and_then(Value::as_array).filter(|c| !c.is_empty()) {
            let text = choices[0].get("text").and_then(Value::as_str).unwrap_or("").to_string();
            return StreamMessage::Token { text };
        }
        if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
            let get = |k: &str| usage.get(k).and_then(Value::as_u64).map(|n| n as u32);
            return StreamMessage::Usage(Usage {
                prompt_tokens: get("prompt_tokens"),
                completion_tokens: get("completion_tokens"),
            });
        }
        StreamMessage::Other
    }
}

/// A readable message from an error object (`{"message": .., "type": .., "code": ..}`,
/// OpenAI's and vLLM's `ErrorInfo`), or the JSON itself.
pub fn error_text(err: &Value) -> String {
    let inner = err.get("error").unwrap_or(err);
    match inner.get("message").and_then(Value::as_str) {
        Some(msg) => {
            let kind = inner.get("type").and_then(Value::as_str).unwrap_or("error");
            match inner.get("code").filter(|c| !c.is_null()) {
                Some(code) => format!("{kind} ({code}): {msg}"),
                None => format!("{kind}: {msg}"),
            }
        }
        None => match inner.as_str() {
            Some(s) => s.to_string(),
            None => clip(&inner.to_string(), 500),
        },
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real `vllm serve` 0.32.0 response to a streaming /v1/completions
    /// request (8 token-id prompt, max_tokens 4, include_usage).
    const RECORDED: &[u8] = include_bytes!("testdata/completions_stream.txt");

    fn all_messages(chunks: &[&[u8]]) -> Vec<StreamMessage> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(p.feed(c).unwrap().iter().map(StreamMessage::parse));
        }
        out.extend(p.finish().iter().map(StreamMessage::parse));
        out
    }

    fn texts(msgs: &[StreamMessage]) -> Vec<&str> {
        msgs.iter()
            .filter_map(|m| match m {
                StreamMessage::Token { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn recorded_stream_whole() {
        let msgs = all_messages(&[RECORDED]);
        assert_eq!(msgs.len(), 6, "{msgs:?}");
        assert_eq!(texts(&msgs).len(), 4);
        assert_eq!(
            msgs[4],
            StreamMessage::Usage(Usage { prompt_tokens: Some(8), completion_tokens: Some(4) })
        );
        assert_eq!(msgs[5], StreamMessage::Done);
    }

    #[test]
    fn recorded_stream_split_at_every_byte() {
        let whole = all_messages(&[RECORDED]);
        for cut in 0..=RECORDED.len() {
            let (a, b) = RECORDED.split_at(cut);
            assert_eq!(all_messages(&[a, b]), whole, "split at byte {cut}");
        }
        // and one byte at a time
        let bytes: Vec<&[u8]> = RECORDED.chunks(1).collect();
        assert_eq!(all_messages(&bytes), whole);
    }

    /// CRLF separators, multi-byte UTF-8 text, a comment, an id field, and
    /// a trailing `[DONE]` without its blank line; split everywhere.
    #[test]
    fn crlf_utf8_comments_split_everywhere() {
        let stream = ": ping\r\n\r\n\
            data: {\"choices\":[{\"index\":0,\"text\":\"h\u{e9}\u{65e5}\u{1F600}\"}]}\r\n\r\n\
            id: 7\r\ndata: {\"choices\":[{\"index\":0,\"text\":\"\"}]}\r\n\r\n\
            :keep-alive\n\n\
            data:{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\r\r\
            data: [DONE]";
        let bytes = stream.as_bytes();
        let expect = vec![
            StreamMessage::Token { text: "h\u{e9}\u{65e5}\u{1F600}".into() },
            StreamMessage::Token { text: String::new() },
            StreamMessage::Usage(Usage { prompt_tokens: Some(3), completion_tokens: Some(2) }),
            StreamMessage::Done,
        ];
        assert_eq!(all_messages(&[bytes]), expect);
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(all_messages(&[a, b]), expect, "split at byte {cut}");
            for cut2 in cut..=bytes.len() {
                let (b1, b2) = b.split_at(cut2 - cut);
                assert_eq!(all_messages(&[a, b1, b2]), expect, "split at {cut}, {cut2}");
            }
        }
    }

    #[test]
    fn multi_line_data_is_joined() {
        let mut p = SseParser::new();
        let ev = p.feed(b"data: {\"choices\":\ndata: []}\n\n").unwrap();
        assert_eq!(ev, vec![SseEvent { event: None, data: "{\"choices\":\n[]}".into() }]);
        assert_eq!(StreamMessage::parse(&ev[0]), StreamMessage::Other);
    }

    #[test]
    fn error_events() {
        // vLLM's mid-stream error (create_streaming_error_response), then [DONE]
        let body = b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n\
            data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\n\
            data: [DONE]\n\n";
        let msgs = all_messages(&[body]);
        assert_eq!(msgs[0], StreamMessage::Token { text: "a".into() });
        assert_eq!(msgs[1], StreamMessage::Error("InternalServerError (500): Internal server error".into()));
        assert_eq!(msgs[2], StreamMessage::Done);
        // an `event: error` with plain-text data
        let msgs = all_messages(&[b"event: error\ndata: engine died\n\n"]);
        assert_eq!(msgs, vec![StreamMessage::Error("engine died".into())]);
        // data that is not JSON
        assert!(matches!(all_messages(&[b"data: {\"cho\n\n"])[0], StreamMessage::Error(_)));
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: \xff\xfe\n\n").is_err());
    }

    #[test]
    fn incomplete_trailing_json_is_an_error_not_a_token() {
        // a stream cut inside an event: finish() hands back the partial data
        let mut p = SseParser::new();
        assert!(p.feed(b"data: {\"choices\":[{\"te").unwrap().is_empty());
        let ev = p.finish().unwrap();
        assert!(matches!(StreamMessage::parse(&ev), StreamMessage::Error(_)));
    }

    #[test]
    fn error_body_text() {
        let body: Value = serde_json::from_str(
            r#"{"error":{"message":"The model `nope` does not exist.","type":"NotFoundError","param":"model","code":404}}"#,
        )
        .unwrap();
        assert_eq!(error_text(&body), "NotFoundError (404): The model `nope` does not exist.");
        assert_eq!(error_text(&Value::String("boom".into())), "boom");
        assert_eq!(clip("h\u{e9}llo", 2), "h...");
    }
}
