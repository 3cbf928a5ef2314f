//! Reads the manifest's YAML into a JSON value under hard limits, so hostile input is refused
//! quickly and with bounded memory:
//!
//! - the text is at most `max_manifest_bytes` long (checked before parsing);
//! - exactly one document (empty documents around it are tolerated, as kubectl does);
//! - nesting depth at most [`MAX_DEPTH`], checked on the event stream before any value is built
//!   (`nesting`), and again after alias expansion as each collection is entered;
//! - anchors and aliases are allowed but expanded under a budget of [`MAX_NODES`] nodes and
//!   `2 * max_manifest_bytes` bytes of text, so an alias bomb stops early;
//! - a UTF-8 byte-order mark before the text is skipped, as kubectl does;
//! - tags outside the core schema are refused by the first pass (`nesting`), core ones
//!   (`!!str`, `!!int`, ...) honoured; merge keys (`<<: *base`) are honoured as kubectl's
//!   YAML 1.1 parser does: keys of the mapping itself win, then earlier merged mappings;
//! - duplicate keys, non-string keys and non-finite numbers are refused.

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::{Rejection, nesting};

/// Deepest nesting of mappings and sequences accepted. The deepest field a stack Pod may set
/// is 11 levels down (e.g. `spec.volumes[].projected.sources[].secret.items[].mode`), so
/// anything deeper is refused by the schema anyway; the YAML scanner's cost grows with flow
/// nesting for every token, so the limit stays close to that.
pub(crate) const MAX_DEPTH: usize = 16;
/// Most nodes (keys, values, list items) accepted, counted on the text by the first pass and
/// again after alias expansion. A pod at every per-pod bound (512 env entries with
/// `valueFrom`, 64 ports, 32 volumes, 16 containers with probes) has about 8,000; each node
/// costs about 0.7 µs through every step, so this keeps any manifest under 20 ms of CPU.
pub(crate) const MAX_NODES: usize = 20_000;

/// Parses `manifest` into a JSON value, or says which limit or YAML rule it breaks. Also
/// returns what the first pass noted (plain scalars YAML 1.1 reads differently).
pub(super) fn read(manifest: &str, max_bytes: usize) -> Result<(Value, nesting::Scan), Rejection> {
    if manifest.len() > max_bytes {
        return Err(Rejection::new("manifest", format!("is larger than {max_bytes} bytes")));
    }
    let manifest = manifest.strip_prefix('\u{feff}').unwrap_or(manifest);
    let scan = nesting::check_depth(manifest, MAX_DEPTH, MAX_NODES)?;
    let budget = Budget::new(max_bytes.saturating_mul(2));
    let mut documents = serde_yaml::Deserializer::from_str(manifest);
    let first = match documents.next() {
        Some(document) => budget.read(document)?,
        None => Value::Null,
    };
    for document in documents {
        if !budget.read(document)?.is_null() {
            return Err(Rejection::new("manifest", "must contain exactly one YAML document"));
        }
    }
    Ok((first, scan))
}

/// [`read`] without the first pass's notes.
#[cfg(test)]
pub(super) fn parse(manifest: &str, max_bytes: usize) -> Result<Value, Rejection> {
    read(manifest, max_bytes).map(|(value, _)| value)
}

/// What is left to spend, and the first failure with the path to it.
struct Budget {
    nodes_left: Cell<usize>,
    text_bytes_left: Cell<usize>,
    failure: RefCell<Option<Failure>>,
}

/// A failure raised by our visitors; ancestors add their path segment while it propagates.
struct Failure {
    /// Innermost segment first.
    segments: Vec<Segment>,
    problem: String,
}

enum Segment {
    Key(String),
    Index(usize),
}

impl Budget {
    fn new(text_bytes: usize) -> Self {
        Self {
            nodes_left: Cell::new(MAX_NODES),
            text_bytes_left: Cell::new(text_bytes),
            failure: RefCell::new(None),
        }
    }

    fn read(&self, document: serde_yaml::Deserializer<'_>) -> Result<Value, Rejection> {
        NodeSeed { budget: self, depth: 0 }
            .deserialize(document)
            .map_err(|err| self.rejection(&err))
    }

    /// Records `problem` at the current node and returns the error that unwinds the parse.
    fn fail<E: de::Error>(&self, problem: impl Into<String>) -> E {
        let problem = problem.into();
        let error = E::custom(&problem);
        self.failure.borrow_mut().get_or_insert(Failure {
            segments: Vec::new(),
            problem,
        });
        error
    }

