// Command etcd is upstream's etcd server (go.etcd.io/etcd/server/v3 main),
// built at the version k8s.io/kubernetes requires (make control-plane).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
