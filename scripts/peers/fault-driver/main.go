// Command csi-fault-driver is a CSI driver that INJECTS FAULTS, for the kcsi tests that need a
// failure no real peer produces on demand. Every other kcsi test runs against the real
// csi-driver-host-path (hostpathplugin) or Kubernetes' e2e mock driver; see scripts/peers.
//
// Underneath the faults it behaves like csi-driver-host-path on the node side, with real mounts,
// so a fault test sees the same volume lifecycle as the other tests: one Unix socket serving
// Identity, Controller and Node; volumes in <statedir>/<volid> (a directory, or a sparse file
// for block volumes) and bookkeeping in <statedir>/state.json; NodeStage is bookkeeping only
// and NodePublish needs it at the identical staging path; NodePublish creates the target with
// mkdir (the parent is the kubelet's job) and bind-mounts the volume (block: a loop device onto
// a target file); NodeUnpublish unmounts and removes the target; NodeUnstage fails while
// published; ephemeral inline volumes (csi.storage.k8s.io/ephemeral=true) live from publish to
// unpublish; NodeGetVolumeStats does a real statfs. Its vendor_version is "fault-driver-0.1".
//
// Where it differs from hostpathplugin (deliberately small, and no test depends on it except
// where it injects a fault): no snapshots, cloning, group controller, capacity or attach;
// DeleteVolume of a staged or published volume fails; NodeUnpublish removes the target with
// rmdir/unlink (never RemoveAll); NodeGetVolumeStats wants a current publication; its volume
// condition reports a missing volume or target.
//
// The faults:
//   - --fail-rpc=<Method>=<grpc code number>[:<count>][,...] (or $CSI_FAULT_DRIVER_FAIL_RPC)
//     makes <Method> (short name, e.g. NodePublishVolume, or full /csi.v1.Node/NodePublishVolume)
//     return that code without doing anything; with :<count> only the first <count> calls fail.
//   - --hang-rpc=<Method>[:<count>][,...] (or $CSI_FAULT_DRIVER_HANG_RPC) makes <Method> block
//     until the caller's context ends (DeadlineExceeded / Canceled), then return that code.
//   - --disable-node-cap=STAGE_UNSTAGE_VOLUME,... drops node capabilities: a driver without
//     staging, stats or expansion, which csi-driver-host-path cannot be made into.
//
// At -v>=5 every RPC is logged as csi-driver-host-path logs it (pkg/hostpath/server.go
// logGRPCJson), one line `gRPCCall: {"Method":…,"Request":…,"Response":…,"Error":…}`, so one
// log parser serves both drivers.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

const (
	vendorVersion = "fault-driver-0.1"
	topologyKey   = "topology.hostpath.csi/node"
)

type config struct {
	endpoint, nodeID, stateDir, driverName string
	maxVolumesPerNode                      int64
	enableTopology                         bool
	nodeCaps                               []csi.NodeServiceCapability_RPC_Type
}

func main() {
	klog.InitFlags(nil)
	var cfg config
	flag.StringVar(&cfg.endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix://<path> or <path>")
	flag.StringVar(&cfg.nodeID, "nodeid", "", "node id (required)")
	flag.StringVar(&cfg.stateDir, "statedir", "/csi-data-dir", "directory for volumes and state.json")
	flag.StringVar(&cfg.driverName, "drivername", "hostpath.csi.k8s.io", "CSI driver name")
	flag.Int64Var(&cfg.maxVolumesPerNode, "maxvolumespernode", 0, "NodeGetInfo max_volumes_per_node (0 = unlimited)")
	flag.BoolVar(&cfg.enableTopology, "enable-topology", true, "report topology "+topologyKey+"=<nodeid>")
	disableCaps := flag.String("disable-node-cap", "", "comma-separated node capabilities to drop, e.g. STAGE_UNSTAGE_VOLUME")
	failRPC := flag.String("fail-rpc", os.Getenv("CSI_FAULT_DRIVER_FAIL_RPC"), "test hook: <Method>=<code>[:<count>][,...]")
	hangRPC := flag.String("hang-rpc", os.Getenv("CSI_FAULT_DRIVER_HANG_RPC"), "test hook: <Method>[:<count>][,...]")
	flag.Parse()

	if cfg.nodeID == "" {
		klog.Fatal("--nodeid is required")
	}
	var err error
	if cfg.nodeCaps, err = nodeCapabilities(*disableCaps); err != nil {
		klog.Fatal(err)
	}
	hooks, err := parseHooks(*failRPC, *hangRPC)
	if err != nil {
		klog.Fatal(err)
	}
	d, err := newDriver(cfg)
	if err != nil {
		klog.Fatal(err)
	}

	path := strings.TrimPrefix(strings.TrimPrefix(cfg.endpoint, "unix://"), "unix:")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		klog.Fatalf("removing stale socket %s: %v", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		klog.Fatalf("listen on %s: %v", path, err)
	}
	logAll := klog.V(5).Enabled()
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := hooks.run(ctx, info.FullMethod, req, h)
		if logAll {
			logCall(info.FullMethod, req, resp, err)
		}
		return resp, err
	}))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	csi.RegisterNodeServer(srv, d)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigs
		klog.Infof("%v: shutting down", s)
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second): // a hung RPC (test hook) must not block shutdown
			srv.Stop()
		}
	}()
	klog.Infof("%s %s (fault-injecting CSI driver) serving %s, node %q, state in %s",
		cfg.driverName, vendorVersion, path, cfg.nodeID, cfg.stateDir)
	if err := srv.Serve(l); err != nil {
		klog.Errorf("serve: %v", err)
	}
	_ = os.Remove(path)
	klog.Flush()
}

