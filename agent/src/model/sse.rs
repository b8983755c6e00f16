//! An incremental parser of server-sent events (the WHATWG `text/event-stream` format), for
//! the model clients' streams.
//!
//! Bytes go in as the network delivers them, cut anywhere: in the middle of a line, of a
//! `\r\n` pair, of a UTF-8 sequence. Complete events come out. Lines end in `\n`, `\r\n` or a
//! lone `\r`; `event:` names the event, `data:` lines are joined with `\n`, a line starting
//! with `:` is a comment (a keep-alive), `id:` and `retry:` are ignored (the clients never
//! reconnect on their own: a broken stream is sent again whole, see the clients). A line
//! longer than [`MAX_LINE`] is an error, so a server cannot make the agent buffer without
//! bound.

/// The longest line (and event data) accepted, in bytes.
pub const MAX_LINE: usize = 8 * 1024 * 1024;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name; empty when the event had none (the format's default, `message`).
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The stream is not one a client can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event-stream line or event is longer than {MAX_LINE} bytes")]
pub struct SseTooLong;

/// The parser's state between two pushes.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The current line, not yet ended.
    line: Vec<u8>,
    /// The last line ended in `\r`: a `\n` right after it belongs to the same line end.
    after_cr: bool,
    /// Nothing was read yet (a leading byte-order mark is dropped).
    started: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Feed the next bytes; returns the events they complete, in order.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<SseEvent>, SseTooLong> {
        let out = Vec::new();
        if !self.started && !bytes.is_empty() {
            // The BOM may itself arrive cut; wait for three bytes before deciding.
            self.line.extend_from_slice(bytes);
            if self.line.len() < 3 && b"\xEF\xBB\xBF".starts_with(&self.line) {
                return Ok(out);
            }
            self.started = true;
            let pending = std::mem::take(&mut self.line);
            let rest = pending.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&pending);
            return self.feed(rest, out);
        }
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        self.feed(bytes, out)
    }

    fn feed(
        &mut self,
        mut bytes: &[u8],
        mut out: Vec<SseEvent>,
    ) -> Result<Vec<SseEvent>, SseTooLong> {
        while let Some(end) = bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.line.extend_from_slice(&bytes[..end]);
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, &mut out)?;
            if bytes[end] == b'\r' {
                match bytes.get(end + 1) {
                    Some(b'\n') => bytes = &bytes[end + 2..],
                    Some(_) => bytes = &bytes[end + 1..],
                    None => {
                        // The `\n` of this `\r\n` may come with the next push.
                        self.after_cr = true;
                        return Ok(out);
                    }
                }
            } else {
                bytes = &bytes[end + 1..];
            }
        }
        self.line.extend_from_slice(bytes);
        if self.line.len() > MAX_LINE {
            return Err(SseTooLong);
        }
        Ok(out)
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseTooLong> {
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                out.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data,
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        if line.starts_with(b":") {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => self.event = value.into_owned(),
            b"data" => {
                if self.data.len() + value.len() > MAX_LINE {
                    return Err(SseTooLong);
                }
                self.data.push_str(&value);
                self.data.push('\n');
                self.has_data = true;
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    /// A sample with every feature: named and unnamed events, multi-line data, comments,
    /// CRLF, lone CR, a field with no space after the colon, a field with no colon, ignored
    /// fields, an event with no data (not dispatched), multi-byte UTF-8.
    const SAMPLE: &[u8] = b"\xEF\xBB\xBF: keep-alive\n\
event: message_start\r\n\
data: {\"a\":1}\r\n\
\r\n\
data:first\n\
data: second\n\
id: 7\n\
retry: 10\n\
\n\
event: ping\n\
\n\
event: delta\r\
data: caf\xC3\xA9 \xE2\x9C\x93\r\
data\r\
\r\
data: [DONE]\n\n\
data: never ended";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev("message_start", "{\"a\":1}"),
            ev("", "first\nsecond"),
            ev("delta", "café ✓\n"),
            ev("", "[DONE]"),
        ]
    }

    #[test]
    fn whole_sample() {
        let mut p = SseParser::new();
        assert_eq!(p.push(SAMPLE).unwrap(), expected());
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        for a in 0..=SAMPLE.len() {
            let mut p = SseParser::new();
            let mut got = p.push(&SAMPLE[..a]).unwrap();
            got.extend(p.push(&SAMPLE[a..]).unwrap());
            assert_eq!(got, expected(), "split at {a}");
        }
    }

    #[test]
    fn every_pair_of_split_points_gives_the_same_events() {
        for a in 0..=SAMPLE.len() {
            for b in a..=SAMPLE.len() {
                let mut p = SseParser::new();
                let mut got = p.push(&SAMPLE[..a]).unwrap();
                got.extend(p.push(&SAMPLE[a..b]).unwrap());
                got.extend(p.push(&SAMPLE[b..]).unwrap());
                assert_eq!(got, expected(), "split at {a} and {b}");
            }
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let mut p = SseParser::new();
        let mut got = Vec::new();
        for b in SAMPLE {
            got.extend(p.push(std::slice::from_ref(b)).unwrap());
        }
        assert_eq!(got, expected());
    }

    #[test]
    fn empty_pushes_change_nothing() {
        let mut p = SseParser::new();
        let mut got = p.push(b"").unwrap();
        for chunk in SAMPLE.chunks(5) {
            got.extend(p.push(chunk).unwrap());
            got.extend(p.push(b"").unwrap());
        }
        assert_eq!(got, expected());
    }

    #[test]
    fn a_bom_only_at_the_start_is_dropped() {
        let mut p = SseParser::new();
        let got = p.push(b"data: \xEF\xBB\xBFx\n\n").unwrap();
        assert_eq!(got, vec![ev("", "\u{feff}x")]);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut p = SseParser::new();
        let chunk = vec![b'x'; 1024 * 1024];
        let mut result = Ok(Vec::new());
        for _ in 0..9 {
            result = p.push(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseTooLong));
        // Negative control: the same bytes in lines of a normal length are fine.
        let mut p = SseParser::new();
        for _ in 0..9 {
            let mut line = b"data: ".to_vec();
            line.extend_from_slice(&chunk);
            line.extend_from_slice(b"\n\n");
            assert_eq!(p.push(&line).unwrap().len(), 1);
        }
    }
}
