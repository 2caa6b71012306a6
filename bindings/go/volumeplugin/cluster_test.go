package volumeplugin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// cluster is a real kube-apiserver on etcd (scripts/peers/apiserver.sh), for the tests whose
// answer comes from API objects.
type cluster struct {
	dir        string
	kubeconfig string
	client     *clientset.Clientset
}

func startCluster(t *testing.T) *cluster { return startClusterWith(t) }

// startClusterWith starts the cluster with apiserver.sh's options in env (e.g.
// KCSI_APISERVER_USERS=..., KCSI_APISERVER_AUDIT=1).
func startClusterWith(t *testing.T, env ...string) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "kcsi-vp-api.")
	if err != nil {
		t.Fatal(err)
	}
	script := "../../../scripts/peers/apiserver.sh"
	t.Cleanup(func() {
		exec.Command(script, "stop", dir).Run()
		os.RemoveAll(dir)
	})
	start := exec.Command(script, "start", dir)
	start.Env = append(os.Environ(), env...)
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("starting kube-apiserver: %v\n%s", err, out)
	}
	c := &cluster{dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig")}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if c.client, err = clientset.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// startClusterWithNode is startCluster with this node's Node object, which the fake volume
// host's wait for kcsi's CSINode start-up needs.
func startClusterWithNode(t *testing.T) *cluster {
	t.Helper()
	c := startCluster(t)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: volumeplugintest.NodeName}}
	if _, err := c.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// clientAs is a client of user (one of KCSI_APISERVER_USERS) with its own user agent, as a
// kubelet's or a controller's client is.
func (c *cluster) clientAs(t *testing.T, user, userAgent string) *clientset.Clientset {
	t.Helper()
	return clientFrom(t, filepath.Join(c.dir, "users", user+".kubeconfig"), userAgent)
}

// clientWithAgent is an administrator's client with its own user agent, which tells its
// requests apart in the audit log.
func (c *cluster) clientWithAgent(t *testing.T, userAgent string) *clientset.Clientset {
	t.Helper()
	return clientFrom(t, c.kubeconfig, userAgent)
}

func clientFrom(t *testing.T, kubeconfig, userAgent string) *clientset.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.UserAgent = userAgent
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}
