package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// StartProc starts a process logging to logPath, killed if the suite dies.
func StartProc(logPath string, name string, args ...string) (*exec.Cmd, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { cmd.Wait(); f.Close() }()
	return cmd, nil
}

// StopProc stops cmd with SIGTERM, then SIGKILL after 20 s.
func StopProc(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
}

// KillProc kills cmd with SIGKILL, as a crash would, and waits until it is gone.
func KillProc(cmd *exec.Cmd) {
	cmd.Process.Kill()
	for cmd.Process.Signal(syscall.Signal(0)) == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitFor waits until cond is true, checking every 100 ms; ErrTimedOut after timeout.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	return WaitEvery(ctx, 100*time.Millisecond, timeout, what, cond)
}

// ErrTimedOut is waitFor's error when its condition did not come true in time.
var ErrTimedOut = errors.New("timed out")

// WaitEvery is waitFor checking every period (the fleet's checks list every node).
func WaitEvery(ctx context.Context, period, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s waiting for %s", ErrTimedOut, timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(period):
		}
	}
}

// IgnoreNotFound is err, or nil if the API server answered NotFound.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
