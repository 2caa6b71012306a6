package upstream

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/volume"
	upstreamcsi "k8s.io/kubernetes/pkg/volume/csi"

	"kcsi.dev/kcsi/volumeplugin"
	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// BenchmarkLifecycleVsUpstream takes volumes through their node lifecycle (MountDevice, SetUp,
// TearDown, UnmountDevice; hostpath's CSIDriver needs no attach) in this one process, on one
// real hostpath driver, three ways:
//   - kcsi: kcsi.dev/kcsi/volumeplugin's plugin, kcsi through its Go binding;
//   - upstream: pkg/volume/csi v1.36.3 as the kubelet sets it up (see volumeplugintest.UpstreamPlugin);
//   - floor: the driver's RPCs alone (NodeStage, NodePublish, NodeUnpublish, NodeUnstage) on
//     one persistent grpc-go connection, plus the directories both plugins make and remove at
//     the kubelet's depths (CSI leaves the staging directory and the target's parent to the
//     CO): what any plugin must spend.
//
// Each round first runs sequential lifecycles interleaved one by one (floor, kcsi, upstream in
// rotating order), so the driver's drift, milliseconds from one mount to the next, touches the
// three alike; a contender's overhead is the median of its lifecycles' differences from the
// floor's run beside them. Then each runs 16 at a time, in ABBA order over the rounds. It prints
// ms per volume, the overhead above the floor, the ratio round by round (what one short run
// would report), where the overhead goes (each step's median difference from the floor's same
// step: MountDevice against NodeStage and the staging directory, SetUp against NodePublish and
// the target's parent, and so on), dials per lifecycle (counted in a separate pass through a
// relay in front of the driver's socket, so the timed passes go straight to the driver),
// this process's CPU per volume in the parallel passes (on two CPUs sixteen lifecycles at once
// are CPU-bound, so the overhead there follows it) and memory. Goal: kcsi's overhead above
// the floor at most a fifth of upstream's and within 10 % of the floor. It ignores b.N: run it
// with -benchtime=1x (make bench-upstream). Figures are printed, never asserted.
func BenchmarkLifecycleVsUpstream(b *testing.B) {
	const (
		volumes    = 16 // also the parallelism
		sequential = 24 // a lifecycle varies by milliseconds with the driver's mounts
		parRounds  = 2
		rounds     = 8
		dialPasses = 4
	)
	e, plugin, handles, contenders := benchContenders(b, volumes)
	timeout := 10 * time.Second
	for _, c := range contenders { // warm-up: first dials, first directories, lazy set-up
		if _, err := c.run(0, handles[0], "warm"); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
	}
	for _, c := range contenders {
		if err := c.measureAlloc(handles); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
	}
	rssBefore := rssMiB()
	for r := range rounds {
		if err := sequentialRound(r, contenders, handles, sequential); err != nil {
			b.Fatal(err)
		}
		order := slices.Clone(contenders)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			if err := c.measureParallel(r, handles, parRounds); err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
		}
	}
	rssAfter := rssMiB()

	// Dials: every contender re-pointed at a counting relay in front of the driver's socket.
	relay := startRelay(b, filepath.Join(e.Root, "relay.sock"), e.Socket)
	kh := plugin.RegistrationHandler()
	kh.DeRegisterPlugin(volumeplugintest.DriverName, e.Socket)
	upstreamcsi.PluginHandler.DeRegisterPlugin(volumeplugintest.DriverName, e.Socket)
	if err := kh.RegisterPlugin(volumeplugintest.DriverName, relay.path, []string{"1.0.0"}, &timeout); err != nil {
		b.Fatal(err)
	}
	if err := upstreamcsi.PluginHandler.RegisterPlugin(volumeplugintest.DriverName, relay.path, []string{"1.0.0"}, &timeout); err != nil {
		b.Fatal(err)
	}
	// Upstream's driver registry is package state: leave it empty for the next -count run.
	b.Cleanup(func() { upstreamcsi.PluginHandler.DeRegisterPlugin(volumeplugintest.DriverName, relay.path) })
	relayed, err := grpc.NewClient("unix://"+relay.path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer relayed.Close()
	contenders[0].run = floorLifecycle{root: filepath.Join(e.Root, "floor"), conn: relayed}.run
	for _, c := range contenders {
		if _, err := c.run(0, handles[0], "dial-warm"); err != nil {
			b.Fatalf("%s through the relay: %v", c.name, err)
		}
		before := relay.dials.Load()
		for i := range dialPasses {
			if _, err := c.run(i, handles[i], fmt.Sprintf("dial-%d", i)); err != nil {
				b.Fatalf("%s through the relay: %v", c.name, err)
			}
		}
		c.dials = float64(relay.dials.Load()-before) / dialPasses
	}

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\nfilesystem lifecycle (MountDevice, SetUp, TearDown, UnmountDevice), one hostpath driver, %d CPUs, load %s",
		runtime.NumCPU(), load)
	fmt.Printf("%d rounds; sequential: %d lifecycles of each per round, interleaved, medians (over floor: of each lifecycle less the floor's beside it); parallel: %d at once, %d times per round, wall time per volume, median of the rounds\n",
		rounds, sequential, volumes, parRounds)
	fmt.Printf("%-9s %12s %12s %12s %12s %12s %10s %12s\n", "", "seq ms/vol", "over floor", "par ms/vol", "over floor", "par CPU ms", "dials/vol", "Go KiB/vol")
	fl, k, u := contenders[0], contenders[1], contenders[2]
	for _, c := range contenders {
		fmt.Printf("%-9s %12.3f %12.3f %12.3f %12.3f %12.3f %10.1f %12.1f\n", c.name, median(c.seq), median(c.over),
			median(c.par), median(c.par)-median(fl.par), median(c.parCPU), c.dials, c.goKiB)
	}
	seqRatio := func(from, to int) float64 { return median(k.over[from:to]) / median(u.over[from:to]) }
	parRatio := func(r int) float64 { return (k.par[r] - fl.par[r]) / (u.par[r] - fl.par[r]) }
	fmt.Printf("sequential: kcsi's overhead is %.2f of upstream's (goal <= 0.20) and %.1f %% of the floor (goal <= 10 %%)\n",
		seqRatio(0, len(k.over)), 100*median(k.over)/median(fl.seq))
	fmt.Printf("parallel: kcsi's overhead is %.2f of upstream's (goal <= 0.20) and %.1f %% of the floor (goal <= 10 %%)\n",
		(median(k.par)-median(fl.par))/(median(u.par)-median(fl.par)), 100*(median(k.par)-median(fl.par))/median(fl.par))
	var seqRounds, parRatios []float64
	for r := range rounds {
		seqRounds = append(seqRounds, seqRatio(r*sequential, (r+1)*sequential))
		parRatios = append(parRatios, parRatio(r))
	}
	slices.Sort(seqRounds)
	slices.Sort(parRatios)
	fmt.Printf("round by round: sequential ratio %.2f to %.2f, parallel %.2f to %.2f\n",
		seqRounds[0], seqRounds[rounds-1], parRatios[0], parRatios[rounds-1])
	fmt.Printf("sequential, each step over the floor's same step (median ms):")
	for i, name := range stepNames {
		fmt.Printf(" %s kcsi %+.3f upstream %+.3f;", name, median(k.stepsOver[i]), median(u.stepsOver[i]))
	}
	fmt.Println()
	fmt.Printf("process RSS %.1f MiB before the rounds, %.1f MiB after (Go heap in use %.1f MiB; the rest is kcsi's Rust side, cgo and the binary)\n",
		rssBefore, rssAfter, goHeapMiB())
}

