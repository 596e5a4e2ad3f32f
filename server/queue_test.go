package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/test"
)

// failOnce fails each object's first Reconcile and counts the objects
// reconciled after that one retry.
type failOnce struct {
	mu      sync.Mutex
	tries   map[string]int
	retried int
}

func (r *failOnce) Reconcile(_ context.Context, req ctrl.Request) (ctrl.Result, error) {
	if strings.HasSuffix(req.Name, "-ack") {
		return ctrl.Result{}, nil // the server's own ConfigMap reconciler's
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tries[req.Name]++
	switch r.tries[req.Name] {
	case 1:
		return ctrl.Result{}, errors.New("the first try fails")
	case 2:
		r.retried++
	}
	return ctrl.Result{}, nil
}

func (r *failOnce) done() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retried
}

// Members' controllers take Controller.UsePriorityQueue from the Server's
// options, as docs/migrating.md says: by default client-go's classic
// queue, whose retries after an error are limited to 10 a second past a
// burst of 100; with UsePriorityQueue, controller-runtime's priority queue,
// whose per-object backoff alone retries them all at once.
func TestMemberQueueFollowsUsePriorityQueue(t *testing.T) {
	const objects = 200
	// The classic queue's bucket lets 100 retries through at once and the
	// other 100 at 10 a second: 10 s at the least.
	const bucketFloor = (objects - 100) / 10 * time.Second
	ns := testNamespace(t)
	for i := range objects {
		createConfigMap(t, "m1", ns, fmt.Sprintf("cm-%03d", i))
	}
	retryAll := func(t *testing.T, priority *bool) time.Duration {
		r := startServer(t, ns, func(o *ctrl.Options) { o.Controller.UsePriorityQueue = priority })
		f := &failOnce{tries: map[string]int{}}
		r.srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
			return ctrl.NewControllerManagedBy(mgr).Named(fmt.Sprintf("fail-once-%s-%v", ns, ptr.Deref(priority, false))).For(&corev1.ConfigMap{}).Complete(f)
		})
		begin := time.Now()
		if err := r.srv.Add(config.NewNamedConfig("m1", fleet.Cluster("m1").Config)); err != nil {
			t.Fatal(err)
		}
		test.Eventually(t, time.Minute, "every object reconciled after one retry", func() bool { return f.done() == objects })
		return time.Since(begin)
	}
	t.Run("priority queue", func(t *testing.T) {
		took := retryAll(t, ptr.To(true))
		t.Logf("figure: %d objects failed once, all retried %s after Add", objects, took.Round(time.Millisecond))
		if took >= bucketFloor {
			t.Errorf("with UsePriorityQueue, %d retries took %s: limited as the classic queue limits them", objects, took.Round(time.Millisecond))
		}
	})
	t.Run("default", func(t *testing.T) {
		took := retryAll(t, nil)
		t.Logf("figure: %d objects failed once, all retried %s after Add", objects, took.Round(time.Millisecond))
		if took < bucketFloor {
			t.Errorf("by default, %d retries took %s, under the classic queue's %s", objects, took.Round(time.Millisecond), bucketFloor)
		}
	})
}
