package observe

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Requests the suite counts rather than compares in full fall in buckets: 0, 1, a few, and
// more than fewCalls and than callsPerMinute a minute of the snapshot's window, which no timer
// of the kubelet or a sidecar comes near (the busiest, upstream's capability probe before
// each 1 s stats call, makes about 120 a minute per volume); a plugin that calls in a loop
// lands in the top bucket.
const (
	fewCalls       = 10
	callsPerMinute = 300
)

var buckets = []string{"0", "1", "a few", fmt.Sprintf("more than %d, and than %d a minute", fewCalls, callsPerMinute)}

var topBucket = len(buckets) - 1

// bucket is the bucket of count requests in a window that long.
func bucket(count int, window time.Duration) string {
	switch {
	case count <= 1:
		return buckets[count]
	case float64(count) <= max(fewCalls, callsPerMinute*window.Minutes()):
		return buckets[2]
	}
	return buckets[topBucket]
}

// countRule is how the bucket of a counted request may differ from upstream's, and why.
type countRule struct {
	reason string
	allows func(kcsi, upstream int) bool // the buckets' indexes
}

// timed is the rule of requests a timer sends: how many a snapshot holds depends on when the
// timer fired, so the buckets under the top may differ; the top never.
func timed(timer string) countRule {
	return countRule{timer + ": how many a snapshot holds depends on when it fired, so any bucket but the top",
		func(k, u int) bool { return k < topBucket && u < topBucket }}
}

// countRules are the requests counted by bucket, by the end of their key, with the reason
// their buckets may differ (README "Where kcsi differs from upstream on purpose" for the
// capability probe). Every other request is compared in full, or by exact count.
var countRules = map[string]countRule{
	"NodeGetCapabilities count": {"kcsi probes capabilities once per driver connection; upstream before every stage, publish, expand and stats call: kcsi's bucket may be lower, never higher",
		func(k, u int) bool { return k <= u }},
	"NodeGetVolumeStats count":             timed("the kubelet's volume stats collector runs every volumeStatsAggPeriod (1 s here)"),
	"NodePublishVolume republish count":    timed("requiresRepublish: the kubelet republishes on every pod sync (5 s here); each repeat must still be the identical request"),
	"ControllerPublishVolume retry count":  timed("the external-attacher retries a failed ControllerPublishVolume on its own backoff; each retry must follow an identical request that failed"),
	"ControllerPublishVolume resync count": timed("the external-attacher syncs a VolumeAttachment again on its own writes (finalizer, node ID annotation, status) and may attach it once more before its cache says attached; one such repeat of a success per request, and only where the API server's audit log shows that from the VolumeAttachment's creation until the repeat it was written by the external-attacher alone (cluster attacherResync), so nothing the plugin did caused it"),
}

// countRuleOf is the rule of key, if it is a counted one.
func countRuleOf(key string) (countRule, bool) {
	for suffix, r := range countRules {
		if strings.HasSuffix(key, suffix) {
			return r, true
		}
	}
	return countRule{}, false
}

// RequestsKey is the key of the API requests the node's kubelet and the attach/detach
// controller made in a scenario, a line per user, verb and resource (cluster AuditRequests).
const RequestsKey = "api requests of the kubelet and the attach/detach controller (user verb resource)"

// Which plugin's set of API requests may hold a request the other's does not.
const (
	either       = "either"
	kcsiOnly     = "kcsi"
	upstreamOnly = "upstream"
)

// requestRule says which plugin's request set may hold a line alone, and why.
type requestRule struct{ side, reason string }

