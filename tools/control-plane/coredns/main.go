// CoreDNS for the real-node profile (fluidos_testenv::real_node), with only
// the plugins a cluster's own names need: its own main, as CoreDNS documents
// for builds with a chosen plugin set, so the build leaves out the cloud
// providers' SDKs the full plugin list pulls in. No forward (and so no loop
// detection): a real node's namespace has no upstream resolver to forward to.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The order plugins run in, as CoreDNS's plugin.cfg orders them.
var directives = []string{
	"reload",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
