package shard

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// TestSimUnansweredClaimAfterLapse: a's host connection is refused past
// its lease duration, so b takes a's clusters. When the host answers a
// again, a's view still lags, and a's first claim of an old cluster Lease
// gets no answer (refused: nothing sent; hung: sent, outcome unknown). a
// runs no cluster b runs: a claim written in an earlier epoch, or whose
// answer never came, counts only once a read shows it stands.
func TestSimUnansweredClaimAfterLapse(t *testing.T) {
	for _, mode := range []fault{refuse, hang, loseAns} {
		t.Run(map[fault]string{refuse: "refused", hang: "hung", loseAns: "lost answer"}[mode], func(t *testing.T) {
			s := newSim(t, 4)
			s.quiet = true
			s.stopDelay = 3 * time.Second // a member's graceful shutdown
			a, _ := s.add("a", defaultTiming, Options{}), s.add("b", defaultTiming, Options{})
			s.until(30*time.Second, "balanced", s.balanced)
			a.stale = true // a's view lags from here on
			a.leases.setFault(func(string, string) fault { return refuse })
			s.until(30*time.Second, "b runs everything", func() bool { return s.settled() && s.load()["b"] == len(s.names) })
			failed := false
			a.leases.setFault(func(verb, name string) fault {
				if verb == "update" && strings.Contains(name, "-c-") && !failed {
					failed = true
					return mode
				}
				return pass
			})
			s.run(5 * time.Second)
			if !failed {
				t.Fatal("a wrote no cluster Lease after the host answered again")
			}
			s.rec.noDoubles(t)
		})
	}
}

// TestSimLeaseGoneDuringHandover: a hands a cluster over to b, which
// joined; while a's member still stops, the cluster's Lease is deleted (a
// clean-up job), blanked (a restored copy of a release), or restored with
// b as holder. b runs the cluster only once it has stopped on a, and it
// runs on b in the end.
func TestSimLeaseGoneDuringHandover(t *testing.T) {
	for _, how := range []string{"deleted", "blanked", "restored naming b"} {
		t.Run(how, func(t *testing.T) {
			s := newSim(t, 8)
			s.quiet = true
			s.stopDelay = 3 * time.Second
			a := s.add("a", defaultTiming, Options{})
			s.until(30*time.Second, "a runs everything", func() bool { return s.settled() && s.load()["a"] == 8 })
			s.add("b", defaultTiming, Options{})
			var victim string
			s.until(30*time.Second, "a stops a cluster for b", func() bool {
				for n, cl := range a.c.claims {
					if !cl.running && cl.stopping != nil {
						victim = n
						return true
					}
				}
				return false
			})
			leaseName := ClusterLeaseName("fleet", victim)
			switch how {
			case "deleted":
				s.store.mu.Lock()
				delete(s.store.items, leaseName)
				s.store.mu.Unlock()
			case "blanked":
				l := s.store.get(leaseName)
				l.Spec.HolderIdentity = nil
				s.store.put(l)
			default:
				l := s.store.get(leaseName)
				l.Spec.HolderIdentity = ptr.To("b")
				s.store.put(l)
			}
			s.until(30*time.Second, victim+" runs on b", func() bool {
				o := s.rec.owners()[victim]
				return len(o) == 1 && o[0] == "b"
			})
			s.rec.noDoubles(t)
		})
	}
}

// skewed is a replica's clock, off by a fixed offset from the others'.
type skewed struct {
	*clocktesting.FakeClock
	off time.Duration
}

func (s skewed) Now() time.Time                  { return s.FakeClock.Now().Add(s.off) }
func (s skewed) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

type handovers struct {
	noMetrics
	got []time.Duration
}

func (h *handovers) Handover(d time.Duration) { h.got = append(h.got, d) }

// TestSimUnownedUnderSkew: a's clock is 10 minutes behind b's, then 10
// minutes ahead. a hands clusters over to b, which takes each within a
// step or two of a's release: the unowned time b reports is that short,
// whatever a's clock says.
func TestSimUnownedUnderSkew(t *testing.T) {
	for _, off := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		t.Run(off.String(), func(t *testing.T) {
			s := newSim(t, 8)
			s.quiet = true
			s.addClock("a", defaultTiming, Options{}, skewed{s.clock, off})
			s.until(30*time.Second, "a runs everything", func() bool { return s.settled() && s.load()["a"] == 8 })
			m := &handovers{}
			s.add("b", defaultTiming, Options{Metrics: m})
			s.until(30*time.Second, "balanced", s.balanced)
			if len(m.got) == 0 {
				t.Fatal("b reported no handover")
			}
			for _, d := range m.got {
				if d > 2*time.Second {
					t.Errorf("b reported a cluster unowned for %s; a released it a moment before b took it (all: %v)", d, m.got)
				}
			}
		})
	}
}

