package volumeplugin

import (
	"testing"

	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/volume"

	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// The tests run the real csi-driver-host-path (scripts/peers/build.sh hostpath, or
// $KCSI_HOSTPATH) with real mounts, so they need root: see volumeplugintest, which holds
// the environment apart from the plugin.

// env is one kubelet root with a running hostpath driver and an initialized plugin.
type env struct {
	*volumeplugintest.Node
	plugin *Plugin
	host   volume.VolumeHost
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvIn(t, nil)
}

// newEnvIn is newEnv in a cluster (nil: standalone, hostpath's CSIDriver given in Config):
// the plugin and the VolumeHost then use its API server, and the driver gets driverFlags.
func newEnvIn(t testing.TB, c *cluster, driverFlags ...string) *env {
	t.Helper()
	e := &env{Node: volumeplugintest.StartNode(t, driverFlags...)}
	cfg, client := Config{CSIDrivers: []any{volumeplugintest.HostpathCSIDriver()}}, clientset.Interface(nil)
	if c != nil {
		cfg, client = Config{Kubeconfig: c.kubeconfig}, c.client
	}
	e.startPlugin(t, cfg, client)
	return e
}

// startPlugin makes e.plugin a new plugin with cfg on e's root, as a (re)started kubelet does:
// Init on a kubelet VolumeHost with client, then the driver's registration.
func (e *env) startPlugin(t testing.TB, cfg Config, client clientset.Interface) {
	t.Helper()
	e.plugin = New(cfg)
	t.Cleanup(e.plugin.Close)
	e.host = volumeplugintest.KubeletHost(t, e.Root, client, e.plugin)
	e.Register(t, e.plugin.RegistrationHandler())
}
