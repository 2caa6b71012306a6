package kcsi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"kcsi.dev/kcsi"
)

// The kubelet's plugin manager calls the handler for every "CSIPlugin" socket it finds.
func ExamplePluginHandler() {
	root, err := os.MkdirTemp("", "kcsi-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	host, err := kcsi.NewHost(kcsi.Config{NodeName: "node-1", RootDir: root})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()
	handler := &kcsi.PluginHandler{Host: host}

	name, versions := "hostpath.csi.k8s.io", []string{"1.0.0"}
	endpoint := filepath.Join(root, "plugins", "csi-hostpath", "csi.sock") // no driver listens here
	fmt.Println("validate:", handler.ValidatePlugin(name, endpoint, versions))
	timeout := 2 * time.Second
	err = handler.RegisterPlugin(name, endpoint, versions, &timeout)
	// The plugin manager retries a registration that failed with nothing changed.
	fmt.Println("register: retry later:", kcsi.IsTransient(err) || errors.Is(err, kcsi.ErrUnavailable))
	// When the registrar's socket goes away:
	handler.DeRegisterPlugin(name, endpoint)
	drivers, err := host.Drivers()
	fmt.Println("drivers:", len(drivers), err)
	// Output:
	// validate: <nil>
	// register: retry later: true
	// drivers: 0 <nil>
}

// Volume operations report how the failure leaves the volume.
func ExampleMounter_SetUp() {
	root, err := os.MkdirTemp("", "kcsi-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	host, err := kcsi.NewHost(kcsi.Config{NodeName: "node-1", RootDir: root})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()
	// A PersistentVolume and a Pod in their API JSON form (or *corev1 values).
	pv := json.RawMessage(`{"metadata": {"name": "pv-1"}, "spec": {"accessModes": ["ReadWriteOnce"],
		"csi": {"driver": "hostpath.csi.k8s.io", "volumeHandle": "vol-1"}}}`)
	pod := json.RawMessage(`{"metadata": {"name": "web", "namespace": "default", "uid": "uid-1"}}`)
	m, err := host.NewMounter(kcsi.Spec{PersistentVolume: pv}, pod)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	err = m.SetUp(context.Background(), nil) // no driver of that name is registered yet
	switch {
	case err == nil:
		fmt.Println("mounted")
	case kcsi.IsUncertain(err):
		// NodePublishVolume may still be running: treat the volume as possibly mounted and
		// tear it down even if the pod goes away.
		fmt.Println("maybe mounted")
	case kcsi.IsTransient(err), errors.Is(err, kcsi.ErrUnavailable):
		// Nothing changed: retry with backoff.
		fmt.Println("nothing changed: retry")
	default:
		// Finished with an error.
		fmt.Println("failed:", err)
	}
	// Output: nothing changed: retry
}
