//! What a stack may reach and what may reach it, as one NetworkPolicy over every stack pod,
//! and the check that no other policy widens it (policies add up: one that allows anything to
//! the stacks' pods reopens what this one closes).
//!
//! By default a stack reaches the public internet and the cluster's DNS, nothing private: not
//! the node's metadata service (its IAM role's credentials), not the VPC (the platform's
//! database, node daemons, the cluster endpoint), not another stack. It is reached from
//! public addresses only (participants, through its node or host port), never from another
//! stack's pod, which has a private address. Pure: the policy and the check are functions of
//! their inputs; `namespace.rs` applies them.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::config::Isolation;
use crate::model::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

pub(crate) const ISOLATION_POLICY_NAME: &str = "stack-provisioner-isolation";
/// The policy earlier versions applied (egress only, metadata denied): it allows private
/// ranges, so it must go where the isolation policy is applied.
pub(crate) const LEGACY_POLICY_NAME: &str = "stack-provisioner-egress-guard";

/// Private and link-local IPv4: RFC 1918 (the VPC, pods on EKS's VPC CNI, the service range),
/// carrier-grade NAT (100.64/10, also EKS's custom pod networking), link-local (169.254/16:
/// the instance metadata service, the VPC's DNS and time servers).
const PRIVATE_V4: &[&str] = &[
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
];
/// Unique local addresses (fc00::/7, which holds EC2's fd00:ec2::/32: metadata, DNS, time)
/// and link-local.
const PRIVATE_V6: &[&str] = &["fc00::/7", "fe80::/10"];

/// The one policy over every stack pod.
pub(crate) fn isolation_policy(isolation: &Isolation) -> NetworkPolicy {
    let mut egress = vec![dns_rule()];
    if isolation.internet_egress {
        egress.push(NetworkPolicyEgressRule {
            to: Some(public_except(&isolation.deny_egress_cidrs)),
            ports: None,
        });
    }
    let mut sources = public_except(&[]);
    sources.extend(
        isolation
            .allow_ingress_cidrs
            .iter()
            .map(|cidr| ip_block(cidr, Vec::new())),
    );
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(ISOLATION_POLICY_NAME.to_owned()),
            labels: Some(managed_by()),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(managed_by()),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(sources),
                ports: None,
            }]),
            egress: Some(egress),
        }),
    }
}

/// Why the isolation does not hold as applied, when another policy of the namespace allows
/// traffic to or from the stacks' pods (ours aside; a policy that only denies is harmless).
pub(crate) fn widening_policies(policies: &[NetworkPolicy]) -> Vec<String> {
    policies
        .iter()
        .filter(|p| p.metadata.name.as_deref() != Some(ISOLATION_POLICY_NAME))
        .filter_map(|policy| {
            let spec = policy.spec.as_ref()?;
            if !selects_stacks(spec.pod_selector.as_ref()) {
                return None;
            }
            let types = effective_types(spec);
            let allows_ingress = types.contains(&"Ingress") && spec.ingress.as_ref().is_some_and(|r| !r.is_empty());
            let allows_egress = types.contains(&"Egress") && spec.egress.as_ref().is_some_and(|r| !r.is_empty());
            let what = match (allows_ingress, allows_egress) {
                (true, true) => "ingress and egress",
                (true, false) => "ingress",
                (false, true) => "egress",
                (false, false) => return None,
            };
            Some(format!(
                "NetworkPolicy {} allows {what} to the stacks' pods beside {ISOLATION_POLICY_NAME}",
                policy.metadata.name.as_deref().unwrap_or("(unnamed)")
            ))
        })
        .collect()
}

/// Whether a selector may match a stack pod, whose labels we do not all know: only a
/// `matchLabels` naming another value of the managed-by label, or any label the stack pods
/// never carry in a way we can tell, is taken as not selecting them. Conservative: when in
/// doubt, it selects.
fn selects_stacks(selector: Option<&LabelSelector>) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let excluded_by_labels = selector
        .match_labels
        .as_ref()
        .is_some_and(|labels| labels.get(MANAGED_BY_LABEL).is_some_and(|v| v != MANAGED_BY_VALUE));
    let excluded_by_expressions = selector.match_expressions.iter().flatten().any(|e| {
        e.key == MANAGED_BY_LABEL
            && match e.operator.as_str() {
                "In" => !e.values.iter().flatten().any(|v| v == MANAGED_BY_VALUE),
                "NotIn" => e.values.iter().flatten().any(|v| v == MANAGED_BY_VALUE),
                "DoesNotExist" => true,
                _ => false,
            }
    });
    !(excluded_by_labels || excluded_by_expressions)
}

