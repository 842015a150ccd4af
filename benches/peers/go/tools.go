//go:build tools

// Package tools pins the Kyverno commands that benches/peers/build builds
// (the admission controller and the background controller). It is never
// compiled; it only keeps the requirements in go.mod/go.sum.
package tools

import (
	_ "github.com/kyverno/kyverno/cmd/background-controller"
	_ "github.com/kyverno/kyverno/cmd/kyverno"
)
