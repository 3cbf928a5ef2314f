//! Kubernetes' required node placement, read as the scheduler's NodeAffinity filter and the
//! kubelet's admission read it (component-helpers `nodeaffinity`, apimachinery `labels`):
//! `nodeSelector` labels must all be present; required terms are ORed, the requirements of a
//! term ANDed. A term with no requirement, or one that does not parse (an unknown operator,
//! `Gt`/`Lt` without exactly one integer, a field requirement without exactly one value),
//! matches no node. The only node field is `metadata.name`; any other field reads as "".

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec};

use crate::validate::NODE_NAME_FIELD;

/// The required terms of `spec`'s node affinity, if it has any.
pub(super) fn required_terms(spec: &PodSpec) -> Option<&[NodeSelectorTerm]> {
    let required = spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?;
    Some(&required.node_selector_terms)
}

/// Whether a node with these labels and this name satisfies `spec`'s `nodeSelector` and
/// required node affinity (`RequiredNodeAffinity.Match`).
pub(super) fn matches(spec: &PodSpec, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let selected = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    selected && required_terms(spec).is_none_or(|terms| terms.iter().any(|t| term_matches(t, labels, name)))
}

pub(super) fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    !(expressions.is_empty() && fields.is_empty())
        && expressions.iter().all(|r| label_matches(r, labels))
        && fields.iter().all(|r| field_matches(r, name))
}

/// `labels.Requirement.Matches`: `NotIn` and `DoesNotExist` hold on a node without the label;
/// `Gt`/`Lt` need the label's value to be an integer.
fn label_matches(requirement: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    let value = labels.get(&requirement.key);
    match requirement.operator.as_str() {
        "In" => !values.is_empty() && value.is_some_and(|v| values.contains(v)),
        "NotIn" => !values.is_empty() && value.is_none_or(|v| !values.contains(v)),
        "Exists" => values.is_empty() && value.is_some(),
        "DoesNotExist" => values.is_empty() && value.is_none(),
        operator @ ("Gt" | "Lt") => {
            let ([bound], Some(value)) = (values, value) else {
                return false;
            };
            match (value.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(value), Ok(bound)) if operator == "Gt" => value > bound,
                (Ok(value), Ok(bound)) => value < bound,
                _ => false,
            }
        }
        _ => false,
    }
}

/// `fields.OneTermEqualSelector` / `OneTermNotEqualSelector` over `{metadata.name: name}`.
fn field_matches(requirement: &NodeSelectorRequirement, name: &str) -> bool {
    let [wanted] = requirement.values.as_deref().unwrap_or_default() else {
        return false;
    };
    let value = if requirement.key == NODE_NAME_FIELD { name } else { "" };
    match requirement.operator.as_str() {
        "In" => value == wanted,
        "NotIn" => value != wanted,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector};

    use super::*;

    fn req(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    fn term(expressions: Vec<NodeSelectorRequirement>, fields: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: (!expressions.is_empty()).then_some(expressions),
            match_fields: (!fields.is_empty()).then_some(fields),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn spec(selector: &[(&str, &str)], terms: Option<Vec<NodeSelectorTerm>>) -> PodSpec {
        PodSpec {
            node_selector: Some(labels(selector)),
            affinity: terms.map(|node_selector_terms| Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector { node_selector_terms }),
                    ..NodeAffinity::default()
                }),
                ..Affinity::default()
            }),
            ..PodSpec::default()
        }
    }

    #[test]
    fn label_operators_follow_kubernetes() {
        let node = labels(&[("zone", "a"), ("size", "8"), ("odd", "x8")]);
        let rows = [
            (req("zone", "In", &["a", "b"]), true),
            (req("zone", "In", &["b"]), false),
            (req("missing", "In", &["a"]), false),
            (req("zone", "NotIn", &["b"]), true),
            (req("zone", "NotIn", &["a"]), false),
            // A node without the label satisfies NotIn and DoesNotExist.
            (req("missing", "NotIn", &["a"]), true),
            (req("zone", "Exists", &[]), true),
            (req("missing", "Exists", &[]), false),
            (req("missing", "DoesNotExist", &[]), true),
            (req("zone", "DoesNotExist", &[]), false),
            (req("size", "Gt", &["7"]), true),
            (req("size", "Gt", &["8"]), false),
            (req("size", "Lt", &["9"]), true),
            (req("size", "Lt", &["8"]), false),
            (req("size", "Gt", &["-1"]), true),
            // Gt/Lt need integers on both sides, and exactly one bound.
            (req("odd", "Gt", &["1"]), false),
            (req("missing", "Lt", &["100"]), false),
            (req("size", "Gt", &["seven"]), false),
            (req("size", "Gt", &["1", "2"]), false),
            // What does not parse matches nothing.
            (req("zone", "In", &[]), false),
            (req("zone", "Exists", &["a"]), false),
            (req("zone", "Near", &["a"]), false),
        ];
        for (requirement, expected) in rows {
            assert_eq!(label_matches(&requirement, &node), expected, "{requirement:?}");
        }
    }

    #[test]
    fn field_requirements_select_by_name_only() {
        let name = |operator: &str, values: &[&str]| req("metadata.name", operator, values);
        let rows = [
            (name("In", &["n1"]), true),
            (name("In", &["n2"]), false),
            (name("NotIn", &["n2"]), true),
            (name("NotIn", &["n1"]), false),
            // Exactly one value, In or NotIn only; other fields read as "".
            (name("In", &["n1", "n2"]), false),
            (name("Exists", &[]), false),
            (req("metadata.uid", "In", &["n1"]), false),
            (req("metadata.uid", "NotIn", &["n1"]), true),
        ];
        for (requirement, expected) in rows {
            assert_eq!(field_matches(&requirement, "n1"), expected, "{requirement:?}");
        }
    }

    #[test]
    fn terms_are_ored_and_their_requirements_anded() {
        let node = labels(&[("role", "stack"), ("zone", "a")]);
        let zone = |z: &str| req("zone", "In", &[z]);
        let name = |n: &str| req("metadata.name", "In", &[n]);
        let rows = [
            (vec![term(vec![zone("a")], vec![])], true),
            (vec![term(vec![zone("b")], vec![]), term(vec![zone("a")], vec![])], true),
            (vec![term(vec![zone("a"), req("role", "In", &["gpu"])], vec![])], false),
            (vec![term(vec![zone("a")], vec![name("n1")])], true),
            (vec![term(vec![zone("a")], vec![name("n2")])], false),
            (vec![term(vec![], vec![name("n1")])], true),
            // An empty term matches nothing, not everything; so does an empty list.
            (vec![term(vec![], vec![])], false),
            (vec![term(vec![], vec![]), term(vec![zone("a")], vec![])], true),
            (vec![], false),
        ];
        for (terms, expected) in rows {
            assert_eq!(
                matches(&spec(&[], Some(terms.clone())), &node, "n1"),
                expected,
                "{terms:?}"
            );
        }
        // The node selector must hold as well; without affinity it alone decides.
        assert!(matches(&spec(&[("role", "stack")], None), &node, "n1"));
        assert!(!matches(&spec(&[("role", "gpu")], None), &node, "n1"));
        assert!(!matches(
            &spec(&[("role", "gpu")], Some(vec![term(vec![zone("a")], vec![])])),
            &node,
            "n1"
        ));
    }
}
