package observe

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func publish(volume string, failed bool) Call {
	c := Call{Method: "ControllerPublishVolume", Request: map[string]any{"volume_id": volume, "node_id": "n"}}
	if failed {
		c.Error = "rpc error: code = ResourceExhausted desc = the node's one attachment is taken"
	}
	return c
}

func TestControllerPublishIsFoldedAfterAFailureAndAfterASuccessOnlyOnceAndOnlyWithEvidence(t *testing.T) {
	calls := []Call{
		publish("a", true), publish("a", true), publish("a", false), // a retry, then a retry that succeeds
		publish("a", false), publish("a", false), // the attacher's one resync, then one compared in full
		publish("b", false), publish("b", false), publish("b", false), // one resync, one compared
	}
	z := &Normalizer{Resynced: func(first, repeat Call) bool { return true }}
	compared, counts := z.CallLines(calls)
	if len(compared) != 4 || counts["ControllerPublishVolume retry"] != 2 || counts["ControllerPublishVolume resync"] != 2 {
		t.Errorf("with evidence: CallLines = %q, %v; want 4 lines compared, 2 retries and 2 resyncs", compared, counts)
	}
	for _, z := range []*Normalizer{{}, {Resynced: func(first, repeat Call) bool { return false }}} {
		compared, counts = z.CallLines(calls)
		if len(compared) != 6 || counts["ControllerPublishVolume retry"] != 2 || counts["ControllerPublishVolume resync"] != 0 {
			t.Errorf("without evidence: CallLines = %q, %v; want 6 lines compared, 2 retries and no resync", compared, counts)
		}
	}
}

func TestOnlyATokenRepublishRightAfterTheSamePublishIsFolded(t *testing.T) {
	z := &Normalizer{}
	token := Call{Method: "NodePublishVolume", Request: map[string]any{"volume_id": "a",
		"volume_context": map[string]any{"csi.storage.k8s.io/serviceAccount.tokens": "{}"}}}
	plain := Call{Method: "NodePublishVolume", Request: map[string]any{"volume_id": "a"}}
	unpublish := Call{Method: "NodeUnpublishVolume", Request: map[string]any{"volume_id": "a"}}
	compared, counts := z.CallLines([]Call{token, token, token, unpublish, token, plain, plain})
	if len(compared) != 5 || counts["NodePublishVolume republish"] != 2 {
		t.Errorf("callLines = %q, %v; want 5 lines compared and 2 republishes", compared, counts)
	}
}

func TestBucketsHaveAnUpperBound(t *testing.T) {
	for _, c := range []struct {
		count  int
		window time.Duration
		want   int
	}{
		{0, time.Minute, 0},
		{1, time.Second, 1},
		{fewCalls, time.Second, 2},
		{fewCalls + 1, time.Second, topBucket},
		{12, time.Minute, 2},                 // a republish every 5 s
		{60, 30 * time.Second, 2},            // stats and a capability probe each second
		{200, 20 * time.Second, topBucket},   // a republish every 100 ms
		{callsPerMinute, time.Minute, 2},     // at the bound
		{callsPerMinute + 1, time.Minute, 3}, // over it
	} {
		if got := bucket(c.count, c.window); got != buckets[c.want] {
			t.Errorf("bucket(%d, %s) = %q, want %q", c.count, c.window, got, buckets[c.want])
		}
	}
}

func TestCountRulesAllowOnlyTheirDifferences(t *testing.T) {
	few, top := buckets[2], buckets[topBucket]
	for _, c := range []struct {
		key, kcsi, upstream string
		want                bool
	}{
		{"running: NodePublishVolume republish count", "1", few, true},
		{"running: NodePublishVolume republish count", top, few, false},
		{"running: NodeGetVolumeStats count", "0", "1", true},
		{"running: NodeGetVolumeStats count", few, top, false},
		{"deleted: attach driver ControllerPublishVolume retry count", few, "0", true},
		{"running: NodeGetCapabilities count", "1", few, true},
		{"running: NodeGetCapabilities count", few, "1", false},
		{"running: NodeGetCapabilities count", top, few, false},
		{"running: csi request counts", "Probe x1", "Probe x2", false},
	} {
		if _, got := allowedDifference(c.key, []string{c.kcsi}, []string{c.upstream}); got != c.want {
			t.Errorf("allowedDifference(%q, %q, %q) = %v, want %v", c.key, c.kcsi, c.upstream, got, c.want)
		}
	}
}

func TestReadCallsFailsOnWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	good := `I1206 00:00:00.000000 1 utils.go:1] gRPCCall: {"Method":"/csi.v1.Node/NodePublishVolume","Request":{"volume_id":"a"},"Error":""}` + "\n"
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	calls, err := ReadCalls(write("good.log", "I1206 started\n"+good), 0)
	if err != nil || len(calls) != 1 || calls[0].Method != "NodePublishVolume" {
		t.Errorf("readCalls(a good log) = %+v, %v; want one NodePublishVolume", calls, err)
	}
	for name, text := range map[string]string{
		"cut.log":       good + `I1206 gRPCCall: {"Method":"/csi.v1.Node/NodeUnpublishVolume","Requ` + "\n",
		"no-method.log": `I1206 gRPCCall: {"Request":{}}` + "\n",
		"long.log":      "gRPCCall: " + strings.Repeat("x", 17<<20) + "\n",
	} {
		if calls, err := ReadCalls(write(name, text), 0); err == nil {
			t.Errorf("readCalls(%s) = %d calls, no error; want an error", name, len(calls))
		}
	}
	if _, err := ReadCalls(filepath.Join(dir, "missing.log"), 0); err == nil {
		t.Error("readCalls of a missing log: no error")
	}
}

func TestCountKeysGiveBothPluginsEveryRuledKey(t *testing.T) {
	o := &Observation{}
	countKeys(o, "running:", map[string]int{"NodeGetCapabilities": 3, "Probe": 1}, time.Minute)
	for suffix := range countRules {
		if !slices.Contains(o.keys, "running: "+suffix) {
			t.Errorf("no key %q in %q", "running: "+suffix, o.keys)
		}
	}
	if got := o.values["running: csi request counts"]; !slices.Equal(got, []string{"Probe x1"}) {
		t.Errorf("csi request counts = %q, want [Probe x1]", got)
	}
}

