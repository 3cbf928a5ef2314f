//! The compatibility corpus: challenge manifests as authors really write them (by hand, with
//! YAML 1.1 modes, anchors and merge keys, as JSON, as `kubectl get -o yaml` output minus
//! status and managed fields), each accepted with the meaning kubectl gives it.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::{policy, stack_id, without_forced_fields};
use crate::model::Protocol::{self, Tcp, Udp};
use crate::model::TargetPort;
use crate::validate::{HardenedPod, validate};

/// Name, manifest and the target ports it exposes.
type Entry = (&'static str, &'static str, &'static [(u16, Protocol)]);

/// An entry of the file `corpus/<name>.<ext>`: the name is the file's, so they cannot drift apart.
macro_rules! entry {
    ($name:literal, $ext:literal, $ports:expr) => {
        ($name, include_str!(concat!("corpus/", $name, ".", $ext)), $ports)
    };
}

const CORPUS: &[Entry] = &[
    entry!("web-probes", "yaml", &[(8080, Tcp)]),
    entry!("scripts-configmap", "yaml", &[(1337, Tcp)]),
    entry!("sidecar-logs", "yaml", &[(80, Tcp), (9113, Tcp)]),
    entry!("udp-dns", "yaml", &[(53, Udp), (53, Tcp), (8053, Tcp)]),
    entry!("multi-port", "yaml", &[(22, Tcp), (80, Tcp), (443, Tcp), (8080, Tcp)]),
    entry!("init-flag", "yaml", &[(31337, Tcp)]),
    entry!("downward-env", "yaml", &[(5000, Tcp)]),
    entry!("kubectl-get", "yaml", &[(4000, Tcp)]),
    entry!("anchors-merge", "yaml", &[(7001, Tcp), (7002, Tcp)]),
    entry!("flow-json", "json", &[(3000, Tcp)]),
];

fn ports(list: &[(u16, Protocol)]) -> Vec<TargetPort> {
    list.iter()
        .map(|(container_port, protocol)| TargetPort {
            container_port: *container_port,
            protocol: *protocol,
        })
        .collect()
}

fn accept(name: &str, yaml: &str, list: &[(u16, Protocol)]) -> HardenedPod {
    let target = ports(list);
    let hardened = validate(yaml, &target, &stack_id(), &policy()).unwrap_or_else(|r| panic!("{name}: {r}"));
    let again = validate(&without_forced_fields(&hardened.pod), &target, &stack_id(), &policy());
    assert_eq!(
        again.as_ref(),
        Ok(&hardened),
        "{name}: output does not validate to itself"
    );
    hardened
}

fn json(pod: &Pod) -> Value {
    serde_json::to_value(pod).expect("pod encodes")
}

/// Each file, also behind a byte-order mark and with CRLF line ends, as editors save them.
#[test]
fn every_corpus_manifest_is_accepted() {
    for (name, yaml, list) in CORPUS {
        let plain = accept(name, yaml, list);
        let bom = accept(name, &format!("\u{feff}{yaml}"), list);
        let crlf = accept(name, &yaml.replace('\n', "\r\n"), list);
        assert_eq!((&bom, &crlf), (&plain, &plain), "{name}");
    }
}

fn corpus(name: &str) -> Value {
    let (_, yaml, list) = CORPUS.iter().find(|(n, ..)| *n == name).expect("in corpus");
    json(&accept(name, yaml, list).pod)
}

#[test]
fn octal_modes_mean_what_kubectl_makes_of_them() {
    let pod = corpus("scripts-configmap");
    let volumes = &pod["spec"]["volumes"];
    assert_eq!(volumes[0]["configMap"]["defaultMode"], 0o755);
    assert_eq!(volumes[0]["configMap"]["items"][0]["mode"], 0o555);
    assert_eq!(volumes[0]["configMap"]["items"][1].get("mode"), None);
    assert_eq!(volumes[1]["secret"]["defaultMode"], 0o400);
    let pod = corpus("init-flag");
    assert_eq!(pod["spec"]["volumes"][0]["secret"]["items"][0]["mode"], 0o440);
    // A command's text is a string whatever it looks like.
    assert!(
        pod["spec"]["initContainers"][0]["command"][2]
            .as_str()
            .unwrap()
            .contains("chmod 0444")
    );
    let pod = corpus("downward-env");
    assert_eq!(pod["spec"]["volumes"][0]["downwardAPI"]["defaultMode"], 0o644);
    assert_eq!(pod["spec"]["volumes"][1]["projected"]["defaultMode"], 0o440);
    // Decimal in `kubectl get` output.
    assert_eq!(
        corpus("kubectl-get")["spec"]["volumes"][0]["configMap"]["defaultMode"],
        420
    );
}

#[test]
fn anchors_merge_keys_and_yaml_1_1_booleans_are_expanded() {
    let pod = corpus("anchors-merge");
    let containers = &pod["spec"]["containers"];
    assert_eq!(containers[1]["name"], "beta");
    assert_eq!(containers[1]["image"], containers[0]["image"]);
    assert_eq!(containers[1]["env"], containers[0]["env"]);
    assert_eq!(containers[1]["ports"][0]["containerPort"], 7002);
    assert_eq!(
        (&containers[1]["tty"], &containers[1]["stdin"]),
        (&Value::Bool(true), &Value::Bool(true))
    );
    assert_eq!(containers[0]["env"][1]["value"], "7000");
}

#[test]
fn kubectl_get_output_keeps_its_meaning() {
    let pod = corpus("kubectl-get");
    assert_eq!(pod["metadata"]["labels"]["app"], "rev");
    assert!(
        pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap()
            .starts_with("{\"apiVersion\"")
    );
    assert_eq!(pod["metadata"].get("uid"), None);
    let spec = &pod["spec"];
    assert_eq!(spec["tolerations"].as_array().unwrap().len(), 2);
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["containers"][0]["terminationMessagePolicy"], "File");
    assert_eq!(spec.get("serviceAccountName"), None);
}

#[test]
fn probes_env_and_ports_survive() {
    let pod = corpus("web-probes");
    let web = &pod["spec"]["containers"][0];
    assert_eq!(web["startupProbe"]["httpGet"]["port"], "http");
    assert_eq!(web["livenessProbe"]["tcpSocket"]["port"], 8080);
    assert_eq!(web["lifecycle"]["preStop"]["sleep"]["seconds"], 5);
    let pod = corpus("downward-env");
    let env = &pod["spec"]["containers"][0]["env"];
    assert_eq!(env[1]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    assert_eq!(env[2]["valueFrom"]["resourceFieldRef"]["divisor"], "1Mi");
    let pod = corpus("udp-dns");
    assert_eq!(pod["spec"]["containers"][0]["ports"][0]["protocol"], "UDP");
    let pod = corpus("flow-json");
    assert_eq!(pod["spec"]["containers"][0]["resources"]["limits"]["cpu"], "250m");
    assert_eq!(pod["spec"]["containers"][0]["livenessProbe"]["grpc"]["port"], 3001);
}