// requestRules are the API requests (RequestsKey's lines) that may be in one plugin's set and
// not in the other's; any other line in one set alone fails the scenario.
var requestRules = map[string]requestRule{
	"system:node:<node> update leases":                                                {either, "the kubelet renews its node lease every 10 s: whether a scenario holds a renewal depends on its length"},
	"system:node:<node> patch events":                                                 {either, "the kubelet patches an event it records again (its event correlator counts the repeat); at its start it records the node's condition events (NodeHasSufficientMemory, ...) once or twice, as its first node status update runs before or after its registration (pkg/kubelet/kubelet_node_status.go): timing: after the restart, in three runs of the suite upstream's kubelet alone patched them twice and kcsi's alone once (kubelet-restart compares when the restarted node says Ready); the kubelet's events' reasons are compared (api objects)"},
	"system:node:<node> patch nodes/status":                                           {either, "the kubelet reports its node status every 5 s here (nodeStatusUpdateFrequency): whether a short scenario holds a report depends on its length"},
	"system:serviceaccount:kube-system:attachdetach-controller get volumeattachments": {upstreamOnly, "upstream's Detach polls the deleted VolumeAttachment with a GET until it is gone (pkg/volume/csi/csi_attacher.go waitForVolumeDetachment); kcsi's controller host waits on the controller's VolumeAttachment informer instead (docs/kubernetes.md), so it sends no GET; the poll may land in the scenario after the detach"},
}

// allowedRequestDifference says whether the two request sets may differ as they do: every line
// in one alone has a rule allowing that plugin to have it alone.
func allowedRequestDifference(kcsi, upstream []string) (string, bool) {
	var reasons []string
	for _, side := range []struct {
		name         string
		lines, other []string
	}{{kcsiOnly, kcsi, upstream}, {upstreamOnly, upstream, kcsi}} {
		for _, l := range side.lines {
			if slices.Contains(side.other, l) {
				continue
			}
			r, ok := requestRules[l]
			if !ok || r.side != either && r.side != side.name {
				return "", false
			}
			reasons = append(reasons, fmt.Sprintf("%q (%s alone): %s", l, side.name, r.reason))
		}
	}
	return strings.Join(reasons, "; "), true
}

// allowedDifference says whether the bucket of a counted key, or the API requests, may differ
// as they do, and why.
func allowedDifference(key string, kcsi, upstream []string) (string, bool) {
	if key == RequestsKey {
		return allowedRequestDifference(kcsi, upstream)
	}
	r, ok := countRuleOf(key)
	if !ok || len(kcsi) != 1 || len(upstream) != 1 {
		return "", false
	}
	return r.reason, r.allows(slices.Index(buckets, kcsi[0]), slices.Index(buckets, upstream[0]))
}

// allowedEmptyDirs are kcsi's own dirs under the kubelet root, left out of the files compared
// while they are empty but for kcsi's blanks (any other file left in one still shows, and
// fails the scenario). So are the dirs above one while they hold nothing else: kcsi makes
// plugins/kubernetes.io/csi for its temp dir at its first save (an inline volume's SetUp too),
// upstream's plugin only at its first MountDevice.
var allowedEmptyDirs = map[string]string{
	"plugins/kubernetes.io/csi/.kcsi-tmp": "kcsi writes vol_data.json through a temp file here (same filesystem, so the rename stays atomic) and sweeps it at host start, so a kill mid-write never leaves a file in a pod's volume dir; a few blank temp files are kept here ready, so the write before a driver call costs one fdatasync of a file already on disk",
}

// BucketKeys records the bucket of each count a rule names.
func BucketKeys(o *Observation, prefix string, counts map[string]int, window time.Duration) {
	for _, suffix := range slices.Sorted(maps.Keys(countRules)) {
		method, _ := strings.CutSuffix(suffix, " count")
		o.Add(prefix+" "+suffix, bucket(counts[method], window))
	}
}

// countKeys records the counts of the methods compared only by count: those with a count rule
// each under their own key as a bucket (0 too, so both plugins have the key), all others
// together under one key, exactly.
func countKeys(o *Observation, prefix string, counts map[string]int, window time.Duration) {
	BucketKeys(o, prefix, counts, window)
	var lines []string
	for m, k := range counts {
		if _, ok := countRules[m+" count"]; !ok {
			lines = append(lines, fmt.Sprintf("%s x%d", m, k))
		}
	}
	sort.Strings(lines)
	o.Add(prefix+" csi request counts", lines...)
}
