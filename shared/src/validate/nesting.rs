//! A first pass over the YAML event stream, before anything is built: it refuses deep nesting
//! and unsupported tags, and notes the plain scalars YAML 1.1 reads differently.
//!
//! yaml_serde reads a whole document into events before deserializing, and libyaml's scanner
//! does work proportional to the flow nesting depth for every token: a 250 KB document of
//! nested flow mappings took 15 s (release build) to load. This pass pulls events one at a
//! time from the same libyaml port and stops at the first collection deeper than the limit,
//! which it reaches after a few hundred bytes of such input.
//!
//! Tags: the core-schema tags are honoured by the parse (`!!str 0755` is a string, `!!map` a
//! mapping); any other tag (`!!binary`, `!!set`, `!!timestamp`, `!local`, ...) would change the
//! value in a way the Pod cannot carry, so it is refused here with its line, never dropped.

use std::collections::HashSet;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use libyaml_rs as sys;

use super::{Rejection, yaml11};

const CORE_PREFIX: &str = "tag:yaml.org,2002:";
const HONOURED_TAGS: &str = "only !!str, !!int, !!float, !!bool, !!null, !!seq and !!map are honoured";

/// What the first pass learned about a manifest that is not refused.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// Untagged plain scalars that YAML 1.1 (kubectl's parser) reads as a number or boolean
    /// while YAML 1.2 reads them as a string, e.g. `0755`.
    pub plain_yaml11: HashSet<String>,
}

/// Refuses `manifest` if any mapping or sequence is nested deeper than `max_depth` or a node
/// carries a tag that is not honoured. Syntax errors end the pass without a verdict: the full
/// parse reports them with its own message.
pub(super) fn check_depth(manifest: &str, max_depth: usize, max_nodes: usize) -> Result<Scan, Rejection> {
    let mut events = EventStream::new(manifest);
    let mut depth = 0usize;
    let mut nodes = 0usize;
    let mut scan = Scan::default();
    while let Some(event) = events.next_event() {
        // Collections and scalars, before any alias is expanded: a long flat list stops here.
        if matches!(
            event.kind,
            Kind::CollectionStart { .. } | Kind::PlainScalar(_) | Kind::Scalar
        ) {
            nodes += 1;
            if nodes > max_nodes {
                return Err(Rejection::new(
                    "manifest",
                    format!("has more than {max_nodes} nodes (line {})", event.line + 1),
                ));
            }
        }
        if let Some(tag) = &event.tag
            && !honoured(tag, &event.kind)
        {
            let short = tag
                .strip_prefix(CORE_PREFIX)
                .map_or_else(|| tag.clone(), |t| format!("!!{t}"));
            return Err(Rejection::new(
                "manifest",
                format!(
                    "uses the YAML tag {short} (line {}), which is not supported: {HONOURED_TAGS}",
                    event.line + 1
                ),
            ));
        }
        match event.kind {
            Kind::CollectionStart { .. } => {
                depth += 1;
                if depth > max_depth {
                    return Err(Rejection::new(
                        "manifest",
                        format!("nests deeper than {max_depth} levels (line {})", event.line + 1),
                    ));
                }
            }
            Kind::CollectionEnd => depth = depth.saturating_sub(1),
            Kind::PlainScalar(text) => {
                scan.plain_yaml11.insert(text);
            }
            Kind::Scalar | Kind::Other => {}
        }
    }
    Ok(scan)
}

fn honoured(tag: &str, kind: &Kind) -> bool {
    matches!(
        (tag.strip_prefix(CORE_PREFIX), kind),
        (Some("map"), Kind::CollectionStart { mapping: true })
            | (Some("seq"), Kind::CollectionStart { mapping: false })
            | (
                Some("str" | "int" | "float" | "bool" | "null"),
                Kind::Scalar | Kind::PlainScalar(_)
            )
    )
}

enum Kind {
    CollectionStart {
        mapping: bool,
    },
    CollectionEnd,
    /// An untagged plain scalar YAML 1.1 reads differently, with its text.
    PlainScalar(String),
    /// Any other scalar.
    Scalar,
    /// An alias or a document/stream event.
    Other,
}

