# Local PKI of the test cluster: a CA, the apiserver serving certificate, one client
# certificate per component, and the service-account signing key. Sourced by `up`.
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

client_cert() {
    sign_cert "$1" "$2" "extendedKeyUsage=clientAuth"
}

pki_complete() {
    local f
    for f in ca.crt ca.key apiserver.crt admin.crt kube-controller-manager.crt kube-scheduler.crt kwok.crt sa.key sa.pub; do
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
    client_cert admin "/O=system:masters/CN=stack-env-admin"
    client_cert kube-controller-manager "/CN=system:kube-controller-manager"
    client_cert kube-scheduler "/CN=system:kube-scheduler"
    # kwok plays every kubelet at once (node status, leases, pod status, deletions).
    client_cert kwok "/O=system:masters/CN=kwok"
    new_key "$PKI_DIR/sa.key"
    openssl pkey -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null
}

# write_kubeconfig <file> <client-cert-name>: a self-contained kubeconfig for the apiserver.
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
    client-certificate-data: $(base64 -w0 <"$PKI_DIR/$name.crt")
    client-key-data: $(base64 -w0 <"$PKI_DIR/$name.key")
contexts:
- name: stack-env
  context:
    cluster: stack-env
    user: $name
current-context: stack-env
EOF
    chmod 600 "$file"
}
