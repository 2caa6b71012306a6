package kcsi

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Version is the kcsi library version this package is linked against, e.g. "0.1.0".
func Version() string { return C.GoString(C.kcsi_version()) }

// Config configures a Host; it is sent to kcsi_host_new as JSON.
type Config struct {
	// Role is "node" (the default, the kubelet's half) or "controller" (the attach/detach
	// controller's half: Kubeconfig or KubeconfigData required, no NodeName or RootDir).
	Role string
	// NodeName is the node this host acts for (also the node ID checked in registrations).
	NodeName string
	// RootDir is the kubelet root directory: pods/, plugins/ and plugins_registry/ live here.
	RootDir string
	// Kubeconfig is the API server's kubeconfig; empty means standalone (no API server).
	Kubeconfig string
	// KubeconfigData is, instead of Kubeconfig, the kubeconfig document itself (YAML or
	// JSON), for a program whose credentials live in memory. It holds a credential: kcsi never
	// logs it.
	KubeconfigData string
	// Timeout is the per-operation deadline; zero means kcsi's default (120 s, the kubelet's
	// csiTimeout). It applies to calls whose context deadline cannot be passed down.
	Timeout time.Duration
	// IdleConnection is how long a driver's connection may stay unused before kcsi closes it
	// (it is reopened on the next call); zero means kcsi's default, 5 minutes.
	IdleConnection time.Duration
	// FeatureGates are the kubelet feature gates the plugin consults.
	FeatureGates map[string]bool
	// CSIDrivers stand in for the API's CSIDriver objects in standalone mode: each a
	// *storagev1.CSIDriver or its JSON (json.RawMessage or []byte).
	CSIDrivers []any
	// CSIDriversFromHost makes the program keep the host's CSIDriver objects current
	// (ApplyCSIDriver, DeleteCSIDriver, CSIDriversSynced, from an informer it already runs)
	// instead of kcsi listing and watching them itself. Needs Kubeconfig or KubeconfigData.
	CSIDriversFromHost bool
	// VolumeAttachmentsFromHost makes a controller host's program keep its VolumeAttachments
	// current (ApplyVolumeAttachment, DeleteVolumeAttachment, VolumeAttachmentsSynced, from
	// the attach/detach controller's informer) instead of kcsi listing and watching them.
	VolumeAttachmentsFromHost bool
	// PluginWatcher makes the host watch PluginsRegistryDir for node-driver-registrar sockets
	// and register their drivers, as the kubelet's plugin manager does.
	PluginWatcher bool
	// PluginsRegistryDir is the watched directory; empty means <RootDir>/plugins_registry.
	// Only with PluginWatcher.
	PluginsRegistryDir string
}

// MarshalJSON encodes c in the C API's host configuration form (camelCase keys, timeout in
// seconds, empty settings left out).
func (c Config) MarshalJSON() ([]byte, error) {
	type wire struct {
		Role           string          `json:"role,omitempty"`
		NodeName       string          `json:"nodeName,omitempty"`
		RootDir        string          `json:"rootDir,omitempty"`
		Kubeconfig     string          `json:"kubeconfig,omitempty"`
		KubeconfigData string          `json:"kubeconfigData,omitempty"`
		TimeoutSeconds float64         `json:"timeoutSeconds,omitempty"`
		IdleSeconds    float64         `json:"idleConnectionSeconds,omitempty"`
		FeatureGates   map[string]bool `json:"featureGates,omitempty"`
		CSIDrivers     []any           `json:"csiDrivers,omitempty"`
		FromHost       bool            `json:"csiDriversFromHost,omitempty"`
		VAsFromHost    bool            `json:"volumeAttachmentsFromHost,omitempty"`
		PluginWatcher  bool            `json:"pluginWatcher,omitempty"`
		RegistryDir    string          `json:"pluginsRegistryDir,omitempty"`
	}
	drivers := make([]any, len(c.CSIDrivers))
	for i, d := range c.CSIDrivers {
		drivers[i] = rawBytes(d)
	}
	return json.Marshal(wire{c.Role, c.NodeName, c.RootDir, c.Kubeconfig, c.KubeconfigData, c.Timeout.Seconds(), c.IdleConnection.Seconds(), c.FeatureGates, drivers,
		c.CSIDriversFromHost, c.VolumeAttachmentsFromHost, c.PluginWatcher, c.PluginsRegistryDir})
}

// Host is one node agent's instance of kcsi, with its own driver registry: two hosts in one
// process never see each other's drivers. Its methods are safe for concurrent use.
//
// Call Close when done. A Host that becomes unreachable without Close is freed by a cleanup
// as a safety net; handles made from it then fail with ErrFailedPrecondition.
type Host struct {
	h       *handle[*C.kcsi_host]
	cleanup runtime.Cleanup
	// csiDrivers is kcsi_host_csidriver_generation's counter, in the host's C memory;
	// attachRequired caches DriverAttachRequired's answers against it.
	csiDrivers     *uint64
	attachRequired sync.Map // driver name -> factAnswer
}

// NewHost creates a host. kcsi rejects unknown or missing required settings with
// ErrInvalidArgument.
func NewHost(config Config) (*Host, error) {
	return NewHostJSON(config)
}

