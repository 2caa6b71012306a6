package observe

import (
	"fmt"
	"time"

	"kcsi.dev/kcsi/internal/mountinfo"
)

// Observation is what one scenario saw with one plugin, by key. Keys starting with "info:"
// are reported but not compared, and so are those of CheckKcsi (only kcsi's must be true).
type Observation struct {
	keys   []string
	values map[string][]string
	// problems kept the scenario from being observed (a log or the mount table the suite
	// could not read); any fails it.
	problems []string
	// publishes counts the NodePublishVolume requests the snapshots saw: a scenario that
	// published nothing tested nothing.
	publishes int
	// requestsDiffer: why this scenario's API requests (RequestsKey) are reported, not
	// compared; empty for every scenario but those that make kcsi act where upstream does not.
	requestsDiffer string
}

// RequestsDifferBecause has the scenario's API requests reported beside each other, not
// compared, for the reason given (Forbidden answers still fail it).
func (o *Observation) RequestsDifferBecause(reason string) { o.requestsDiffer = reason }

// RequestsKey is the key the scenario's API requests go under.
func (o *Observation) RequestsKey() string {
	if o.requestsDiffer != "" {
		return "info: " + RequestsKey + ", not compared: " + o.requestsDiffer
	}
	return RequestsKey
}

// Add records lines under key.
func (o *Observation) Add(key string, lines ...string) {
	if o.values == nil {
		o.values = map[string][]string{}
	}
	if _, ok := o.values[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.values[key] = append(o.values[key], lines...)
}

// Check records a check's outcome; a failed one fails the scenario and shows detail.
func (o *Observation) Check(key string, ok bool, detail string) {
	o.Add("check: "+key, fmt.Sprintf("%v", ok))
	if !ok {
		o.Add("info: failed check "+key, detail)
	}
}

// kcsiCheck starts the key of a check only kcsi's run must pass (CheckKcsi).
const kcsiCheck = "kcsi check: "

// CheckKcsi records a check only kcsi's run must pass: something kcsi does that upstream's
// plugin does not (an upstream bug kcsi fixes, e.g. kubernetes#85476). Both runs record it;
// upstream's outcome, and its detail when it fails, are reported beside kcsi's and never
// compared, so they name what upstream gets wrong without failing the scenario.
func (o *Observation) CheckKcsi(key string, ok bool, detail string) {
	o.Add(kcsiCheck+key, fmt.Sprintf("%v", ok))
	if !ok {
		o.Add("info: failed check "+key, detail)
	}
}

// CheckMounted checks that path is a mount point.
func (o *Observation) CheckMounted(key, path string) {
	ok, detail := isMountPoint(path)
	o.Check(key, ok, detail)
}

// Fail records that what could not be observed, which fails the scenario.
func (o *Observation) Fail(what string, err error) {
	o.problems = append(o.problems, what+": "+err.Error())
}

// AddCalls records a driver's requests since m under prefix: the stateful ones in full, the
// others by count.
func (o *Observation) AddCalls(prefix string, calls []Call, m Mark, z *Normalizer) {
	compared, counts := z.CallLines(calls)
	o.Add(prefix+" csi requests", compared...)
	countKeys(o, prefix, counts, time.Since(m.At))
	for _, c := range calls {
		if c.Method == "NodePublishVolume" {
			o.publishes++
		}
	}
}

// isMountPoint says whether path is a mount point, and if not, or if the mount table is
// unreadable, why.
func isMountPoint(path string) (bool, string) {
	ok, err := mountinfo.IsMountPoint(path)
	if err != nil {
		return false, err.Error()
	}
	if !ok {
		return false, path + " is not a mount point"
	}
	return true, path
}
