//go:build tools

// Package tools pins the Liqo commands this module builds.
package tools

import (
	_ "github.com/liqotech/liqo/cmd/crd-replicator"
	_ "github.com/liqotech/liqo/cmd/liqo-controller-manager"
	_ "github.com/liqotech/liqo/cmd/liqoctl"
	_ "github.com/liqotech/liqo/cmd/uninstaller"
	_ "github.com/liqotech/liqo/cmd/virtual-kubelet"
	_ "github.com/liqotech/liqo/cmd/webhook"
)
