package observe

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// Normalizer rewrites what legitimately differs between the two runs (node, namespace and
// directory names, pod UIDs, volume handles and the hashes made from them) to placeholders.
type Normalizer struct {
	pairs []string
	// Resynced says whether a successful ControllerPublishVolume that repeats an identical
	// successful one (first) is the external-attacher's own resync, from evidence the plugin
	// under test cannot make (the allowlist's "ControllerPublishVolume resync count"); nil:
	// never, and every such repeat is compared in full.
	Resynced func(first, repeat Call) bool
}

// Add rewrites from to the placeholder to.
func (z *Normalizer) Add(from, to string) { z.pairs = append(z.pairs, from, to) }

var (
	// A JWT (a service-account token a driver got through tokenRequests) and an RFC 3339
	// time (its expiry) differ from run to run.
	ServiceAccountToken = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*`)
	timestamp           = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
)

// Apply rewrites s to its placeholders.
func (z *Normalizer) Apply(s string) string {
	s = strings.NewReplacer(z.pairs...).Replace(s)
	s = ServiceAccountToken.ReplaceAllString(s, "<token>")
	return timestamp.ReplaceAllString(s, "<time>")
}

// CallLines: stateful requests in order, in full; the others counted by method.
func (z *Normalizer) CallLines(calls []Call) (compared []string, counts map[string]int) {
	counts = map[string]int{}
	failed := map[string]bool{}   // a request line -> whether the last call with it failed
	resynced := map[string]bool{} // a request line -> whether a resync of it was folded
	last := map[string]Call{}     // a request line -> the last call with it
	for _, c := range calls {
		if !stateful[c.Method] {
			counts[c.Method]++
			continue
		}
		b, _ := json.Marshal(c.Request) // sorted keys
		line := c.Method + " " + z.Apply(string(b))
		// A republish (requiresRepublish, for fresh tokenRequests tokens) repeats the last
		// request exactly, and so does the external-attacher's retry of a failed attach; how
		// many repeats a snapshot holds depends on when the timers fired, so those repeats
		// are counted apart (in buckets, countKeys) and the request compared once. One repeat
		// of a success per request is counted apart where Resynced proves it the
		// external-attacher's own (countRules says why). Any other repeated request is
		// compared in full.
		var repeat string
		switch {
		case c.Method == "NodePublishVolume" && strings.Contains(line, "serviceAccount.tokens") &&
			len(compared) > 0 && compared[len(compared)-1] == line:
			repeat = "republish"
		case c.Method == "ControllerPublishVolume" && failed[line]:
			repeat = "retry"
		case c.Method == "ControllerPublishVolume" && c.Error == "" && !failed[line] && !resynced[line] &&
			slices.Contains(compared, line) && z.Resynced != nil && z.Resynced(last[line], c):
			repeat, resynced[line] = "resync", true
		}
		failed[line] = c.Error != ""
		last[line] = c
		if repeat != "" {
			counts[c.Method+" "+repeat]++
			continue
		}
		compared = append(compared, line)
	}
	return compared, counts
}
