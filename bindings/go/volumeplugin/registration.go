package volumeplugin

import (
	"time"

	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"kcsi.dev/kcsi"
)

// RegistrationHandler is the plugin manager's handler for the "CSIPlugin" type, in place of
// csi.PluginHandler. It may be taken before Init; calls before Init fail.
func (p *Plugin) RegistrationHandler() cache.PluginHandler { return registrationHandler{p} }

type registrationHandler struct{ p *Plugin }

var _ cache.PluginHandler = registrationHandler{}

func (r registrationHandler) handler() (*kcsi.PluginHandler, error) {
	h, err := r.p.ready()
	if err != nil {
		return nil, err
	}
	return &kcsi.PluginHandler{Host: h}, nil
}

func (r registrationHandler) ValidatePlugin(name, endpoint string, versions []string) error {
	h, err := r.handler()
	if err != nil {
		return err
	}
	return h.ValidatePlugin(name, endpoint, versions)
}

func (r registrationHandler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	h, err := r.handler()
	if err != nil {
		return err
	}
	return h.RegisterPlugin(name, endpoint, versions, timeout)
}

func (r registrationHandler) DeRegisterPlugin(name, endpoint string) {
	if h, err := r.handler(); err == nil {
		h.DeRegisterPlugin(name, endpoint)
	}
}
