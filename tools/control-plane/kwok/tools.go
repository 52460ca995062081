//go:build tools

// Package tools pins kwok, the fake kubelet that makes Pods Ready without containers.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
