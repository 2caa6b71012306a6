// Command register registers one CSI driver with a kcsi host, as the kubelet's plugin
// manager would, and prints the host's drivers as JSON.
//
//	register -endpoint unix:///var/lib/kubelet/plugins/example.csi/csi.sock -name example.csi
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"kcsi.dev/kcsi"
)

func main() {
	endpoint := flag.String("endpoint", "", "the driver's socket, unix:///path or /path (required)")
	name := flag.String("name", "", "the driver's name, as its registrar reports it (required)")
	versions := flag.String("versions", "1.0.0", "comma-separated CSI versions the driver supports")
	node := flag.String("node", "node-1", "node name")
	root := flag.String("root", "", "kubelet root directory (default: a new temporary directory)")
	timeout := flag.Duration("timeout", 30*time.Second, "registration deadline")
	flag.Parse()
	if *endpoint == "" || *name == "" {
		flag.Usage()
		os.Exit(2)
	}
	if *root == "" {
		dir, err := os.MkdirTemp("", "kcsi-register")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		*root = dir
	}

	host, err := kcsi.NewHost(kcsi.Config{NodeName: *node, RootDir: *root})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := host.RegisterPlugin(ctx, *name, *endpoint, strings.Split(*versions, ",")); err != nil {
		log.Fatalf("registering %s: %v (transient: %v)", *name, err, kcsi.IsTransient(err))
	}
	drivers, err := host.DriversJSON()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(drivers)
}
