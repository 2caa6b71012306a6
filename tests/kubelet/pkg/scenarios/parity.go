package scenarios

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// withCSIDriver changes the suite's CSIDriver for one scenario and returns the undo.
func withCSIDriver(ctx context.Context, n *cluster.Node, edit func(*storagev1.CSIDriverSpec)) (func(), error) {
	return withDriverSpec(ctx, n, cluster.HostpathCSIDriver(), edit)
}

// withDriverSpec changes the CSIDriver object of base (as the suite created it) and returns
// the undo. Both plugins watch CSIDriver objects; the pause lets their caches catch up.
func withDriverSpec(ctx context.Context, n *cluster.Node, base *storagev1.CSIDriver, edit func(*storagev1.CSIDriverSpec)) (func(), error) {
	drivers := n.Suite.Client.StorageV1().CSIDrivers()
	update := func(edit func(*storagev1.CSIDriverSpec)) error {
		d, err := drivers.Get(ctx, base.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(&d.Spec)
		if _, err := drivers.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		return nil
	}
	if err := update(edit); err != nil {
		return nil, err
	}
	return func() {
		if err := update(func(s *storagev1.CSIDriverSpec) { *s = base.Spec }); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-e2e: restoring the CSIDriver %s: %v\n", base.Name, err)
		}
	}, nil
}

// ownership is "gid <g> mode <m>" of the volume root, for comparison.
func ownership(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("gid %d mode %o", st.Gid, st.Mode&0o7777)
}

// rwopFSGroup: a ReadWriteOncePod PV with an fsType under fsGroupPolicy
// ReadWriteOnceWithFSType: upstream's hasReadWriteOnce accepts RWOP, so the fsGroup is applied.
func rwopFSGroup(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	restore, err := withCSIDriver(ctx, n, func(s *storagev1.CSIDriverSpec) {
		p := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
		s.FSGroupPolicy = &p
	})
	if err != nil {
		return err
	}
	defer restore()
	c, err := n.CreateClaim(ctx, "rwop", false, func(pv *v1.PersistentVolume, pvc *v1.PersistentVolumeClaim) {
		pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}
		pv.Spec.CSI.FSType = "ext4"
		pvc.Spec.AccessModes = pv.Spec.AccessModes
	})
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod := n.ClaimPod("rwop", c)
	gid := int64(3456)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: &gid}
	return runPod(ctx, n, o, pod, map[string]string{"rwop": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		got := ownership(n.MountPath(pod, c.PV))
		o.Add("running: ownership", got)
		o.Check("fsGroup is applied to a ReadWriteOncePod volume", strings.HasPrefix(got, "gid 3456 "), got)
		return nil
	})
}

// readOnlyPVC: the pod mounts its claim read-only: NodePublish says so and the mount refuses
// writes.
func readOnlyPVC(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	c, err := n.CreateClaim(ctx, "ro", false)
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	vol := cluster.ClaimVolume(c)
	vol.PersistentVolumeClaim.ReadOnly = true
	pod := n.Pod("ro", []v1.Volume{vol}, []v1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}}, nil)
	return runPod(ctx, n, o, pod, map[string]string{"ro": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		err := os.WriteFile(filepath.Join(n.MountPath(pod, c.PV), "x"), []byte("x"), 0o644)
		o.Check("a write through the read-only mount fails with EROFS", errors.Is(err, syscall.EROFS), fmt.Sprint(err))
		return nil
	})
}

// secrets: NodeStage and NodePublish secrets from a Secret the PV names.
func secrets(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "csi-secret", Namespace: n.NS},
		StringData: map[string]string{"username": "kcsi", "password": "not-logged"}}
	if _, err := n.Suite.Client.CoreV1().Secrets(n.NS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer n.Suite.Client.CoreV1().Secrets(n.NS).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	ref := &v1.SecretReference{Name: secret.Name, Namespace: n.NS}
	c, err := n.CreateClaim(ctx, "secrets", false, func(pv *v1.PersistentVolume, _ *v1.PersistentVolumeClaim) {
		pv.Spec.CSI.NodeStageSecretRef = ref
		pv.Spec.CSI.NodePublishSecretRef = ref
	})
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod := n.ClaimPod("secrets", c)
	m := n.Mark()
	return runPod(ctx, n, o, pod, map[string]string{"secrets": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		calls, err := n.CallsSince(m)
		if err != nil {
			return err
		}
		var withSecrets []string
		for _, c := range calls {
			if s, ok := c.Request["secrets"]; ok && (c.Method == "NodeStageVolume" || c.Method == "NodePublishVolume") {
				withSecrets = append(withSecrets, fmt.Sprintf("%s %v", c.Method, s))
			}
		}
		o.Check("NodeStage and NodePublish carry the Secret", len(withSecrets) == 2, strings.Join(withSecrets, "; "))
		return nil
	})
}

// tokenRepublish: a CSIDriver with tokenRequests and requiresRepublish: the kubelet publishes
// the volume again on every pod sync (5 s here), each time with a token for the audience,
// and the token is reused (the kubelet's token manager; kcsi's per-host cache) while fresh.
func tokenRepublish(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "token-sa", Namespace: n.NS}}
	if _, err := n.Suite.Client.CoreV1().ServiceAccounts(n.NS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer n.Suite.Client.CoreV1().ServiceAccounts(n.NS).Delete(context.Background(), sa.Name, metav1.DeleteOptions{})
	restore, err := withCSIDriver(ctx, n, func(s *storagev1.CSIDriverSpec) {
		t := true
		exp := int64(3600)
		s.RequiresRepublish = &t
		s.TokenRequests = []storagev1.TokenRequest{{Audience: "kcsi-e2e", ExpirationSeconds: &exp}}
	})
	if err != nil {
		return err
	}
	defer restore()
	c, err := n.CreateClaim(ctx, "token", false)
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod := n.ClaimPod("token", c)
	pod.Spec.ServiceAccountName = sa.Name
	m := n.Mark()
	return runPod(ctx, n, o, pod, map[string]string{"token": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		// The republishes land between "running:" and "deleted:": a snapshot of their own
		// puts their count in a bucket, so a plugin republishing in a loop fails.
		republishing := n.Mark()
		defer n.Snapshot(ctx, o, "republishing:", republishing, z)
		var tokens []string
		err := cluster.WaitFor(ctx, 40*time.Second, "three republishes", func() (bool, error) {
			calls, err := n.CallsSince(m)
			if err != nil {
				return false, err
			}
			tokens = nil
			for _, c := range calls {
				if c.Method == "NodePublishVolume" {
					tokens = append(tokens, observe.ServiceAccountToken.FindString(fmt.Sprint(c.Request["volume_context"])))
				}
			}
			return len(tokens) >= 4, nil
		})
		o.Check("the volume is published again on every sync", err == nil, fmt.Sprint(err))
		same := len(tokens) > 0 && tokens[0] != ""
		for _, t := range tokens {
			same = same && t == tokens[0]
		}
		o.Check("every republish carries the same, cached token", same, fmt.Sprintf("%d publishes", len(tokens)))
		return nil
	})
}
