package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"
	mount "k8s.io/mount-utils"
)

const stateFile = "state.json"

// volume is one volume's record; the whole map is persisted in <statedir>/state.json.
type volume struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Size       int64  `json:"size"`
	Block      bool   `json:"block,omitempty"`
	Ephemeral  bool   `json:"ephemeral,omitempty"`
	StagedPath string `json:"stagedPath,omitempty"`
	// Published maps each target path to how it was published.
	Published map[string]publication `json:"published,omitempty"`
}

type publication struct {
	ReadOnly bool `json:"readOnly,omitempty"`
}

// driver serves Identity, Controller and Node. One mutex serialises all volume operations,
// as in the real driver.
type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	cfg     config
	mounter mount.Interface
	mu      sync.Mutex
	volumes map[string]*volume
}

func newDriver(cfg config) (*driver, error) {
	if err := os.MkdirAll(cfg.stateDir, 0o750); err != nil {
		return nil, err
	}
	d := &driver{cfg: cfg, mounter: mount.NewWithoutSystemd(""), volumes: map[string]*volume{}}
	b, err := os.ReadFile(filepath.Join(cfg.stateDir, stateFile))
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return nil, err
	default:
		var s struct {
			Volumes map[string]*volume `json:"volumes"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", stateFile, err)
		}
		if s.Volumes != nil {
			d.volumes = s.Volumes
		}
		klog.Infof("restored %d volume(s) from %s", len(d.volumes), stateFile)
	}
	return d, nil
}

// save writes state.json atomically (temp file + rename). Callers hold d.mu.
func (d *driver) save() error {
	b, err := json.MarshalIndent(struct {
		Volumes map[string]*volume `json:"volumes"`
	}{d.volumes}, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.cfg.stateDir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(d.cfg.stateDir, stateFile))
}

func (d *driver) volPath(id string) string { return filepath.Join(d.cfg.stateDir, id) }

// validID reports whether id can name a file directly inside the state directory.
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00") &&
		id != stateFile && id != stateFile+".tmp"
}

// createBacking makes <statedir>/<id>: a sparse file of size bytes (block) or a directory.
func (d *driver) createBacking(v *volume) error {
	p := d.volPath(v.ID)
	if !v.Block {
		if err := os.Mkdir(p, 0o777); err != nil && !os.IsExist(err) {
			return err
		}
		return os.Chmod(p, 0o777) // world-writable root (no umask), so non-root test pods can write
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(v.Size)
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (d *driver) topology() []*csi.Topology {
	if !d.cfg.enableTopology {
		return nil
	}
	return []*csi.Topology{{Segments: map[string]string{topologyKey: d.cfg.nodeID}}}
}

// Loop devices (block volumes), via util-linux losetup like the real driver's volumepathhandler.

// loopDevices lists the loop devices backed by file.
func loopDevices(file string) ([]string, error) {
	out, err := exec.Command("losetup", "-j", file).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("losetup -j %s: %v: %s", file, err, out)
	}
	var devs []string
	for _, line := range strings.Split(string(out), "\n") {
		if dev, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(dev, "/dev/") {
			devs = append(devs, dev)
		}
	}
	return devs, nil
}

// attachLoop returns the loop device backed by file, attaching one if there is none.
func attachLoop(file string) (string, error) {
	devs, err := loopDevices(file)
	if err != nil || len(devs) > 0 {
		if len(devs) > 0 {
			return devs[0], nil
		}
		return "", err
	}
	out, err := exec.Command("losetup", "-f", "--show", file).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup -f --show %s: %v: %s", file, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func detachLoop(file string) error {
	devs, err := loopDevices(file)
	for _, dev := range devs {
		if out, dErr := exec.Command("losetup", "-d", dev).CombinedOutput(); dErr != nil {
			return fmt.Errorf("losetup -d %s: %v: %s", dev, dErr, out)
		}
	}
	return err
}
