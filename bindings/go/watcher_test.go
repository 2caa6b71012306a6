package kcsi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigSendsPluginWatcherKeys(t *testing.T) {
	b, err := json.Marshal(Config{NodeName: "n", RootDir: "/r", PluginWatcher: true, PluginsRegistryDir: "/reg"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(b, &got)
	if got["pluginWatcher"] != true || got["pluginsRegistryDir"] != "/reg" {
		t.Fatalf("config JSON %s", b)
	}
	b, _ = json.Marshal(Config{NodeName: "n", RootDir: "/r"})
	if strings.Contains(string(b), "plugin") {
		t.Fatalf("unset watcher keys were sent: %s", b)
	}
}

func TestPluginWatcherRegistersTheRealRegistrarsDriver(t *testing.T) {
	root := shortTempDir(t, "kcsigo-w")
	h := newTestHost(t, Config{NodeName: "go-node", RootDir: root, PluginWatcher: true})
	// The driver's socket where a DaemonSet puts it: <root>/plugins/<driver>/csi.sock.
	dir := filepath.Join(root, "plugins", "hostpath.csi.k8s.io")
	os.MkdirAll(dir, 0o755)
	d := startDriver(t, peerBinary(t, "hostpath", "KCSI_HOSTPATH"), dir, "hostpath.csi.k8s.io",
		[]string{"--nodeid=go-node", "--statedir=" + filepath.Join(dir, "state")})
	startProcess(t, "registrar", peerBinary(t, "registrar", "KCSI_REGISTRAR"), []string{"--csi-address=" + d.Socket,
		"--kubelet-registration-path=" + d.Socket, "--plugin-registration-path=" + filepath.Join(root, "plugins_registry")})
	var st *HostStatus
	waitFor(t, "registered", func() bool {
		var err error
		st, err = h.Status()
		if err != nil {
			t.Fatal(err)
		}
		w := st.PluginWatcher
		return w != nil && len(w.Sockets) == 1 && w.Sockets[0].State == "registered"
	})
	if st.PluginWatcher.Dir != filepath.Join(root, "plugins_registry") || len(st.Drivers) != 1 ||
		st.Drivers[0].Name != "hostpath.csi.k8s.io" || st.Drivers[0].NodeID != "go-node" {
		t.Fatalf("status %s", st.Raw)
	}
}

func waitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