    /// Adds a path segment to the failure unwinding through an ancestor.
    fn through<E>(&self, segment: Segment, error: E) -> E {
        if let Some(failure) = self.failure.borrow_mut().as_mut() {
            failure.segments.push(segment);
        }
        error
    }

    fn spend_node<E: de::Error>(&self) -> Result<(), E> {
        match self.nodes_left.get().checked_sub(1) {
            Some(left) => {
                self.nodes_left.set(left);
                Ok(())
            }
            None => Err(self.fail(format!("has more than {MAX_NODES} nodes (after alias expansion)"))),
        }
    }

    fn spend_text<E: de::Error>(&self, text: &str) -> Result<String, E> {
        self.spend_node()?;
        match self.text_bytes_left.get().checked_sub(text.len()) {
            Some(left) => {
                self.text_bytes_left.set(left);
                Ok(text.to_owned())
            }
            None => Err(self.fail("expands to too much text (after alias expansion)")),
        }
    }

    fn rejection(&self, err: &serde_yaml::Error) -> Rejection {
        match self.failure.borrow_mut().take() {
            Some(failure) => Rejection::new(format_path(&failure.segments), failure.problem),
            None => Rejection::new("manifest", format!("is not valid YAML: {err}")),
        }
    }
}

fn format_path(innermost_first: &[Segment]) -> String {
    let mut path = String::new();
    for segment in innermost_first.iter().rev() {
        match segment {
            Segment::Key(key) if path.is_empty() => path.push_str(key),
            Segment::Key(key) => {
                path.push('.');
                path.push_str(key);
            }
            Segment::Index(index) => path.push_str(&format!("[{index}]")),
        }
    }
    if path.is_empty() { "manifest".into() } else { path }
}

