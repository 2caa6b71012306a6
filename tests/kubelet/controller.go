package main

import (
	"context"
	"flag"
	"fmt"
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

	"kcsi.dev/kcsi/volumeplugin"
)

// runController runs the real attach/detach controller of kube-controller-manager
// (pkg/controller/volume/attachdetach) as cmd/kube-controller-manager/app/core.go starts it:
// one shared informer factory, its default timer config, reconciler sync every minute and
// force-detach on timeout. Only the CSI plugin is loaded: kcsi's (the line a
// kube-controller-manager changes) or upstream's.
func runController(args []string) error {
	fs := flag.NewFlagSet("controller", flag.ExitOnError)
	plugin := fs.String("plugin", "kcsi", "CSI volume plugin: kcsi or upstream")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return fmt.Errorf("controller: -kubeconfig is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	// kube-controller-manager's defaults (--kube-api-qps 20, --kube-api-burst 30).
	cfg.QPS, cfg.Burst = 20, 30
	cfg.UserAgent = "kcsi-e2e-attachdetach-controller"
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		return err
	}

	var plugins []volume.VolumePlugin
	switch *plugin {
	case "upstream":
		plugins = csi.ProbeVolumePlugins()
	case "kcsi":
		// The line a kube-controller-manager changes.
		plugins = volumeplugin.ProbeAttachableVolumePlugins(volumeplugin.Config{Kubeconfig: *kubeconfig})
		defer plugins[0].(*volumeplugin.Plugin).Close()
	default:
		return fmt.Errorf("controller: -plugin is %q, want kcsi or upstream", *plugin)
	}

	// --min-resync-period defaults to 12h; ResyncPeriod randomises it up to twice that.
	factory := informers.NewSharedInformerFactory(client, 12*time.Hour)
	adc, err := attachdetach.NewAttachDetachController(
		ctx,
		client,
		factory.Core().V1().Pods(),
		factory.Core().V1().Nodes(),
		factory.Core().V1().PersistentVolumeClaims(),
		factory.Core().V1().PersistentVolumes(),
		factory.Storage().V1().CSINodes(),
		factory.Storage().V1().CSIDrivers(),
		factory.Storage().V1().VolumeAttachments(),
		plugins,
		nil,   // no flex volume plugin dir
		false, // --disable-attach-detach-reconcile-sync
		time.Minute,
		false, // --disable-force-detach-on-timeout
		attachdetach.DefaultTimerConfig,
	)
	if err != nil {
		return fmt.Errorf("NewAttachDetachController: %w", err)
	}
	factory.Start(ctx.Done())
	go adc.Run(ctx)
	klog.InfoS("kubelet-e2e: attach/detach controller running", "plugin", *plugin)
	<-ctx.Done()
	factory.Shutdown()
	return nil
}
