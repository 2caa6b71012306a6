package kcsi

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestPluginHandlerDrivesRegistrationLikeThePluginManager(t *testing.T) {
	d := startHostpathDriver(t, "handler.csi.kcsi.dev")
	h := newTestHost(t, Config{})
	var logs bytes.Buffer
	// Used through upstream's interface, as the kubelet's plugin manager holds it.
	var ph pluginHandler = &PluginHandler{Host: h, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}

	if err := ph.ValidatePlugin(d.Name, d.Endpoint, []string{"v1.0.0"}); err != nil {
		t.Fatalf("ValidatePlugin: %v", err)
	}
	timeout := 10 * time.Second
	if err := ph.RegisterPlugin(d.Name, d.Endpoint, []string{"v1.0.0"}, &timeout); err != nil {
		t.Fatalf("RegisterPlugin: %v", err)
	}
	if err := ph.ValidatePlugin(d.Name, d.Endpoint, []string{"v1.0.0"}); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("ValidatePlugin after registering: want ErrAlreadyExists, got %v", err)
	}
	if ds, _ := h.Drivers(); len(ds) != 1 || ds[0].NodeID != d.Name {
		t.Fatalf("drivers after RegisterPlugin: %+v", ds)
	}

	ph.DeRegisterPlugin(d.Name, d.Endpoint)
	if ds, _ := h.Drivers(); len(ds) != 0 {
		t.Fatalf("drivers after DeRegisterPlugin: %+v", ds)
	}
	if logs.Len() != 0 {
		t.Fatalf("a successful DeRegisterPlugin logged %q", logs.String())
	}
	// Upstream deletes unknown names silently: only a debug record, no error.
	ph.DeRegisterPlugin(d.Name, d.Endpoint)
	if s := logs.String(); !strings.Contains(s, "level=DEBUG") || strings.Contains(s, "level=ERROR") {
		t.Fatalf("DeRegisterPlugin of an unknown name logged %q", s)
	}
}

func TestPluginHandlerRegisterPluginHonoursPluginClientTimeout(t *testing.T) {
	endpoint := silentDriver(t)
	ph := &PluginHandler{Host: newTestHost(t, Config{})}
	timeout := 300 * time.Millisecond
	start := time.Now()
	err := ph.RegisterPlugin("silent.csi.kcsi.dev", endpoint, []string{"1.0.0"}, &timeout)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("want ErrTimeout, got %v", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("a 300ms pluginClientTimeout took %v", elapsed)
	}
}

func TestPluginHandlerLogsDeRegisterFailures(t *testing.T) {
	h := newTestHost(t, Config{})
	var logs bytes.Buffer
	ph := &PluginHandler{Host: h, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	h.Close()
	ph.DeRegisterPlugin("gone.csi.kcsi.dev", "unix:///tmp/gone.sock")
	if s := logs.String(); !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "gone.csi.kcsi.dev") {
		t.Fatalf("DeRegisterPlugin on a closed host logged %q", s)
	}
}
