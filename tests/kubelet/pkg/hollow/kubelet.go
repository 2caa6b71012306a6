package hollow

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	noopoteltrace "go.opentelemetry.io/otel/trace/noop"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	"k8s.io/kubernetes/pkg/kubelet"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	containertest "k8s.io/kubernetes/pkg/kubelet/container/testing"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
	"k8s.io/kubernetes/pkg/util/oom"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/configmap"
	"k8s.io/kubernetes/pkg/volume/csi"
	"k8s.io/kubernetes/pkg/volume/downwardapi"
	"k8s.io/kubernetes/pkg/volume/emptydir"
	"k8s.io/kubernetes/pkg/volume/projected"
	"k8s.io/kubernetes/pkg/volume/secret"
	"k8s.io/kubernetes/pkg/volume/util/hostutil"
	"k8s.io/kubernetes/pkg/volume/util/subpath"
	"k8s.io/mount-utils"

	"kcsi.dev/kcsi/volumeplugin"
)

// pluginContainerManager is the stub container manager with one change: its plugin
// registration handlers carry kcsi's under "CSIPlugin", which the kubelet adds after its own
// csi.PluginHandler and so replaces it.
type pluginContainerManager struct {
	cm.ContainerManager
	handlers map[string]cache.PluginHandler
}

func (c pluginContainerManager) GetPluginRegistrationHandlers() map[string]cache.PluginHandler {
	return c.handlers
}

