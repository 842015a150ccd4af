//go:build tools

// Package tools pins the commands that tests/node/tools builds from other modules: the
// private registry of the node tests (distribution's cmd/registry) and crane, which lays out
// their images. It is never compiled; it only keeps the requirements in go.mod/go.sum.
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
	_ "github.com/google/go-containerregistry/cmd/crane"
)
