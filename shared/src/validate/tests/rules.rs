//! One row per rule, in `rules.yaml`: what is rejected (with the field path) and what is
//! accepted.

use serde::Deserialize;
use serde_json::Value;

use super::{Edits, accepted, init_container, refused};

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

#[test]
fn every_rejected_rule_names_its_field() {
    let table = table();
    let rows = table.refused.iter().map(|row| {
        let at = row
            .at
            .as_deref()
            .unwrap_or_else(|| panic!("refused row without `at`: {:?}", row.edits()));
        (row.edits(), at)
    });
    refused(rows.collect());
}

#[test]
fn harmless_fields_are_accepted() {
    let table = table();
    if let Some(row) = table.accepted.iter().find(|row| row.at.is_some()) {
        panic!("accepted row with `at`: {:?}", row.edits());
    }
    accepted(table.accepted.iter().map(Row::edits).collect());
}