// TestSimAlteredClusterAnnotation: the cluster annotation of c00's Lease
// is altered to another cluster's name (a hand edit, a tool that copied
// c01's Lease over it). a, which runs c00, repairs it; when a stops
// gracefully, c00 moves to b within its handover.
func TestSimAlteredClusterAnnotation(t *testing.T) {
	s := newSim(t, 2)
	a := s.add("a", defaultTiming, Options{})
	s.until(30*time.Second, "a runs everything", func() bool { return s.settled() && s.load()["a"] == 2 })
	leaseName := ClusterLeaseName("fleet", s.names[0])
	l := s.store.get(leaseName)
	l.Annotations[ClusterAnnotation] = s.names[1]
	s.store.put(l)
	s.until(5*time.Second, "a repairs the annotation", func() bool {
		return s.store.get(leaseName).Annotations[ClusterAnnotation] == s.names[0]
	})
	l = s.store.get(leaseName)
	l.Annotations[ClusterAnnotation] = s.names[1]
	s.store.put(l)
	s.add("b", defaultTiming, Options{})
	s.run(5 * time.Second)
	// a stops gracefully, as Coordinator.leave does: hands over for at
	// most a lease duration, removes its Lease; then its members stop.
	a.c.startLeaving()
	s.until(a.c.o.LeaseDuration, "a hands everything over", a.c.handedOver)
	a.c.finishLeaving(context.Background())
	s.crash(a)
	s.until(5*time.Second, "b runs everything", func() bool { return s.settled() && s.load()["b"] == 2 })
	s.rec.noDoubles(t)
}

// TestSimAlteredAnnotationCollected: the Lease of a cluster that left the
// fleet, its annotation altered to name a cluster still in the fleet, is
// deleted all the same.
func TestSimAlteredAnnotationCollected(t *testing.T) {
	s := newSim(t, 2)
	s.add("a", defaultTiming, Options{})
	s.add("b", defaultTiming, Options{})
	s.until(30*time.Second, "settled", s.settled)
	gone := s.names[0]
	leaseName := ClusterLeaseName("fleet", gone)
	s.names = s.names[1:]
	s.until(10*time.Second, "its Lease is deleted", func() bool { return s.store.get(leaseName) == nil })
	// Back as a Lease of nobody's (a restore), naming the other cluster.
	s.store.put(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        leaseName,
			Labels:      map[string]string{GroupLabel: GroupKey("fleet"), RoleLabel: RoleCluster},
			Annotations: map[string]string{GroupAnnotation: "fleet", ClusterAnnotation: s.names[0], WriterAnnotation: "elsewhere"},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To(int32(2))},
	})
	s.until(30*time.Second, "the restored Lease is deleted", func() bool { return s.store.get(leaseName) == nil })
}

// earlierReleases is a replica of an earlier release of mccr: its releases
// carry no ReleasedAnnotation.
type earlierReleases struct{ *fakeLeases }

func (o earlierReleases) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if ptr.Deref(l.Spec.HolderIdentity, "") == "" {
		l = l.DeepCopy()
		delete(l.Annotations, ReleasedAnnotation)
	}
	return o.fakeLeases.Update(ctx, l, opts)
}

// TestSimHandoverFromAnEarlierRelease: during a rolling update, a replica
// of an earlier release hands its clusters over (a replica joining, and
// its own graceful stop) as fast as one of this release does: its
// releases, which carry no ReleasedAnnotation, are its own writes, not
// Leases that lost their holder by a hand edit.
func TestSimHandoverFromAnEarlierRelease(t *testing.T) {
	for _, earlier := range []bool{false, true} {
		t.Run(fmt.Sprintf("earlier=%v", earlier), func(t *testing.T) {
			s := newSim(t, 8)
			s.quiet = true
			a := s.add("a", defaultTiming, Options{})
			if earlier {
				a.c.leases = earlierReleases{a.leases}
			}
			s.until(30*time.Second, "a runs everything", func() bool { return s.settled() && s.load()["a"] == 8 })
			s.rec.resetDark()
			m := &handovers{}
			s.add("b", defaultTiming, Options{Metrics: m})
			s.until(60*time.Second, "balanced", s.balanced)
			if s.rec.maxDark > 2*time.Second {
				t.Errorf("b joining left a cluster dark for %s", s.rec.maxDark)
			}
			s.rec.resetDark()
			a.c.startLeaving()
			s.until(a.c.o.LeaseDuration, "a hands everything over", a.c.handedOver)
			a.c.finishLeaving(context.Background())
			s.crash(a)
			s.until(60*time.Second, "b runs everything", func() bool { return s.settled() && s.load()["b"] == 8 })
			if s.rec.maxDark > 2*time.Second {
				t.Errorf("a's graceful stop left a cluster dark for %s", s.rec.maxDark)
			}
			s.rec.noDoubles(t)
		})
	}
}

// TestSentNothing: what a real client-go call returns when nothing left
// (a refused connection, a dial that fails) counts as sent nothing; a call
// that reached a server that never answered does not.
func TestSentNothing(t *testing.T) {
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	_ = refused.Close() // nothing listens there now
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = hung.Close()
		<-done
	})
	go func() { // accepts, never answers; closes what it accepted once closed
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	update := func(addr string) error {
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr, Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default", ResourceVersion: "1"}}
		_, err = cs.CoordinationV1().Leases("default").Update(context.Background(), l, metav1.UpdateOptions{})
		return err
	}
	if err := update(refusedAddr); err == nil || !sentNothing(err) {
		t.Errorf("refused: %v; want it counted as sent nothing", err)
	}
	if err := update(hung.Addr().String()); err == nil || sentNothing(err) {
		t.Errorf("no answer: %v; want it counted as sent, outcome unknown", err)
	}
}
