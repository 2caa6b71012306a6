package main

import (
	"fmt"
	"slices"

	"kcsi.dev/kcsi/benches/kubelet/stats"
)

// printPaired compares the plugins round by round. Each round of a filesystem or block
// configuration gives one pair, kcsi's run and upstream's, under the same load; a measure's
// pairs over all configurations are pooled as ratios (kcsi / upstream - 1), so 32- and 110-pod
// rounds weigh alike. Medians over a handful of rounds, each row alone, cannot tell a few per
// cent from the machine's noise; the pooled pairs bound it: the sign test says how likely so
// many pairs going one way would be if the plugins were alike, and the median ratio's 95 %
// confidence interval bounds the difference (an upper bound at or below 0: kcsi is no slower
// than upstream).
// The attach-required rows run once per plugin with a controller each, not interleaved, and
// stay out of the pool.
func (b benchRuns) printPaired() {
	ratios := make([][]float64, len(benchMeasures))
	pairs := 0
	for _, c := range b.configs() {
		if c.kind == "attach" {
			continue
		}
		k, u := b[c]["kcsi"], b[c]["upstream"]
		for i := range min(len(k), len(u)) {
			pairs++
			for m, measure := range benchMeasures {
				if theirs := measure.of(u[i]); theirs > 0 {
					ratios[m] = append(ratios[m], float64(measure.of(k[i]))/float64(theirs)-1)
				}
			}
		}
	}
	if pairs == 0 {
		return
	}
	for _, r := range ratios {
		slices.Sort(r)
	}
	if _, _, ok := stats.MedianInterval(ratios[0]); !ok {
		fmt.Printf("\npaired: too few filesystem and block rounds to compare (a 95 %% interval needs more pairs than this run's %d; raise -bench-rounds)\n", pairs)
		return
	}
	fmt.Printf("\npaired: kcsi against upstream in the same round (one after the other, each first in half the rounds), %d pairs over the filesystem and block configurations (kcsi / upstream - 1; negative: kcsi sooner)\n", pairs)
	for m, measure := range benchMeasures {
		r := ratios[m]
		var sooner, later int
		for _, x := range r {
			if x < 0 {
				sooner++
			} else if x > 0 {
				later++
			}
		}
		fmt.Printf("  %-16s kcsi sooner in %2d, later in %2d, level in %d; median %+5.1f %%", measure.name, sooner, later, len(r)-sooner-later, 100*stats.Median(r))
		if lo, hi, ok := stats.MedianInterval(r); ok {
			fmt.Printf(" [95 %% CI %+.1f, %+.1f]", 100*lo, 100*hi)
		}
		n := sooner + later
		fmt.Printf("; sign test: P(>= %d of %d sooner) = %.3f, P(>= %d of %d later) = %.3f\n",
			sooner, n, stats.BinomialTail(n, sooner), later, n, stats.BinomialTail(n, later))
	}
}
