// The local environment's NetworkPolicy enforcer: kube-router pinned by go.mod, its firewall
// alone (the network policy controller), started as upstream's pkg/cmd starts it when only
// --run-firewall is on. Upstream's binary also links the BGP router (GoBGP) and the IPVS
// service proxy, which the nodes never run: about 40 % of its build.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/spf13/pflag"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s\n", err)
		os.Exit(1)
	}
}

func run() error {
	config, err := parseFlags()
	if err != nil {
		return err
	}
	if !config.RunFirewall || config.RunRouter || config.RunServiceProxy || config.RunLoadBalancer {
		return errors.New("this kube-router runs its firewall alone: --run-firewall=true " +
			"--run-router=false --run-service-proxy=false --run-loadbalancer=false")
	}
	clientConfig, err := clientcmd.BuildConfigFromFlags(config.Master, config.Kubeconfig)
	if err != nil {
		return fmt.Errorf("failed to build configuration from CLI: %w", err)
	}
	client, err := kubernetes.NewForConfig(clientConfig)
	if err != nil {
		return fmt.Errorf("failed to create Kubernetes client: %w", err)
	}

	var wg sync.WaitGroup
	stopCh := make(chan struct{})
	// The controller reports a heartbeat each sync; the health controller takes them.
	healthChan := make(chan *healthcheck.ControllerHeartbeat, 10)
	defer close(healthChan)
	hc, err := healthcheck.NewHealthController(config)
	if err != nil {
		return fmt.Errorf("failed to create health controller: %w", err)
	}
	wg.Add(1)
	go hc.RunServer(stopCh, &wg)

	factory := informers.NewSharedInformerFactory(client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	nsInformer := factory.Core().V1().Namespaces().Informer()
	npInformer := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stopCh)
	if err := waitForCaches(factory, stopCh, config.CacheSyncTimeout); err != nil {
		return err
	}
	hc.SetAlive()
	wg.Add(1)
	go hc.RunCheck(healthChan, stopCh, &wg)

	var ipsetMutex sync.Mutex
	iptablesCmdHandlers, ipSetHandlers, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		return fmt.Errorf("failed to create iptables handlers: %w", err)
	}
	npc, err := netpol.NewNetworkPolicyController(client, config, podInformer, npInformer, nsInformer,
		&ipsetMutex, iptablesCmdHandlers, ipSetHandlers)
	if err != nil {
		return fmt.Errorf("failed to create network policy controller: %w", err)
	}
	for _, handler := range []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{podInformer, npc.PodEventHandler},
		{nsInformer, npc.NamespaceEventHandler},
		{npInformer, npc.NetworkPolicyEventHandler},
	} {
		if _, err := handler.informer.AddEventHandler(handler.handler); err != nil {
			return fmt.Errorf("failed to add an event handler: %w", err)
		}
	}
	wg.Add(1)
	go npc.Run(healthChan, stopCh, &wg)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	klog.Infof("Shutting down the controllers")
	close(stopCh)
	wg.Wait()
	return nil
}

// parseFlags takes upstream's flags, and klog's as upstream's main sets them.
func parseFlags() (*options.KubeRouterConfig, error) {
	klog.InitFlags(nil)
	config := options.NewKubeRouterConfig()
	config.AddFlags(pflag.CommandLine)
	pflag.Parse()
	// https://github.com/kubernetes/kubernetes/issues/17162, as upstream's main.
	if err := flag.CommandLine.Parse([]string{}); err != nil {
		return nil, fmt.Errorf("failed to parse flags: %w", err)
	}
	if err := flag.Set("logtostderr", "true"); err != nil {
		return nil, fmt.Errorf("failed to set flag: %w", err)
	}
	if err := flag.Set("v", config.VLevel); err != nil {
		return nil, fmt.Errorf("failed to set flag: %w", err)
	}
	return config, nil
}

func waitForCaches(factory informers.SharedInformerFactory, stopCh <-chan struct{}, timeout time.Duration) error {
	synced := make(chan struct{})
	go func() {
		factory.WaitForCacheSync(stopCh)
		close(synced)
	}()
	select {
	case <-time.After(timeout):
		return fmt.Errorf("%s timeout", timeout)
	case <-synced:
		return nil
	}
}