var logMu sync.Mutex

// logCall writes one line per RPC in hostpathplugin's format (pkg/hostpath/server.go
// logGRPCJson): the request and response structs as encoding/json renders them.
func logCall(method string, req, resp any, err error) {
	line := struct {
		Method    string
		Request   any
		Response  any
		Error     string
		FullError error
	}{Method: method, Request: req, Response: resp, FullError: err}
	if err != nil {
		line.Error = err.Error()
	}
	b, mErr := json.Marshal(line)
	if mErr != nil {
		b = []byte(fmt.Sprintf(`{"Method":%q,"Error":"log: %s"}`, method, mErr))
	}
	logMu.Lock()
	defer logMu.Unlock()
	_, _ = os.Stderr.Write(append(append([]byte("gRPCCall: "), b...), '\n'))
}

// hook is one fault: fail with code, or hang; left < 0 means every call.
type hook struct {
	code codes.Code
	hang bool
	left int
}

type hookSet struct {
	mu sync.Mutex
	m  map[string]*hook // by short method name
}

// parseHooks reads --fail-rpc (Method=code[:count],...) and --hang-rpc (Method[:count],...).
func parseHooks(fail, hang string) (*hookSet, error) {
	hs := &hookSet{m: map[string]*hook{}}
	add := func(spec string, isHang bool) error {
		for _, item := range strings.Split(spec, ",") {
			if item = strings.TrimSpace(item); item == "" {
				continue
			}
			h := &hook{hang: isHang, left: -1}
			name, rest := item, ""
			if i := strings.LastIndex(item, ":"); i >= 0 {
				name, rest = item[:i], item[i+1:]
				n, err := strconv.Atoi(rest)
				if err != nil || n < 1 {
					return fmt.Errorf("bad count in hook %q", item)
				}
				h.left = n
			}
			if !isHang {
				eq := strings.LastIndex(name, "=")
				if eq < 0 {
					return fmt.Errorf("bad --fail-rpc item %q: want <Method>=<code>[:<count>]", item)
				}
				c, err := strconv.Atoi(name[eq+1:])
				if err != nil || c <= 0 || c > 16 {
					return fmt.Errorf("bad grpc code in %q (want 1..16)", item)
				}
				name, h.code = name[:eq], codes.Code(c)
			}
			hs.m[name[strings.LastIndex(name, "/")+1:]] = h
		}
		return nil
	}
	if err := add(fail, false); err != nil {
		return nil, err
	}
	return hs, add(hang, true)
}

// run applies a matching hook, or calls the real handler.
func (hs *hookSet) run(ctx context.Context, method string, req any, h grpc.UnaryHandler) (any, error) {
	short := method[strings.LastIndex(method, "/")+1:]
	hs.mu.Lock()
	hk := hs.m[short]
	active := hk != nil && hk.left != 0
	if active && hk.left > 0 {
		hk.left--
	}
	hs.mu.Unlock()
	switch {
	case !active:
		return h(ctx, req)
	case hk.hang:
		klog.Infof("test hook: %s hangs until its context ends", short)
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	default:
		klog.Infof("test hook: %s fails with %s", short, hk.code)
		return nil, status.Errorf(hk.code, "fault-driver: %s fails with %s", short, hk.code)
	}
}

func nodeCapabilities(disable string) ([]csi.NodeServiceCapability_RPC_Type, error) {
	caps := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_VOLUME_CONDITION,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	}
	for _, name := range strings.Split(disable, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		v, ok := csi.NodeServiceCapability_RPC_Type_value[name]
		if !ok {
			return nil, fmt.Errorf("--disable-node-cap: unknown capability %q", name)
		}
		kept := caps[:0]
		for _, c := range caps {
			if c != csi.NodeServiceCapability_RPC_Type(v) {
				kept = append(kept, c)
			}
		}
		caps = kept
	}
	return caps, nil
}
