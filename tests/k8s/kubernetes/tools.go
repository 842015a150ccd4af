//go:build tools

// Package tools pins the Kubernetes control-plane commands that
// tests/k8s/assets builds (kube-apiserver, kube-controller-manager, kubectl).
// It is never compiled; it only keeps the requirements in go.mod/go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
