//! A first pass over the YAML event stream that refuses deep nesting before anything is built.
//!
//! yaml_serde reads a whole document into events before deserializing, and libyaml's scanner
//! does work proportional to the flow nesting depth for every token: a 250 KB document of
//! nested flow mappings took 15 s (release build) to load. This pass pulls events one at a
//! time from the same libyaml port and stops at the first collection deeper than the limit,
//! which it reaches after a few hundred bytes of such input.

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use libyaml_rs as sys;

use super::Rejection;

/// Refuses `manifest` if any mapping or sequence is nested deeper than `max_depth`. Syntax
/// errors end the pass without a verdict: the full parse reports them with its own message.
pub fn check_depth(manifest: &str, max_depth: usize) -> Result<(), Rejection> {
    let mut events = EventStream::new(manifest);
    let mut depth = 0usize;
    while let Some(event) = events.next_event() {
        match event.kind {
            Kind::CollectionStart => {
                depth += 1;
                if depth > max_depth {
                    return Err(Rejection::new(
                        "manifest",
                        format!("nests deeper than {max_depth} levels (line {})", event.line + 1),
                    ));
                }
            }
            Kind::CollectionEnd => depth = depth.saturating_sub(1),
            Kind::Other => {}
        }
    }
    Ok(())
}

enum Kind {
    CollectionStart,
    CollectionEnd,
    Other,
}

struct Event {
    kind: Kind,
    /// Zero-based.
    line: u64,
}

/// libyaml's pull parser over a borrowed string.
struct EventStream<'input> {
    /// Boxed because libyaml keeps a pointer to the parser inside itself.
    parser: Box<MaybeUninit<sys::yaml_parser_t>>,
    initialized: bool,
    finished: bool,
    _input: PhantomData<&'input str>,
}

impl<'input> EventStream<'input> {
    fn new(input: &'input str) -> Self {
        let mut parser = Box::new(MaybeUninit::<sys::yaml_parser_t>::uninit());
        let raw = parser.as_mut_ptr();
        // SAFETY: `raw` points to writable memory for a parser, which `yaml_parser_initialize`
        // fills in. The input pointer stays valid for `'input`, which outlives `self`
        // (`PhantomData`), and the parser is deleted in `drop` before the borrow ends.
        let initialized = unsafe { sys::yaml_parser_initialize(raw) }.ok;
        if initialized {
            unsafe {
                sys::yaml_parser_set_encoding(raw, sys::YAML_UTF8_ENCODING);
                sys::yaml_parser_set_input_string(raw, input.as_ptr(), input.len() as u64);
            }
        }
        Self {
            parser,
            initialized,
            finished: !initialized,
            _input: PhantomData,
        }
    }

    /// The next event; `None` at the end of the stream or at a syntax error.
    fn next_event(&mut self) -> Option<Event> {
        if self.finished {
            return None;
        }
        let mut event = MaybeUninit::<sys::yaml_event_t>::uninit();
        let raw_event = event.as_mut_ptr();
        // SAFETY: the parser was initialized (else `finished` is set) and has not failed or
        // ended yet. On success `yaml_parser_parse` initializes the event, which is read and
        // then released exactly once; on failure the event is left untouched.
        unsafe {
            if sys::yaml_parser_parse(self.parser.as_mut_ptr(), raw_event).fail {
                self.finished = true;
                return None;
            }
            let type_ = (*raw_event).type_;
            let line = (*raw_event).start_mark.line;
            sys::yaml_event_delete(raw_event);
            let kind = if type_ == sys::YAML_SEQUENCE_START_EVENT || type_ == sys::YAML_MAPPING_START_EVENT {
                Kind::CollectionStart
            } else if type_ == sys::YAML_SEQUENCE_END_EVENT || type_ == sys::YAML_MAPPING_END_EVENT {
                Kind::CollectionEnd
            } else {
                self.finished = type_ == sys::YAML_STREAM_END_EVENT;
                Kind::Other
            };
            Some(Event { kind, line })
        }
    }
}

impl Drop for EventStream<'_> {
    fn drop(&mut self) {
        if self.initialized {
            // SAFETY: initialized in `new`, deleted only here.
            unsafe { sys::yaml_parser_delete(self.parser.as_mut_ptr()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_is_counted_across_flow_and_block_styles() {
        assert_eq!(check_depth("a:\n  b: [1, {c: [2]}]\n", 5), Ok(()));
        let r = check_depth("a:\n  b: [1, {c: [2]}]\n", 4).unwrap_err();
        assert_eq!(r.to_string(), "manifest nests deeper than 4 levels (line 2)");
        assert!(check_depth("- - - - x\n", 3).is_err());
        assert_eq!(check_depth("- - - x\n", 3), Ok(()));
    }

    #[test]
    fn syntax_errors_and_multiple_documents_pass_through() {
        assert_eq!(check_depth("a: [1, 2\n", 2), Ok(()));
        assert_eq!(check_depth("a: 1\n---\nb: 2\n", 1), Ok(()));
        assert_eq!(check_depth("", 1), Ok(()));
    }

    #[test]
    fn deep_flow_input_stops_early() {
        let deep = "{a: ".repeat(50_000);
        let r = check_depth(&deep, 32).unwrap_err();
        assert_eq!(r.to_string(), "manifest nests deeper than 32 levels (line 1)");
    }
}
