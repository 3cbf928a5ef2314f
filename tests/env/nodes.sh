# Real worker nodes of the local environment: each one a network namespace with its own
# address, running containerd (runc), the kubelet and kube-proxy built from the control plane's
# module, so stacks really run and participants really connect. Sourced by up and down.
#
# Addresses: every environment takes a slot N (0-7) on the machine, so two environments (two
# terminals, helper sessions) never share a bridge, a namespace or an address:
#   10.(80+N).0.1          the host end of the nodes' bridge (apiserver, registry listen here)
#   10.(80+N).0.(10+i)     node i: its InternalIP and ExternalIP, what participants connect to
#   10.(80+N).i.0/24       the pod subnet of node i
#   198.51.100.(1+N)       also on the host end: a public address, the internet as stacks see it
#                          (internet.test to the cluster's DNS)
#   10.96.0.10             the cluster's DNS Service, a ClusterIP (in the nodes' namespaces only)
# None of them can collide with the machine's own 192.0.2.0/24 or the kwok nodes' documentation
# addresses (192.0.2.x, 203.0.113.x), and nothing leaves the machine.
#
# Everything a node changes lives in its namespace (iptables of kube-proxy, portmap and the
# kubelet; the pods' bridge; conntrack), under NODE_ROOT and in cgroups under /stack-env-N-*;
# `down` removes all of it. The kubelet also sets three global sysctls (vm.overcommit_memory,
# kernel.panic, kernel.panic_on_oops): saved at up, restored at down.
# shellcheck shell=bash

SLOT_DIR=/run/stack-env
NET_FILE="$STATE_DIR/net.sh"
MAX_SLOTS=8

# Where a node's runtime state lives: short paths (unix sockets are limited to 108 bytes,
# whatever directory the repository was cloned into).
node_root_base() { echo "/var/lib/stack-env/slot-$SLOT"; }
node_root() { echo "$(node_root_base)/$1"; }
node_netns() { echo "stk$SLOT-$1"; }
node_name() { echo "stack-node-$1"; }
node_ip() { echo "$NET_PREFIX.0.$((10 + $1))"; }
node_pod_cidr() { echo "$NET_PREFIX.$1.0/24"; }
bridge_name() { echo "stk${SLOT}br"; }
# A documentation address (TEST-NET-2, never routed) standing for the internet: stacks may reach
# it, unlike every private address.
internet_host() { echo "198.51.100.$((1 + SLOT))"; }
# The cluster DNS Service's ClusterIP, fixed inside the apiserver's service range (10.96.0.0/16)
# as EKS fixes it inside its own: the kubelets write it into every pod's resolv.conf.
cluster_dns_ip() { echo 10.96.0.10; }

# The real nodes this environment runs (STACK_ENV_REAL_NODES at up, 2 by default; 0 runs the
# control plane and kwok only).
real_node_count() { echo "${REAL_NODES:-0}"; }

node_components() {
    local i name
    for ((i = 1; i <= $(real_node_count); i++)); do
        name="$(node_name "$i")"
        echo "$name-containerd" "$name-kubelet" "$name-kube-proxy" "$name-kube-router" "$name-metadata"
    done
}

load_net() {
    # shellcheck source=/dev/null
    [[ -f "$NET_FILE" ]] && source "$NET_FILE"
    return 0
}

# Takes a free slot (or the one this state directory already holds) and writes net.sh.
claim_slot() {
    local n owner
    mkdir -p "$SLOT_DIR"
    for ((n = 0; n < MAX_SLOTS; n++)); do
        if mkdir "$SLOT_DIR/slot-$n" 2>/dev/null; then
            echo "$STATE_DIR" >"$SLOT_DIR/slot-$n/owner"
            break
        fi
        owner="$(cat "$SLOT_DIR/slot-$n/owner" 2>/dev/null || true)"
        # Ours, or left by an environment whose state is gone.
        if [[ "$owner" == "$STATE_DIR" || ! -f "$owner/net.sh" ]]; then
            echo "$STATE_DIR" >"$SLOT_DIR/slot-$n/owner"
            break
        fi
    done
    ((n < MAX_SLOTS)) || die "all $MAX_SLOTS environment slots of this machine are taken ($SLOT_DIR)"
    local real_nodes="${STACK_ENV_REAL_NODES:-2}" host_ip="10.$((80 + n)).0.1"
    # Without real nodes no bridge is made (net_up needs root): the control plane is on loopback.
    ((real_nodes > 0)) || host_ip=127.0.0.1
    cat >"$NET_FILE" <<EOF
SLOT=$n
NET_PREFIX=10.$((80 + n))
HOST_IP=$host_ip
REAL_NODES=$real_nodes
EOF
    load_net
}