struct Event {
    kind: Kind,
    /// The node's tag, if it has one.
    tag: Option<String>,
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
        // ended yet. On success `yaml_parser_parse` initializes the event, which is read (the
        // union field matching its type, whose strings live until the event is deleted) and
        // then released exactly once; on failure the event is left untouched.
        unsafe {
            if sys::yaml_parser_parse(self.parser.as_mut_ptr(), raw_event).fail {
                self.finished = true;
                return None;
            }
            let event = &*raw_event;
            let type_ = event.type_;
            let line = event.start_mark.line;
            let (kind, tag) = if type_ == sys::YAML_SEQUENCE_START_EVENT {
                (
                    Kind::CollectionStart { mapping: false },
                    c_text(event.data.sequence_start.tag),
                )
            } else if type_ == sys::YAML_MAPPING_START_EVENT {
                (
                    Kind::CollectionStart { mapping: true },
                    c_text(event.data.mapping_start.tag),
                )
            } else if type_ == sys::YAML_SEQUENCE_END_EVENT || type_ == sys::YAML_MAPPING_END_EVENT {
                (Kind::CollectionEnd, None)
            } else if type_ == sys::YAML_SCALAR_EVENT {
                let scalar = event.data.scalar;
                let tag = c_text(scalar.tag);
                let mut kind = Kind::Scalar;
                if tag.is_none() && scalar.style == sys::YAML_PLAIN_SCALAR_STYLE && !scalar.value.is_null() {
                    let bytes = std::slice::from_raw_parts(scalar.value, scalar.length as usize);
                    if let Ok(text) = std::str::from_utf8(bytes)
                        && yaml11::differs_from_yaml12(text)
                    {
                        kind = Kind::PlainScalar(text.to_owned());
                    }
                }
                (kind, tag)
            } else {
                self.finished = type_ == sys::YAML_STREAM_END_EVENT;
                (Kind::Other, None)
            };
            sys::yaml_event_delete(raw_event);
            Some(Event { kind, tag, line })
        }
    }
}

/// A libyaml NUL-terminated string (tags), if set.
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string that outlives the call.
unsafe fn c_text(ptr: *const u8) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: by the caller's contract.
    let text = unsafe { std::ffi::CStr::from_ptr(ptr.cast()) };
    Some(text.to_string_lossy().into_owned())
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
        assert!(check_depth("a:\n  b: [1, {c: [2]}]\n", 5, 1000).is_ok());
        let r = check_depth("a:\n  b: [1, {c: [2]}]\n", 4, 1000).unwrap_err();
        assert_eq!(r.to_string(), "manifest nests deeper than 4 levels (line 2)");
        assert!(check_depth("- - - - x\n", 3, 1000).is_err());
        assert!(check_depth("- - - x\n", 3, 1000).is_ok());
    }

    #[test]
    fn syntax_errors_and_multiple_documents_pass_through() {
        assert!(check_depth("a: [1, 2\n", 2, 1000).is_ok());
        assert!(check_depth("a: 1\n---\nb: 2\n", 1, 1000).is_ok());
        assert!(check_depth("", 1, 1000).is_ok());
    }

    #[test]
    fn tags_outside_the_core_schema_are_refused_with_their_line() {
        for yaml in [
            "a: !!str 0755\nb: !!int 1\nc: !!float 1.5\nd: !!bool true\ne: !!null ~\n",
            "a: !!map {b: 1}\nc: !!seq [1]\n",
            "? !!str k\n: v\n",
        ] {
            assert!(check_depth(yaml, 8, 1000).is_ok(), "{yaml}");
        }
        let cases = [
            ("a: 1\nb: !!binary aGk=\n", "!!binary (line 2)"),
            ("a: !!set {x, y}\n", "!!set (line 1)"),
            ("a: !!timestamp 2001-12-14\n", "!!timestamp (line 1)"),
            ("a: !!omap [{x: 1}]\n", "!!omap (line 1)"),
            ("a: !custom 1\n", "!custom (line 1)"),
            ("a: ! 1\n", "! (line 1)"),
            ("a: !<tag:example.com,2000:x> 1\n", "tag:example.com,2000:x (line 1)"),
            ("a: !!map [1]\n", "!!map (line 1)"),
            ("a: !!str {b: 1}\n", "!!str (line 1)"),
            (
                "%TAG !e! tag:example.com,2000:\n---\na: !e!x 1\n",
                "tag:example.com,2000:x (line 3)",
            ),
        ];
        for (yaml, tag) in cases {
            let r = check_depth(yaml, 8, 1000).unwrap_err();
            assert!(
                r.problem.starts_with(&format!("uses the YAML tag {tag}")),
                "{yaml}: {r}"
            );
        }
    }

    #[test]
    fn plain_scalars_yaml_1_1_reads_differently_are_noted() {
        let scan = check_depth(
            "a: 0755\nb: '0644'\nc: 1_000\nd: yes\ne: \"on\"\nf: 80\ng: 0x1F\nh: !!str 0600\n",
            4,
            1000,
        )
        .unwrap();
        let mut noted: Vec<&str> = scan.plain_yaml11.iter().map(String::as_str).collect();
        noted.sort();
        assert_eq!(noted, ["0755", "1_000", "yes"]);
    }

    #[test]
    fn node_count_is_checked_before_anything_is_built() {
        assert!(check_depth("[1, 2, 3]", 4, 4).is_ok());
        let r = check_depth("a: [1, 2, 3]\n", 4, 4).unwrap_err();
        assert_eq!(r.to_string(), "manifest has more than 4 nodes (line 1)");
        assert!(
            check_depth("a: &x [1, 2]\nb: *x\n", 4, 6).is_ok(),
            "aliases count once here"
        );
    }

    #[test]
    fn deep_flow_input_stops_early() {
        let deep = "{a: ".repeat(50_000);
        let r = check_depth(&deep, 32, 1000).unwrap_err();
        assert_eq!(r.to_string(), "manifest nests deeper than 32 levels (line 1)");
    }
}
