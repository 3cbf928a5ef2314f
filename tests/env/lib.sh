# Shared helpers of the tests/env scripts. Sourced, never executed.
# shellcheck shell=bash

# shellcheck disable=SC2034  # the paths below are used by the scripts sourcing this file
ENV_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$ENV_DIR/../.." && pwd)"
# STACK_ENV_STATE: another state directory, for a second environment next to the usual one.
STATE_DIR="${STACK_ENV_STATE:-$ENV_DIR/.state}"
CACHE_DIR="${STACK_ENV_CACHE:-$HOME/.cache/stack-provisioner}"
BIN_DIR="$CACHE_DIR/bin"
DDB_DIR="$CACHE_DIR/dynamodb"
STAMP_DIR="$CACHE_DIR/stamps"

PKI_DIR="$STATE_DIR/pki"
LOG_DIR="$STATE_DIR/logs"
PID_DIR="$STATE_DIR/pids"
PORTS_FILE="$STATE_DIR/ports.sh"
ENV_FILE="$STATE_DIR/env.sh"
KUBECONFIG_FILE="$STATE_DIR/kubeconfig"

# Start order of the control plane and its neighbours; `down` stops in reverse, after the
# real nodes (nodes.sh), whose components depend on how many there are.
COMPONENTS=(etcd dynamodb kube-apiserver kube-controller-manager kube-scheduler kwok registry)

DDB_STACK_TABLE_DEFAULT="stacks"
AWS_REGION_DEFAULT="us-east-1"

# The Go builds must never fetch another toolchain, and everything they download stays in the cache.
export GOTOOLCHAIN=local
export GOMODCACHE="$CACHE_DIR/go/mod"
export GOCACHE="$CACHE_DIR/go/cache"
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOPROXY="${GOPROXY:-https://proxy.golang.org}"
# Static binaries, like the official Kubernetes server builds.
export CGO_ENABLED=0

# The Go build cache (several GB) is only useful for rebuilding after a pin changes: dropped
# after a build unless STACK_ENV_KEEP_GO_CACHE=1.
drop_go_build_cache() {
    if [[ "${STACK_ENV_KEEP_GO_CACHE:-0}" != 1 && -d "$GOCACHE" ]] && [[ -n "$(ls -A "$GOCACHE")" ]]; then
        go clean -cache
    fi
}

log() { printf '[env %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

need_cmd() {
    local cmd
    for cmd in "$@"; do
        command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' is required but not installed"
    done
}

# Seconds since the epoch with millisecond precision, for timing messages.
now_s() { date +%s.%N | cut -c1-14; }
elapsed_since() { awk -v s="$1" -v e="$(now_s)" 'BEGIN { printf "%.1fs", e - s }'; }

pid_file() { echo "$PID_DIR/$1.pid"; }
log_file() { echo "$LOG_DIR/$1.log"; }

# The pid of a component we started, if that process is still alive and still runs the
# binary we started (a recycled pid must never be signalled).
component_pid() {
    local name="$1" file pid exe
    file="$(pid_file "$name")"
    [[ -s "$file" ]] || return 1
    read -r pid exe <"$file" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$exe" || return 1
    echo "$pid"
}

component_alive() { component_pid "$1" >/dev/null; }

# Every component's process is alive (not a health check).
all_running() {
    local name
    [[ -f "$NET_FILE" ]] || return 1
    for name in "${COMPONENTS[@]}" $(node_components); do
        component_alive "$name" || return 1
    done
}

# The pid of each component this shell started: its child, so its pid is not reused before it
# is waited for, and `wait` tells how it ended.
declare -A STARTED_PIDS=()

# Starts a component detached from this shell (own session, so Ctrl-C in a terminal or the
# end of this script does not reach it) and records "<pid> <executable>" in its pid file.
# `start_component <name> [--exe <executable>] <command...>`: --exe names the program the
# command ends up running when that is not its first word (a wrapper that execs it).
start_component() {
    local name="$1" exe
    shift
    if [[ "$1" == --exe ]]; then
        exe="$2"
        shift 2
    else
        exe="$1"
    fi
    local log
    log="$(log_file "$name")"
    : >"$log"
    # Lock descriptors (8: state lock, 9: install lock) must not outlive the script in the child.
    setsid bash -c 'echo "$$ $1" > "$2"; shift 2; exec "$@"' _ "$exe" "$(pid_file "$name")" "$@" \
        </dev/null >>"$log" 2>&1 8>&- 9>&- &
    STARTED_PIDS[$name]=$!
    # The pid file is written by the child; wait for it so callers can rely on it.
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -s "$(pid_file "$name")" ]] && return 0
        sleep 0.05
    done
    die "$name did not start (no pid file)"
}

