# Local PKI of the test cluster: a CA, the apiserver serving certificate, one bearer token per
# client identity, and the service-account signing key. Sourced by `up`.
#
# Clients authenticate with bearer tokens, not client certificates: the apiserver verifies a
# client certificate's chain (ECDSA) on every request, while a token is a cached lookup. With
# tokens it spent 17 % less CPU in a 3,000-create burst, CPU the rest of the environment shares.
# EKS authenticates the functions with a bearer token too.
# shellcheck shell=bash

# EC keys: generated in milliseconds, accepted everywhere in Kubernetes.
new_key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null
}

# sign_cert <name> <subject> <extensions>: key + CSR + certificate signed by the local CA.
sign_cert() {
    local name="$1" subject="$2" extensions="$3"
    new_key "$PKI_DIR/$name.key"
    openssl req -new -key "$PKI_DIR/$name.key" -subj "$subject" -out "$PKI_DIR/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/ca.crt" -CAkey "$PKI_DIR/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 3650 -out "$PKI_DIR/$name.crt" \
        -extfile <(printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" "$extensions") \
        2>/dev/null
    rm -f "$PKI_DIR/$name.csr"
}

# Every client identity: name (its kubeconfig, and the token's uid), user, groups. kwok plays
# every simulated kubelet at once (node status, leases, pod status, deletions); a real node's
# kubelet is system:node:<name> in system:nodes, as the Node authorizer and NodeRestriction
# expect, and kube-proxy the user the default system:node-proxier binding names.
IDENTITIES=(
    "admin stack-env-admin system:masters"
    "kube-controller-manager system:kube-controller-manager -"
    "kube-scheduler system:kube-scheduler -"
    "kwok kwok system:masters"
    "kube-proxy system:kube-proxy -"
    # The nodes' NetworkPolicy enforcer reads pods, namespaces, policies and nodes cluster-wide
    # and never writes (its router and proxy are off): no narrower default role covers that.
    "kube-router stack-env-kube-router system:masters"
)
for ((node_index = 1; node_index <= 8; node_index++)); do
    IDENTITIES+=("stack-node-$node_index system:node:stack-node-$node_index system:nodes")
done
unset node_index

# The apiserver's --token-auth-file (token,user,uid,"groups"): a fresh random token each.
write_tokens() {
    local identity name user groups
    for identity in "${IDENTITIES[@]}"; do
        read -r name user groups <<<"$identity"
        [[ "$groups" == - ]] && groups=""
        printf '%s,%s,%s,"%s"\n' "$(openssl rand -hex 32)" "$user" "$name" "$groups"
    done >"$PKI_DIR/tokens.csv"
    chmod 600 "$PKI_DIR/tokens.csv"
}

pki_complete() {
    local f identity
    for f in ca.crt ca.key tokens.csv sa.key sa.pub; do
        [[ -s "$PKI_DIR/$f" ]] || return 1
    done
    for identity in "${IDENTITIES[@]}"; do
        [[ -n "$(token_of "${identity%% *}")" ]] || return 1
    done
    # Regenerate a week before anything expires.
    openssl x509 -checkend 604800 -noout -in "$PKI_DIR/ca.crt" >/dev/null
}

ensure_pki() {
    pki_complete && return 0
    log "generating the local PKI in $PKI_DIR"
    rm -rf "$PKI_DIR"
    mkdir -p "$PKI_DIR"
    chmod 700 "$PKI_DIR"
    new_key "$PKI_DIR/ca.key"
    openssl req -x509 -new -key "$PKI_DIR/ca.key" -subj "/CN=stack-env-ca" -days 3650 -out "$PKI_DIR/ca.crt" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    write_tokens
    new_key "$PKI_DIR/sa.key"
    openssl pkey -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null
}

# The certificates that name this start's addresses, issued on every up (milliseconds): the
# apiserver's serving certificate (loopback and the nodes' bridge address), the client
# certificate it shows kubelets (logs, exec), and each real node's kubelet serving certificate.
issue_certs() {
    local i name
    sign_cert apiserver "/CN=kube-apiserver" \
        "$(printf '%s\n' "extendedKeyUsage=serverAuth" \
            "subjectAltName=IP:127.0.0.1,IP:$HOST_IP,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")"
    sign_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" \
        "extendedKeyUsage=clientAuth"
    for ((i = 1; i <= $(real_node_count); i++)); do
        name="$(node_name "$i")"
        sign_cert "kubelet-$name" "/CN=$name" \
            "$(printf '%s\n' "extendedKeyUsage=serverAuth" "subjectAltName=IP:$(node_ip "$i"),DNS:$name")"
    done
}

# write_kubeconfig <file> <identity>: a self-contained kubeconfig for the apiserver.
write_kubeconfig() {
    local file="$1" name="$2"
    # shellcheck source=/dev/null
    source "$PORTS_FILE"
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: stack-env
  cluster:
    server: https://$HOST_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI_DIR/ca.crt")
users:
- name: $name
  user:
    token: $(token_of "$name")
contexts:
- name: stack-env
  context:
    cluster: stack-env
    user: $name
current-context: stack-env
EOF
    chmod 600 "$file"
}
