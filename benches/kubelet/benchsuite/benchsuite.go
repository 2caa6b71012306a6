// Package benchsuite is how every kubelet benchmark program starts: its common flags (-repo,
// -e2e, -work, -keep), the root check, a context that SIGTERM or SIGINT cancels, and the
// real-kubelet suite's work directory.
package benchsuite

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
)

// Main runs a benchmark program: run gets its arguments, and an error ends it with status 1.
func Main(name string, run func(args []string) error) {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Flags are the flags every benchmark program takes.
type Flags struct {
	repo, e2e, work *string
	keep            *bool
}

// Register adds the common flags to fs.
func Register(fs *flag.FlagSet) *Flags {
	return &Flags{
		repo: fs.String("repo", ".", "the kcsi repository (for scripts/peers)"),
		e2e:  fs.String("e2e", "", "the kubelet-e2e binary, which runs the kubelets and controllers (scripts/kubelet-e2e-bin.sh)"),
		work: fs.String("work", "", "work directory (default: a new one under /tmp)"),
		keep: fs.Bool("keep", false, "keep the work directory"),
	}
}

// Start checks the flags (fs parsed) and the user, and makes the suite with its work
// directory named by prefix; done cancels ctx and removes the work directory unless -keep.
func (f *Flags) Start(prefix string) (ctx context.Context, s *cluster.Suite, done func(), err error) {
	if *f.e2e == "" {
		return nil, nil, nil, fmt.Errorf("-e2e is required")
	}
	if os.Geteuid() != 0 {
		return nil, nil, nil, fmt.Errorf("the kubelet and the drivers mount volumes and loop devices: run as root")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	if s, err = cluster.NewSuite(*f.repo, *f.work, prefix, *f.e2e); err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ctx, s, func() {
		if !*f.keep {
			s.RemoveWork()
		}
		stop()
	}, nil
}
