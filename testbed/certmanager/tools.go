//go:build tools

// Package tools pins cert-manager for the test bed: its controller and cainjector run beside the real
// control plane (out of cluster, with the admin kubeconfig) so that the release manifest's Certificates are
// issued by cert-manager itself (tests/nodes/test_manifest.py). v1.11 is the last release whose commands are in
// the module the Go module proxy serves (later ones are modules of their own, not published there); the
// Certificate and Issuer API the chart uses (cert-manager.io/v1) is the same.
package tools

import (
	_ "github.com/cert-manager/cert-manager/cmd/cainjector/app"
	_ "github.com/cert-manager/cert-manager/cmd/controller/app"
)
