// The local environment's cluster DNS, as EKS's CoreDNS add-on serves it: CoreDNS pinned by
// go.mod, with only the plugins the environment's Corefile uses (tests/src/env/cluster_dns.rs),
// compiled in as CoreDNS's own plugin.cfg does it. All of upstream's (cloud DNS providers,
// tracing) would build several times longer for nothing the Corefile names.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
