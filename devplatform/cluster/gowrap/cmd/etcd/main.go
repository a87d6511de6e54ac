// etcd at exactly the version k8s.io/kubernetes pins (via go.sum), so the control plane
// needs no distribution package and no version-compatibility guesswork.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
