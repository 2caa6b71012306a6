package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type benchResult struct {
	running, torndown time.Duration
}

// benchmark creates n pods with one PVC each at once and times until all are Running and,
// after deleting them all at once, until all are gone with their pod dirs.
func (n *node) benchmark(ctx context.Context, count int) (benchResult, error) {
	var r benchResult
	claims := make([]*claim, count)
	for i := range claims {
		c, err := n.createClaim(ctx, fmt.Sprintf("bench-%02d", i), false)
		if err != nil {
			return r, err
		}
		claims[i] = c
		defer n.deleteClaim(context.Background(), c)
	}
	pods := make([]*v1.Pod, count)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, count)
	for i, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := n.s.client.CoreV1().Pods(n.ns).Create(ctx, n.pod(fmt.Sprintf("bench-%02d", i), []v1.Volume{claimVolume(c)},
				[]v1.VolumeMount{{Name: "data", MountPath: "/data"}}, nil), metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			pods[i] = p
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	for _, p := range pods {
		defer n.s.client.CoreV1().Pods(n.ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	}
	for _, p := range pods {
		if _, err := n.waitRunning(ctx, p.Name, 5*time.Minute); err != nil {
			return r, err
		}
	}
	r.running = time.Since(start)

	start = time.Now()
	for _, p := range pods {
		if err := n.s.client.CoreV1().Pods(n.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			return r, err
		}
	}
	for _, p := range pods {
		if err := n.deletePod(ctx, p, 5*time.Minute); err != nil {
			return r, err
		}
	}
	r.torndown = time.Since(start)
	fmt.Printf("[%s] benchmark: %d pods Running in %.1f s, torn down in %.1f s\n", n.plugin, count, r.running.Seconds(), r.torndown.Seconds())
	return r, nil
}
