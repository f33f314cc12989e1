// The pod sandbox of a real node in wf's local cluster (wf/cluster/images.py): holds the pod's namespaces and
// waits for SIGTERM or SIGINT, as Kubernetes' own pause does; its PID 1 has no default signal handlers.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