// RunKubelet is `kubelet-e2e kubelet`: one kubelet with kcsi's or upstream's CSI plugin until
// SIGTERM.
func RunKubelet(args []string) error {
	fs := flag.NewFlagSet("kubelet", flag.ExitOnError)
	plugin := fs.String("plugin", "kcsi", "CSI volume plugin: kcsi or upstream")
	root := fs.String("root", "", "kubelet root directory")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server")
	node := fs.String("node", "", "node name")
	logs := fs.String("pod-logs", "", "pod logs directory (default: <root>/../pod-logs)")
	// 5 s makes the suite's status checks quick; the fleet runs the kubelet's default, 10 s.
	statusEvery := fs.Duration("node-status-update", 5*time.Second, "nodeStatusUpdateFrequency")
	apiQPS := fs.Int("api-qps", 0, "kubeAPIQPS, burst twice that (0: the kubelet's defaults)")
	// The scenarios run 1 s, so each running volume is asked for its stats (NodeGetVolumeStats)
	// within seconds; the benchmarks alone keep the kubelet's default.
	statsEvery := fs.Duration("volume-stats-period", time.Minute, "volumeStatsAggPeriod")
	// kcsi's grace period for a volume staged before it started that no pod uses
	// (volumeplugin.Config.OrphanGracePeriod); upstream's plugin has none. The unstage-window
	// scenarios restart the kubelet with a few seconds, so they wait seconds, not a minute.
	orphanGrace := fs.Duration("orphan-grace-period", 0, "kcsi's OrphanGracePeriod (0: kcsi's default, 30 s)")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *root == "" || *kubeconfig == "" || *node == "" {
		return fmt.Errorf("kubelet: -root, -kubeconfig and -node are required")
	}
	if *logs == "" {
		*logs = filepath.Join(filepath.Dir(*root), "pod-logs")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	restCfg.UserAgent = "kcsi-e2e-kubelet"

	// Beside the root, where the run's clean-up finds it: the harness kills the kubelet, so
	// Stop never unlinks the socket, and fakeremote.GenerateEndpoint's would stay in /tmp.
	// Listening unlinks the one a killed kubelet left, for the restart scenarios.
	endpoint := "unix://" + filepath.Join(filepath.Dir(*root), "cri.sock")
	fakeRuntime := fakeremote.NewFakeRemoteRuntime()
	if err := fakeRuntime.Start(endpoint); err != nil {
		return fmt.Errorf("fake CRI runtime: %w", err)
	}
	defer fakeRuntime.Stop()
	runtimeService, err := remote.NewRemoteRuntimeService(ctx, endpoint, 15*time.Second, noopoteltrace.NewTracerProvider(), false)
	if err != nil {
		return err
	}

	plugins := []volume.VolumePlugin{}
	plugins = append(plugins, emptydir.ProbeVolumePlugins()...)
	plugins = append(plugins, secret.ProbeVolumePlugins()...)
	plugins = append(plugins, configmap.ProbeVolumePlugins()...)
	plugins = append(plugins, projected.ProbeVolumePlugins()...)
	plugins = append(plugins, downwardapi.ProbeVolumePlugins()...)
	handlers := map[string]cache.PluginHandler{}
	switch *plugin {
	case "upstream":
		plugins = append(plugins, csi.ProbeVolumePlugins()...)
	case "kcsi":
		// The two lines a kubelet changes. kcsi sends its API requests through the kubelet's
		// own client (its identity, user agent and QPS) and reads the kubelet's own CSIDriver
		// informer, as upstream's plugin does.
		p := volumeplugin.New(volumeplugin.Config{CSIDriversFromVolumeHost: true, OrphanGracePeriod: *orphanGrace})
		plugins = append(plugins, p)
		handlers["CSIPlugin"] = p.RegistrationHandler()
		defer p.Close()
	default:
		return fmt.Errorf("kubelet: -plugin is %q, want kcsi or upstream", *plugin)
	}

	f := options.NewKubeletFlags()
	f.RootDirectory = *root
	f.HostnameOverride = *node
	f.MinimumGCAge.Duration = time.Minute
	c, err := options.NewKubeletConfiguration()
	if err != nil {
		return err
	}
	c.ContainerRuntimeEndpoint = endpoint
	c.ImageServiceEndpoint = endpoint
	c.EnableServer = false
	c.ReadOnlyPort = 0
	c.HealthzPort = 0
	c.MakeIPTablesUtilChains = false
	c.ShutdownGracePeriod.Duration = 0
	c.ShutdownGracePeriodCriticalPods.Duration = 0
	c.EvictionHard = map[string]string{}
	c.EvictionSoft = map[string]string{}
	c.CgroupsPerQOS = false
	c.EnforceNodeAllocatable = nil
	c.CgroupRoot = ""
	c.KubeletCgroups = ""
	c.SystemCgroups = ""
	c.FailSwapOn = false
	c.ProtectKernelDefaults = false
	c.StaticPodPath = ""
	c.PodLogsDir = *logs
	c.VolumePluginDir = filepath.Join(*root, "volume-plugins")
	// A cluster's DNS service address, as kubeadm configures it (nothing listens: the fake
	// runtime never resolves). Without one, every sync of a ClusterFirst pod posts two
	// MissingClusterDNS warnings (pkg/kubelet/network/dns/dns.go GetPodDNS), which a real
	// node does not, and they took ~40 % of the kubelet's 50 QPS in the pod benchmarks.
	c.ClusterDNS = []string{"10.96.0.10"}
	c.ClusterDomain = "cluster.local"
	c.ResolverConfig = ""
	c.SyncFrequency.Duration = 5 * time.Second
	c.VolumeStatsAggPeriod.Duration = *statsEvery
	c.NodeStatusUpdateFrequency.Duration = *statusEvery
	c.EnableControllerAttachDetach = true
	c.RegisterNode = true
	c.ProviderID = "kcsi-e2e://" + *node
	// RunKubelet cannot raise RLIMIT_NOFILE here: ask for what the process already has.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		c.MaxOpenFiles = int64(lim.Cur)
	}

	// The kubelet's own client settings (cmd/kubelet/app/server.go buildKubeletClientConfig
	// and run): without them client-go's default 5 QPS throttles every pod start. Events go
	// through a client of their own, limited by eventRecordQPS, as in the real kubelet.
	if *apiQPS > 0 {
		c.KubeAPIQPS, c.KubeAPIBurst = int32(*apiQPS), int32(2**apiQPS)
	}
	restCfg.ContentType = c.ContentType
	restCfg.QPS = float32(c.KubeAPIQPS)
	restCfg.Burst = int(c.KubeAPIBurst)
	client, err := clientset.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	evCfg := *restCfg
	evCfg.QPS, evCfg.Burst = float32(c.EventRecordQPS), int(c.EventBurst)
	events, err := clientset.NewForConfig(&evCfg)
	if err != nil {
		return err
	}
	hbCfg := *restCfg
	hbCfg.Timeout = 40 * time.Second
	hbCfg.QPS = -1
	heartbeat, err := clientset.NewForConfig(&hbCfg)
	if err != nil {
		return err
	}

	mounter := mount.New("")
	deps := &kubelet.Dependencies{
		KubeClient:                client,
		HeartbeatClient:           heartbeat,
		RemoteRuntimeService:      runtimeService,
		RemoteImageService:        fakeRuntime.ImageService,
		CAdvisorInterface:         &cadvisortest.Fake{NodeName: *node},
		OSInterface:               &containertest.FakeOS{}, // the real one creates /var/log/containers
		ContainerManager:          pluginContainerManager{cm.NewStubContainerManager(), handlers},
		VolumePlugins:             plugins,
		OOMAdjuster:               oom.NewFakeOOMAdjuster(),
		Mounter:                   mounter,
		Subpather:                 subpath.New(mounter),
		HostUtil:                  hostutil.NewHostUtil(),
		PodStartupLatencyTracker:  kubeletutil.NewPodStartupLatencyTracker(),
		NodeStartupLatencyTracker: kubeletutil.NewNodeStartupLatencyTracker(),
		TracerProvider:            noopoteltrace.NewTracerProvider(),
		// RunKubelet's own event recorder, sending to the API server, so the suite compares
		// the reasons of the kubelet's events (FailedMount, FileSystemResizeSuccessful, ...).
		EventClient: events.CoreV1(),
	}
	if err := os.MkdirAll(*logs, 0o755); err != nil {
		return err
	}
	if err := kubeletapp.RunKubelet(ctx, &options.KubeletServer{KubeletFlags: *f, KubeletConfiguration: *c}, deps); err != nil {
		return fmt.Errorf("RunKubelet: %w", err)
	}
	<-ctx.Done()
	klog.Info("kubelet-e2e: stopping")
	return nil
}
