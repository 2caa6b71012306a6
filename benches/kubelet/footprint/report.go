package main

import (
	"fmt"
	"sort"
	"time"

	"kcsi.dev/kcsi/benches/kubelet/procmem"
	"kcsi.dev/kcsi/benches/kubelet/stats"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// row is one printed figure of a reading.
type row struct {
	name string
	of   func(procmem.Usage) float64
}

var rows = []row{
	{"RSS, MiB", func(u procmem.Usage) float64 { return procmem.MiB(u.Total) }},
	{"  the binary's pages", func(u procmem.Usage) float64 { return procmem.MiB(u.Binary) }},
	{"  libkcsi.so's pages", func(u procmem.Usage) float64 { return procmem.MiB(u.Lib) }},
	{"    of them written (private)", func(u procmem.Usage) float64 { return procmem.MiB(u.LibDirty) }},
	{"  other files' pages (libc, ld.so)", func(u procmem.Usage) float64 { return procmem.MiB(u.Files) }},
	{"  anonymous (heaps, stacks, .bss)", func(u procmem.Usage) float64 { return procmem.MiB(u.Anon) }},
	{"threads", func(u procmem.Usage) float64 { return float64(u.Threads) }},
}

// print prints each process's medians, kcsi beside upstream.
func print(results map[string]*footprint, steady, every time.Duration) {
	fmt.Printf("\nmedians of %d readings over %s (one every %s), one pod Running on an attach-required CSI volume\n",
		len(results[observe.Plugins[0]].kubelet), steady, every)
	for _, proc := range []struct {
		name     string
		readings func(*footprint) []procmem.Usage
	}{
		{"kubelet", func(f *footprint) []procmem.Usage { return f.kubelet }},
		{"attach/detach controller", func(f *footprint) []procmem.Usage { return f.controller }},
	} {
		fmt.Printf("\n%-36s %10s %10s %10s\n", proc.name, observe.Plugins[0], observe.Plugins[1], "kcsi − upstream")
		for _, r := range rows {
			kcsi := median(proc.readings(results[observe.Plugins[0]]), r.of)
			upstream := median(proc.readings(results[observe.Plugins[1]]), r.of)
			fmt.Printf("%-36s %10.1f %10.1f %+10.1f\n", r.name, kcsi, upstream, kcsi-upstream)
		}
	}
	fmt.Println("\nupstream's processes are the same kubelet-e2e binary: they map libkcsi.so too, never calling it;" +
		"\na kubelet built without kcsi has neither those pages nor its other files'")
}

func median(us []procmem.Usage, of func(procmem.Usage) float64) float64 {
	v := make([]float64, len(us))
	for i, u := range us {
		v[i] = of(u)
	}
	sort.Float64s(v)
	return stats.Median(v)
}