release_slot() {
    [[ -n "${SLOT:-}" ]] || return 0
    if [[ "$(cat "$SLOT_DIR/slot-$SLOT/owner" 2>/dev/null)" == "$STATE_DIR" ]]; then
        rm -rf "${SLOT_DIR:?}/slot-$SLOT"
    fi
    rmdir "$SLOT_DIR" 2>/dev/null || true
    rm -f "$NET_FILE"
}

# The bridge on the host and one namespace + veth per node, with routes to every pod subnet.
net_up() {
    local br i
    br="$(bridge_name)"
    ip link add "$br" type bridge
    ip addr add "$HOST_IP/24" dev "$br"
    ip addr add "$(internet_host)/32" dev "$br"
    ip link set "$br" up
    for ((i = 1; i <= $(real_node_count); i++)); do
        net_add_node "$i"
    done
}

# net_add_node <i>: node i's namespace on the bridge, routes between its pod subnet and those
# of nodes 1..i-1 (both ways) and from the host. Also how a node joins at runtime (add-node).
net_add_node() {
    local i="$1" j ns veth
    ns="$(node_netns "$(node_name "$i")")"
    veth="stk${SLOT}v$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$(bridge_name)" up
    ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$HOST_IP"
    # The cloud's metadata address, answered on the node (see start_metadata).
    ip -n "$ns" addr add 169.254.169.254/32 dev lo
    ip route add "$(node_pod_cidr "$i")" via "$(node_ip "$i")"
    for ((j = 1; j < i; j++)); do
        ip -n "$ns" route add "$(node_pod_cidr "$j")" via "$(node_ip "$j")"
        ip -n "$(node_netns "$(node_name "$j")")" route add "$(node_pod_cidr "$i")" via "$(node_ip "$i")"
    done
}

net_down() {
    local i
    [[ -n "${SLOT:-}" ]] || return 0
    for ((i = 1; i <= ${REAL_NODES:-0}; i++)); do
        ip route del "$(node_pod_cidr "$i")" 2>/dev/null || true
        ip netns del "$(node_netns "$(node_name "$i")")" 2>/dev/null || true
    done
    ip link del "$(bridge_name)" 2>/dev/null || true
}

# The kubelet changes these host-wide; down puts them back.
SAVED_SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)

save_sysctls() {
    local key
    [[ -f "$STATE_DIR/sysctls" ]] && return 0
    for key in "${SAVED_SYSCTLS[@]}"; do
        echo "$key=$(sysctl -n "$key")"
    done >"$STATE_DIR/sysctls"
}

restore_sysctls() {
    local line
    [[ -f "$STATE_DIR/sysctls" ]] || return 0
    while read -r line; do
        sysctl -q -w "$line" >/dev/null || true
    done <"$STATE_DIR/sysctls"
    rm -f "$STATE_DIR/sysctls"
}

# The cgroup every pod of a node lives under, in each v1 hierarchy.
node_cgroup() { echo "/stack-env-$SLOT-$1"; }

# Every v1 hierarchy, and the hybrid host's unified one (runc puts containers there too).
cgroup_hierarchies() {
    awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts
}

make_node_cgroups() {
    local h
    for h in $(cgroup_hierarchies); do
        mkdir -p "$h$(node_cgroup "$1")"
    done
}

