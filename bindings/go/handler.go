package kcsi

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// pluginHandler is upstream's k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache.PluginHandler
// (v1.36), declared here so that this module needs no Kubernetes dependency while the
// compiler still proves PluginHandler fits the kubelet's plugin manager.
type pluginHandler interface {
	ValidatePlugin(pluginName string, endpoint string, versions []string) error
	RegisterPlugin(pluginName, endpoint string, versions []string, pluginClientTimeout *time.Duration) error
	DeRegisterPlugin(pluginName, endpoint string)
}

var _ pluginHandler = (*PluginHandler)(nil)

// PluginHandler adapts a Host to the kubelet plugin manager's handler for the "CSIPlugin"
// type, so kcsi can replace pkg/volume/csi's RegistrationHandler.
type PluginHandler struct {
	Host *Host
	// Logger receives DeRegisterPlugin's failures, which the interface cannot return
	// (upstream logs them too); nil means slog.Default().
	Logger *slog.Logger
}

// ValidatePlugin implements the plugin manager's validation step; it has no side effects.
func (p *PluginHandler) ValidatePlugin(name, endpoint string, versions []string) error {
	return p.Host.ValidatePlugin(name, endpoint, versions)
}

// RegisterPlugin registers the driver. As upstream, a nil pluginClientTimeout means the
// default CSI timeout (here: the host's timeout).
func (p *PluginHandler) RegisterPlugin(name, endpoint string, versions []string, pluginClientTimeout *time.Duration) error {
	ctx := context.Background()
	if pluginClientTimeout != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *pluginClientTimeout)
		defer cancel()
	}
	return p.Host.RegisterPlugin(ctx, name, endpoint, versions)
}

// DeRegisterPlugin deregisters the driver. The endpoint is ignored, as upstream does. A name
// that is not registered is only logged at debug level: upstream's driver store deletes
// missing names silently.
func (p *PluginHandler) DeRegisterPlugin(name, endpoint string) {
	err := p.Host.DeregisterPlugin(context.Background(), name)
	if err == nil {
		return
	}
	log := p.Logger
	if log == nil {
		log = slog.Default()
	}
	if errors.Is(err, ErrNotFound) {
		log.Debug("kcsi: DeRegisterPlugin for a driver that is not registered", "driver", name, "endpoint", endpoint)
		return
	}
	log.Error("kcsi: DeRegisterPlugin failed", "driver", name, "endpoint", endpoint, "err", err)
}
