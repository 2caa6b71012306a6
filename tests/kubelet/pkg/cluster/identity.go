package cluster

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
)

// The suite runs as a real cluster does (StartCluster with secure): kube-apiserver authorizes
// with Node,RBAC and admits with NodeRestriction; each kubelet has its node's client
// certificate (user system:node:<node>, group system:nodes), the attach/detach controller the
// kube-system/attachdetach-controller service account's token (bound by the API server's
// bootstrap RBAC roles, as kube-controller-manager's --use-service-account-credentials runs
// it), and the external-attacher and external-resizer their service accounts' tokens, bound
// to exactly the RBAC objects of their own deploy manifests (rbac/, copied verbatim from the
// peers' source archives at the versions scripts/peers/versions.sh pins). The registrar and
// the hostpath driver get no credentials: their deploy manifests grant them nothing (the
// registrar's has no RBAC at all; hostpath's binds its service account only to its
// sidecars' roles). The suite's own client keeps the admin's (system:masters) to create pods
// and volumes and to look.

// ControllerSA is the attach/detach controller's service account, which kube-apiserver's
// bootstrap role system:controller:attachdetach-controller is bound to.
var ControllerSA = [2]string{"kube-system", "attachdetach-controller"}

//go:embed rbac/*.yaml
var rbacManifests embed.FS

// Sidecar is a sidecar's identity: its deploy manifest's RBAC and service account.
type Sidecar struct {
	Manifest string // under rbac/
	NS, SA   string // as the manifest names them
}

var (
	// AttacherIdentity is the external-attacher's (deploy/kubernetes/rbac.yaml).
	AttacherIdentity = Sidecar{"external-attacher-v4.12.0.yaml", "default", "csi-attacher"}
	// ResizerIdentity is the external-resizer's (deploy/kubernetes/rbac.yaml).
	ResizerIdentity = Sidecar{"external-resizer-v2.2.1.yaml", "default", "csi-resizer"}
)

// User is the user name a service account authenticates as.
func User(ns, sa string) string { return "system:serviceaccount:" + ns + ":" + sa }

// NodeUser is the user name of the node's kubelet.
func NodeUser(node string) string { return "system:node:" + node }

// SecureNodes are the names of the nodes the secure cluster gives client certificates, one per
// plugin (NewNode's names).
func SecureNodes(plugins []string) []string {
	var names []string
	for _, p := range plugins {
		names = append(names, "node-"+p)
	}
	return names
}

// setUpIdentities applies the sidecars' RBAC and writes the kubeconfigs of the controller's
// and the sidecars' service accounts under dir/users.
func (s *Suite) setUpIdentities(ctx context.Context, dir string) error {
	s.identities = map[string]string{}
	for _, sc := range []Sidecar{AttacherIdentity, ResizerIdentity} {
		if err := s.applyManifest(ctx, sc.Manifest); err != nil {
			return fmt.Errorf("RBAC of %s: %w", sc.Manifest, err)
		}
	}
	for _, sa := range [][2]string{ControllerSA, {AttacherIdentity.NS, AttacherIdentity.SA}, {ResizerIdentity.NS, ResizerIdentity.SA}} {
		path, err := s.serviceAccountKubeconfig(dir, sa[0], sa[1])
		if err != nil {
			return err
		}
		s.identities[User(sa[0], sa[1])] = path
	}
	return nil
}

// KubeconfigOf is the kubeconfig of user in a secure cluster, the admin's otherwise.
func (s *Suite) KubeconfigOf(user string) string {
	if p, ok := s.identities[user]; ok {
		return p
	}
	return s.Kubeconfig
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the service account (apiserver.sh
// sa-token, which creates it if missing).
func (s *Suite) serviceAccountKubeconfig(dir, ns, name string) (string, error) {
	c := exec.Command(filepath.Join(s.Repo, "scripts/peers/apiserver.sh"), "sa-token", dir, ns, name)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return "", fmt.Errorf("apiserver.sh sa-token %s %s: %v\n%s", ns, name, err, stderr.String())
	}
	cfg, err := clientcmd.LoadFromFile(s.Kubeconfig)
	if err != nil {
		return "", err
	}
	for _, a := range cfg.AuthInfos {
		a.Token = strings.TrimSpace(string(out))
	}
	path := filepath.Join(dir, "users", User(ns, name)+".kubeconfig")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return path, clientcmd.WriteToFile(*cfg, path)
}

// applyManifest creates the manifest's service accounts and RBAC objects with the admin's
// client; any other kind is an error.
func (s *Suite) applyManifest(ctx context.Context, name string) error {
	b, err := rbacManifests.ReadFile("rbac/" + name)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return err
		}
		switch o := obj.(type) {
		case *v1.ServiceAccount:
			_, err = s.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = s.Client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = s.Client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = s.Client.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = s.Client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("unexpected %T", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}