// NewHostJSON creates a host from a configuration in the C API's JSON form (see Config), for
// settings this package does not model yet.
func NewHostJSON(config any) (*Host, error) {
	const op = "NewHost"
	a := newArgs(op)
	cfg := a.json("config", config)
	defer a.done()
	if a.err != nil {
		return nil, a.err
	}
	var p *C.kcsi_host
	var e C.gk_err
	if err := check(op, C.gk_host_new(cfg, &p, &e), &e); err != nil {
		return nil, err
	}
	var generation *C.uint64_t
	if err := check(op, C.gk_host_csidriver_generation(p, &generation, &e), &e); err != nil {
		C.kcsi_host_free(p)
		return nil, err
	}
	h := &Host{csiDrivers: (*uint64)(unsafe.Pointer(generation))}
	h.h, h.cleanup = track(h, "host", p, func(p *C.kcsi_host) { C.kcsi_host_free(p) })
	return h, nil
}

// closeHandle is the cleanup of every wrapper: it runs only if Close was never called.
func closeHandle[P comparable](h *handle[P]) { h.close() }

// Close frees the host. It is idempotent, safe to call concurrently and while other
// goroutines are in calls on h (the memory is freed when the last of them returns); later
// calls fail with ErrClosed.
func (h *Host) Close() { closeOwner(h, h.h, &h.cleanup) }

// HostStatus is kcsi_host_status' answer.
type HostStatus struct {
	Role               string   `json:"role"`
	NodeName           string   `json:"nodeName"`
	Standalone         bool     `json:"standalone"`
	CSINodeInitialized bool     `json:"csiNodeInitialized"`
	LastError          *string  `json:"lastError"` // what upstream hands to SetKubeletError; nil when healthy
	Drivers            []Driver `json:"drivers"`
	// PluginWatcher is nil unless Config.PluginWatcher is set.
	PluginWatcher *PluginWatcherStatus `json:"pluginWatcher"`
	// Raw is the whole answer, including fields this struct does not name.
	Raw json.RawMessage `json:"-"`
}

// PluginWatcherStatus is what the host's plugin watcher saw.
type PluginWatcherStatus struct {
	Dir         string               `json:"dir"`
	SocketsSeen uint64               `json:"socketsSeen"`
	LastError   *string              `json:"lastError"` // a failure of the watcher itself
	Sockets     []RegistrationSocket `json:"sockets"`
}

// RegistrationSocket is one registration socket in the watched directory.
type RegistrationSocket struct {
	Path string `json:"path"`
	// State is "registering", "registered" or "retrying" (failed, tried again with backoff).
	State     string  `json:"state"`
	Driver    *string `json:"driver"`
	Endpoint  *string `json:"endpoint"`
	Attempts  int     `json:"attempts"`
	LastError *string `json:"lastError"`
}

// Status returns the host's status. It does not block on drivers.
func (h *Host) Status() (*HostStatus, error) {
	const op = "Status"
	var raw string
	err := h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_host_status(p, &out, &e), &e); err != nil {
			return err
		}
		raw = takeString(out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var s HostStatus
	if err := decode(op, raw, &s); err != nil {
		return nil, err
	}
	s.Raw = json.RawMessage(raw)
	return &s, nil
}

// decode parses kcsi's JSON output; a failure is a kcsi bug, so it is ErrInternal.
func decode(op, text string, v any) error {
	if err := json.Unmarshal([]byte(text), v); err != nil {
		return &Error{Op: op, Result: ResultInternal, Class: ClassFinal, GRPCCode: -1,
			Message: "kcsi returned JSON this package cannot read: " + err.Error()}
	}
	return nil
}

// call runs one C call on h's C handle.
func (h *Host) call(ctx context.Context, op string, fn func(p *C.kcsi_host) error) error {
	return callOn(ctx, h, h.h, op, fn)
}

// callOn runs one C call on a handle: it refuses a done context and a closed handle, holds
// the handle open during the call (so a concurrent Close cannot free it) and keeps owner,
// whose cleanup would close the handle, reachable until the call has returned.
func callOn[P comparable](ctx context.Context, owner any, h *handle[P], op string, fn func(p P) error) error {
	if err := beforeCall(ctx, op); err != nil {
		return err
	}
	p, err := h.acquire(op)
	if err != nil {
		return err
	}
	defer h.release()
	err = fn(p)
	runtime.KeepAlive(owner)
	return err
}

// track wraps a new C handle owned by the Go value w and arranges for a cleanup to close it
// if w becomes unreachable without Close (a safety net, not the way to free handles).
func track[W any, P comparable](w *W, kind string, p P, free func(P)) (*handle[P], runtime.Cleanup) {
	h := newHandle(kind, p, free)
	return h, runtime.AddCleanup(w, closeHandle[P], h)
}

// closeOwner is every wrapper's Close: the first close stops the safety-net cleanup.
func closeOwner[P comparable](owner any, h *handle[P], c *runtime.Cleanup) {
	if h.close() {
		c.Stop()
	}
	runtime.KeepAlive(owner)
}
