package kcsi

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// apiServer is a real kube-apiserver on etcd, started by scripts/peers/apiserver.sh for one
// test and stopped when it ends, with a plain HTTPS client of the test's own (admin token,
// the server's self-signed certificate as the only CA): what the tests read from it does not
// pass through kcsi.
type apiServer struct {
	URL        string
	Kubeconfig string
	token      string
	client     *http.Client
}

func startAPIServer(t testing.TB) *apiServer {
	t.Helper()
	script, err := filepath.Abs("../../scripts/peers/apiserver.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := shortTempDir(t, "kcsigo-api")
	// Registered first: a start that failed half way still stops what it started.
	t.Cleanup(func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("stopping the API server: %v: %s", err, out)
		}
	})
	if out, err := exec.Command(script, "start", dir).CombinedOutput(); err != nil {
		t.Fatalf("starting the API server (the etcd and apiserver peers: scripts/peers/build.sh etcd apiserver): %v: %s", err, out)
	}
	env := map[string]string{}
	f, err := os.Open(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if k, v, ok := strings.Cut(s.Text(), "="); ok {
			env[k] = v
		}
	}
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := os.ReadFile(filepath.Join(dir, "certs", "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(cert) {
		t.Fatalf("no certificate in %s", filepath.Join(dir, "certs", "apiserver.crt"))
	}
	return &apiServer{
		URL:        env["APISERVER_URL"],
		Kubeconfig: env["KUBECONFIG"],
		token:      strings.TrimSpace(string(token)),
		client: &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca}}},
	}
}

// do sends one request (obj, if not nil, as its JSON body) and returns the status code and
// body.
func (a *apiServer) do(t testing.TB, method, path string, obj any) (int, []byte) {
	t.Helper()
	var body io.Reader
	if obj != nil {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// create POSTs obj to the collection at path and decodes the created object into out (if not
// nil).
func (a *apiServer) create(t testing.TB, path string, obj, out any) {
	t.Helper()
	code, b := a.do(t, http.MethodPost, path, obj)
	if code != http.StatusCreated {
		t.Fatalf("POST %s: status %d: %s", path, code, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("POST %s: %v: %s", path, err, b)
		}
	}
}

// get reads the object at path into out; false when there is none (404).
func (a *apiServer) get(t testing.TB, path string, out any) bool {
	t.Helper()
	code, b := a.do(t, http.MethodGet, path, nil)
	if code == http.StatusNotFound {
		return false
	}
	if code != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", path, code, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
	return true
}
