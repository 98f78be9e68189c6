// Command coredns is CoreDNS (github.com/coredns/coredns, pinned in ./go.mod) with only the plugins a
// test-bed cluster's DNS needs: the cluster's Services and pods from the API server (kubernetes), and the
// health, readiness, cache, error and query-log plugins kubeadm's Corefile uses. `python -m sim
// realcluster` runs it as kube-system's DNS Deployment on the real nodes, as kind does; with no upstream
// resolver (no network here), names outside the cluster are not forwarded. Built by make node-tools.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"      // cache
	_ "github.com/coredns/coredns/plugin/errors"     // errors
	_ "github.com/coredns/coredns/plugin/health"     // health
	_ "github.com/coredns/coredns/plugin/kubernetes" // kubernetes
	_ "github.com/coredns/coredns/plugin/log"        // log
	_ "github.com/coredns/coredns/plugin/ready"      // ready
)

func init() {
	// The order CoreDNS runs its plugins in (upstream's plugin.cfg order, limited to the ones built in).
	dnsserver.Directives = []string{"errors", "log", "health", "ready", "cache", "kubernetes"}
}

func main() {
	coremain.Run()
}
