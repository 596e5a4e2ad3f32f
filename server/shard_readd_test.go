package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestShardDeleteAddRunsAgain: a cluster that runs on the only replica is
// deleted and added again at once (a source that replaces it), over and
// over, some of the rounds between two of the coordinator's steps. The
// new record is told to run each time: the cluster never stays Elsewhere.
func TestShardDeleteAddRunsAgain(t *testing.T) {
	h := newShardHarness(t, 1)
	a := h.start("a", nil)
	h.settled(map[string]replica{"a": a})
	name := h.names[0]
	for i := range 10 {
		if err := a.srv.Delete(name); err != nil {
			t.Fatal(err)
		}
		if err := a.srv.Add(config.NewNamedConfig(name, fleet.Cluster(members[0]).Config)); err != nil {
			t.Fatal(err)
		}
		test.Eventually(t, 10*time.Second, fmt.Sprintf("round %d: %s runs again after Delete+Add on its only replica", i, name), func() bool {
			st, err := a.srv.Status(name)
			return err == nil && st.Phase == server.PhaseReady
		})
	}
	h.noDoubles()
}

// TestShardDeleteAddTwoReplicas: every replica's source replaces a cluster
// (Delete then Add of the same name) at once. The cluster runs again on
// one replica, and the other says it is Elsewhere, run by that one.
func TestShardDeleteAddTwoReplicas(t *testing.T) {
	h := newShardHarness(t, 4)
	a, b := h.start("a", nil), h.start("b", nil)
	replicas := map[string]replica{"a": a, "b": b}
	h.settled(replicas)
	test.Eventually(t, 30*time.Second, "both replicas agree", func() bool { return agreed(replicas, h.names, h.w.owners()) })
	name := h.names[0]
	for _, r := range []replica{a, b} {
		if err := r.srv.Delete(name); err != nil {
			t.Fatal(err)
		}
		if err := r.srv.Add(config.NewNamedConfig(name, fleet.Cluster(members[0]).Config)); err != nil {
			t.Fatal(err)
		}
	}
	// Lease 3 s, renew 2 s, retry 500 ms: well within 10 s.
	test.Eventually(t, 10*time.Second, name+" runs on one replica, and both replicas say which", func() bool {
		return len(h.w.owners()[name]) == 1 && agreed(replicas, []string{name}, h.w.owners())
	})
	h.noDoubles()
}
