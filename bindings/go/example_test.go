package kcsi_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"time"

	"kcsi.dev/kcsi"
)

// The kubelet's plugin manager calls the handler for every "CSIPlugin" socket it finds.
func ExamplePluginHandler() {
	host, err := kcsi.NewHost(kcsi.Config{NodeName: "node-1", RootDir: "/var/lib/kubelet"})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()
	handler := &kcsi.PluginHandler{Host: host}

	name, endpoint, versions := "hostpath.csi.k8s.io", "/var/lib/kubelet/plugins/csi-hostpath/csi.sock", []string{"1.0.0"}
	if err := handler.ValidatePlugin(name, endpoint, versions); err != nil {
		log.Fatal(err)
	}
	timeout := 10 * time.Second
	if err := handler.RegisterPlugin(name, endpoint, versions, &timeout); err != nil {
		log.Print(err)
	}
	// When the registrar's socket goes away:
	handler.DeRegisterPlugin(name, endpoint)
}

// Volume operations report how the failure leaves the volume.
func ExampleMounter_SetUp() {
	host, err := kcsi.NewHost(kcsi.Config{NodeName: "node-1", RootDir: "/var/lib/kubelet"})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()
	var pv, pod json.RawMessage // a PersistentVolume and a Pod in their API JSON form (or *corev1 values)
	m, err := host.NewMounter(kcsi.Spec{PersistentVolume: pv}, pod)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	err = m.SetUp(context.Background(), nil)
	switch {
	case err == nil:
	case kcsi.IsUncertain(err):
		// NodePublishVolume may still be running: treat the volume as possibly mounted and
		// tear it down even if the pod goes away.
	case kcsi.IsTransient(err), errors.Is(err, kcsi.ErrUnavailable):
		// Nothing changed: retry with backoff.
	default:
		// Finished with an error.
	}
}
