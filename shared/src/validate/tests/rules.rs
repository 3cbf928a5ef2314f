//! One row per rule: what is rejected (with the field path) and what is accepted.

use serde_json::{Value, json};

use super::{Edits, accepted, init_container, refused};

#[test]
fn every_rejected_rule_names_its_field() {
    let init = init_container();
    let with_init = |key: &str, value: Value| {
        let mut c = init.clone();
        c[key] = value;
        ("/spec/initContainers", json!([c]))
    };
    let rows: Vec<(Edits, &str)> = vec![
        // schema
        (vec![("/apiVersion", json!("apps/v1"))], "apiVersion"),
        (vec![("/kind", json!("Deployment"))], "kind"),
        (vec![("/status", json!({"phase": "Running"}))], "status"),
        (vec![("/spec/hostNetwrok", json!(true))], "spec.hostNetwrok"),
        (
            vec![("/spec/containers/0/imagee", json!("x"))],
            "spec.containers[0].imagee",
        ),
        (
            vec![("/spec/containers/0/ports/0/containerPort", json!("http"))],
            "spec.containers[0].ports[0].containerPort",
        ),
        (vec![("/spec", Value::Null)], "spec"),
        // metadata
        (
            vec![("/metadata/finalizers", json!(["example.com/keep"]))],
            "metadata.finalizers",
        ),
        (
            vec![("/metadata/ownerReferences", json!([]))],
            "metadata.ownerReferences",
        ),
        (
            vec![("/metadata/resourceVersion", json!("1"))],
            "metadata.resourceVersion",
        ),
        (
            vec![("/metadata/labels/node.kubernetes.io~1role", json!("x"))],
            "metadata.labels.node.kubernetes.io/role",
        ),
        (
            vec![("/metadata/labels/kubernetes.io~1hostname", json!("x"))],
            "metadata.labels.kubernetes.io/hostname",
        ),
        (
            vec![(
                "/metadata/labels/stack-provisioner~1stack-id",
                json!("stack-ffffffffffffffff"),
            )],
            "metadata.labels.stack-provisioner/stack-id",
        ),
        (
            vec![("/metadata/labels/app.kubernetes.io~1managed-by", json!("me"))],
            "metadata.labels.app.kubernetes.io/managed-by",
        ),
        (
            vec![(
                "/metadata/annotations/container.apparmor.security.beta.kubernetes.io~1web",
                json!("unconfined"),
            )],
            "metadata.annotations.container.apparmor.security.beta.kubernetes.io/web",
        ),
        (
            vec![(
                "/metadata/annotations/seccomp.security.alpha.kubernetes.io~1pod",
                json!("unconfined"),
            )],
            "metadata.annotations.seccomp.security.alpha.kubernetes.io/pod",
        ),
        (
            vec![("/metadata/annotations/x.k8s.io~1y", json!("z"))],
            "metadata.annotations.x.k8s.io/y",
        ),
        // pod spec
        (vec![("/spec/hostNetwork", json!(true))], "spec.hostNetwork"),
        (vec![("/spec/hostPID", json!(true))], "spec.hostPID"),
        (vec![("/spec/hostIPC", json!(true))], "spec.hostIPC"),
        (vec![("/spec/hostUsers", json!(true))], "spec.hostUsers"),
        (
            vec![("/spec/securityContext", json!({"runAsUser": 0}))],
            "spec.securityContext.runAsUser",
        ),
        (
            vec![(
                "/spec/securityContext",
                json!({"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]}),
            )],
            "spec.securityContext.sysctls",
        ),
        (
            vec![("/spec/serviceAccountName", json!("robot"))],
            "spec.serviceAccountName",
        ),
        (vec![("/spec/serviceAccount", json!("robot"))], "spec.serviceAccount"),
        (
            vec![("/spec/automountServiceAccountToken", json!(true))],
            "spec.automountServiceAccountToken",
        ),
        (vec![("/spec/nodeName", json!("ip-10-0-0-1"))], "spec.nodeName"),
        (vec![("/spec/runtimeClassName", json!("runc"))], "spec.runtimeClassName"),
        (vec![("/spec/schedulerName", json!("mine"))], "spec.schedulerName"),
        (
            vec![("/spec/priorityClassName", json!("system-node-critical"))],
            "spec.priorityClassName",
        ),
        (vec![("/spec/priority", json!(1_000_000))], "spec.priority"),
        (
            vec![("/spec/preemptionPolicy", json!("Never"))],
            "spec.preemptionPolicy",
        ),
        (
            vec![(
                "/spec/ephemeralContainers",
                json!([{"name": "dbg", "image": "busybox"}]),
            )],
            "spec.ephemeralContainers",
        ),
        (
            vec![("/spec/resourceClaims", json!([{"name": "gpu"}]))],
            "spec.resourceClaims",
        ),
        (vec![("/spec/overhead", json!({"cpu": "1"}))], "spec.overhead"),
        (
            vec![("/spec/resources", json!({"limits": {"cpu": "1"}}))],
            "spec.resources",
        ),
        (
            vec![("/spec/schedulingGates", json!([{"name": "wait"}]))],
            "spec.schedulingGates",
        ),
        (
            vec![(
                "/spec/topologySpreadConstraints",
                json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]),
            )],
            "spec.topologySpreadConstraints",
        ),
        (
            vec![("/spec/nodeSelector", json!({"kubernetes.io/hostname": "n1"}))],
            "spec.nodeSelector.kubernetes.io/hostname",
        ),
        (
            vec![("/spec/nodeSelector", json!({"role": "system"}))],
            "spec.nodeSelector.role",
        ),
        (
            vec![("/spec/affinity/podAffinity", json!({}))],
            "spec.affinity.podAffinity",
        ),
        (
            vec![("/spec/affinity/podAntiAffinity", json!({}))],
            "spec.affinity.podAntiAffinity",
        ),
        (
            vec![("/spec/tolerations", json!([{"operator": "Exists"}]))],
            "spec.tolerations[0].key",
        ),
        (
            vec![(
                "/spec/tolerations",
                json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]),
            )],
            "spec.tolerations[0].key",
        ),
        (
            vec![(
                "/spec/tolerations",
                json!([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]),
            )],
            "spec.tolerations[0].effect",
        ),
        (
            vec![("/spec/tolerations", json!([{"key": "dedicated", "operator": "Exists"}]))],
            "spec.tolerations[0].effect",
        ),
        (
            vec![(
                "/spec/tolerations",
                json!([{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule", "tolerationSeconds": 5}]),
            )],
            "spec.tolerations[1].tolerationSeconds",
        ),
        (vec![("/spec/os", json!({"name": "windows"}))], "spec.os.name"),
        (
            vec![("/spec/activeDeadlineSeconds", json!(0))],
            "spec.activeDeadlineSeconds",
        ),
        (
            vec![("/spec/terminationGracePeriodSeconds", json!(3600))],
            "spec.terminationGracePeriodSeconds",
        ),
        (
            vec![("/spec/terminationGracePeriodSeconds", json!(-1))],
            "spec.terminationGracePeriodSeconds",
        ),
        // containers
        (vec![("/spec/containers", json!([]))], "spec.containers"),
        (
            vec![("/spec/containers/0/securityContext", json!({"privileged": true}))],
            "spec.containers[0].securityContext.privileged",
        ),
        (
            vec![("/spec/containers/0/securityContext", json!({"runAsNonRoot": false}))],
            "spec.containers[0].securityContext.runAsNonRoot",
        ),
        (
            vec![with_init("securityContext", json!({"runAsUser": 0}))],
            "spec.initContainers[0].securityContext.runAsUser",
        ),
        (
            vec![with_init(
                "securityContext",
                json!({"capabilities": {"add": ["SYS_ADMIN"]}}),
            )],
            "spec.initContainers[0].securityContext.capabilities.add[0]",
        ),
        (vec![("/spec/containers/0/name", json!(""))], "spec.containers[0].name"),
        (
            vec![("/spec/containers/0/image", json!(""))],
            "spec.containers[0].image",
        ),
        (
            vec![("/spec/containers/0/image", Value::Null)],
            "spec.containers[0].image",
        ),
        (
            vec![("/spec/containers/0/image", json!("reg.io/ctf/../evil"))],
            "spec.containers[0].image",
        ),
        (vec![with_init("image", json!(" "))], "spec.initContainers[0].image"),
        (
            vec![("/spec/containers/0/ports/0/hostPort", json!(80))],
            "spec.containers[0].ports[0].hostPort",
        ),
        (
            vec![("/spec/containers/0/ports/0/hostIP", json!("0.0.0.0"))],
            "spec.containers[0].ports[0].hostIP",
        ),
        (
            vec![("/spec/containers/0/ports/1", json!({"containerPort": 0}))],
            "spec.containers[0].ports[1].containerPort",
        ),
        (
            vec![("/spec/containers/0/ports/1", json!({"containerPort": 70000}))],
            "spec.containers[0].ports[1].containerPort",
        ),
        (
            vec![with_init("ports", json!([{"containerPort": 81}]))],
            "spec.initContainers[0].ports",
        ),
        (
            vec![(
                "/spec/containers/0/volumeDevices",
                json!([{"name": "d", "devicePath": "/dev/xvda"}]),
            )],
            "spec.containers[0].volumeDevices",
        ),
        (
            vec![(
                "/spec/containers/0/volumeMounts",
                json!([{"name": "v", "mountPath": "/v", "subPathExpr": "$(POD_NAME)"}]),
            )],
            "spec.containers[0].volumeMounts[0].subPathExpr",
        ),
        (
            vec![(
                "/spec/containers/0/volumeMounts",
                json!([{"name": "v", "mountPath": "/v", "mountPropagation": "Bidirectional"}]),
            )],
            "spec.containers[0].volumeMounts[0].mountPropagation",
        ),
        (
            vec![(
                "/spec/containers/0/volumeMounts",
                json!([{"name": "v", "mountPath": "/v", "subPath": "a/../../etc"}]),
            )],
            "spec.containers[0].volumeMounts[0].subPath",
        ),
        (
            vec![(
                "/spec/containers/0/volumeMounts",
                json!([{"name": "v", "mountPath": "/v", "subPath": "/etc"}]),
            )],
            "spec.containers[0].volumeMounts[0].subPath",
        ),
        (
            vec![(
                "/spec/containers/0/livenessProbe",
                json!({"httpGet": {"host": "169.254.169.254", "port": 80, "path": "/"}}),
            )],
            "spec.containers[0].livenessProbe.httpGet.host",
        ),
        (
            vec![(
                "/spec/containers/0/readinessProbe",
                json!({"tcpSocket": {"host": "10.0.0.1", "port": 22}}),
            )],
            "spec.containers[0].readinessProbe.tcpSocket.host",
        ),
        (
            vec![(
                "/spec/containers/0/startupProbe",
                json!({"httpGet": {"host": "kubernetes.default", "port": 443}}),
            )],
            "spec.containers[0].startupProbe.httpGet.host",
        ),
        (
            vec![(
                "/spec/containers/0/lifecycle",
                json!({"preStop": {"httpGet": {"host": "10.0.0.1", "port": 80}}}),
            )],
            "spec.containers[0].lifecycle.preStop.httpGet.host",
        ),
        (
            vec![("/spec/containers/0/restartPolicy", json!("Always"))],
            "spec.containers[0].restartPolicy",
        ),
        (
            vec![with_init("restartPolicy", json!("OnFailure"))],
            "spec.initContainers[0].restartPolicy",
        ),
        (
            vec![(
                "/spec/containers/0/restartPolicyRules",
                json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}]),
            )],
            "spec.containers[0].restartPolicyRules",
        ),
        // volumes
        (
            vec![("/spec/volumes", json!([{"name": "h", "hostPath": {"path": "/"}}]))],
            "spec.volumes[0].hostPath",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "e", "emptyDir": {}}, {"name": "n", "nfs": {"server": "s", "path": "/"}}]),
            )],
            "spec.volumes[1].nfs",
        ),
        (
            vec![("/spec/volumes", json!([{"name": "c", "csi": {"driver": "d"}}]))],
            "spec.volumes[0].csi",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "p", "persistentVolumeClaim": {"claimName": "c"}}]),
            )],
            "spec.volumes[0].persistentVolumeClaim",
        ),
        (
            vec![("/spec/volumes", json!([{"name": "e", "ephemeral": {}}]))],
            "spec.volumes[0].ephemeral",
        ),
        (
            vec![("/spec/volumes", json!([{"name": "i", "image": {"reference": "x"}}]))],
            "spec.volumes[0].image",
        ),
        (
            vec![("/spec/volumes", json!([{"name": "g", "gitRepo": {"repository": "x"}}]))],
            "spec.volumes[0].gitRepo",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "i", "iscsi": {"targetPortal": "t", "iqn": "q", "lun": 0}}]),
            )],
            "spec.volumes[0].iscsi",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "t", "projected": {"sources": [{"configMap": {"name": "c"}}, {"serviceAccountToken": {"path": "t"}}]}}]),
            )],
            "spec.volumes[0].projected.sources[1].serviceAccountToken",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "t", "projected": {"sources": [{"clusterTrustBundle": {"path": "b"}}]}}]),
            )],
            "spec.volumes[0].projected.sources[0].clusterTrustBundle",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "e", "emptyDir": {"medium": "HugePages"}}]),
            )],
            "spec.volumes[0].emptyDir.medium",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "e", "emptyDir": {"sizeLimit": "-1Gi"}}]),
            )],
            "spec.volumes[0].emptyDir.sizeLimit",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "e", "emptyDir": {}, "secret": {"secretName": "s"}}]),
            )],
            "spec.volumes[0]",
        ),
        (
            vec![("/spec/volumes", json!([{"emptyDir": {}}]))],
            "spec.volumes[0].name",
        ),
        // resources
        (
            vec![("/spec/containers/0/resources", json!({"limits": {"memory": "128Mi"}}))],
            "spec.containers[0].resources",
        ),
        (
            vec![("/spec/containers/0/resources", json!({"requests": {"cpu": "1"}}))],
            "spec.containers[0].resources",
        ),
        (
            vec![("/spec/containers/0/resources", Value::Null)],
            "spec.containers[0].resources",
        ),
        (
            vec![(
                "/spec/containers/0/resources",
                json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "500m"}}),
            )],
            "spec.containers[0].resources.requests.cpu",
        ),
        (
            vec![("/spec/containers/0/resources/limits/cpu", json!("lots"))],
            "spec.containers[0].resources.limits.cpu",
        ),
        (
            vec![("/spec/containers/0/resources/limits/cpu", json!("0"))],
            "spec.containers[0].resources.limits.cpu",
        ),
        (
            vec![("/spec/containers/0/resources/limits/memory", json!("-1Mi"))],
            "spec.containers[0].resources.limits.memory",
        ),
        (
            vec![("/spec/containers/0/resources/limits/memory", json!("99999999999Ei"))],
            "spec.containers[0].resources.limits.memory",
        ),
        (
            vec![("/spec/containers/0/resources/limits/nvidia.com~1gpu", json!("1"))],
            "spec.containers[0].resources.limits.nvidia.com/gpu",
        ),
        (
            vec![("/spec/containers/0/resources/requests/hugepages-2Mi", json!("2Mi"))],
            "spec.containers[0].resources.requests.hugepages-2Mi",
        ),
        (
            vec![("/spec/containers/0/resources/claims", json!([{"name": "gpu"}]))],
            "spec.containers[0].resources.claims",
        ),
        (
            vec![("/spec/containers/0/resources/limits/ephemeral-storage", json!("2Gi"))],
            "spec.containers[0].resources.limits.ephemeral-storage",
        ),
        (
            vec![("/spec/containers/0/resources/limits/cpu", json!("5"))],
            "spec.containers[*].resources",
        ),
        (
            vec![("/spec/containers/0/resources/limits/memory", json!("9Gi"))],
            "spec.containers[*].resources",
        ),
        (
            vec![with_init("resources", json!({"limits": {"memory": "1Mi"}}))],
            "spec.initContainers[0].resources",
        ),
        // target ports
        (
            vec![("/spec/containers/0/ports/0/containerPort", json!(8080))],
            "target_port[0]",
        ),
        (
            vec![("/spec/containers/0/ports/0/protocol", json!("UDP"))],
            "target_port[0]",
        ),
    ];
    refused(rows);
}