# Kills every process left in a node's cgroups, then removes them, deepest first.
remove_node_cgroups() {
    local cg h dir pids quota
    cg="$(node_cgroup "$1")"
    # A killed task that CFS bandwidth control parked never runs again on this kernel (6.18's
    # task-based throttling; a fork bomb under a CPU limit shows it, its pod stays Terminating):
    # lifting the quotas lets the kill finish.
    for h in $(cgroup_hierarchies); do
        find "$h$cg" -depth \( -name cpu.cfs_quota_us -o -name cpu.max \) 2>/dev/null |
            while read -r quota; do
                if [[ "$quota" == *cpu.max ]]; then echo max; else echo -1; fi >"$quota" 2>/dev/null || true
            done
    done
    for h in $(cgroup_hierarchies); do
        [[ -d "$h$cg" ]] || continue
        # Cgroups vanish while they are read (the kubelet removes its own): what is left counts.
        pids="$(find "$h$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true)"
        # shellcheck disable=SC2086
        [[ -z "$pids" ]] || kill -KILL $pids 2>/dev/null || true
    done
    for h in $(cgroup_hierarchies); do
        [[ -d "$h$cg" ]] || continue
        find "$h$cg" -depth -type d 2>/dev/null | while read -r dir; do
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                rmdir "$dir" 2>/dev/null && break
                sleep 0.1
            done
        done || true
    done
}

# Unmounts everything below a directory, deepest first (kubelet volumes, overlay rootfs, pod
# network namespaces, the kubelet's own bind mount of its root).
unmount_below() {
    local dir="$1" target
    awk -v dir="$dir" '$5 == dir || index($5, dir "/") == 1 { print $5 }' /proc/self/mountinfo 2>/dev/null |
        awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2- |
        while read -r target; do
            umount -l "$target" 2>/dev/null || true
        done || true
}

# Host paths containerd and CNI use whatever they are told (shim sockets, the CNI result
# cache): removed when empty, left alone when anything else uses them.
remove_runtime_dirs() {
    rmdir /run/containerd/s /run/containerd /var/lib/cni/results /var/lib/cni /var/lib/stack-env 2>/dev/null || true
}

# Starts a component inside a node's network namespace (only the network: the mount namespace
# is the host's, so the kubelet's volume mounts are what containerd mounts into containers).
start_in_netns() {
    local name="$1" ns="$2"
    shift 2
    start_component "$name" --exe "$1" nsenter --net="/run/netns/$ns" -- "$@"
}

# write_node_config <i>: containerd's config, the CNI network, the kubelet's and kube-proxy's
# configurations and kubeconfigs of node i, under its root.
write_node_config() {
    local i="$1" name root ip
    name="$(node_name "$i")"
    root="$(node_root "$name")"
    ip="$(node_ip "$i")"
    mkdir -p "$root"/{containerd,containerd-state,kubelet,pod-logs,cni-conf,cni-ipam}
    # The local registry speaks plain HTTP: the way containerd is told so for one registry. The
    # slow one (a benchmark's throttled proxy in front of it, STACK_ENV_SLOW_REGISTRY) too.
    local registry
    for registry in "$REGISTRY" ${SLOW_REGISTRY:+"$SLOW_REGISTRY"}; do
        mkdir -p "$root/certs.d/$registry"
        cat >"$root/certs.d/$registry/hosts.toml" <<TOML
server = "http://$registry"
[host."http://$registry"]
  capabilities = ["pull", "resolve"]
TOML
    done
    # EKS's nodeadm config (version 3) with what this machine needs: cgroupfs (no systemd),
    # restrict_oom_score_adj (no CAP_SYS_RESOURCE here), its own paths everywhere (pod network
    # namespaces and runc's state included, so that down finds them), no NRI or CDI (they
    # would create host directories). enable_unprivileged_ports stays at the v2 default, true:
    # EKS's config does not set it either.
    cat >"$root/containerd.toml" <<TOML
version = 3
root = "$root/containerd"
state = "$root/containerd-state"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "$root/containerd.sock"

[ttrpc]
  address = "$root/containerd.sock.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "$root/opt"

[plugins.'io.containerd.cri.v1.images']
  discard_unpacked_layers = true
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$REGISTRY/stack-env/pause:3.10"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$root/certs.d"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$BIN_DIR/runc"
        Root = "$root/runc"
        SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      runtime_path = "$BIN_DIR/containerd-shim-runsc-v1"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$root/runsc.toml"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$BIN_DIR/cni"]
    conf_dir = "$root/cni-conf"
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
    # gVisor (runsc) for the RuntimeClass gvisor: systrap, the platform that needs no KVM (what
    # these VMs and most EC2 instances offer), the manifest's seccomp profile applied inside
    # the sandbox as well (runsc ignores it unless told), and the root filesystem's writes kept
    # in the sandbox's memory, so that they count against the pod's memory limit at once
    # (runsc's default backs them with a file on the node's disk, which the kubelet measures
    # only every 10 s).
    cat >"$root/runsc.toml" <<TOML
