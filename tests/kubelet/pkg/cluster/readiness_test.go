package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestReadyBucketCountsFromTheFirstPost(t *testing.T) {
	t0 := time.Now()
	post := func(ms int, status string) readyPost {
		return readyPost{at: t0.Add(time.Duration(ms) * time.Millisecond), status: status}
	}
	for _, c := range []struct {
		posts []readyPost
		want  string
	}{
		{nil, "no node status posted"},
		{[]readyPost{post(0, "True")}, "Ready within"},
		{[]readyPost{post(0, "False"), post(250, "True")}, "Ready within"},
		// The blip: "CSINode is not yet initialized" for about 10 s.
		{[]readyPost{post(0, "False"), post(5000, "False"), post(10000, "True")}, "Ready later"},
		{[]readyPost{post(0, "False")}, "not Ready"},
	} {
		if got := readyBucket(c.posts); !strings.HasPrefix(got, c.want) {
			t.Errorf("readyBucket(%v) = %q, want %q...", c.posts, got, c.want)
		}
	}
}