#[test]
fn harmless_fields_are_accepted() {
    let sidecar = {
        let mut c = init_container();
        c["restartPolicy"] = json!("Always");
        c
    };
    let rows: Vec<Edits> = vec![
        vec![],
        vec![
            ("/spec/hostNetwork", json!(false)),
            ("/spec/hostPID", json!(false)),
            ("/spec/hostIPC", json!(false)),
        ],
        vec![("/spec/hostUsers", json!(false))],
        vec![
            ("/spec/automountServiceAccountToken", json!(false)),
            ("/spec/enableServiceLinks", json!(false)),
        ],
        vec![("/spec/restartPolicy", json!("Always"))],
        vec![("/spec/nodeSelector", json!({"role": "stack"}))],
        vec![
            ("/metadata/namespace", json!("kube-system")),
            ("/metadata/generateName", json!("x-")),
        ],
        vec![
            ("/metadata/labels/app.kubernetes.io~1name", json!("web")),
            ("/metadata/annotations/description", json!("red team")),
            ("/metadata/annotations/app.kubernetes.io~1part-of", json!("ctf")),
        ],
        vec![(
            "/spec/tolerations",
            json!([{"key": "dedicated", "operator": "Equal", "value": "ctf", "effect": "NoSchedule"}]),
        )],
        vec![(
            "/spec/affinity/nodeAffinity",
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}),
        )],
        vec![
            ("/spec/dnsPolicy", json!("None")),
            ("/spec/dnsConfig", json!({"nameservers": ["1.1.1.1"]})),
        ],
        vec![(
            "/spec/hostAliases",
            json!([{"ip": "127.0.0.1", "hostnames": ["flag.local"]}]),
        )],
        vec![
            ("/spec/shareProcessNamespace", json!(true)),
            ("/spec/hostname", json!("box")),
            ("/spec/subdomain", json!("s")),
        ],
        vec![("/spec/os", json!({"name": "linux"}))],
        vec![
            ("/spec/terminationGracePeriodSeconds", json!(10)),
            ("/spec/activeDeadlineSeconds", json!(60)),
        ],
        vec![
            ("/spec/readinessGates", json!([])),
            ("/spec/imagePullSecrets", json!([{"name": "pull"}])),
        ],
        vec![(
            "/spec/volumes",
            json!([
                {"name": "e", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                {"name": "c", "configMap": {"name": "cfg"}},
                {"name": "s", "secret": {"secretName": "flag"}},
                {"name": "d", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                {"name": "p", "projected": {"sources": [{"configMap": {"name": "c"}}, {"secret": {"name": "s"}}, {"downwardAPI": {"items": []}}]}},
                {"name": "bare"}
            ]),
        )],
        vec![(
            "/spec/containers/0/volumeMounts",
            json!([{"name": "c", "mountPath": "/etc/app.ini", "subPath": "conf/app.ini", "readOnly": true, "mountPropagation": "HostToContainer"}]),
        )],
        vec![("/spec/initContainers", json!([init_container(), sidecar]))],
        vec![
            ("/spec/containers/0/ports/0/name", json!("http")),
            (
                "/spec/containers/0/livenessProbe",
                json!({"httpGet": {"port": 80, "path": "/healthz"}}),
            ),
            (
                "/spec/containers/0/readinessProbe",
                json!({"tcpSocket": {"port": "http"}}),
            ),
            (
                "/spec/containers/0/lifecycle",
                json!({"preStop": {"exec": {"command": ["sleep", "1"]}}}),
            ),
        ],
        vec![(
            "/spec/containers/0/resources/requests/ephemeral-storage",
            json!("500Mi"),
        )],
        vec![(
            "/spec/containers/0/resources",
            json!({"requests": {"cpu": 1, "memory": 1e9}}),
        )],
        vec![
            ("/spec/containers/0/securityContext", Value::Null),
            ("/spec/unknownButNull", Value::Null),
        ],
        vec![(
            "/spec/containers/0/env",
            json!([{"name": "FLAG", "valueFrom": {"secretKeyRef": {"name": "flag", "key": "f"}}}]),
        )],
        vec![(
            "/spec/containers/0/ports/1",
            json!({"containerPort": 53, "protocol": "UDP"}),
        )],
    ];
    accepted(rows);
}
