package observe

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Plugins are the two CSI volume plugins every scenario runs with, kcsi's and upstream's.
var Plugins = []string{"kcsi", "upstream"}

// Report prints each scenario's observations side by side where they differ; it returns how
// many scenarios failed (an error, a check kcsi failed, or a key that differs and is not on
// the allowlist).
func Report(scenarios []string, obs map[string]map[string]*Observation, errs map[string]map[string]error, show bool) int {
	failed := 0
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for _, name := range scenarios {
		k, u := obs["kcsi"][name], obs["upstream"][name]
		var problems []string
		for _, p := range Plugins {
			o := obs[p][name]
			if err := errs[p][name]; err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", p, err))
			}
			for _, why := range o.problems {
				problems = append(problems, fmt.Sprintf("%s: %s", p, why))
			}
			if o.publishes == 0 {
				problems = append(problems, p+": no NodePublishVolume in any snapshot: the scenario ran no volume")
			}
		}
		keys := append([]string{}, k.keys...)
		for _, key := range u.keys {
			if _, ok := k.values[key]; !ok {
				keys = append(keys, key)
			}
		}
		var diffs, infos, same []string
		compared, fixes := 0, 0
		for _, key := range keys {
			if !notCompared(key) {
				compared++
			}
			kv, uv := strings.Join(k.values[key], "\n"), strings.Join(u.values[key], "\n")
			if strings.HasPrefix(key, kcsiCheck) && kv == "true" && uv != "true" {
				fixes++
			}
			for _, prefix := range []string{"check: ", kcsiCheck} {
				if check, ok := strings.CutPrefix(key, prefix); ok && kv != "true" {
					problems = append(problems, "kcsi failed "+check+" ("+strings.Join(k.values["info: failed check "+check], "")+")")
				}
			}
			if kv == uv {
				if show {
					same = append(same, fmt.Sprintf("  %s\n%s", key, indent(k.values[key])))
				}
				continue
			}
			block := fmt.Sprintf("  %s\n%s    kcsi:\n%s\n    upstream:\n%s", key, aloneLines(k.values[key], u.values[key]), indent(k.values[key]), indent(u.values[key]))
			if reason, ok := allowedDifference(key, k.values[key], u.values[key]); ok {
				infos = append(infos, block+"\n    allowed: "+reason)
			} else if notCompared(key) {
				infos = append(infos, block)
			} else {
				diffs = append(diffs, block)
			}
		}
		if compared == 0 {
			problems = append(problems, "no key compared: the scenario observed nothing")
		}
		status := "SAME as upstream"
		if fixes > 0 {
			status += fmt.Sprintf(" where compared; kcsi passes %d check(s) upstream fails", fixes)
		}
		if len(problems) > 0 || len(diffs) > 0 {
			status = "FAILED"
			failed++
		}
		fmt.Fprintf(w, "\n=== %s: %s\n", name, status)
		for _, p := range problems {
			fmt.Fprintf(w, "  error: %s\n", p)
		}
		for _, d := range diffs {
			fmt.Fprintf(w, "differs:\n%s\n", d)
		}
		for _, d := range infos {
			fmt.Fprintf(w, "differs (allowed or detail of a failed check):\n%s\n", d)
		}
		for _, d := range same {
			fmt.Fprintf(w, "same for both:\n%s\n", d)
		}
		if len(diffs) == 0 {
			fmt.Fprintf(w, "  compared: %d keys, %d lines equal\n", compared, countLines(k))
		}
	}
	return failed
}

// aloneLines names the lines of a multi-line value only one plugin has, first, so the few
// lines of a report a CI log shows around "FAILED" hold the difference itself.
func aloneLines(kcsi, upstream []string) string {
	if len(kcsi) < 2 && len(upstream) < 2 {
		return ""
	}
	var b strings.Builder
	for _, side := range []struct {
		name         string
		lines, other []string
	}{{"kcsi", kcsi, upstream}, {"upstream", upstream, kcsi}} {
		for _, l := range side.lines {
			if !slices.Contains(side.other, l) {
				fmt.Fprintf(&b, "    %s alone: %s\n", side.name, l)
			}
		}
	}
	return b.String()
}

// notCompared: an "info: " key, or a check only kcsi's run must pass (CheckKcsi).
func notCompared(key string) bool {
	return strings.HasPrefix(key, "info: ") || strings.HasPrefix(key, kcsiCheck)
}

func countLines(o *Observation) int {
	n := 0
	for key, v := range o.values {
		if !notCompared(key) {
			n += len(v)
		}
	}
	return n
}

func indent(lines []string) string {
	if len(lines) == 0 {
		return "      (none)"
	}
	return "      " + strings.Join(lines, "\n      ")
}