/// `policyTypes` as the apiserver defaults it: Ingress always, Egress when egress rules exist.
fn effective_types(spec: &NetworkPolicySpec) -> Vec<&str> {
    match &spec.policy_types {
        Some(types) => types.iter().map(String::as_str).collect(),
        None if spec.egress.is_some() => vec!["Ingress", "Egress"],
        None => vec!["Ingress"],
    }
}

/// The cluster's DNS (CoreDNS, labelled `k8s-app: kube-dns` in `kube-system` on EKS as
/// upstream), port 53 over UDP and TCP.
fn dns_rule() -> NetworkPolicyEgressRule {
    let port = |protocol: &str| NetworkPolicyPort {
        port: Some(IntOrString::Int(53)),
        protocol: Some(protocol.to_owned()),
        end_port: None,
    };
    NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_owned(),
                    "kube-system".to_owned(),
                )])),
                ..LabelSelector::default()
            }),
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("k8s-app".to_owned(), "kube-dns".to_owned())])),
                ..LabelSelector::default()
            }),
            ip_block: None,
        }]),
        ports: Some(vec![port("UDP"), port("TCP")]),
    }
}

/// Every public address of both families, less `deny`.
fn public_except(deny: &[String]) -> Vec<NetworkPolicyPeer> {
    let (deny_v6, deny_v4): (Vec<&String>, Vec<&String>) = deny.iter().partition(|c| c.contains(':'));
    let except = |private: &[&str], deny: Vec<&String>| -> Vec<String> {
        private
            .iter()
            .map(|c| (*c).to_owned())
            .chain(deny.into_iter().cloned())
            .collect()
    };
    vec![
        ip_block("0.0.0.0/0", except(PRIVATE_V4, deny_v4)),
        ip_block("::/0", except(PRIVATE_V6, deny_v6)),
    ]
}

fn ip_block(cidr: &str, except: Vec<String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.to_owned(),
            except: (!except.is_empty()).then_some(except),
        }),
        ..NetworkPolicyPeer::default()
    }
}

