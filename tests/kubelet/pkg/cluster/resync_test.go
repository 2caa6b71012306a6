package cluster

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// auditLine is one audit.k8s.io/v1 event as the API server logs it.
func auditLine(id, verb, agent, va string, at time.Time) string {
	b, _ := json.Marshal(map[string]any{"auditID": id, "verb": verb, "userAgent": agent,
		"objectRef":                map[string]string{"resource": "volumeattachments", "name": va},
		"requestReceivedTimestamp": at.UTC().Format(time.RFC3339Nano)})
	return string(b)
}

func TestAttacherResyncNeedsTheAttacherAloneToHaveWrittenTheAttachment(t *testing.T) {
	dir := t.TempDir()
	n := &Node{Name: "node-kcsi", Suite: &Suite{AuditLog: filepath.Join(dir, "audit.log")},
		Attach: &AttachStack{attacherBin: "/cache/attacher/csi-attacher"}}
	va := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("vol-1"+AttachDriverName+"node-kcsi")))
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	call := func(ms int) observe.Call {
		return observe.Call{Method: "ControllerPublishVolume", Request: map[string]any{"volume_id": "vol-1"}, At: at(ms)}
	}
	attacher := "csi-attacher/v0.0.0 (linux/amd64) kubernetes/$Format"
	for _, tc := range []struct {
		name  string
		lines []string
		want  bool
	}{
		{"the attacher's finalizer and status", []string{
			auditLine("1", "create", "kcsi/0.1", va, at(0)), auditLine("2", "patch", attacher, va, at(5)),
			auditLine("3", "patch", attacher, va, at(15))}, true},
		{"the plugin wrote it too", []string{
			auditLine("1", "create", "kcsi/0.1", va, at(0)), auditLine("2", "patch", attacher, va, at(5)),
			auditLine("3", "update", "kcsi/0.1", va, at(12))}, false},
		{"nobody but its creator", []string{auditLine("1", "create", "kcsi/0.1", va, at(0))}, false},
		{"another attachment's writes", []string{
			auditLine("1", "create", "kcsi/0.1", va, at(0)), auditLine("2", "patch", attacher, "csi-other", at(5))}, false},
		{"the plugin's write after the repeat", []string{
			auditLine("1", "create", "kcsi/0.1", va, at(0)), auditLine("2", "patch", attacher, va, at(5)),
			auditLine("3", "update", "kcsi/0.1", va, at(30))}, true},
		{"an earlier attachment of the volume, deleted by the controller", []string{
			auditLine("1", "create", "kcsi/0.1", va, at(-50)), auditLine("2", "delete", "kcsi/0.1", va, at(-20)),
			auditLine("3", "create", "kcsi/0.1", va, at(0)), auditLine("4", "patch", attacher, va, at(5))}, true},
	} {
		if err := os.WriteFile(n.Suite.AuditLog, []byte(strings.Join(tc.lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := n.attacherResync(call(10), call(20)); got != tc.want {
			t.Errorf("%s: attacherResync = %v, want %v", tc.name, got, tc.want)
		}
	}
	if err := os.Remove(n.Suite.AuditLog); err != nil {
		t.Fatal(err)
	}
	if n.attacherResync(call(10), call(20)) {
		t.Error("attacherResync without an audit log = true, want false")
	}
}
