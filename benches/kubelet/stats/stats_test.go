package stats

import (
	"math"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestMedianTakesTheMeanOfTheMiddleTwoOfAnEvenCount(t *testing.T) {
	if m := Median([]float64{1, 2, 4, 8}); m != 3 {
		t.Errorf("Median(1 2 4 8) = %v, want 3", m)
	}
	if m := Median([]float64{1, 2, 4}); m != 2 {
		t.Errorf("Median(1 2 4) = %v, want 2", m)
	}
	if m := Median([]time.Duration{time.Second, 2 * time.Second}); m != 1500*time.Millisecond {
		t.Errorf("Median(1s 2s) = %v, want 1.5s", m)
	}
}

func TestBinomialTailIsTheSignTestsExactPValue(t *testing.T) {
	// P(X >= 10) for X ~ Binomial(14, 1/2) = (1001 + 364 + 91 + 14 + 1) / 2^14
	if p := BinomialTail(14, 10); !near(p, 1471.0/16384) {
		t.Errorf("BinomialTail(14, 10) = %v, want %v", p, 1471.0/16384)
	}
	if p := BinomialTail(5, 0); p != 1 {
		t.Errorf("BinomialTail(5, 0) = %v, want 1", p)
	}
	if p := BinomialCDF(16, 3); !near(p, 697.0/65536) {
		t.Errorf("BinomialCDF(16, 3) = %v, want %v", p, 697.0/65536)
	}
}

func TestMedianIntervalOf16PairsIsTheFourthFromEachEnd(t *testing.T) {
	// P(X <= 3) = 0.0106 <= 0.025 < P(X <= 4) = 0.0384 for Binomial(16, 1/2): 97.9 % coverage.
	v := make([]float64, 16)
	for i := range v {
		v[i] = float64(i + 1)
	}
	lo, hi, ok := MedianInterval(v)
	if !ok || lo != 4 || hi != 13 {
		t.Errorf("MedianInterval(1..16) = %v, %v, %v; want 4, 13, true", lo, hi, ok)
	}
}

func TestMedianIntervalNeedsSixValues(t *testing.T) {
	if _, _, ok := MedianInterval([]float64{1, 2, 3, 4, 5}); ok {
		t.Error("MedianInterval of 5 values gave an interval; 95 % needs at least 6")
	}
	lo, hi, ok := MedianInterval([]float64{1, 2, 3, 4, 5, 6})
	if !ok || lo != 1 || hi != 6 {
		t.Errorf("MedianInterval(1..6) = %v, %v, %v; want 1, 6, true", lo, hi, ok)
	}
}
