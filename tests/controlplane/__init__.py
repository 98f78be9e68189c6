"""Tests against a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler from `make control-plane`), marked `controlplane`; skipped when the binaries are absent."""