binary_name = "$BIN_DIR/runsc"
root = "$root/runsc"
[runsc_config]
  platform = "systrap"
  oci-seccomp = "true"
  overlay2 = "root:memory"
TOML
    # bridge + host-local + portmap, as the probe of real-nodes.md ran it; no masquerading:
    # pod addresses are routed (host and nodes know every pod subnet), as in a VPC.
    cat >"$root/cni-conf/10-stack-env.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "stack-env",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$(node_pod_cidr "$i")" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$root/cni-ipam"
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
JSON
    write_kubeconfig "$root/kubelet.kubeconfig" "$name"
    write_kubeconfig "$root/kube-proxy.kubeconfig" kube-proxy
    write_kubeconfig "$root/kube-router.kubeconfig" kube-router
    # Only the apiserver (its client certificate from the local CA) may call the kubelet: the
    # node's port is reachable from pods. The cloud provider is "external": the environment
    # plays EKS's cloud controller and gives the node its ExternalIP (stack-env init-nodes).
    cat >"$root/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI_DIR/kubelet-$name.crt
tlsPrivateKeyFile: $PKI_DIR/kubelet-$name.key
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: false }
  x509: { clientCAFile: $PKI_DIR/ca.crt }
authorization: { mode: AlwaysAllow }
containerRuntimeEndpoint: unix://$root/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $(node_cgroup "$name")
failSwapOn: false
failCgroupV1: false
podLogsDir: $root/pod-logs
resolvConf: /etc/resolv.conf
# The cluster's DNS (CoreDNS, started by up: stack-env cluster-dns), as on EKS.
clusterDNS: [$(cluster_dns_ip)]
clusterDomain: cluster.local
maxPods: 250
evictionHard: { memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1% }
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# As EKS's nodeadm sets it: a slow pull does not hold up every other pod of the node.
serializeImagePulls: false
# What a stack node must set (the kubelet's default is no limit): a fork bomb in one stack
# exhausts its own pods' PIDs, not the node's.
podPidsLimit: 1024
YAML
    # A node joining during an event (add-node) registers with a startup taint, as Karpenter's
    # startupTaints or a node group's taints put it: NODE_TAINT, key=value:Effect.
    if [[ -n "${NODE_TAINT:-}" ]]; then
        local key="${NODE_TAINT%%=*}" rest="${NODE_TAINT#*=}"
        printf 'registerWithTaints:\n  - { key: %s, value: "%s", effect: %s }\n' \
            "$key" "${rest%%:*}" "${rest##*:}" >>"$root/kubelet.yaml"
    fi
    # kube-proxy in iptables mode, EKS's default; minSyncPeriod 0s applies an endpoint change
    # at once (upstream's default is 1s); conntrack limits are left alone (they are the
    # host's), its ports live in the node's namespace.
    cat >"$root/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: { kubeconfig: $root/kube-proxy.kubeconfig }
hostnameOverride: $name
mode: iptables
clusterCIDR: $NET_PREFIX.0.0/16
nodePortAddresses: [primary]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s }
iptables: { minSyncPeriod: 0s, syncPeriod: 30s }
YAML
}

# A stand-in for the EC2 instance metadata service on the node's 169.254.169.254 (IMDSv1, the
# worst case): what a pod must never reach, with a fake credential of the node's role.
write_metadata() {
    local dir="$1/latest/meta-data/iam/security-credentials"
    mkdir -p "$dir"
    echo "stack-node-role" >"$dir/index.html"
    mkdir -p "$dir/stack-node-role"
    printf '{"Code":"Success","AccessKeyId":"ASIASTACKENVFAKEKEY","SecretAccessKey":"stack-env-fake-secret","Token":"stack-env-fake-token"}\n' \
        >"$dir/stack-node-role/index.html"
}

