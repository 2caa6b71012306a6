package procmem

import (
	"os"
	"testing"
)

func TestEveryResidentByteOfAProcessFallsInExactlyOnePlace(t *testing.T) {
	u, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.Total == 0 || u.Binary == 0 || u.Anon == 0 {
		t.Fatalf("a running Go test has resident binary pages and a heap: %+v", u)
	}
	if sum := u.Binary + u.Lib + u.Files + u.Anon; sum != u.Total {
		t.Errorf("the parts add up to %d bytes, the RSS is %d: %+v", sum, u.Total, u)
	}
	if u.Lib != 0 || u.LibDirty != 0 {
		t.Errorf("this test does not load libkcsi.so, yet its pages count %d bytes", u.Lib)
	}
	if u.Threads < 1 {
		t.Errorf("threads: %d", u.Threads)
	}
}
