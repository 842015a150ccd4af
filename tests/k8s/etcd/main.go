// Command etcd is a thin wrapper around the upstream etcd server entry point,
// built from the Go module proxy for cheiron's Kubernetes integration tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
