// Command pause is the sandbox ("pause") container of the test bed's real nodes: no registry can be
// reached here, so containerd's sandbox_image is this program in an image of its own (make node-tools).
// As upstream's pause does, it sleeps as the pod's PID 1, reaps the zombies of a shared PID namespace and
// exits on SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for got := range signals {
		if got != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