// benchContenders starts the driver and both plugins on it, creates n volumes and returns
// them with the floor, kcsi and upstream, in that order, and kcsi's plugin.
func benchContenders(b *testing.B, n int) (*volumeplugintest.Node, *volumeplugin.Plugin, []string, []*lifecycleFigures) {
	e := volumeplugintest.StartNode(b)
	k := volumeplugin.New(volumeplugin.Config{CSIDrivers: []any{volumeplugintest.HostpathCSIDriver()}})
	b.Cleanup(k.Close)
	volumeplugintest.KubeletHost(b, e.Root, nil, k)
	e.Register(b, k.RegistrationHandler())
	upRoot := b.TempDir()
	b.Cleanup(func() { volumeplugintest.UnmountUnder(b, upRoot) })
	up := volumeplugintest.UpstreamPlugin(b, upRoot)
	timeout := 10 * time.Second
	if err := upstreamcsi.PluginHandler.RegisterPlugin(volumeplugintest.DriverName, e.Socket, []string{"1.0.0"}, &timeout); err != nil {
		b.Fatal(err)
	}
	handles := make([]string, n)
	for i := range handles {
		handles[i] = e.CreateVolume(b, fmt.Sprintf("bench-%d", i), false)
	}
	floor := floorLifecycle{root: filepath.Join(e.Root, "floor"), conn: e.CSI}
	contenders := []*lifecycleFigures{
		{name: "floor", run: floor.run},
		{name: "kcsi", run: pluginLifecycle(k)},
		{name: "upstream", run: pluginLifecycle(up)},
	}
	return e, k, handles, contenders
}

