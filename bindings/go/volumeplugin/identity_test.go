package volumeplugin

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"
	"kcsi.dev/kcsi"
	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// The kubelet's identity under the Node authorizer, and the one the README once suggested
// for the controller manager (it may list and watch everything, and create no
// VolumeAttachment).
const (
	kubeletUser           = "system:node:" + volumeplugintest.NodeName
	controllerManagerUser = "system:kube-controller-manager"
)

// bind gives user the cluster role (the admin creates the binding) and waits until the
// API server's authorizer lets user do what allowed does.
func (c *cluster) bind(t *testing.T, user, role string, allowed func() error) {
	t.Helper()
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-" + strings.ReplaceAll(user, ":", "-")},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := c.client.RbacV1().ClusterRoleBindings().Create(context.Background(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the binding of "+user+" to "+role, func() bool { return allowed() == nil })
}

// role creates a cluster role of rules.
func (c *cluster) role(t *testing.T, name string, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	r := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := c.client.RbacV1().ClusterRoles().Create(context.Background(), r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func (c *cluster) createNode(t *testing.T) *v1.Node {
	t.Helper()
	n, err := c.client.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: volumeplugintest.NodeName}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t *testing.T, limit time.Duration, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !done(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v", what, limit)
		}
	}
}

// auditEvent is what the tests read of the API server's audit log.
type auditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource string `json:"resource"`
		Name     string `json:"name"`
	} `json:"objectRef"`
}

func (c *cluster) audit(t *testing.T) []auditEvent {
	t.Helper()
	f, err := os.Open(filepath.Join(c.dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []auditEvent
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		var e auditEvent
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("audit log line %q: %v", lines.Text(), err)
		}
		events = append(events, e)
	}
	return events
}

// TestRequestsGoOutAsTheVolumeHostsClientWithNoKubeconfigOfItsOwn: with the zero Config, kcsi
// sends its requests through the kubelet's own client, as upstream's plugin does: the API
// server's audit log shows the CSINode created and the CSIDriver objects watched by the
// kubelet's user with the kubelet's user agent, and no request under kcsi's own.
func TestRequestsGoOutAsTheVolumeHostsClientWithNoKubeconfigOfItsOwn(t *testing.T) {
	c := startClusterWith(t, "KCSI_APISERVER_AUDIT=1", "KCSI_APISERVER_USERS="+kubeletUser+"=system:nodes")
	node := c.createNode(t)
	const agent = "kubelet-under-test/v1.36.3"
	kubelet := c.clientAs(t, kubeletUser, agent)
	c.bind(t, kubeletUser, "system:node", func() error {
		_, err := kubelet.CoreV1().Nodes().Get(context.Background(), volumeplugintest.NodeName, metav1.GetOptions{})
		return err
	})
	p := New(Config{})
	t.Cleanup(p.Close)
	host := volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), kubelet, nil, volumeplugintest.NodeName, nil, nil)
	if err := p.Init(host); err != nil {
		t.Fatal(err)
	}
	if err := host.WaitForKubeletErrNil(); err != nil {
		t.Fatalf("the CSINode start-up did not clear the kubelet's error: %v", err)
	}
	csinode, err := c.client.StorageV1().CSINodes().Get(context.Background(), volumeplugintest.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := csinode.OwnerReferences; len(refs) != 1 || refs[0].UID != node.UID {
		t.Errorf("CSINode owner references %+v, want the Node %s", refs, node.UID)
	}
	waitFor(t, 10*time.Second, "kcsi's watch of the CSIDriver objects in the audit log", func() bool {
		for _, e := range c.audit(t) {
			if e.Verb == "watch" && e.ObjectRef != nil && e.ObjectRef.Resource == "csidrivers" && e.User.Username == kubeletUser {
				return true
			}
		}
		return false
	})
	created := false
	for _, e := range c.audit(t) {
		if strings.HasPrefix(e.UserAgent, "kcsi/") {
			t.Errorf("a request went out under kcsi's own user agent: %+v", e)
		}
		if e.User.Username == kubeletUser && e.UserAgent != agent {
			t.Errorf("a request of the kubelet's user under another user agent: %q %+v", e.UserAgent, e)
		}
		if e.ObjectRef != nil && e.ObjectRef.Resource == "csinodes" && e.Verb == "create" {
			created = true
			if e.User.Username != kubeletUser {
				t.Errorf("the CSINode was created by %q, not the kubelet", e.User.Username)
			}
		}
	}
	if !created {
		t.Error("the audit log has no CSINode create")
	}
}