func TestReadCallsTakesTheTimeFromTheKlogHeader(t *testing.T) {
	log := filepath.Join(t.TempDir(), "driver.log")
	line := `I0102 03:04:05.678901 1 utils.go:1] gRPCCall: {"Method":"/csi.v1.Node/NodePublishVolume","Request":{},"Error":""}` + "\n"
	if err := os.WriteFile(log, []byte(line+`gRPCCall: {"Method":"/csi.v1.Node/NodePublishVolume","Request":{},"Error":""}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	calls, err := ReadCalls(log, 0)
	if err != nil || len(calls) != 2 {
		t.Fatalf("ReadCalls = %+v, %v", calls, err)
	}
	at := calls[0].At
	if at.Month() != time.January || at.Day() != 2 || at.Hour() != 3 || at.Minute() != 4 || at.Second() != 5 || at.Nanosecond() != 678901000 {
		t.Errorf("At = %v, want January 2, 03:04:05.678901", at)
	}
	if !calls[1].At.IsZero() {
		t.Errorf("a line without a klog header has At %v, want none", calls[1].At)
	}
}

func TestDirsKcsiMadeOnlyForItsTempDirAreLeftOutUntilTheyHoldMore(t *testing.T) {
	root := t.TempDir()
	tmp := filepath.Join(root, "plugins/kubernetes.io/csi/.kcsi-tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".vol_data.json.1.00ff.blank"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	z := &Normalizer{}
	lines, err := z.FileLines(root)
	if err != nil || len(lines) != 0 {
		t.Fatalf("only kcsi's temp dir and the dirs above it: want no lines, got %q (%v)", lines, err)
	}

	// Once the plugin dir holds a driver's dir (upstream makes it too), it is compared.
	if err := os.Mkdir(filepath.Join(root, "plugins/kubernetes.io/csi/hostpath.csi.k8s.io"), 0o750); err != nil {
		t.Fatal(err)
	}
	lines, err = z.FileLines(root)
	want := []string{"plugins/kubernetes.io dir", "plugins/kubernetes.io/csi dir", "plugins/kubernetes.io/csi/hostpath.csi.k8s.io dir"}
	if err != nil || len(lines) != len(want) {
		t.Fatalf("want %d lines starting %q, got %q (%v)", len(want), want, lines, err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w+" ") {
			t.Errorf("line %d: want %q..., got %q", i, w, lines[i])
		}
	}
}

func TestAKcsiCheckFailsOnlyKcsiAndIsNeverCompared(t *testing.T) {
	run := func(kcsiOK, upstreamOK bool) int {
		obs := map[string]map[string]*Observation{}
		for _, p := range Plugins {
			o := &Observation{publishes: 1}
			o.Add("running: files", "same")
			o.CheckKcsi("the leftover is unstaged", map[string]bool{"kcsi": kcsiOK, "upstream": upstreamOK}[p], p+" left it")
			obs[p] = map[string]*Observation{"s": o}
		}
		return Report([]string{"s"}, obs, map[string]map[string]error{"kcsi": {}, "upstream": {}}, false)
	}
	for _, c := range []struct {
		kcsi, upstream bool
		failed         int
	}{{true, false, 0}, {true, true, 0}, {false, false, 1}, {false, true, 1}} {
		if got := run(c.kcsi, c.upstream); got != c.failed {
			t.Errorf("kcsi %v, upstream %v: %d failed, want %d", c.kcsi, c.upstream, got, c.failed)
		}
	}
	o := &Observation{}
	o.CheckKcsi("x", true, "")
	if o.values["kcsi check: x"] == nil || !notCompared("kcsi check: x") || notCompared("check: x") {
		t.Errorf("CheckKcsi keys %q: want one kcsi check, not compared", o.keys)
	}
}

func TestARequestInOneSetAloneIsAllowedOnlyForItsSide(t *testing.T) {
	node := "system:node:<node> get pods"
	lease := "system:node:<node> update leases"
	get := "system:serviceaccount:kube-system:attachdetach-controller get volumeattachments"
	list := "system:serviceaccount:kube-system:attachdetach-controller list volumeattachments"
	for _, c := range []struct {
		kcsi, upstream []string
		want           bool
	}{
		{[]string{node}, []string{node}, true},
		{[]string{node, lease}, []string{node}, true},
		{[]string{node}, []string{node, lease}, true},
		{[]string{node}, []string{node, get}, true},
		{[]string{node, get}, []string{node}, false},
		// kcsi's controller host reads the controller's informers: a list of its own is not allowed.
		{[]string{node, list}, []string{node}, false},
		{[]string{node}, []string{node, list}, false},
		{[]string{node, "system:node:<node> get secrets"}, []string{node}, false},
		{[]string{}, []string{node}, false},
	} {
		if _, ok := allowedDifference(RequestsKey, c.kcsi, c.upstream); ok != c.want {
			t.Errorf("allowedDifference(%q, %q) = %v, want %v", c.kcsi, c.upstream, ok, c.want)
		}
	}
}

func TestAReportNamesTheLinesOnlyOnePluginHasBeforeTheFullLists(t *testing.T) {
	got := aloneLines([]string{"a", "b", "c"}, []string{"b", "c", "d"})
	want := "    kcsi alone: a\n    upstream alone: d\n"
	if got != want {
		t.Fatalf("aloneLines = %q, want %q", got, want)
	}
	if got := aloneLines([]string{"1"}, []string{"2"}); got != "" {
		t.Fatalf("a single-line value needs no alone lines, got %q", got)
	}
}
