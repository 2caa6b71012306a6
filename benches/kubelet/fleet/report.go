package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// print lists every kind of request the plugin's fleet sent, per node: during registration,
// per minute at rest, and in the restart window.
func (r *fleetResult) print(plugin string) {
	keys := map[request]bool{}
	for _, t := range []tally{r.registration, r.rest, r.restart} {
		for k := range t {
			keys[k] = true
		}
	}
	sorted := make([]request, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		return fmt.Sprint(a.client, a.resource, a.verb, a.failed) < fmt.Sprint(b.client, b.resource, b.verb, b.failed)
	})
	n := float64(r.nodes)
	fmt.Printf("\n[%s] requests per node        registration   at rest, per min   restart (%.1f min)\n", plugin, r.restartMinutes)
	for _, k := range sorted {
		name := fmt.Sprintf("%s %s %s", k.client, k.verb, k.resource)
		if k.failed {
			name += " (failed)"
		}
		fmt.Printf("  %-40s %8.2f %14.2f %16.2f\n", name, float64(r.registration[k])/n,
			float64(r.rest[k])/n/r.restMinutes, float64(r.restart[k])/n)
	}
}

// printFleets prints the plugins' figures side by side.
func printFleets(selected []string, results map[string]*fleetResult) {
	perNode := func(t func(*fleetResult) tally, keep func(request) bool) func(*fleetResult) string {
		return func(r *fleetResult) string { return fmt.Sprintf("%.1f", float64(t(r).sum(keep))/float64(r.nodes)) }
	}
	perMinute := func(keep func(request) bool) func(*fleetResult) string {
		return func(r *fleetResult) string {
			return fmt.Sprintf("%.2f", float64(r.rest.sum(keep))/float64(r.nodes)/r.restMinutes)
		}
	}
	reg := func(r *fleetResult) tally { return r.registration }
	restart := func(r *fleetResult) tally { return r.restart }
	mib := func(v []int64) string {
		v = slices.Clone(v)
		slices.Sort(v)
		return fmt.Sprintf("%.1f", float64(v[len(v)/2])/(1<<20))
	}
	rows := []struct {
		name string
		f    func(*fleetResult) string
	}{
		{"nodes", func(r *fleetResult) string { return fmt.Sprint(r.nodes) }},
		{"all Ready with the driver in CSINode, s", func(r *fleetResult) string { return fmt.Sprintf("%.1f", r.ready.Seconds()) }},
		{"registrar restarts (failed registrations)", func(r *fleetResult) string { return fmt.Sprint(r.registrarRestarts) }},
		{"registration: requests per node", perNode(reg, all)},
		{"  of them kcsi's own client", perNode(reg, byClient("kcsi"))},
		{"  Node writes per node", perNode(reg, writesOf("nodes"))},
		{"  CSINode writes per node", perNode(reg, writesOf("csinodes"))},
		{"at rest: requests per node per min", perMinute(all)},
		{"  of them kcsi's own client", perMinute(byClient("kcsi"))},
		{"  Node writes per node per min", perMinute(writesOf("nodes"))},
		{"  CSINode writes per node per min", perMinute(writesOf("csinodes"))},
		{"  Lease writes per node per min", perMinute(writesOf("leases"))},
		{"restart window: requests per node", perNode(restart, all)},
		{"  x the rest rate over that window", func(r *fleetResult) string {
			rest := float64(r.rest.sum(all)) / r.restMinutes * r.restartMinutes
			return fmt.Sprintf("%.1f", float64(r.restart.sum(all))/rest)
		}},
		{"  lists (re-lists) per node", perNode(restart, byVerb("list"))},
		{"  watches per node", perNode(restart, byVerb("watch"))},
		{"  failed requests per node", perNode(restart, failed)},
		{"  every Lease renewed, s after up", func(r *fleetResult) string { return fmt.Sprintf("%.1f", r.back.Seconds()) }},
		{"kubelet RSS, median MiB", func(r *fleetResult) string { return mib(r.rss) }},
		{"  libkcsi.so pages, median MiB", func(r *fleetResult) string { return mib(r.lib) }},
		{"connections to the API server", func(r *fleetResult) string {
			c := slices.Clone(r.conns)
			slices.Sort(c)
			return fmt.Sprint(c[len(c)/2])
		}},
	}
	fmt.Printf("\nfleet: one fresh kube-apiserver per plugin, figures per node\n  %-40s", "")
	for _, p := range selected {
		fmt.Printf(" %10s", p)
	}
	fmt.Println()
	for _, row := range rows {
		cells := make([]string, len(selected))
		for i, p := range selected {
			cells[i] = fmt.Sprintf(" %10s", row.f(results[p]))
		}
		fmt.Printf("  %-40s%s\n", row.name, strings.Join(cells, ""))
	}
}