// adcHost is an attach/detach controller's VolumeHost as kube-controller-manager's is: no pods
// dir (volumetest's fake has one under its root).
type adcHost struct {
	volumetest.FakeVolumeHost
	volume.AttachDetachVolumeHost
}

func (adcHost) GetPodsDir() string { return "" }

func asADC(h volumetest.FakeVolumeHost) adcHost {
	return adcHost{h, h.(volume.AttachDetachVolumeHost)}
}

// TestInitSucceedsWhereUpstreamsDoesAndTheFirstCallSaysWhatIsWrong: on hosts where kcsi cannot
// make its host, Init returns nil as upstream's Init does on the same host (a failed Init
// would stop every controller of a kube-controller-manager), and a call that needs the host
// returns the cause.
func TestInitSucceedsWhereUpstreamsDoesAndTheFirstCallSaysWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		host func(t *testing.T) volume.VolumeHost
		want string
	}{
		{"the attach/detach controller's host without an API client", Config{}, func(t *testing.T) volume.VolumeHost {
			return asADC(volumetest.NewFakeAttachDetachVolumeHostWithCSINodeName(t, t.TempDir(), nil, nil, "", nil, nil))
		}, "has no API client"},
		{"the attach/detach controller's host with a client kcsi cannot send through", Config{}, func(t *testing.T) volume.VolumeHost {
			return asADC(volumetest.NewFakeAttachDetachVolumeHostWithCSINodeName(t, t.TempDir(), fake.NewClientset(), nil, "", nil, nil))
		}, "has no HTTP client kcsi can send its requests through"},
		{"a kubelet's host with a client kcsi cannot send through", Config{}, func(t *testing.T) volume.VolumeHost {
			return volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), fake.NewClientset(), nil, volumeplugintest.NodeName, nil, nil)
		}, "has no HTTP client kcsi can send its requests through"},
		{"an unreadable Config.Kubeconfig", Config{Kubeconfig: "/nonexistent/kcsi/kubeconfig"}, func(t *testing.T) volume.VolumeHost {
			return volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), nil, nil, volumeplugintest.NodeName, nil, nil)
		}, "/nonexistent/kcsi/kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := csi.ProbeVolumePlugins()[0].Init(tc.host(t)); err != nil {
				t.Fatalf("upstream's Init: %v", err)
			}
			p := New(tc.cfg)
			defer p.Close()
			if err := p.Init(tc.host(t)); err != nil {
				t.Fatalf("Init: %v", err)
			}
			_, err := p.NewAttacher()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewAttacher: %v, want an error with %q", err, tc.want)
			}
			if !p.CanSupport(volumeplugintest.PVSpec("pv", "h", false)) {
				t.Error("CanSupport of a CSI PersistentVolume is false")
			}
		})
	}
}

// TestAKubeconfigThatAppearsAfterInitMakesTheHostWithoutACall: the cause goes away (the
// kubeconfig appears) and kcsi makes its host by itself, initialises the CSINode and clears
// the kubelet's error, with no volume call to prompt it.
func TestAKubeconfigThatAppearsAfterInitMakesTheHostWithoutACall(t *testing.T) {
	c := startCluster(t)
	c.createNode(t)
	later := filepath.Join(t.TempDir(), "kubeconfig")
	p := New(Config{Kubeconfig: later})
	t.Cleanup(p.Close)
	host := volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), c.client, nil, volumeplugintest.NodeName, nil, nil)
	if err := p.Init(host); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CanAttach(volumeplugintest.PVSpec("pv", "h", false)); err == nil || !strings.Contains(err.Error(), later) {
		t.Fatalf("CanAttach before the kubeconfig exists: %v", err)
	}
	text, err := os.ReadFile(c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(later, text, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "kcsi's host, made by the plugin itself", func() bool { return p.Host() != nil })
	if err := host.WaitForKubeletErrNil(); err != nil {
		t.Fatalf("the CSINode start-up did not clear the kubelet's error: %v", err)
	}
	if _, err := c.client.StorageV1().CSINodes().Get(context.Background(), volumeplugintest.NodeName, metav1.GetOptions{}); err != nil {
		t.Fatalf("CSINode: %v", err)
	}
}