# A component this shell started has ended (a zombie counts). Not component_alive, whose
# command line reads empty while the process is inside execve(2): a CI run once reported a
# just-started controller-manager dead with nothing in its log.
component_exited() {
    local pid="${STARTED_PIDS[$1]:-}"
    [[ -n "$pid" ]] && ! pid_running "$pid"
}

# Says why a component failed and shows its log's tail; when its process ended, also how (as
# its parent, this shell, was told: an exit status or a signal).
report_crash() {
    local name="$1" why="$2" status=0
    if component_exited "$name"; then
        wait "${STARTED_PIDS[$name]}" 2>/dev/null || status=$?
        if ((status > 128)); then
            why="$why (killed by signal $((status - 128)), $(kill -l "$status"))"
        else
            why="$why (exit status $status)"
        fi
    fi
    log "ERROR: $name $why; last lines of $(log_file "$name"):"
    tail -n 40 "$(log_file "$name")" >&2 || true
}

# wait_until <component> <timeout-seconds> <description> <command...>
# Polls the command until it succeeds; fails early if the component's process exits.
wait_until() {
    local name="$1" timeout="$2" what="$3"
    shift 3
    local deadline=$((SECONDS + timeout))
    while ((SECONDS < deadline)); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        if component_exited "$name"; then
            report_crash "$name" "exited while waiting for: $what"
            return 1
        fi
        sleep 0.2
    done
    report_crash "$name" "not healthy after ${timeout}s (waiting for: $what)"
    return 1
}

# Prints N distinct free loopback TCP ports. They are held open together so they differ.
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# token_of <identity>: its bearer token (tests/env/pki.sh writes them).
token_of() {
    awk -F, -v name="$1" '$3 == name { print $1 }' "$PKI_DIR/tokens.csv"
}

# curl against the apiserver as the admin user.
kube_curl() {
    # shellcheck source=/dev/null
    source "$PORTS_FILE"
    curl -sf --max-time 5 --cacert "$PKI_DIR/ca.crt" -H @<(printf 'Authorization: Bearer %s\n' "$(token_of admin)") \
        "https://$HOST_IP:$APISERVER_PORT$1"
}

# A signed DynamoDB JSON-protocol call against DynamoDB Local (dummy credentials).
ddb_call() {
    local body="${2:-}"
    [[ -n "$body" ]] || body='{}'
    # shellcheck source=/dev/null
    source "$PORTS_FILE"
    curl -sf --max-time 5 -X POST "http://127.0.0.1:$DYNAMODB_PORT/" \
        -H "X-Amz-Target: DynamoDB_20120810.$1" -H 'Content-Type: application/x-amz-json-1.0' \
        --user local:local --aws-sigv4 "aws:amz:$AWS_REGION_DEFAULT:dynamodb" -d "$body"
}

write_env_file() {
    # shellcheck source=/dev/null
    source "$PORTS_FILE"
    local tmp="$ENV_FILE.tmp"
    cat >"$tmp" <<EOF
# Written by tests/env/up; source it to talk to the local environment.
export KUBECONFIG='$KUBECONFIG_FILE'
export AWS_ENDPOINT_URL_DYNAMODB='http://127.0.0.1:$DYNAMODB_PORT'
export AWS_REGION='$AWS_REGION_DEFAULT'
export AWS_ACCESS_KEY_ID='local'
export AWS_SECRET_ACCESS_KEY='local'
export DDB_STACK_TABLE='${DDB_STACK_TABLE:-$DDB_STACK_TABLE_DEFAULT}'
export STACK_ENV_STATE_DIR='$STATE_DIR'
export STACK_ENV_EKS_TIER='${EKS_TIER:-unknown}'
# The registry the nodes pull from without credentials (push your own images there, see
# tests/env/README.md) and the allowlist that lets an API accept it, as an operator lets a
# private registry through.
export STACK_ENV_REGISTRY='$HOST_IP:$REGISTRY_PORT'
export STACK_IMAGE_ALLOWLIST='$HOST_IP:$REGISTRY_PORT/'
# Where a benchmark serves the same registry slowly (its own throttled proxy, bench-startgun);
# the nodes pull from it over plain HTTP.
export STACK_ENV_SLOW_REGISTRY='${SLOW_REGISTRY_PORT:+$HOST_IP:$SLOW_REGISTRY_PORT}'
# Participants connect from this machine, a private address the stacks' isolation lets in only
# when told (as an operator tells it an on-site network).
export STACK_ALLOW_INGRESS_CIDRS='$HOST_IP/32'
# Every stack waits until its isolation is enforced (the tcp image has busybox's sh and nc).
export STACK_ISOLATION_CHECK_IMAGE='$HOST_IP:$REGISTRY_PORT/stack-env/tcp:1'
# The pre-pull's pods run the sleep of the registry's static busybox in each image.
export STACK_PREPULL_HELPER_IMAGE='$HOST_IP:$REGISTRY_PORT/stack-env/busybox:1'
export STACK_ENV_REAL_NODES='${REAL_NODES:-0}'
# A public address on this machine that the real nodes' stacks reach as they would the internet.
export STACK_ENV_INTERNET_HOST='$( ((${REAL_NODES:-0} > 0)) && internet_host)'
EOF
    mv "$tmp" "$ENV_FILE"
}