# start_node <i>: containerd, the kubelet, kube-proxy and the metadata stand-in of node i.
start_node() {
    local i="$1" name ns root
    name="$(node_name "$i")"
    ns="$(node_netns "$name")"
    root="$(node_root "$name")"
    make_node_cgroups "$name"
    write_node_config "$i"
    start_in_netns "$name-containerd" "$ns" "$BIN_DIR/containerd" --config "$root/containerd.toml" --log-level warn
    start_in_netns "$name-kube-proxy" "$ns" "$BIN_DIR/kube-proxy" --config "$root/kube-proxy.yaml" --v=1
    write_metadata "$root/metadata"
    start_in_netns "$name-metadata" "$ns" "$(command -v busybox)" httpd -f -p 169.254.169.254:80 -h "$root/metadata"
    wait_until "$name-containerd" 30 "containerd socket" test -S "$root/containerd.sock"
    start_in_netns "$name-kubelet" "$ns" "$BIN_DIR/kubelet" \
        --config="$root/kubelet.yaml" --kubeconfig="$root/kubelet.kubeconfig" \
        --root-dir="$root/kubelet" --cert-dir="$root/kubelet/pki" \
        --hostname-override="$name" --node-ip="$(node_ip "$i")" --cloud-provider=external \
        --node-labels="role=stack,stack-env/node=real" --v=1
}

# start_node_enforcer <i>: NetworkPolicies enforced on node i as EKS's VPC CNI agent does when
# switched on, by kube-router's firewall alone in the node's iptables. It needs its Node object,
# so it starts once the node is registered; up waits for its chains before any stack runs.
start_node_enforcer() {
    local i="$1" name ns root
    name="$(node_name "$i")"
    ns="$(node_netns "$name")"
    root="$(node_root "$name")"
    # Pods on one node's bridge reach each other through the firewall only when bridged
    # traffic passes iptables.
    ip netns exec "$ns" sysctl -q -w net.bridge.bridge-nf-call-iptables=1
    start_in_netns "$name-kube-router" "$ns" "$BIN_DIR/kube-router" \
        --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false \
        --kubeconfig="$root/kube-router.kubeconfig" --hostname-override="$name" \
        --service-cluster-ip-range=10.96.0.0/16 --service-node-port-range=30000-32767 \
        --health-port=0 --metrics-port=0 --v=1
    wait_until "$name-kube-router" 60 "kube-router's firewall chains" \
        sh -c "ip netns exec '$ns' iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1"
}

# wait_cluster_dns <i>: a name of the cluster resolves from node i through the DNS Service's
# ClusterIP (kube-proxy's rules of that node), as every pod asks it.
wait_cluster_dns() {
    local i="$1" name ns
    name="$(node_name "$i")"
    ns="$(node_netns "$name")"
    wait_until "$name-kube-proxy" 60 "cluster DNS through $(cluster_dns_ip) from $name" \
        sh -c "ip netns exec '$ns' busybox nslookup -type=a -timeout=1 kubernetes.default.svc.cluster.local \
            $(cluster_dns_ip) | grep -q '^Address: '"
}

# stop_node <i>: the kubelet and kube-proxy, every container (by cgroup), containerd and its
# shims, then every mount, cgroup and file the node left.
stop_node() {
    local i="$1" name root pid
    name="$(node_name "$i")"
    root="$(node_root "$name")"
    stop_components 10 "$name-kubelet" "$name-kube-proxy" "$name-kube-router" "$name-metadata"
    remove_node_cgroups "$name"
    stop_components 10 "$name-containerd"
    # Shims outlive containerd (they are their own session); each names our socket.
    for pid in $(pgrep -f "containerd-shim-run(c-v2|sc-v1) .*-address $root/containerd.sock" || true); do
        kill -KILL "$pid" 2>/dev/null || true
    done
    remove_node_cgroups "$name"
    unmount_below "$root"
    rm -rf "$root"
    rmdir "$(node_root_base)" 2>/dev/null || true
}
