package volumeplugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"kcsi.dev/kcsi"
)

// volumeRefs are the spec names and "<driver>^<handle>" of volumes something refers to, and
// (from the API server) the UIDs of the pods bound to the node.
type volumeRefs struct {
	names   map[string]bool
	handles map[string]bool
	pods    map[string]bool
}

func newVolumeRefs() volumeRefs {
	return volumeRefs{names: map[string]bool{}, handles: map[string]bool{}, pods: map[string]bool{}}
}

func (r volumeRefs) uses(m kcsi.DeviceMount) bool {
	spec := m.SpecName // block volumes; a filesystem one's is in its vol_data.json
	if spec == "" {
		spec = m.VolumeData["specVolID"]
	}
	return (spec != "" && r.names[spec]) || r.handles[m.Driver+"^"+m.VolumeHandle]
}

// podPublish is a block volume's publish for one pod: the plugin's
// volumeDevices/publish/<spec>/<uid> (NodePublishVolume's target) and the kubelet's
// volumeDevices/<spec>/dev/<uid> (its bind mount of the device).
type podPublish struct{ spec, uid string }

func (p podPublish) key() string { return "publish:" + p.spec + "/" + p.uid }

// diskRefs is what the dirs under the kubelet root name.
type diskRefs struct {
	volumeRefs
	// stranded: block publishes whose pod dir no longer names the volume. The kubelet rebuilds
	// a pod's block volumes from pods/<uid>/volumeDevices only, and it removes that entry
	// before NodeUnpublishVolume (operation_generator.go GenerateUnmapVolumeFunc runs
	// util.UnmapBlockVolume, then UnmapPodDevice) and makes it after NodePublishVolume
	// (GenerateMapVolumeFunc): a kubelet killed in between never unpublishes these.
	stranded []podPublish
}

// usesStrictly: something on disk names m, a stranded publish included.
func (r diskRefs) usesStrictly(m kcsi.DeviceMount) bool {
	if r.uses(m) {
		return true
	}
	for _, p := range r.stranded {
		if m.Kind == "block" && p.spec == m.SpecName {
			return true
		}
	}
	return false
}

func (r diskRefs) isStranded(p podPublish) bool {
	for _, s := range r.stranded {
		if s == p {
			return true
		}
	}
	return false
}

// readPublishRefs reads which volumes the pod dirs and the block publish dirs name (the
// kubelet's pods/<uid>/volumes/kubernetes.io~csi/<spec> with its vol_data.json,
// pods/<uid>/volumeDevices/kubernetes.io~csi/<spec>, and the plugin's
// volumeDevices/publish/<spec>/<uid> and volumeDevices/<spec>/dev/<uid>, which name the volume
// only while the pod's dir does, else they are stranded). An entry whose vol_data.json is
// unreadable still names its spec; a dir that cannot be read names its volume.
func readPublishRefs(podsDir, devDir string) (diskRefs, error) {
	refs := diskRefs{volumeRefs: newVolumeRefs()}
	pods, err := readDirNames(podsDir)
	if err != nil {
		return refs, err
	}
	mapped := map[podPublish]bool{}
	for _, uid := range pods {
		for _, sub := range []string{"volumes", "volumeDevices"} {
			dir := filepath.Join(podsDir, uid, sub, "kubernetes.io~csi")
			specs, err := readDirNames(dir)
			if err != nil {
				return refs, err
			}
			for _, spec := range specs {
				refs.names[spec] = true
				if sub == "volumes" {
					addRecordedHandle(refs.volumeRefs, filepath.Join(dir, spec, "vol_data.json"))
				} else {
					mapped[podPublish{spec, uid}] = true
				}
			}
		}
	}
	seen := map[podPublish]bool{}
	addPodDirs := func(spec, dir string) {
		uids, err := readDirNames(dir)
		if err != nil {
			refs.names[spec] = true
			return
		}
		for _, uid := range uids {
			p := podPublish{spec, uid}
			switch {
			case mapped[p]:
				refs.names[spec] = true
			case !seen[p]:
				seen[p] = true
				refs.stranded = append(refs.stranded, p)
			}
		}
	}
	specs, err := readDirNames(filepath.Join(devDir, "publish"))
	if err != nil {
		return refs, err
	}
	for _, spec := range specs {
		addPodDirs(spec, filepath.Join(devDir, "publish", spec))
	}
	specs, err = readDirNames(devDir)
	if err != nil {
		return refs, err
	}
	for _, spec := range specs {
		addPodDirs(spec, filepath.Join(devDir, spec, "dev"))
	}
	return refs, nil
}

// readDirNames lists dir; a dir that does not exist is empty.
func readDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, err
}

func addRecordedHandle(refs volumeRefs, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	var data map[string]string
	if json.Unmarshal(b, &data) == nil && data["volumeHandle"] != "" {
		refs.handles[data["driverName"]+"^"+data["volumeHandle"]] = true
	}
}

// podUsers reads from the API server which pods are bound to this node and which volumes they
// reference: each claim's PersistentVolume by name and by CSI driver and handle, and every
// other volume by its name (a CSI-migrated inline volume is staged under it). A claim or
// volume that does not exist (yet) references nothing: a pod that gets it later has it staged
// by the kubelet, which claims it. Only the reads the Node authorizer allows a kubelet: its
// own pods, and the claims and volumes of those.
func (o *orphans) podUsers(ctx context.Context) (volumeRefs, error) {
	refs := newVolumeRefs()
	pods, err := o.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", o.node).String(),
	})
	if err != nil {
		return refs, err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue // the kubelet never mounts a terminal pod's volumes again
		}
		refs.pods[string(pod.UID)] = true
		for _, vol := range pod.Spec.Volumes {
			claim := ""
			switch {
			case vol.PersistentVolumeClaim != nil:
				claim = vol.PersistentVolumeClaim.ClaimName
			case vol.Ephemeral != nil:
				claim = pod.Name + "-" + vol.Name
			default:
				refs.names[vol.Name] = true
				continue
			}
			if err := o.addClaim(ctx, refs, pod.Namespace, claim); err != nil {
				return refs, err
			}
		}
	}
	return refs, nil
}

func (o *orphans) addClaim(ctx context.Context, refs volumeRefs, ns, name string) error {
	pvc, err := o.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || pvc.Spec.VolumeName == "" {
		return err
	}
	refs.names[pvc.Spec.VolumeName] = true
	pv, err := o.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Spec.CSI != nil {
		refs.handles[pv.Spec.CSI.Driver+"^"+pv.Spec.CSI.VolumeHandle] = true
	}
	return nil
}
