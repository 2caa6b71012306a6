package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// readyPost is a Ready condition the kubelet posted, and when the suite saw it.
type readyPost struct {
	at                      time.Time
	status, reason, message string
}

// ReadyWatch records the Node's Ready condition as a (re)started kubelet posts it: each change
// of its status, message or heartbeat after the one the watch began with.
type ReadyWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	posts  []readyPost
	err    error
}

// WatchReady starts watching the node's Ready condition (before the kubelet starts).
func (n *Node) WatchReady(ctx context.Context) (*ReadyWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := n.Suite.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + n.Name})
	if err != nil {
		cancel()
		return nil, err
	}
	rw := &ReadyWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rw.done)
		defer w.Stop()
		var last *v1.NodeCondition
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if ctx.Err() != nil {
					return // Record stopped it
				}
				rw.mu.Lock()
				rw.err = fmt.Errorf("watching node %s: %v", n.Name, ev.Object)
				rw.mu.Unlock()
				return
			}
			nd, ok := ev.Object.(*v1.Node)
			if !ok {
				continue
			}
			var c *v1.NodeCondition
			for i := range nd.Status.Conditions {
				if nd.Status.Conditions[i].Type == v1.NodeReady {
					c = &nd.Status.Conditions[i]
				}
			}
			if c == nil {
				continue
			}
			if last != nil && (c.Status != last.Status || c.Message != last.Message || !c.LastHeartbeatTime.Equal(&last.LastHeartbeatTime)) {
				rw.mu.Lock()
				rw.posts = append(rw.posts, readyPost{time.Now(), string(c.Status), c.Reason, c.Message})
				rw.mu.Unlock()
			}
			last = c.DeepCopy()
		}
	}()
	return rw, nil
}

// WaitPostedReady waits until the kubelet has posted Ready=True since the watch began (the
// Node said Ready before the restart too, so StartKubelet's wait may end before the
// restarted kubelet's first node status); a timeout is no error here: Record says so.
func (rw *ReadyWatch) WaitPostedReady(ctx context.Context, timeout time.Duration) error {
	err := WaitFor(ctx, timeout, "the restarted kubelet's node status saying Ready", func() (bool, error) {
		rw.mu.Lock()
		defer rw.mu.Unlock()
		for _, p := range rw.posts {
			if p.status == string(v1.ConditionTrue) {
				return true, nil
			}
		}
		return false, rw.err
	})
	if errors.Is(err, ErrTimedOut) {
		return nil
	}
	return err
}

// readyWithin is how soon after the kubelet's first node status a restarted node must say
// Ready to be "at once": upstream's plugin initializes the CSINode within a fraction of it.
const readyWithin = time.Second

// Record stops the watch and records under prefix when the node said Ready, in buckets:
// within readyWithin of the kubelet's first node status after the restart, later, or not while
// watched; the posts themselves, with their messages and times, go to an info key.
func (rw *ReadyWatch) Record(o *observe.Observation, prefix string) {
	rw.cancel()
	<-rw.done
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.err != nil {
		o.Fail(prefix+" the node's Ready condition", rw.err)
		return
	}
	var lines []string
	for _, p := range rw.posts {
		lines = append(lines, fmt.Sprintf("+%d ms Ready=%s %s %q", p.at.Sub(rw.posts[0].at).Milliseconds(), p.status, p.reason, p.message))
	}
	o.Add(prefix+" node Ready over the kubelet restart", readyBucket(rw.posts))
	o.Add("info: "+prefix+" the node's Ready condition as the kubelet posted it", lines...)
}

// readyBucket is when the posts first said Ready, counted from the first post.
func readyBucket(posts []readyPost) string {
	if len(posts) == 0 {
		return "no node status posted while watched"
	}
	for _, p := range posts {
		if p.status != string(v1.ConditionTrue) {
			continue
		}
		if p.at.Sub(posts[0].at) <= readyWithin {
			return "Ready within " + readyWithin.String() + " of the kubelet's first node status"
		}
		return "Ready later than " + readyWithin.String() + " after the kubelet's first node status"
	}
	return "not Ready while watched"
}
