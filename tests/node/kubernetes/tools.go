//go:build tools

// Package tools pins the node commands that tests/node/tools builds (the kubelet, and
// kube-scheduler for the test that installs cheiron in-cluster). It is never compiled; it only
// keeps the requirements in go.mod/go.sum. A module of its own, apart from tests/k8s/kubernetes,
// so the control plane's wrapper and cache key stay as they are; both require the same
// k8s.io/kubernetes, so the Go build cache shares what they have in common.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