/// Any YAML node at `depth`.
#[derive(Clone, Copy)]
struct NodeSeed<'b> {
    budget: &'b Budget,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl NodeSeed<'_> {
    fn child<E: de::Error>(self) -> Result<Self, E> {
        if self.depth >= MAX_DEPTH {
            return Err(self.budget.fail(format!("nests deeper than {MAX_DEPTH} levels")));
        }
        Ok(Self {
            budget: self.budget,
            depth: self.depth + 1,
        })
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.budget.spend_node()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.budget.spend_node()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.budget.spend_node()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Value, E> {
        Err(self.budget.fail("is a number out of range"))
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Value, E> {
        Err(self.budget.fail("is a number out of range"))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.budget.spend_node()?;
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| self.budget.fail("is not a finite number"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.spend_text(v).map(Value::String)
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Value, E> {
        Err(self.budget.fail("is binary data, which is not supported"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.budget.spend_node()?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_newtype_struct<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<Value, A::Error> {
        Err(self.budget.fail("uses a YAML tag, which is not supported"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.spend_node()?;
        let child = self.child()?;
        let mut items = Vec::new();
        loop {
            match seq.next_element_seed(child) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => return Ok(Value::Array(items)),
                Err(err) => return Err(self.budget.through(Segment::Index(items.len()), err)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.spend_node()?;
        let child = self.child()?;
        let mut object = Map::new();
        let mut merged: Option<Value> = None;
        while let Some(key) = map.next_key_seed(KeySeed { budget: self.budget })? {
            if object.contains_key(&key) || (key == MERGE_KEY && merged.is_some()) {
                return Err(self.budget.fail(format!("has a duplicate key {key:?}")));
            }
            match map.next_value_seed(child) {
                Ok(value) if key == MERGE_KEY => merged = Some(value),
                Ok(value) => {
                    object.insert(key, value);
                }
                Err(err) => return Err(self.budget.through(Segment::Key(key), err)),
            }
        }
        if let Some(merged) = merged {
            merge_into(&mut object, merged).map_err(|problem| {
                self.budget
                    .through(Segment::Key(MERGE_KEY.into()), self.budget.fail(problem))
            })?;
        }
        Ok(Value::Object(object))
    }
}

const MERGE_KEY: &str = "<<";

/// Adds the keys of a merge value (a mapping or a list of mappings) that `object` lacks; in a
/// list, earlier mappings win. Values move: nothing is copied beyond what was counted.
fn merge_into(object: &mut Map<String, Value>, merged: Value) -> Result<(), &'static str> {
    const SHAPE: &str = "must be a mapping or a list of mappings (a merge key)";
    let sources = match merged {
        Value::Object(source) => vec![source],
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Object(source) => Ok(source),
                _ => Err(SHAPE),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(SHAPE),
    };
    for source in sources {
        for (key, value) in source {
            object.entry(key).or_insert(value);
        }
    }
    Ok(())
}

/// A mapping key; only strings are accepted, like Kubernetes' JSON.
struct KeySeed<'b> {
    budget: &'b Budget,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        let budget = self.budget;
        deserializer.deserialize_any(self).inspect_err(|_| {
            let mut failure = budget.failure.borrow_mut();
            failure.get_or_insert_with(|| Failure {
                segments: Vec::new(),
                problem: "has a key that is not a string".into(),
            });
        })
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        self.budget.spend_text(v)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    const LIMIT: usize = 256 * 1024;

    fn rejected(yaml: &str) -> Rejection {
        parse(yaml, LIMIT).expect_err("should be rejected")
    }

    #[test]
    fn plain_yaml_becomes_json() {
        let value = parse("a: 1\nb: [x, 2.5, true, null]\nc: {d: '80'}\n", LIMIT).unwrap();
        assert_eq!(value, json!({"a": 1, "b": ["x", 2.5, true, null], "c": {"d": "80"}}));
    }

    #[test]
    fn empty_documents_around_the_one_are_tolerated() {
        assert_eq!(parse("---\na: 1\n---\n", LIMIT).unwrap(), json!({"a": 1}));
        assert_eq!(parse("", LIMIT).unwrap(), Value::Null);
    }

    #[test]
    fn second_document_is_rejected() {
        let r = rejected("a: 1\n---\nb: 2\n");
        assert_eq!(r.to_string(), "manifest must contain exactly one YAML document");
    }

    #[test]
    fn oversized_manifest_is_rejected_before_parsing() {
        let r = parse(&"a".repeat(101), 100).unwrap_err();
        assert_eq!(r.to_string(), "manifest is larger than 100 bytes");
    }

    #[test]
    fn duplicate_keys_are_rejected_with_their_map_path() {
        let r = rejected("metadata:\n  labels:\n    app: a\n    app: b\n");
        assert_eq!(
            (r.path.as_str(), r.problem.as_str()),
            ("metadata.labels", "has a duplicate key \"app\"")
        );
        assert_eq!(rejected("a: 1\na: 2\n").path, "manifest");
    }

    #[test]
    fn non_string_keys_tags_and_odd_numbers_are_rejected() {
        let cases = [
            ("spec:\n  80: x\n", "spec", "has a key that is not a string"),
            ("spec:\n  ? [a]\n  : x\n", "spec", "has a key that is not a string"),
            (
                "spec:\n  x: !custom 1\n",
                "manifest",
                "uses the YAML tag !custom (line 2), which is not supported: only !!str, !!int, !!float, !!bool, !!null, !!seq and !!map are honoured",
            ),
            ("spec:\n  - .nan\n", "spec[0]", "is not a finite number"),
            (
                "a: [1, 2, 340282366920938463463374607431768211455]\n",
                "a[2]",
                "is a number out of range",
            ),
        ];
        for (yaml, path, problem) in cases {
            let r = rejected(yaml);
            assert_eq!((r.path.as_str(), r.problem.as_str()), (path, problem), "{yaml}");
        }
    }

    #[test]
    fn syntax_errors_say_invalid_yaml() {
        let r = rejected("a: [1, 2\n");
        assert_eq!(r.path, "manifest");
        assert!(r.problem.starts_with("is not valid YAML"), "{r}");
        assert!(rejected("a: *missing\n").problem.starts_with("is not valid YAML"));
    }

    #[test]
    fn deep_nesting_is_rejected_before_building() {
        let ok = format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(&ok, LIMIT).is_ok());
        let deep = format!("a:\n  b: {}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(
            rejected(&deep).to_string(),
            format!("manifest nests deeper than {MAX_DEPTH} levels (line 2)")
        );
    }

    #[test]
    fn nesting_gained_through_aliases_is_rejected_with_its_path() {
        let half = MAX_DEPTH / 2 + 1;
        let yaml = format!(
            "a: &deep {}1{}\nb: {}*deep{}\n",
            "[".repeat(half),
            "]".repeat(half),
            "[".repeat(half),
            "]".repeat(half)
        );
        let r = rejected(&yaml);
        assert_eq!(r.problem, format!("nests deeper than {MAX_DEPTH} levels"));
        assert!(r.path.starts_with("b[0][0]"), "{r}");
    }

    #[test]
    fn byte_order_mark_is_skipped() {
        assert_eq!(
            parse("\u{feff}a: 1\nb:\n  - x\n", LIMIT).unwrap(),
            json!({"a": 1, "b": ["x"]})
        );
        assert_eq!(parse("\u{feff}{\"a\": 1}", LIMIT).unwrap(), json!({"a": 1}));
    }

    #[test]
    fn core_tags_are_honoured_others_refused() {
        let value = parse(
            "a: !!str 0755\nb: !!str 80\nc: !!float 1\nd: !!map {e: !!null ~}\n",
            LIMIT,
        )
        .unwrap();
        assert_eq!(value, json!({"a": "0755", "b": "80", "c": 1.0, "d": {"e": null}}));
        for yaml in ["a: !!binary aGk=\n", "a: !custom {b: 1}\n", "a: !!set {x}\n"] {
            assert!(rejected(yaml).problem.starts_with("uses the YAML tag"), "{yaml}");
        }
    }

    #[test]
    fn merge_keys_are_honoured_like_kubectl() {
        let yaml = "base: &b {cpu: 1, memory: 1Gi}\nother: &o {cpu: 2, x: 1}\n\
                    one: {<<: *b, memory: 2Gi}\nmany:\n  <<: [*b, *o]\n  y: 2\n";
        let value = parse(yaml, LIMIT).unwrap();
        assert_eq!(value["one"], json!({"cpu": 1, "memory": "2Gi"}));
        assert_eq!(value["many"], json!({"cpu": 1, "memory": "1Gi", "x": 1, "y": 2}));
        let r = rejected("a: {<<: 1}\n");
        assert_eq!(
            (r.path.as_str(), r.problem.as_str()),
            ("a.<<", "must be a mapping or a list of mappings (a merge key)")
        );
        assert!(
            rejected("a: &a {x: 1}\nb: {<<: *a, <<: *a}\n")
                .problem
                .contains("duplicate key")
        );
    }

    #[test]
    fn small_aliases_are_expanded() {
        let value = parse("base: &b {x: 1}\ncopy: *b\n", LIMIT).unwrap();
        assert_eq!(value["copy"], json!({"x": 1}));
    }

    #[test]
    fn hostile_inputs_are_refused() {
        for (name, yaml, problem) in hostile_inputs() {
            let r = parse(&yaml, LIMIT).expect_err(name);
            assert!(r.problem.contains(problem), "{name}: {r}");
        }
    }

    /// Inputs built to exhaust time or memory, with the problem each must be refused for.
    /// `validate::tests::bench` prints how long each takes.
    pub(crate) fn hostile_inputs() -> Vec<(&'static str, String, &'static str)> {
        let mut laughs = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            laughs.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let big_scalar = "x".repeat(100 * 1024);
        let wide = format!("s: &s {big_scalar}\nl: [{}]\n", vec!["*s"; 100].join(", "));
        let wide_at_depth = || {
            let mut s = "{a: ".repeat(MAX_DEPTH - 2) + "[";
            while s.len() < LIMIT - 64 {
                s.push_str("{b: c}, ");
            }
            s
        };
        let mut flat = String::from("l: [");
        while flat.len() < LIMIT - 8 {
            flat.push_str("1,");
        }
        flat.push_str("1]");
        vec![
            ("billion laughs", laughs, "nodes (after alias expansion)"),
            ("alias to a 100 KiB string x100", wide, "too much text"),
            (
                "120k nested sequences",
                format!("{}{}", "[".repeat(120_000), "]".repeat(120_000)),
                "nests deeper",
            ),
            (
                "50k nested flow mappings",
                format!("{}{}", "{a: ".repeat(50_000), "}".repeat(50_000)),
                "nests deeper",
            ),
            ("50k unclosed flow mappings", "{a: ".repeat(50_000), "nests deeper"),
            (
                "30k nested block sequences",
                format!("{}x", "- ".repeat(30_000)),
                "nests deeper",
            ),
            ("250 KB of flow maps under the depth limit", wide_at_depth(), "nodes"),
            ("256 KiB flat list", flat, "nodes"),
            (
                "unterminated quote",
                format!("a: \"{}", "x".repeat(200_000)),
                "not valid YAML",
            ),
            (
                "one duplicate key in 9k",
                (0..9_000).map(|i| format!("k{i}: v\n")).collect::<String>() + "k5: v\n",
                "duplicate key",
            ),
        ]
    }
}
