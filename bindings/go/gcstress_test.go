//go:build gcstress

package kcsi

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Run with: GOGC=1 go test -tags gcstress -run GCStress (scripts/test-go.sh does).
// KCSI_GCSTRESS_DURATION (a time.Duration, default 10s) sets how long it runs.

func TestGCStressClosesAndCollectsHandlesWhileCallsAreInFlight(t *testing.T) {
	debug.SetGCPercent(1)
	duration := 10 * time.Second
	if s := os.Getenv("KCSI_GCSTRESS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		duration = d
	}
	d := startHostpathDriver(t, "gc.csi.kcsi.dev")
	root := shortTempDir(t, "kcsigo-gc")
	cfg := Config{NodeName: "node-gc", RootDir: root, CSIDrivers: []any{noAttachCSIDriver(d.Name)}}
	spec := pvSpec(d.Name, "pv-gc", createVolume(t, d, "pv-gc", "1Mi", false))

	// The inner handles of wrappers whose references were dropped: their cleanups must free
	// them once the last call on them has returned.
	var dropped struct {
		sync.Mutex
		freed []func() bool // one per dropped wrapper; captures only the inner handle
	}
	var unexpected struct {
		sync.Mutex
		errs []error
	}
	// Every failure must be a kcsi error: closed handles, a freed host, a racing registration.
	var succeeded, refused atomic.Int64
	expect := func(err error) {
		switch {
		case err == nil:
			succeeded.Add(1)
		case errors.Is(err, ErrClosed) || errors.Is(err, ErrFailedPrecondition):
			refused.Add(1)
		}
		var e *Error
		if err != nil && !errors.As(err, &e) {
			unexpected.Lock()
			unexpected.errs = append(unexpected.errs, err)
			unexpected.Unlock()
		}
	}

	// calls hammers h and m until stop closes; it is what is in flight while they are freed.
	calls := func(h *Host, m *Mounter, stop <-chan struct{}, wg *sync.WaitGroup) {
		defer wg.Done()
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 7 {
			case 0:
				expect(h.ValidatePlugin(d.Name, d.Endpoint, []string{"1.0.0"}))
			case 1:
				_, err := h.Drivers()
				expect(err)
			case 2:
				_, err := h.Status()
				expect(err)
			case 3:
				_, err := h.VolumeName(spec)
				expect(err)
			case 4:
				_, err := m.Path()
				expect(err)
			case 5:
				err := h.RegisterPlugin(ctx, d.Name, d.Endpoint, []string{"1.0.0"})
				if !errors.Is(err, ErrAlreadyExists) {
					expect(err)
				}
			case 6:
				_, err := m.Metrics(ctx) // a driver round trip
				expect(err)
			}
		}
	}

	end := time.Now().Add(duration)
	rounds := 0
	for time.Now().Before(end) {
		rounds++
		// Explicit Close while calls are in flight on other goroutines.
		h, err := NewHost(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m, err := h.NewMounter(spec, pod("pod-gc"))
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go calls(h, m, stop, &wg)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		var closers sync.WaitGroup
		for range 3 {
			closers.Add(2)
			go func() { defer closers.Done(); m.Close() }()
			go func() { defer closers.Done(); h.Close() }()
		}
		closers.Wait()
		if _, err := h.Drivers(); !errors.Is(err, ErrClosed) {
			t.Fatalf("a call after Close: want ErrClosed, got %v", err)
		}
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
		close(stop)
		wg.Wait()

		// Dropped references: calls are in flight when the last reference goes away; the
		// cleanups free the handles once those calls have returned.
		func() {
			h2, err := NewHost(cfg)
			if err != nil {
				t.Fatal(err)
			}
			m2, err := h2.NewMounter(spec, pod("pod-gc2"))
			if err != nil {
				t.Fatal(err)
			}
			hh, mh := h2.h, m2.h
			dropped.Lock()
			dropped.freed = append(dropped.freed, func() bool { return freed(hh) }, func() bool { return freed(mh) })
			dropped.Unlock()
			stop2 := make(chan struct{})
			var wg2 sync.WaitGroup
			for range 2 {
				wg2.Add(1)
				go calls(h2, m2, stop2, &wg2)
			}
			go func() {
				time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
				close(stop2)
			}()
			// h2 and m2 go out of scope here; only the in-flight goroutines still hold them.
		}()
		runtime.GC()
	}

	// Every dropped wrapper must eventually be collected and its handle freed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		runtime.GC()
		open := 0
		dropped.Lock()
		for _, f := range dropped.freed {
			if !f() {
				open++
			}
		}
		n := len(dropped.freed)
		dropped.Unlock()
		if open == 0 {
			t.Logf("%d rounds, %d calls succeeded, %d refused on closed or orphaned handles; %d dropped handles freed by cleanups",
				rounds, succeeded.Load(), refused.Load(), n)
			if succeeded.Load() == 0 || refused.Load() == 0 {
				t.Fatal("the run exercised no successful calls or no calls on freed handles")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d dropped handles were never freed", open, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	unexpected.Lock()
	defer unexpected.Unlock()
	for _, err := range unexpected.errs {
		t.Errorf("a call failed with a non-kcsi error: %v", err)
	}
}

func freed[P comparable](h *handle[P]) bool {
	return h.freed.Load() && h.state.Load() == closedBit
}
