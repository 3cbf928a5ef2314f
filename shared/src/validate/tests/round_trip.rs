//! Accepted output parses back to the same Pod and validates again to itself.

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::{edited, init_container, run, without_forced_fields};

#[test]
fn output_yaml_parses_back_to_the_same_pod() {
    let hardened = run(&edited(&[("/spec/initContainers", json!([init_container()]))])).unwrap();
    let reparsed: Pod = serde_yaml::from_str(&hardened.yaml).unwrap();
    assert_eq!(reparsed, hardened.pod);
    assert!(
        hardened.yaml.contains("apiVersion: v1") && hardened.yaml.contains("kind: Pod"),
        "{}",
        hardened.yaml
    );
}

#[test]
fn hardened_output_validates_again_to_itself() {
    let volumes = json!([{"name": "e", "emptyDir": {"sizeLimit": "5Gi"}}, {"name": "bare"}]);
    let first = run(&edited(&[
        ("/spec/volumes", volumes),
        ("/spec/initContainers", json!([init_container()])),
    ]))
    .unwrap();
    let second = run(&without_forced_fields(&first.pod)).unwrap();
    assert_eq!(second, first);
}
