package kcsi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRegisterListDuplicateAndDeregisterAgainstHostpathDriver(t *testing.T) {
	d := startHostpathDriver(t, "hostpath.csi.kcsi.dev")
	h := newTestHost(t, Config{})
	ctx := context.Background()

	if err := h.RegisterPlugin(ctx, d.Name, d.Endpoint, []string{"1.0.0"}); err != nil {
		t.Fatalf("RegisterPlugin: %v", err)
	}
	ds, err := h.Drivers()
	if err != nil {
		t.Fatal(err)
	}
	want := Driver{Name: d.Name, Endpoint: d.Endpoint, HighestSupportedVersion: "1.0.0", NodeID: d.Name}
	if len(ds) != 1 || ds[0].Name != want.Name || ds[0].Endpoint != want.Endpoint ||
		ds[0].HighestSupportedVersion != want.HighestSupportedVersion || ds[0].NodeID != want.NodeID {
		t.Fatalf("Drivers() = %+v, want one %+v", ds, want)
	}
	st, err := h.Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Drivers) != 1 || st.LastError != nil || !st.Standalone {
		t.Fatalf("Status() = %+v (raw %s)", st, st.Raw)
	}

	err = h.RegisterPlugin(ctx, d.Name, d.Endpoint, []string{"1.0.0"})
	if !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("re-registering the same version: want ErrAlreadyExists, got %v", err)
	}
	if e := kcsiError(t, err); e.Op != "RegisterPlugin" || e.GRPCCode != -1 ||
		!strings.Contains(e.Message, "already registered with a higher supported version") {
		t.Fatalf("duplicate error = %#v", e)
	}
	if err := h.ValidatePlugin(d.Name, d.Endpoint, []string{"1.0.0"}); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("ValidatePlugin of a registered name and version: want ErrAlreadyExists, got %v", err)
	}
	// A strictly higher version replaces the registration, as upstream does.
	if err := h.RegisterPlugin(ctx, d.Name, d.Endpoint, []string{"1.2.0"}); err != nil {
		t.Fatalf("registering a higher version: %v", err)
	}
	if ds, _ := h.Drivers(); len(ds) != 1 || ds[0].HighestSupportedVersion != "1.2.0" {
		t.Fatalf("after the higher version: %+v", ds)
	}

	if err := h.DeregisterPlugin(ctx, d.Name); err != nil {
		t.Fatalf("DeregisterPlugin: %v", err)
	}
	if ds, _ := h.Drivers(); len(ds) != 0 {
		t.Fatalf("drivers after deregistering: %+v", ds)
	}
	if err := h.DeregisterPlugin(ctx, d.Name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deregistering twice: want ErrNotFound, got %v", err)
	}
}

func TestValidatePluginFollowsUpstreamVersionTable(t *testing.T) {
	h := newTestHost(t, Config{})
	cases := []struct {
		versions []string
		ok       bool
	}{
		{[]string{"v1.0.0"}, true},
		{[]string{"0.3.0"}, false},
		{[]string{"0.2.0"}, false},
		{[]string{"0.2.0", "v0.3.0"}, false},
		{[]string{"4.9.12", "2.0.1"}, false},
		{[]string{}, false},
		{[]string{"var", "boo", "foo"}, false},
		{[]string{"0.2.0", "v1.0.0"}, true},
		{[]string{"0.2.0", "v1.2.3"}, true},
		{[]string{"v1.2.3", "v0.3.0"}, true},
		{[]string{"v1.2.3", "v0.3.0", "2.0.1"}, true},
		{[]string{"v1.2.3", "4.9.12", "v0.3.0", "2.0.1"}, true},
		{[]string{"v1.2.3", "boo", "v0.3.0", "2.0.1"}, true},
	}
	for _, c := range cases {
		err := h.ValidatePlugin("com.example.csi", "unix:///tmp/nowhere.sock", c.versions)
		if c.ok && err != nil {
			t.Errorf("ValidatePlugin(%q) = %v, want nil", c.versions, err)
		}
		if !c.ok && !errors.Is(err, ErrUnsupportedVersion) {
			t.Errorf("ValidatePlugin(%q) = %v, want ErrUnsupportedVersion", c.versions, err)
		}
	}
}

func TestTwoHostsKeepSeparateRegistries(t *testing.T) {
	d := startHostpathDriver(t, "shared.csi.kcsi.dev")
	a := newTestHost(t, Config{NodeName: "node-a"})
	b := newTestHost(t, Config{NodeName: "node-b"})
	ctx := context.Background()

	if err := a.RegisterPlugin(ctx, d.Name, d.Endpoint, []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	if ds, _ := b.Drivers(); len(ds) != 0 {
		t.Fatalf("host b sees host a's drivers: %+v", ds)
	}
	// The same name and version is no duplicate on the other host.
	if err := b.RegisterPlugin(ctx, d.Name, d.Endpoint, []string{"1.0.0"}); err != nil {
		t.Fatalf("registering on host b: %v", err)
	}
	if err := a.DeregisterPlugin(ctx, d.Name); err != nil {
		t.Fatal(err)
	}
	if ds, _ := b.Drivers(); len(ds) != 1 {
		t.Fatalf("deregistering on host a changed host b: %+v", ds)
	}
	a.Close()
	if ds, err := b.Drivers(); err != nil || len(ds) != 1 {
		t.Fatalf("closing host a changed host b: %+v, %v", ds, err)
	}
}

func TestRegisterPluginTimesOutAtTheContextDeadline(t *testing.T) {
	endpoint := silentDriver(t)
	h := newTestHost(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()

	start := time.Now()
	err := h.RegisterPlugin(ctx, "silent.csi.kcsi.dev", endpoint, []string{"1.0.0"})
	elapsed := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrTimeout matching context.DeadlineExceeded, got %v", err)
	}
	if !IsTransient(err) {
		t.Fatalf("a timed-out registration is rolled back, so transient; got class %v", kcsiError(t, err).Class)
	}
	if elapsed < 250*time.Millisecond || elapsed > 30*time.Second { // generous: the default host timeout is 120 s
		t.Fatalf("the call took %v for a 300ms deadline", elapsed)
	}
	if ds, _ := h.Drivers(); len(ds) != 0 {
		t.Fatalf("a timed-out registration left drivers behind: %+v", ds)
	}
}

func TestRegisterPluginWithoutDeadlineUsesTheHostTimeout(t *testing.T) {
	endpoint := silentDriver(t)
	h := newTestHost(t, Config{Timeout: 400 * time.Millisecond})
	start := time.Now()
	err := h.RegisterPlugin(context.Background(), "silent.csi.kcsi.dev", endpoint, []string{"1.0.0"})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("want ErrTimeout, got %v", err)
	}
	if elapsed := time.Since(start); elapsed < 350*time.Millisecond || elapsed > 30*time.Second { // generous: the default host timeout is 120 s
		t.Fatalf("the call took %v for a 400ms host timeout", elapsed)
	}
}

func TestCallsWithADoneContextDoNotStart(t *testing.T) {
	d := startHostpathDriver(t, "early.csi.kcsi.dev")
	h := newTestHost(t, Config{})

	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := h.RegisterPlugin(expired, d.Name, d.Endpoint, []string{"1.0.0"}); !errors.Is(err, ErrTimeout) || !IsTransient(err) {
		t.Fatalf("expired context: want a transient ErrTimeout, got %v", err)
	}
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := h.DeregisterPlugin(canceled, d.Name); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: want context.Canceled, got %v", err)
	}
	if ds, _ := h.Drivers(); len(ds) != 0 {
		t.Fatalf("a refused call registered something: %+v", ds)
	}
}
