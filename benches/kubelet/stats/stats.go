// Package stats holds the distribution-free statistics the kubelet suite's benchmarks print:
// a median, its confidence interval from order statistics, and the sign test.
package stats

import "math"

// Median is the median of sorted values (ratios, or durations), the mean of the middle two for
// an even count.
func Median[T ~int64 | ~float64](sorted []T) T {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	return (sorted[(n-1)/2] + sorted[n/2]) / 2
}

// MedianInterval is the distribution-free confidence interval of at least 95 % for the median
// of sorted values: the k-th smallest and k-th largest, with k the largest for which fewer
// than k of n values fall below the median with chance at most 2.5 % (Binomial(n, 1/2)). It
// needs at least 6 values.
func MedianInterval(sorted []float64) (lo, hi float64, ok bool) {
	n := len(sorted)
	k := 0
	for k < n/2 && BinomialCDF(n, k) <= 0.025 {
		k++
	}
	if k == 0 {
		return 0, 0, false
	}
	return sorted[k-1], sorted[n-k], true
}

// BinomialCDF is P(X <= k) for X ~ Binomial(n, 1/2).
func BinomialCDF(n, k int) float64 {
	p, term := 0.0, math.Ldexp(1, -n) // term: C(n, i) / 2^n, built up from i = 0
	for i := 0; i <= k && i <= n; i++ {
		p += term
		term = term * float64(n-i) / float64(i+1)
	}
	return p
}

// BinomialTail is P(X >= k) for X ~ Binomial(n, 1/2), the one-sided sign test's p-value.
func BinomialTail(n, k int) float64 {
	if k <= 0 {
		return 1
	}
	return 1 - BinomialCDF(n, k-1)
}
