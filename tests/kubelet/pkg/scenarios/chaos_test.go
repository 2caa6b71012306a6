package scenarios

import (
	"reflect"
	"testing"
)

// The schedule is the seed's alone, so kcsi and upstream run the same one, and it holds
// kills of both targets, at random and inside each held call.
func TestChaosSchedule(t *testing.T) {
	a, b := chaosSchedule(7, 400), chaosSchedule(7, 400)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one seed drew two schedules")
	}
	if reflect.DeepEqual(a, chaosSchedule(8, 400)) {
		t.Fatal("two seeds drew one schedule")
	}
	seen := map[string]bool{}
	for _, st := range a {
		seen[st.Target+" "+st.Phase] = true
		if st.Phase != "random" && st.Claim >= chaosHeldClaims {
			t.Errorf("a held kill on claim %d, which is not the fault driver's", st.Claim)
		}
		if chaosClaims[st.Claim].attach && st.Phase != "random" {
			t.Errorf("a held kill on the attach claim")
		}
		if st.Phase == "NodeExpandVolume" && !chaosClaims[st.Claim].block {
			t.Errorf("a held NodeExpandVolume on claim %d, which the driver expands on the controller side only", st.Claim)
		}
	}
	for _, target := range []string{"kubelet", "driver"} {
		for _, phase := range append([]string{"random"}, chaosRPCs...) {
			if !seen[target+" "+phase] {
				t.Errorf("no %s kill in %s in 400 draws", target, phase)
			}
		}
	}
}
