// Command pause waits for SIGTERM or SIGINT and exits 0: the pause image of the node tests
// (containerd's sandbox_image) and their private test image, both built by tests/node/tools.
// With an argument it first prints it, so a test image says which one it is in its log.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if len(os.Args) > 1 {
		fmt.Println(os.Args[1])
	}
	<-stop
}
