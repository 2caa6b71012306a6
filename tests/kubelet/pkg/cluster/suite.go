package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Suite is the API server and the peers' binaries the nodes run with.
type Suite struct {
	Repo, Work          string
	E2E                 string // the kubelet-e2e binary, whose kubelet and controller commands the nodes run
	Hostpath, Registrar string
	Resizer             string // external-resizer, for the expand scenarios
	FaultDriver         string // only where a fault no real peer makes is needed
	Kubeconfig          string
	Client              *clientset.Clientset
	AuditLog            string // the API server's audit log, if StartCluster was asked for one
	// Secure: the API server authorizes as a real cluster does (StartCluster, identity.go),
	// and each kubelet, controller and sidecar has its own identity.
	Secure bool
	// identities are the kubeconfigs of the service accounts (by user name) in a secure
	// cluster; users/system:node:<node>.kubeconfig under the API server's dir are the nodes'.
	identities map[string]string
	apiDir     string
}

// NewSuite finds the kubelet-e2e binary (e2e, or this one if empty) and the peers, and makes
// the work directory (a new one under /tmp named prefix* if work is empty).
func NewSuite(repo, work, prefix, e2e string) (*Suite, error) {
	s := &Suite{Repo: repo, Work: work, E2E: e2e}
	var err error
	if s.E2E == "" {
		if s.E2E, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	if s.Hostpath, err = s.Peer("hostpath"); err != nil {
		return nil, err
	}
	if s.Registrar, err = s.Peer("registrar"); err != nil {
		return nil, err
	}
	if s.Work == "" {
		s.Work, err = os.MkdirTemp("/tmp", prefix)
	}
	return s, err
}

// RemoveWork unmounts what is left under the work directory and removes it.
func (s *Suite) RemoveWork() {
	unmountUnder(s.Work)
	os.RemoveAll(s.Work)
}

// StartAPIServer starts etcd and kube-apiserver in dir (env: apiserver.sh's settings) and
// points s.Kubeconfig and s.Client at them; the returned func stops both.
func (s *Suite) StartAPIServer(dir string, env ...string) (func(), error) {
	if err := s.APIServer("start", dir, env...); err != nil {
		return nil, err
	}
	stop := func() { s.APIServer("stop", dir) }
	s.Kubeconfig = filepath.Join(dir, "kubeconfig")
	s.apiDir = dir
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		stop()
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cfg.UserAgent = ObserverAgent
	if s.Client, err = clientset.NewForConfig(cfg); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// ObserverAgent is the suite's own client, which the fleet leaves out of its counts.
const ObserverAgent = "kcsi-e2e-observer"

// APIServer runs scripts/peers/apiserver.sh cmd dir.
func (s *Suite) APIServer(cmd, dir string, env ...string) error {
	c := exec.Command(filepath.Join(s.Repo, "scripts/peers/apiserver.sh"), cmd, dir)
	c.Env = append(os.Environ(), env...)
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("apiserver.sh %s: %v\n%s", cmd, err, out)
	}
	return nil
}

// Peer is the path of the peer built by scripts/peers/build.sh.
func (s *Suite) Peer(name string) (string, error) {
	out, err := exec.Command(filepath.Join(s.Repo, "scripts/peers/path.sh"), name).Output()
	if err != nil {
		return "", fmt.Errorf("peer %s is not built (scripts/peers/build.sh %s): %v", name, name, err)
	}
	return strings.TrimSpace(string(out)), nil
}