# "QPS BURST" of kube-scheduler's API client for an EKS control plane tier. Each bind is one
# request, so QPS caps pods scheduled per second. EKS Provisioned Control Plane sets it per tier
# on 1.30+ (XL 167, 2XL 283, 4XL 400 pods/s: the EKS user guide, "Control Plane Scaling
# Tiers"); Standard publishes none, so it gets the upstream default, 50 (burst 100).
scheduler_qps() {
    case "$1" in
    standard) echo "50 100" ;;
    xl) echo "167 334" ;;
    2xl) echo "283 566" ;;
    4xl) echo "400 800" ;;
    *) die "STACK_ENV_EKS_TIER: standard, xl, 2xl or 4xl, got '$1'" ;;
    esac
}

# Cargo's target directory.
target_dir() {
    echo "${CARGO_TARGET_DIR:-$REPO_DIR/target}"
}

# Where cargo puts a workspace binary of the given profile (debug or release).
target_bin() {
    echo "$(target_dir)/$1/$2"
}

# The stack-env helper binary (table from template.yaml, simulated nodes). Built on demand.
stack_env_bin() {
    target_bin debug stack-env
}

# Every build of the scripts selects the whole workspace: one feature set, the one `cargo test
# --workspace` resolves too, so no script compiles the dependency graph a second time.
build_workspace_bin() {
    (cd "$REPO_DIR" && cargo build --quiet --workspace "${@:2}" --bin "$1")
}

build_stack_env() {
    build_workspace_bin stack-env
}

# The functions' bootstraps as `sam build` makes them, what the Lambda emulator runs: rebuilt
# (debug, as the test command builds them) when missing or older than the sources.
ensure_bootstraps() {
    build_stack_env
    "$(stack_env_bin)" lambda-bootstraps 2>/dev/null && return 0
    log "building the functions' bootstraps: sam build (debug)"
    SAM_BUILD_MODE=debug CARGO_PROFILE_DEV_DEBUG=0 "$ENV_DIR/check-deploy" --build >&2
}

# Alive and not a zombie (a component started by this very shell is its child until reaped).
pid_running() {
    local state
    state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$state" && "$state" != "Z" ]]
}

# stop_components <grace-seconds> <name...>: SIGTERM to each running one, wait, SIGKILL to
# whatever is left after the grace period. Only pids from our pid files are signalled.
stop_components() {
    local grace="$1" name pid i
    shift
    local -a pids=() names=()
    for name in "$@"; do
        if pid="$(component_pid "$name")"; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            names+=("$name")
        fi
        rm -f "$(pid_file "$name")"
    done
    local deadline=$((SECONDS + grace)) left
    while :; do
        left=0
        for pid in "${pids[@]}"; do
            pid_running "$pid" && left=$((left + 1))
        done
        ((left == 0 || SECONDS >= deadline)) && break
        sleep 0.1
    done
    for i in "${!pids[@]}"; do
        if pid_running "${pids[i]}"; then
            log "${names[i]} (pid ${pids[i]}) ignored SIGTERM for ${grace}s; sending SIGKILL"
            kill -KILL "${pids[i]}" 2>/dev/null || true
        fi
    done
    for pid in "${pids[@]}"; do
        while pid_running "$pid"; do sleep 0.05; done
    done
    ((${#names[@]} == 0)) || log "stopped: ${names[*]}"
}

# Stops everything we started and undoes what the real nodes changed: the nodes first (their
# kubelets still talk to the apiserver), etcd last (the apiserver's shutdown still talks to it).
stop_all() {
    local grace="${1:-15}" i
    local -a first=()
    # Cleanup goes on whatever fails on the way (`||` also keeps set -e out of stop_node).
    for ((i = 1; i <= ${REAL_NODES:-0}; i++)); do
        stop_node "$i" || log "could not stop node $i completely"
    done
    for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
        [[ "${COMPONENTS[i]}" == etcd ]] || first+=("${COMPONENTS[i]}")
    done
    stop_components "$grace" "${first[@]}"
    stop_components "$grace" etcd
    remove_runtime_dirs
    net_down || true
    restore_sysctls || true
    release_slot
}

# shellcheck source=nodes.sh
source "$ENV_DIR/nodes.sh"
load_net