fn managed_by() -> BTreeMap<String, String> {
    BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned())])
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn blocks(peers: &[NetworkPolicyPeer]) -> Vec<(&str, Vec<&str>)> {
        peers
            .iter()
            .filter_map(|p| p.ip_block.as_ref())
            .map(|b| {
                let except = b.except.iter().flatten().map(String::as_str).collect();
                (b.cidr.as_str(), except)
            })
            .collect()
    }

    #[test]
    fn by_default_stacks_reach_the_internet_and_dns_and_nothing_private() {
        let spec = isolation_policy(&Isolation::default()).spec.unwrap();
        assert_eq!(spec.policy_types.as_deref().unwrap(), ["Ingress", "Egress"]);
        let egress = spec.egress.unwrap();
        assert_eq!(egress.len(), 2);
        let dns = &egress[0];
        let ports: Vec<_> = dns
            .ports
            .iter()
            .flatten()
            .map(|p| p.protocol.as_deref().unwrap())
            .collect();
        assert_eq!(ports, ["UDP", "TCP"]);
        assert!(
            dns.to.as_ref().unwrap()[0].ip_block.is_none(),
            "DNS goes to the cluster's DNS pods only"
        );
        let public = blocks(egress[1].to.as_ref().unwrap());
        assert_eq!(public[0].0, "0.0.0.0/0");
        for private in [
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "100.64.0.0/10",
            "169.254.0.0/16",
        ] {
            assert!(public[0].1.contains(&private), "{private} must be denied");
        }
        assert_eq!(public[1], ("::/0", vec!["fc00::/7", "fe80::/10"]));
    }

    #[test]
    fn other_stacks_cannot_connect_and_participants_can() {
        let spec = isolation_policy(&Isolation::default()).spec.unwrap();
        let ingress = spec.ingress.unwrap();
        assert_eq!(ingress.len(), 1);
        assert!(ingress[0].ports.is_none(), "every port of the stack");
        let sources = blocks(ingress[0].from.as_ref().unwrap());
        assert_eq!(sources[0].0, "0.0.0.0/0");
        assert!(sources[0].1.contains(&"10.0.0.0/8"), "pods and the VPC are private");
        assert_eq!(sources.len(), 2);
    }

    #[test]
    fn the_operator_closes_the_internet_denies_more_and_opens_a_private_network() {
        let isolation = Isolation {
            internet_egress: false,
            deny_egress_cidrs: vec!["198.51.100.0/24".into(), "2001:db8::/32".into()],
            allow_ingress_cidrs: vec!["10.80.0.1/32".into()],
        };
        let spec = isolation_policy(&isolation).spec.unwrap();
        assert_eq!(spec.egress.as_ref().unwrap().len(), 1, "DNS only");
        let sources = blocks(spec.ingress.as_ref().unwrap()[0].from.as_ref().unwrap());
        assert_eq!(sources[2], ("10.80.0.1/32", vec![]));

        let open = Isolation {
            internet_egress: true,
            ..isolation
        };
        let egress = isolation_policy(&open).spec.unwrap().egress.unwrap();
        let public = blocks(egress[1].to.as_ref().unwrap());
        assert_eq!(public[0].1.last(), Some(&"198.51.100.0/24"));
        assert_eq!(public[1].1.last(), Some(&"2001:db8::/32"));
    }

    fn policy(name: &str, selector: Option<LabelSelector>, spec: NetworkPolicySpec) -> NetworkPolicy {
        NetworkPolicy {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(NetworkPolicySpec {
                pod_selector: selector,
                ..spec
            }),
        }
    }

    fn allow_all_ingress() -> NetworkPolicySpec {
        NetworkPolicySpec {
            ingress: Some(vec![NetworkPolicyIngressRule::default()]),
            ..NetworkPolicySpec::default()
        }
    }

    #[test]
    fn a_policy_that_allows_anything_to_the_stacks_widens_the_isolation() {
        let everyone = Some(LabelSelector::default());
        let found = widening_policies(&[
            isolation_policy(&Isolation::default()),
            policy("allow-all", everyone.clone(), allow_all_ingress()),
        ]);
        assert_eq!(found.len(), 1);
        assert!(found[0].contains("allow-all allows ingress"), "{}", found[0]);

        let egress = NetworkPolicySpec {
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(vec![NetworkPolicyEgressRule::default()]),
            ..NetworkPolicySpec::default()
        };
        assert_eq!(
            widening_policies(&[policy("open-egress", everyone.clone(), egress)]).len(),
            1
        );
        // The policy earlier versions applied allows private ranges: it widens too.
        let legacy = policy(LEGACY_POLICY_NAME, everyone.clone(), allow_all_ingress());
        assert_eq!(widening_policies(&[legacy]).len(), 1);
    }

    #[test]
    fn a_policy_that_only_denies_or_selects_other_pods_is_harmless() {
        let deny_all = NetworkPolicySpec {
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ..NetworkPolicySpec::default()
        };
        let other_pods = LabelSelector {
            match_labels: Some(BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), "helm".to_owned())])),
            ..LabelSelector::default()
        };
        let not_ours = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: MANAGED_BY_LABEL.to_owned(),
                operator: "DoesNotExist".to_owned(),
                values: None,
            }]),
            ..LabelSelector::default()
        };
        let found = widening_policies(&[
            policy("deny-all", Some(LabelSelector::default()), deny_all),
            policy("other-app", Some(other_pods), allow_all_ingress()),
            policy("unmanaged", Some(not_ours), allow_all_ingress()),
        ]);
        assert!(found.is_empty(), "{found:?}");
        // A selector on a label we cannot judge may match the stacks.
        let by_app = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
            ..LabelSelector::default()
        };
        assert_eq!(
            widening_policies(&[policy("web", Some(by_app), allow_all_ingress())]).len(),
            1
        );
    }
}
