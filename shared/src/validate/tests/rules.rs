//! One row per rule, in `rules.yaml`: what is rejected (with the field path) and what is
//! accepted.

use serde::Deserialize;
use serde_json::Value;

use super::{Edits, edited, init_container, run};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    refused: Vec<Row>,
    accepted: Vec<Row>,
}

/// Edits of `base()`: JSON pointers set in order, then init containers, each
/// `init_container()` with some keys changed; a refused row names the field `at`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    #[serde(default)]
    set: serde_yaml::Mapping,
    #[serde(default)]
    init: Vec<serde_json::Map<String, Value>>,
    at: Option<String>,
}

impl Row {
    fn edits(&self) -> Edits<'_> {
        let mut edits: Edits = self
            .set
            .iter()
            .map(|(pointer, value)| {
                let pointer = pointer.as_str().expect("a JSON pointer");
                (pointer, serde_json::to_value(value).expect("a JSON value"))
            })
            .collect();
        if !self.init.is_empty() {
            let containers = self.init.iter().map(|changes| {
                let mut container = init_container();
                for (key, value) in changes {
                    container[key] = value.clone();
                }
                container
            });
            edits.push(("/spec/initContainers", Value::Array(containers.collect())));
        }
        edits
    }
}

fn table() -> Table {
    serde_yaml::from_str(include_str!("rules.yaml")).expect("rules.yaml reads")
}

/// Each refused row's edits of `base()` are rejected, naming the row's field path.
#[test]
fn every_rejected_rule_names_its_field() {
    for row in table().refused {
        let edits = row.edits();
        let Some(path) = row.at.as_deref() else {
            panic!("refused row without `at`: {edits:?}");
        };
        match run(&edited(&edits)) {
            Ok(_) => panic!("{edits:?} was accepted, expected a rejection at {path}"),
            Err(rejection) => {
                assert_eq!(rejection.path, path, "{edits:?}: {rejection}");
                assert!(!rejection.problem.is_empty(), "{edits:?}");
            }
        }
    }
}

/// Each accepted row's edits of `base()` pass.
#[test]
fn harmless_fields_are_accepted() {
    for row in table().accepted {
        let edits = row.edits();
        assert!(row.at.is_none(), "accepted row with `at`: {edits:?}");
        if let Err(rejection) = run(&edited(&edits)) {
            panic!("{edits:?} was rejected: {rejection}");
        }
    }
}
