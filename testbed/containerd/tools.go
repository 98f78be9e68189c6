//go:build tools

// Package tools pins containerd 2 for the test bed's real nodes: `make node-tools` builds its daemon, its runc
// shim and ctr from this module into .tools/nodes (static, tags no_btrfs no_devmapper no_zfs: the nodes use
// overlayfs), since Debian 12's containerd is 1.6, which lacks the CRI RuntimeConfig call kubelet 1.37
// needs. runc and the CNI plugins stay Debian's (testbed/node-tools.sh).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
