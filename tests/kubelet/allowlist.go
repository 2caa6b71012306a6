package main

import (
	"fmt"
	"sort"
	"strings"
)

// allowed lists the deliberate differences from upstream the suite accepts, once, with the
// reason (README "Where kcsi differs from upstream on purpose"). A key matches when an
// observation's key ends with it; every other difference fails the scenario.
var allowed = map[string]string{
	"NodeGetCapabilities count":           "kcsi probes capabilities once per driver connection; upstream before every stage, publish, expand and stats call",
	"NodeGetVolumeStats count":            "the kubelet's volume stats collector runs on its own timer: the count depends on how long each run takes",
	"NodePublishVolume republish count":   "requiresRepublish: the kubelet republishes on every pod sync, so the repeats a snapshot holds depend on its timing (each repeat must still be the identical request)",
	"ControllerPublishVolume retry count": "the external-attacher retries a failed ControllerPublishVolume on its own backoff, so the repeats a snapshot holds depend on its timing (each repeat must still be the identical request)",
	"attach driver NodeGetInfo count":     "nodeAllocatableUpdatePeriodSeconds: the kubelet refreshes CSINode's allocatable count with NodeGetInfo on that timer, so the count depends on how long the scenario ran",
}

// allowedEmptyDirs are kcsi's own dirs under the kubelet root, left out of the files compared
// while they are empty but for kcsi's blanks (any other file left in one still shows, and
// fails the scenario).
var allowedEmptyDirs = map[string]string{
	"plugins/kubernetes.io/csi/.kcsi-tmp": "kcsi writes vol_data.json through a temp file here (same filesystem, so the rename stays atomic) and sweeps it at host start, so a kill mid-write never leaves a file in a pod's volume dir; a few blank temp files are kept here ready, so the write before a driver call costs one fdatasync of a file already on disk",
}

// allowedReason is why key may differ, or "" when it must not.
func allowedReason(key string) string {
	for suffix, reason := range allowed {
		if strings.HasSuffix(key, suffix) {
			return reason
		}
	}
	return ""
}

// countKeys records the counts of the methods compared only by count: those on the
// allowlist each under their own key, all others together under one compared key.
func countKeys(o *observation, prefix string, counts map[string]int) {
	var lines []string
	for m, k := range counts {
		key := m + " count"
		if allowedReason(prefix+" "+key) != "" {
			o.add(prefix+" "+key, fmt.Sprint(k))
			continue
		}
		lines = append(lines, fmt.Sprintf("%s x%d", m, k))
	}
	sort.Strings(lines)
	o.add(prefix+" csi request counts", lines...)
}