// BenchmarkLifecycleAlone runs one contender's lifecycles only (KCSI_BENCH_ALONE=floor, kcsi
// or upstream; default kcsi), as LifecycleVsUpstream's rounds do, for a profiler to attribute
// the process's samples to it: go test -c here, then perf record -g ./upstream.test -test.bench
// LifecycleAlone. Prints ms and this process's CPU ms per volume.
func BenchmarkLifecycleAlone(b *testing.B) {
	const volumes, sequential, parRounds, rounds = 16, 24, 2, 8
	name := cmp.Or(os.Getenv("KCSI_BENCH_ALONE"), "kcsi")
	e, _, handles, contenders := benchContenders(b, volumes)
	// Upstream's driver registry is package state: leave it empty for the next benchmark.
	b.Cleanup(func() { upstreamcsi.PluginHandler.DeRegisterPlugin(volumeplugintest.DriverName, e.Socket) })
	at := slices.IndexFunc(contenders, func(c *lifecycleFigures) bool { return c.name == name })
	if at < 0 {
		b.Fatalf("KCSI_BENCH_ALONE=%s: not floor, kcsi or upstream", name)
	}
	c := contenders[at]
	if _, err := c.run(0, handles[0], "warm"); err != nil {
		b.Fatal(err)
	}
	seqCPU := 0.0
	for r := range rounds {
		start := processCPUms()
		if err := sequentialRound(r, []*lifecycleFigures{c}, handles, sequential); err != nil {
			b.Fatal(err)
		}
		seqCPU += (processCPUms() - start) / sequential
		if err := c.measureParallel(r, handles, parRounds); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("\n%s alone, %d rounds: sequential %.3f ms/vol (CPU %.3f ms), %d at once %.3f ms/vol (CPU %.3f ms)\n",
		name, rounds, median(c.seq), seqCPU/rounds, volumes, median(c.par), median(c.parCPU))
}

// lifecycleFigures is one contender's lifecycle and what was measured of it.
type lifecycleFigures struct {
	name string
	run  func(i int, handle, tag string) (stepTimes, error)
	seq  []float64 // ms per sequential lifecycle, every one
	over []float64 // each sequential lifecycle less the floor's beside it
	// stepsOver[s] is step s of each sequential lifecycle less the floor's step s beside it.
	stepsOver [len(stepNames)][]float64
	par       []float64 // ms per volume 16 at a time, one entry per round
	parCPU    []float64 // this process's CPU ms per volume 16 at a time, one entry per round
	dials     float64
	goKiB     float64 // Go heap allocated per lifecycle
}

// stepNames are a lifecycle's steps, as the kubelet calls them.
var stepNames = [...]string{"MountDevice", "SetUp", "TearDown", "UnmountDevice"}

// stepTimes is how long each of a lifecycle's steps took, in ms.
type stepTimes [len(stepNames)]float64

// stepClock times a lifecycle's steps one after the other.
type stepClock struct {
	times stepTimes
	next  int
	start time.Time
}

func startSteps() *stepClock { return &stepClock{start: time.Now()} }

// done ends the current step and starts the next.
func (c *stepClock) done() {
	now := time.Now()
	c.times[c.next] = float64(now.Sub(c.start).Microseconds()) / 1000
	c.next, c.start = c.next+1, now
}

// sequentialRound runs n lifecycles of each contender, one at a time and interleaved in
// rotating order, then takes each one's difference, and each step's, from the floor's of the
// same turn.
func sequentialRound(round int, cs []*lifecycleFigures, handles []string, n int) error {
	for i := range n {
		steps := make([]stepTimes, len(cs))
		for j := range cs {
			k := (i + j) % len(cs)
			c := cs[k]
			start := time.Now()
			t, err := c.run(i%len(handles), handles[i%len(handles)], fmt.Sprintf("s%d-%d", round, i))
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			c.seq = append(c.seq, float64(time.Since(start).Microseconds())/1000)
			steps[k] = t
		}
		floor := cs[0].seq[len(cs[0].seq)-1]
		for k, c := range cs {
			c.over = append(c.over, c.seq[len(c.seq)-1]-floor)
			for s := range stepNames {
				c.stepsOver[s] = append(c.stepsOver[s], steps[k][s]-steps[0][s])
			}
		}
	}
	return nil
}

// measureAlloc is the Go heap a lifecycle allocates, over a few run alone.
func (c *lifecycleFigures) measureAlloc(handles []string) error {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	allocated := ms.TotalAlloc
	for i := range 8 {
		if _, err := c.run(i, handles[i], fmt.Sprintf("alloc-%d", i)); err != nil {
			return err
		}
	}
	runtime.ReadMemStats(&ms)
	c.goKiB = float64(ms.TotalAlloc-allocated) / 1024 / 8
	return nil
}

// measureParallel runs every volume's lifecycle at once, parRounds times: wall time and this
// process's CPU time per volume.
func (c *lifecycleFigures) measureParallel(round int, handles []string, parRounds int) error {
	start, cpuStart := time.Now(), processCPUms()
	for p := range parRounds {
		var wg sync.WaitGroup
		errs := make(chan error, len(handles))
		for i, h := range handles {
			wg.Go(func() {
				if _, err := c.run(i, h, fmt.Sprintf("p%d-%d-%d", round, p, i)); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
	}
	n := float64(parRounds * len(handles))
	c.par = append(c.par, float64(time.Since(start).Microseconds())/1000/n)
	c.parCPU = append(c.parCPU, (processCPUms()-cpuStart)/n)
	return nil
}

// processCPUms is the CPU time this process has used, user and system, every thread's: the
// Go side, cgo and kcsi's Rust threads, not the driver's.
func processCPUms() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

// pluginLifecycle is one volume's node lifecycle through a kubelet volume plugin's interfaces,
// as the kubelet's operation executor calls them.
func pluginLifecycle(p volume.VolumePlugin) func(i int, handle, tag string) (stepTimes, error) {
	dp := p.(volume.DeviceMountableVolumePlugin)
	return func(i int, handle, tag string) (stepTimes, error) {
		clock := startSteps()
		spec := volumeplugintest.PVSpec(fmt.Sprintf("pv-bench-%d", i), handle, false)
		pod := &v1.Pod{}
		pod.Name, pod.Namespace, pod.UID = "bench-"+tag, "default", types.UID(benchUID(tag))
		dm, err := dp.NewDeviceMounter()
		if err != nil {
			return clock.times, err
		}
		dmp, err := dm.GetDeviceMountPath(spec)
		if err != nil {
			return clock.times, err
		}
		if err := dm.MountDevice(spec, "", dmp, volume.DeviceMounterArgs{}); err != nil {
			return clock.times, fmt.Errorf("MountDevice: %w", err)
		}
		clock.done()
		m, err := p.NewMounter(spec, pod)
		if err != nil {
			return clock.times, err
		}
		if err := m.SetUp(volume.MounterArgs{}); err != nil {
			return clock.times, fmt.Errorf("SetUp: %w", err)
		}
		clock.done()
		u, err := p.NewUnmounter(spec.Name(), pod.UID)
		if err != nil {
			return clock.times, err
		}
		if err := u.TearDown(); err != nil {
			return clock.times, fmt.Errorf("TearDown: %w", err)
		}
		clock.done()
		du, err := dp.NewDeviceUnmounter()
		if err != nil {
			return clock.times, err
		}
		if err := du.UnmountDevice(dmp); err != nil {
			return clock.times, fmt.Errorf("UnmountDevice: %w", err)
		}
		clock.done()
		return clock.times, nil
	}
}

// benchUID is a pod UID unique to tag, in the UID's usual form.
func benchUID(tag string) string {
	h := fmt.Sprintf("%032x", []byte(tag))
	h = h[len(h)-32:]
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// floorLifecycle is the driver's work without a plugin: the four RPCs on one connection, and
// the directory levels both plugins make and remove (the driver makes and removes the target):
// a staging directory two levels below an existing one, as a plugin's
// <driver>/<hash>/globalmount, and the target's parent four below, as the kubelet's
// pods/<uid>/volumes/kubernetes.io~csi/<pv>.
type floorLifecycle struct {
	root string
	conn *grpc.ClientConn
}

func (f floorLifecycle) run(_ int, handle, tag string) (stepTimes, error) {
	clock := startSteps()
	data := filepath.Join(f.root, "plugins", tag)
	staging := filepath.Join(data, "globalmount")
	parent := filepath.Join(f.root, "pods", tag, "volumes", "kubernetes.io~csi", "pv")
	target := filepath.Join(parent, "mount")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return clock.times, err
	}
	c := csi.NewNodeClient(f.conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	if _, err := c.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: handle, StagingTargetPath: staging, VolumeCapability: capability}); err != nil {
		return clock.times, err
	}
	clock.done()
	if err := os.MkdirAll(parent, 0o750); err != nil {
		return clock.times, err
	}
	if _, err := c.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: handle, StagingTargetPath: staging, TargetPath: target, VolumeCapability: capability}); err != nil {
		return clock.times, err
	}
	clock.done()
	if _, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: target}); err != nil {
		return clock.times, err
	}
	if err := os.Remove(parent); err != nil {
		return clock.times, err
	}
	clock.done()
	if _, err := c.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: staging}); err != nil {
		return clock.times, err
	}
	err := os.RemoveAll(data)
	clock.done()
	return clock.times, err
}

// relay forwards connections on path to the driver's socket, counting them: a plugin's dials
// seen from outside the plugin.
type relay struct {
	path  string
	dials atomic.Int64
}

func startRelay(tb testing.TB, path, target string) *relay {
	ln, err := net.Listen("unix", path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	r := &relay{path: path}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.dials.Add(1)
			go forward(c, target)
		}
	}()
	return r
}

func forward(c net.Conn, target string) {
	defer c.Close()
	d, err := net.Dial("unix", target)
	if err != nil {
		return
	}
	defer d.Close()
	go func() {
		io.Copy(d, c)
		d.(*net.UnixConn).CloseWrite()
	}()
	io.Copy(c, d)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func rssMiB() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib float64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kib)
			return kib / 1024
		}
	}
	return 0
}

func goHeapMiB() float64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20)
}
