package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// StartCluster starts the suite's kube-apiserver and etcd under the work dir, with an audit
// log if asked (AuditLog), secure if asked (Node,RBAC and NodeRestriction, and an identity
// of its own for each node of observe.Plugins, the controller and the sidecars:
// identity.go), and creates the CSIDriver objects of the main and the attach driver; the
// returned func stops the API server.
func (s *Suite) StartCluster(ctx context.Context, audit, secure bool) (func(), error) {
	started := time.Now()
	dir := filepath.Join(s.Work, "api")
	var env []string
	if audit {
		env = append(env, "KCSI_APISERVER_AUDIT=1")
	}
	if secure {
		env = append(env, "KCSI_APISERVER_NODE_AUTHZ=1",
			"KCSI_APISERVER_NODE_CERTS="+strings.Join(SecureNodes(observe.Plugins), " "))
	}
	stopAPI, err := s.StartAPIServer(dir, env...)
	if err != nil {
		return nil, err
	}
	if audit {
		s.AuditLog = filepath.Join(dir, "audit.log")
	}
	if secure {
		s.Secure = true
		if err := s.setUpIdentities(ctx, dir); err != nil {
			stopAPI()
			return nil, err
		}
	}
	for _, d := range []*storagev1.CSIDriver{HostpathCSIDriver(), AttachCSIDriver()} {
		if _, err := s.Client.StorageV1().CSIDrivers().Create(ctx, d, metav1.CreateOptions{}); err != nil {
			stopAPI()
			return nil, err
		}
	}
	fmt.Printf("kube-apiserver up in %.1f s\n", time.Since(started).Seconds())
	return stopAPI, nil
}

// StartNode starts the plugin's node (kubeletArgs: extra `kubelet-e2e kubelet` flags) with its
// namespace and attach stack, and waits until it is Ready with the drivers registered. The
// node is returned even when it failed to start, for Stop.
func (s *Suite) StartNode(ctx context.Context, plugin string, kubeletArgs ...string) (*Node, error) {
	n := s.NewNode(plugin)
	n.KubeletArgs = append(n.KubeletArgs, kubeletArgs...)
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.NS}}, metav1.CreateOptions{}); err != nil {
		return n, err
	}
	t0 := time.Now()
	if err := n.Start(ctx); err != nil {
		return n, fmt.Errorf("%s node: %w (logs in %s)", plugin, err, n.Dir)
	}
	fmt.Printf("[%s] node Ready with the driver registered in %.1f s\n", plugin, time.Since(t0).Seconds())
	return n, nil
}

// StopNodes stops the nodes and cleans up after them; it returns what each left mounted, or
// why that could not be read: the mount table is read once the processes have stopped and
// before the clean-up unmounts everything.
func StopNodes(nodes map[string]*Node) []string {
	var leftBehind []string
	for plugin, n := range nodes {
		n.StopProcesses()
		left, err := n.LeftMounts()
		n.CleanUp()
		delete(nodes, plugin)
		if err != nil {
			leftBehind = append(leftBehind, fmt.Sprintf("%s node: reading the mount table: %v", plugin, err))
		} else if len(left) > 0 {
			leftBehind = append(leftBehind, fmt.Sprintf("%s node left mounts behind: %v", plugin, left))
		}
	}
	return leftBehind
}
