# The environment's registry and the challenge images pushed to it (see images/README.md).
# Sourced by up, after the registry answers. Images are layers made here from Debian's static
# busybox and our own files, assembled by crane; nothing is pulled from outside.
# shellcheck shell=bash

IMAGES_DIR="$ENV_DIR/images"

# crane over plain HTTP; its progress lines go to the log.
crane_() { "$BIN_DIR/crane" --insecure "$@" >>"$LOG_DIR/images.log" 2>&1; }

# layer_of <tar> <dir>: a reproducible layer tarball of a directory tree.
layer_of() {
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$2" -cf "$1" .
}

# The busybox userland every challenge image shares: /bin with the applets the images use,
# /etc/passwd with root and uid 1000, /tmp.
busybox_tree() {
    local root="$1" applet
    mkdir -p "$root"/{bin,etc,tmp,www}
    chmod 1777 "$root/tmp"
    cp "$(command -v busybox)" "$root/bin/busybox"
    for applet in sh nc httpd sleep cat echo grep id hostname ls ps wget env nslookup; do
        ln -s busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nctf:x:1000:1000:ctf:/tmp:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\nctf:x:1000:\n' >"$root/etc/group"
    install -m 0755 "$IMAGES_DIR/banner" "$root/bin/banner"
    install -m 0755 "$BIN_DIR/udp-banner" "$root/bin/udp-banner"
    install -m 0644 "$IMAGES_DIR/index.html" "$root/www/index.html"
}

# crane reads --entrypoint as one CSV record: no commas or double quotes inside an argument.
push_images() {
    local work="$STATE_DIR/images" repo="$REGISTRY/stack-env"
    rm -rf "$work"
    mkdir -p "$work/busybox" "$work/pause"
    busybox_tree "$work/busybox"
    layer_of "$work/busybox.tar" "$work/busybox"
    install -m 0755 "$BIN_DIR/pause" "$work/pause/pause"
    layer_of "$work/pause.tar" "$work/pause"

    crane_ append --oci-empty-base -f "$work/pause.tar" -t "$repo/pause-layer:3.10"
    crane_ mutate "$repo/pause-layer:3.10" --entrypoint /pause -t "$repo/pause:3.10"
    crane_ append --oci-empty-base -f "$work/busybox.tar" -t "$repo/busybox:1"
    crane_ mutate "$repo/busybox:1" --entrypoint nc,-ll,-p,8080,-e,/bin/banner -t "$repo/tcp:1"
    crane_ mutate "$repo/busybox:1" --env DELAY=3 \
        --entrypoint 'sh,-c,sleep $DELAY && exec httpd -f -p 8080 -h /www' -t "$repo/http:1"
    crane_ mutate "$repo/busybox:1" --user 1000:1000 --entrypoint nc,-ll,-p,80,-e,/bin/banner \
        -t "$repo/lowport:1"
    crane_ mutate "$repo/busybox:1" --entrypoint /bin/udp-banner,9999 -t "$repo/udp:1"
    crane_ mutate "$repo/busybox:1" \
        --entrypoint 'sh,-c,echo stack-env crash challenge: exiting with 3 >&2; exit 3' -t "$repo/crash:1"
}

# The cluster's DNS: the static CoreDNS alone, configured by the ConfigMap mounted at
# /etc/coredns (tests/src/env/cluster_dns.rs). Its 55 MB take seconds to compress: up pushes it
# while the nodes start.
push_dns_image() {
    local work="$STATE_DIR/images/coredns" repo="$REGISTRY/stack-env"
    rm -rf "$work"
    mkdir -p "$work/root"
    install -m 0755 "$BIN_DIR/coredns" "$work/root/coredns"
    layer_of "$work/coredns.tar" "$work/root"
    crane_ append --oci-empty-base -f "$work/coredns.tar" -t "$repo/coredns-layer:1"
    crane_ mutate "$repo/coredns-layer:1" --entrypoint /coredns -t "$repo/coredns:1"
}
