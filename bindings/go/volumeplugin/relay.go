package volumeplugin

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// hostRelay sends kcsi's API requests out through the VolumeHost's own API client (the
// kubelet's, or the attach/detach controller's), as upstream's plugin sends them: with that
// client's credentials, applied by its transport to each request (a rotated client
// certificate, a re-read token file, an exec plugin's token included), its user agent and its
// QPS limiter. kcsi's core (kube-rs) cannot take a Go transport, so it reaches the relay on
// loopback with a random bearer token that only this process knows; the token and the
// relay's address go to kcsi in memory, as its host config's "kubeconfigData".
type hostRelay struct {
	server     *http.Server
	kubeconfig string
}

// startHostRelay relays to client's API server, or says why client cannot carry requests.
func startHostRelay(client clientset.Interface) (*hostRelay, error) {
	rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil || rc.Client == nil {
		return nil, fmt.Errorf("the VolumeHost's API client (%T) has no HTTP client kcsi can send its requests through; set Config.Kubeconfig", client)
	}
	target := rc.Get().AbsPath("/").URL()
	target.RawQuery = ""
	transport := rc.Client.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("making the relay's token: %w", err)
	}
	token := "Bearer " + hex.EncodeToString(secret)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The host client's transport authenticates, and names the user agent, itself.
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("User-Agent")
		},
		Transport:     transport,
		FlushInterval: -1, // a watch's events go on as they come
		ErrorHandler:  unreachable,
	}
	limiter := rc.GetRateLimiter()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(token)) != 1 {
			http.Error(w, "kcsi host relay: wrong or missing token", http.StatusUnauthorized)
			return
		}
		// The host client's own limiter: kcsi's requests count against its QPS, as
		// upstream's plugin's do.
		if limiter != nil {
			if err := limiter.Wait(r.Context()); err != nil {
				unreachable(w, r, fmt.Errorf("waiting for the VolumeHost client's rate limiter: %w", err))
				return
			}
		}
		proxy.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for kcsi's API requests on loopback: %w", err)
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := server.Serve(ln); err != nil && err != http.ErrServerClosed {
			klog.ErrorS(err, "kcsi: the relay to the VolumeHost's API client stopped")
		}
	}()
	kubeconfig, err := json.Marshal(map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"clusters":        []any{map[string]any{"name": "host", "cluster": map[string]any{"server": "http://" + ln.Addr().String()}}},
		"users":           []any{map[string]any{"name": "host", "user": map[string]any{"token": token[len("Bearer "):]}}},
		"contexts":        []any{map[string]any{"name": "host", "context": map[string]any{"cluster": "host", "user": "host"}}},
		"current-context": "host",
	})
	if err != nil {
		server.Close()
		return nil, err
	}
	return &hostRelay{server: server, kubeconfig: string(kubeconfig)}, nil
}

// unreachable answers a request the host client could not carry as the API server answers
// when it is unavailable (a Status kcsi names the failure with).
func unreachable(w http.ResponseWriter, _ *http.Request, err error) {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Reason:   metav1.StatusReasonServiceUnavailable,
		Code:     http.StatusServiceUnavailable,
		Message:  "the VolumeHost's API client could not send the request: " + err.Error(),
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(status)
}

func (r *hostRelay) close() { r.server.Close() }
