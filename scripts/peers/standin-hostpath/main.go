// Command hostpath-standin is a STAND-IN for csi-driver-host-path's hostpathplugin, used only as
// a test peer for kcsi (the kubelet's CSI volume plugin re-implemented in Rust).
//
// Why it exists: the Go module proxy reachable from kcsi's machines answers 403 for
// github.com/kubernetes-csi/csi-driver-host-path (and every other github.com/kubernetes-csi/*
// module except csi-lib-utils and csi-test/v5), so the real driver cannot be built here. This
// program reproduces the real driver's observable node-side behaviour, with real mounts, so
// kcsi's tests still run against a driver that really bind-mounts directories and loop
// devices. It is not the real driver and does not pretend to be: its vendor_version is
// "standin-0.1".
//
// What it does like csi-driver-host-path:
//   - one Unix socket serving Identity, Controller and Node; volumes live in <statedir>/<volid>
//     (a directory, or a sparse file for block volumes) and the driver's bookkeeping in
//     <statedir>/state.json, so a driver restarted on the same statedir knows its volumes;
//   - NodeStage is bookkeeping only; a second NodeStage at another staging path fails with
//     FailedPrecondition; NodePublish needs a prior NodeStage at the identical staging path,
//     creates the target with mkdir (never MkdirAll: the parent is the kubelet's job) and
//     bind-mounts the volume onto it (read-only when asked); block volumes are attached to a
//     loop device that is bind-mounted onto a target FILE; NodeUnpublish unmounts and removes
//     the target; NodeUnstage fails with FailedPrecondition while the volume is published;
//   - ephemeral inline volumes (volume_context csi.storage.k8s.io/ephemeral=true) are created
//     on NodePublish with the volume id the caller sent and deleted on NodeUnpublish;
//   - NodeGetVolumeStats does a real statfs (bytes and inodes; block: total bytes only) and
//     reports a VolumeCondition; NodeGetInfo reports topology topology.hostpath.csi/node=<nodeid>.
//
// Where it differs from the real driver (deliberately small): no snapshots, cloning, group
// controller, capacity tracking, attach (ControllerPublish) or health-monitor RPCs; a volume
// is staged at one path at a time; DeleteVolume of a volume that is still staged or published
// fails with FailedPrecondition instead of only logging a warning; NodeUnpublish removes the
// target with rmdir/unlink (never RemoveAll), so a non-empty unmounted target is an error;
// NodeGetVolumeStats wants volume_path to be a current publication of that volume (NotFound
// otherwise); there is no --ephemeral flag (only volume_context marks a volume ephemeral);
// --maxvolumespernode is only reported, not enforced; with --enable-volume-mount-group,
// NodePublish gives the group to the volume tree (chgrp, g+rw, setgid dirs) as fsGroup would.
//
// Test hooks (for kcsi's tests only; not in the real driver):
//   - --disable-node-cap=STAGE_UNSTAGE_VOLUME,... drops node capabilities (a driver without
//     staging); --enable-volume-mount-group adds VOLUME_MOUNT_GROUP.
//   - --fail-rpc=<Method>=<grpc code number>[:<count>][,...] (or $HOSTPATH_STANDIN_FAIL_RPC)
//     makes <Method> (short name, e.g. NodePublishVolume, or full /csi.v1.Node/NodePublishVolume)
//     return that code without doing anything; with :<count> only the first <count> calls fail.
//   - --hang-rpc=<Method>[:<count>][,...] (or $HOSTPATH_STANDIN_HANG_RPC) makes <Method> block
//     until the caller's context ends (DeadlineExceeded / Canceled), then return that code.
//   - --log-requests (or -v>=5) writes every RPC as one JSON line to stderr:
//     {"method":"/csi.v1.Node/NodePublishVolume","request":{...},"response":{...}|null,
//     "error":"<status message, empty on success>","code":"<grpc code name, e.g. OK>"}
//     with proto field names and only the fields that are set; fields marked csi_secret in the
//     CSI spec (e.g. "secrets") are replaced whole by "***stripped***" (csi-lib-utils protosanitizer).
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
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

const (
	vendorVersion = "standin-0.1"
	topologyKey   = "topology.hostpath.csi/node"
)

type config struct {
	endpoint, nodeID, stateDir, driverName   string
	maxVolumesPerNode                        int64
	enableTopology, enableMountGroup, logReq bool
	nodeCaps                                 []csi.NodeServiceCapability_RPC_Type
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
	flag.BoolVar(&cfg.enableMountGroup, "enable-volume-mount-group", false, "add node capability VOLUME_MOUNT_GROUP")
	flag.BoolVar(&cfg.logReq, "log-requests", false, "log every RPC as a JSON line on stderr (also at -v>=5)")
	disableCaps := flag.String("disable-node-cap", "", "comma-separated node capabilities to drop, e.g. STAGE_UNSTAGE_VOLUME")
	failRPC := flag.String("fail-rpc", os.Getenv("HOSTPATH_STANDIN_FAIL_RPC"), "test hook: <Method>=<code>[:<count>][,...]")
	hangRPC := flag.String("hang-rpc", os.Getenv("HOSTPATH_STANDIN_HANG_RPC"), "test hook: <Method>[:<count>][,...]")
	flag.Parse()

	if cfg.nodeID == "" {
		klog.Fatal("--nodeid is required")
	}
	var err error
	if cfg.nodeCaps, err = nodeCapabilities(*disableCaps, cfg.enableMountGroup); err != nil {
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
	logAll := cfg.logReq || klog.V(5).Enabled()
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
	klog.Infof("%s %s (stand-in for csi-driver-host-path) serving %s, node %q, state in %s",
		cfg.driverName, vendorVersion, path, cfg.nodeID, cfg.stateDir)
	if err := srv.Serve(l); err != nil {
		klog.Errorf("serve: %v", err)
	}
	_ = os.Remove(path)
	klog.Flush()
}

var logMu sync.Mutex

// logCall writes one JSON line per RPC, secrets stripped.
func logCall(method string, req, resp any, err error) {
	line := struct {
		Method   string          `json:"method"`
		Request  json.RawMessage `json:"request"`
		Response json.RawMessage `json:"response"`
		Error    string          `json:"error"`
		Code     string          `json:"code"`
	}{Method: method, Request: json.RawMessage(protosanitizer.StripSecrets(req).String()), Response: json.RawMessage("null")}
	if err == nil {
		line.Response = json.RawMessage(protosanitizer.StripSecrets(resp).String())
	} else {
		line.Error = status.Convert(err).Message()
	}
	line.Code = status.Code(err).String()
	b, mErr := json.Marshal(line)
	if mErr != nil {
		b = []byte(fmt.Sprintf(`{"method":%q,"error":"log: %s"}`, method, mErr))
	}
	logMu.Lock()
	defer logMu.Unlock()
	_, _ = os.Stderr.Write(append(b, '\n'))
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
		return nil, status.Errorf(hk.code, "stand-in test hook: %s fails with %s", short, hk.code)
	}
}

func nodeCapabilities(disable string, mountGroup bool) ([]csi.NodeServiceCapability_RPC_Type, error) {
	caps := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_VOLUME_CONDITION,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	}
	if mountGroup {
		caps = append(caps, csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP)
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