// TestAKubeletThatMayNotCreateItsCSINodeIsToldWhoMayNotDoWhat: a kubelet identity that may
// read Nodes and CSINodes but not create its CSINode gets, as the kubelet's error, upstream's
// text around the API server's Forbidden (user, verb, resource), not a silent wait. The
// expected text is upstream's format (nodeinfomanager InitializeCSINodeWithAnnotation,
// csi_plugin.go initializeCSINode) around the error the same client gets for the same create.
func TestAKubeletThatMayNotCreateItsCSINodeIsToldWhoMayNotDoWhat(t *testing.T) {
	c := startClusterWith(t, "KCSI_APISERVER_USERS="+kubeletUser+"=system:nodes")
	c.createNode(t)
	kubelet := c.clientAs(t, kubeletUser, "kubelet-under-test")
	reader := c.role(t, "csinode-reader",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes", "csidrivers"}, Verbs: []string{"get", "list", "watch"}})
	c.bind(t, kubeletUser, reader, func() error {
		_, err := kubelet.StorageV1().CSIDrivers().List(context.Background(), metav1.ListOptions{})
		return err
	})
	_, refused := kubelet.StorageV1().CSINodes().Create(context.Background(), &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: volumeplugintest.NodeName}}, metav1.CreateOptions{})
	if refused == nil {
		t.Fatal("the kubelet's identity may create its CSINode")
	}
	want := "failed to initialize CSINode: error updating CSINode annotation: timed out waiting for the condition; caused by: " + refused.Error()

	p := New(Config{})
	t.Cleanup(p.Close)
	host := volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), kubelet, nil, volumeplugintest.NodeName, nil, nil)
	if err := p.Init(host); err != nil {
		t.Fatal(err)
	}
	var got string
	waitFor(t, 10*time.Second, "the CSINode start-up's error", func() bool {
		h := p.Host()
		if h == nil {
			return false
		}
		st, err := h.Status()
		if err != nil {
			t.Fatal(err)
		}
		if st.LastError != nil {
			got = *st.LastError
		}
		return strings.Contains(got, "forbidden")
	})
	if got != want {
		t.Errorf("kubelet error:\n got %s\nwant %s", got, want)
	}
	for _, part := range []string{`User "` + kubeletUser + `"`, "cannot create", `resource "csinodes"`} {
		if !strings.Contains(got, part) {
			t.Errorf("the error does not name %s: %s", part, got)
		}
	}
}

// TestAControllerThatMayNotCreateVolumeAttachmentsGetsUpstreamsForbiddenError: the controller
// manager's own identity may not create VolumeAttachments; Attach fails at once, with the
// error upstream's plugin returns on the same host for the same volume, word for word (the
// attach/detach controller puts it in its event), and final, as upstream's errors.New is.
func TestAControllerThatMayNotCreateVolumeAttachmentsGetsUpstreamsForbiddenError(t *testing.T) {
	c := startClusterWith(t, "KCSI_APISERVER_USERS="+controllerManagerUser)
	client := c.clientAs(t, controllerManagerUser, "kube-controller-manager-under-test")
	waitFor(t, 10*time.Second, "the controller manager's bootstrap role", func() bool {
		_, err := client.StorageV1().VolumeAttachments().List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
	spec := volumeplugintest.PVSpec("pv-denied", "h-denied", false)
	upstream := upstreamAttachError(t, client, spec)

	p := New(Config{})
	t.Cleanup(p.Close)
	if err := p.Init(asADC(adcFakeHost(t, client))); err != nil {
		t.Fatal(err)
	}
	a, err := p.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Attach(spec, volumeplugintest.NodeName)
	if err == nil {
		t.Fatal("Attach succeeded")
	}
	if err.Error() != upstream.Error() {
		t.Errorf("Attach:\n     got %s\nupstream %s", err, upstream)
	}
	if !strings.Contains(err.Error(), `User "`+controllerManagerUser+`" cannot create resource "volumeattachments"`) {
		t.Errorf("the error does not name the user, verb and resource: %s", err)
	}
	if kcsi.IsTransient(err) || kcsi.IsUncertain(err) {
		t.Errorf("the error is not final: %#v", err)
	}
}

func adcFakeHost(t *testing.T, client clientset.Interface) volumetest.FakeVolumeHost {
	drivers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	attachments := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	return volumetest.NewFakeAttachDetachVolumeHostWithCSINodeName(t, t.TempDir(), client, nil, "",
		storagelisters.NewCSIDriverLister(drivers), storagelisters.NewVolumeAttachmentLister(attachments))
}

// upstreamAttachError is upstream's plugin's Attach error for spec on an attach/detach
// controller's host with client.
func upstreamAttachError(t *testing.T, client clientset.Interface, spec *volume.Spec) error {
	t.Helper()
	up := csi.ProbeVolumePlugins()[0]
	if err := up.Init(adcFakeHost(t, client)); err != nil {
		t.Fatal(err)
	}
	a, err := up.(volume.AttachableVolumePlugin).NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Attach(spec, volumeplugintest.NodeName)
	if err == nil {
		t.Fatal("upstream's Attach succeeded")
	}
	return err
}
