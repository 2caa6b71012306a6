package hollow

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/volume/attachdetach"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
	"k8s.io/kubernetes/pkg/volume/flexvolume"
	"k8s.io/utils/exec"

	"kcsi.dev/kcsi/volumeplugin"
)

// RunController runs the real attach/detach controller as kube-controller-manager starts it
// (cmd/kube-controller-manager/app/core.go newPersistentVolumeAttachDetachController): its
// informers from one shared factory, the attachable plugins, the flexvolume prober and
// attachdetach.DefaultTimerConfig. The one setting changed is the reconciler's sync period
// (kube-controller-manager's --attach-detach-reconcile-sync-period, 1 min by default), so a
// scenario sees VolumesAreAttached run within seconds.
func RunController(args []string) error {
	fs := flag.NewFlagSet("controller", flag.ExitOnError)
	plugin := fs.String("plugin", "kcsi", "CSI volume plugin: kcsi or upstream")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server")
	flexDir := fs.String("flex-dir", "", "the flexvolume plugin dir the prober watches")
	syncPeriod := fs.Duration("sync-period", 5*time.Second, "--attach-detach-reconcile-sync-period")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" || *flexDir == "" {
		return fmt.Errorf("controller: -kubeconfig and -flex-dir are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	// kube-controller-manager's defaults: --kube-api-qps 20, --kube-api-burst 30.
	restCfg.QPS, restCfg.Burst = 20, 30
	restCfg.UserAgent = "kcsi-e2e-attachdetach-controller"
	client, err := clientset.NewForConfig(restCfg)
	if err != nil {
		return err
	}

	var plugins []volume.VolumePlugin
	switch *plugin {
	case "upstream":
		plugins = csi.ProbeVolumePlugins()
	case "kcsi":
		// The line a kube-controller-manager changes (cmd/kube-controller-manager/app/plugins.go):
		// kcsi sends its API requests through the controller's own client, as upstream's
		// plugin does.
		plugins = volumeplugin.ProbeAttachableVolumePlugins(volumeplugin.Config{})
		defer func() {
			for _, p := range plugins {
				p.(*volumeplugin.Plugin).Close()
			}
		}()
	default:
		return fmt.Errorf("controller: -plugin is %q, want kcsi or upstream", *plugin)
	}

	// kube-controller-manager's --min-resync-period is 12 h (each informer picks 12-24 h).
	factory := informers.NewSharedInformerFactory(client, 12*time.Hour)
	adc, err := attachdetach.NewAttachDetachController(ctx, client,
		factory.Core().V1().Pods(), factory.Core().V1().Nodes(),
		factory.Core().V1().PersistentVolumeClaims(), factory.Core().V1().PersistentVolumes(),
		factory.Storage().V1().CSINodes(), factory.Storage().V1().CSIDrivers(),
		factory.Storage().V1().VolumeAttachments(),
		plugins, flexvolume.GetDynamicPluginProber(ctx, *flexDir, exec.New()),
		false, *syncPeriod, false, attachdetach.DefaultTimerConfig)
	if err != nil {
		return fmt.Errorf("NewAttachDetachController: %w", err)
	}
	factory.Start(ctx.Done())
	fmt.Fprintf(os.Stderr, "kubelet-e2e: attach/detach controller with the %s plugin running\n", *plugin)
	adc.Run(ctx)
	factory.Shutdown()
	return nil
}
