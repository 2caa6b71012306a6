// Command csi-mock-driver serves Kubernetes' own mock CSI driver (the csi-test mock that
// Kubernetes keeps for its e2e tests, k8s.io/kubernetes/test/e2e/storage/drivers/csi-test)
// on a Unix socket, as a standalone process.
//
// Why it exists: the Go module proxy reachable here refuses github.com/kubernetes-csi/*
// (csi-driver-host-path, node-driver-registrar, csi-test/v4 all answer 403), so this is the
// real, upstream-maintained CSI driver we can build. It implements Identity, Controller and
// Node with in-memory bookkeeping (no real mounts: NodePublish only mkdirs the target) and,
// at -v=3, logs every call as `gRPCCall: {"Method":…,"Request":…,"Response":…,"Error":…}`.
// Volumes "1", "2", "3" exist from the start; the node ID equals the driver name.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/driver"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"
)

func main() {
	klog.InitFlags(nil)
	endpoint := flag.String("endpoint", os.Getenv("CSI_ENDPOINT"), "unix://<path> or <path> of the socket to serve (default: $CSI_ENDPOINT)")
	var cfg service.Config
	flag.StringVar(&cfg.DriverName, "drivername", service.Name, "CSI driver name (also used as node ID)")
	flag.BoolVar(&cfg.DisableAttach, "disable-attach", false, "drop PUBLISH_UNPUBLISH_VOLUME from the controller capabilities")
	flag.Int64Var(&cfg.AttachLimit, "attach-limit", 0, "NodeGetInfo max_volumes_per_node (0 = unset)")
	flag.BoolVar(&cfg.NodeExpansionRequired, "node-expand-required", false, "advertise node EXPAND_VOLUME")
	flag.BoolVar(&cfg.NodeVolumeConditionRequired, "node-volume-condition", false, "advertise node VOLUME_CONDITION")
	flag.BoolVar(&cfg.VolumeMountGroupRequired, "volume-mount-group", false, "advertise node VOLUME_MOUNT_GROUP")
	flag.BoolVar(&cfg.DisableControllerExpansion, "disable-controller-expansion", false, "no controller EXPAND_VOLUME")
	flag.BoolVar(&cfg.DisableOnlineExpansion, "disable-online-expansion", false, "offline volume expansion only")
	flag.BoolVar(&cfg.PermissiveTargetPath, "permissive-target-path", false, "accept an existing target path")
	flag.BoolVar(&cfg.EnableTopology, "enable-topology", false, "advertise topology "+service.TopologyKey)
	flag.Parse()

	path := strings.TrimPrefix(*endpoint, "unix://")
	if path == "" {
		fmt.Fprintln(os.Stderr, "csi-mock-driver: --endpoint (or CSI_ENDPOINT) is required")
		os.Exit(2)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		klog.Fatalf("removing stale socket %s: %v", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		klog.Fatalf("listen %s: %v", path, err)
	}

	svc := service.New(cfg)
	d := driver.NewCSIDriver(&driver.CSIDriverServers{Controller: svc, Identity: svc, Node: svc})
	// nil interceptor = the driver's own: no credential checks (creds unset), JSON call log at -v=3.
	if err := d.Start(l, nil); err != nil {
		klog.Fatalf("start: %v", err)
	}
	klog.Infof("mock CSI driver %q serving on %s", cfg.DriverName, path)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	d.Stop()
	_ = os.Remove(path)
}
