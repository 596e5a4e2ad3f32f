package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/mccr-dev/mccr/server"
)

// phaseLog records a member's phase transitions as seen by polling Status.
type phaseLog struct {
	mu      sync.Mutex
	changes []phaseChange
	stop    func()
}

type phaseChange struct {
	phase server.Phase
	at    time.Time
	err   error
}

func watchPhases(srv *server.Server, cluster string) *phaseLog {
	ctx, cancel := context.WithCancel(context.Background())
	p := &phaseLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if st, err := srv.Status(cluster); err == nil {
				p.mu.Lock()
				switch n := len(p.changes); {
				case n == 0:
					// The phase the log starts in was entered before it.
					p.changes = append(p.changes, phaseChange{st.Phase, st.Since, st.LastError})
				case p.changes[n-1].phase != st.Phase:
					p.changes = append(p.changes, phaseChange{st.Phase, time.Now(), st.LastError})
				}
				p.mu.Unlock()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	p.stop = func() { cancel(); <-done }
	return p
}

// first returns when phase was first entered at or after since.
func (p *phaseLog) first(phase server.Phase, since time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.changes {
		if c.phase == phase && !c.at.Before(since) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

func (p *phaseLog) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ""
	for i, c := range p.changes {
		if i > 0 {
			s += " → "
		}
		s += fmt.Sprintf("%s@%s", c.phase, c.at.Format("15:04:05.000"))
	}
	return s
}

// TestFaultAPIServerKilledWhileWorking kills one member's kube-apiserver for
// about ten seconds while a writer keeps every member busy. The members that
// stay up must reconcile every write of every round within 2s; the killed
// one must be seen Unreachable, come back to Ready by itself, and reconcile
// the writes made after its API server returned within 5s of its return.
func TestFaultAPIServerKilledWhileWorking(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow fault test against real API servers; make test runs it")
	}
	const (
		n           = 10
		outage      = 10 * time.Second
		bound       = 2 * time.Second
		catchUpGoal = 5 * time.Second
	)
	ns := namespace(t, "fault-kill")
	for _, m := range members {
		configMaps(t, m, ns, n)
	}
	r := startFaultServer(t, ns, logr.Discard(), false)
	for _, m := range members {
		if err := r.srv.Add(fleet.Cluster(m).Named); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range members {
		waitPhase(t, r.srv, m, server.PhaseReady, 60*time.Second)
	}
	const victimName = "c"
	victim := fleet.Cluster(victimName)
	before, _ := r.srv.Status(victimName)
	phases := watchPhases(r.srv, victimName)
	defer phases.stop()

	objs := objNames(n)
	up, upOnly := membersNamed(members...), membersNamed("a", "b")
	var (
		maxUpLag, maxOutageLag time.Duration
		checked, outageChecked int
		missed                 []string
		tKill, tBack           time.Time
		restartTook            time.Duration
		catchSeq               int
		catchUp                time.Duration
		outageRounds           int
	)
	type back struct {
		at  time.Time
		err error
	}
	backCh := make(chan back, 1)
	restarted := false
	t.Cleanup(func() {
		if !restarted && !tKill.IsZero() {
			if b := <-backCh; b.err != nil {
				t.Errorf("restarting %s's API server: %v", victimName, b.err)
			}
		}
	})

	for seq := 1; ; seq++ {
		if seq > 1000 {
			t.Fatal("the scenario did not finish in 1000 rounds")
		}
		switch {
		case seq == 4:
			// Kill between rounds: no write to the victim is in flight.
			if err := victim.StopAPIServer(); err != nil {
				t.Fatal(err)
			}
			tKill = time.Now()
			go func() {
				time.Sleep(outage)
				begin := time.Now()
				err := victim.StartAPIServer(context.Background())
				restartTook = time.Since(begin)
				backCh <- back{time.Now(), err}
			}()
		case !tKill.IsZero() && tBack.IsZero():
			select {
			case b := <-backCh:
				restarted = true
				if b.err != nil {
					t.Fatalf("restarting %s's API server: %v", victimName, b.err)
				}
				// Back: StartAPIServer saw it ready.
				tBack, catchSeq = b.at, seq
			default:
			}
		}
		targets := up
		down := !tKill.IsZero() && tBack.IsZero()
		if down {
			targets = upOnly
			outageRounds++
		}
		written := writeRound(t, targets, ns, objs, seq)
		for _, tg := range targets {
			last, ok := lastWrite(written[tg.name])
			if !ok {
				t.Fatalf("round %d: writes to %s failed", seq, tg.name)
			}
			deadline := last.Add(bound)
			if tg.name == victimName && seq == catchSeq {
				deadline = tBack.Add(catchUpGoal)
			}
			behind, lags := awaitSeq(r.rec, tg.name, objs, seq, written[tg.name], deadline)
			if len(behind) > 0 {
				more, _ := awaitSeq(r.rec, tg.name, objs, seq, nil, time.Now().Add(30*time.Second))
				msg := fmt.Sprintf("round %d: %s had not reconciled %v at seq %d by the deadline (%s; still behind 30s later: %v)", seq, tg.name, behind, seq, time.Until(deadline).Round(time.Millisecond), more)
				t.Error(msg)
				missed = append(missed, msg)
			}
			if tg.name == victimName && seq == catchSeq {
				var at time.Time
				for _, o := range objs {
					if s, ok := r.rec.get(victimName, o); ok && s.seq >= seq && s.at.After(at) {
						at = s.at
					}
				}
				catchUp = at.Sub(tBack)
				continue
			}
			for _, l := range lags {
				checked++
				maxUpLag = max(maxUpLag, l)
				if down {
					outageChecked++
					maxOutageLag = max(maxOutageLag, l)
				}
			}
		}
		if catchSeq > 0 && seq >= catchSeq+3 {
			break
		}
	}
	phases.stop()
	after, _ := r.srv.Status(victimName)

	unreachableAt, sawUnreachable := phases.first(server.PhaseUnreachable, tKill)
	// The member may be Ready again a moment before StartAPIServer has
	// seen /readyz pass: its own probe only asks for /api.
	readyAt, sawReady := phases.first(server.PhaseReady, unreachableAt)
	sawReady = sawReady && sawUnreachable
	if !sawUnreachable {
		t.Errorf("%s never went Unreachable during the outage; phases: %s", victimName, phases)
	}
	if !sawReady {
		t.Errorf("%s did not come back to Ready; phases: %s", victimName, phases)
	}
	if after.Phase != server.PhaseReady {
		t.Errorf("%s is %s at the end, want Ready", victimName, after.Phase)
	}
	if after.Restarts <= before.Restarts {
		t.Errorf("%s Restarts %d → %d: it was not restarted by the Server", victimName, before.Restarts, after.Restarts)
	}
	if catchUp > catchUpGoal {
		t.Errorf("%s caught up %s after its API server was back, want ≤ %s", victimName, dur(catchUp), catchUpGoal)
	}
	if maxUpLag > bound {
		t.Errorf("a member that stayed up took %s to reconcile a write, want ≤ %s", dur(maxUpLag), bound)
	}
	t.Logf("figure: %s's phases: %s", victimName, phases)
	since := func(at, from time.Time, ok bool) string {
		if !ok {
			return "never"
		}
		return dur(at.Sub(from))
	}
	t.Logf("figure: outage: API server killed for %s (its restart took %s until /readyz passed); %s seen Unreachable %s after the kill; Ready again %s after its API server was back (negative: before /readyz passed); Restarts %d → %d, Failures %d → %d",
		dur(tBack.Sub(tKill)), dur(restartTook), victimName, since(unreachableAt, tKill, sawUnreachable), since(readyAt, tBack, sawReady), before.Restarts, after.Restarts, before.Failures, after.Failures)
	t.Logf("figure: catch-up: %s reconciled all %d objects at the first seq written after its API server was back %s after it was back (goal ≤ %s)",
		victimName, n, dur(catchUp), catchUpGoal)
	t.Logf("figure: members up: %d reconciles checked (%d during the outage, %d rounds), %d rounds missed; max write→reconcile %s overall, %s during the outage (bound %s)",
		checked, outageChecked, outageRounds, len(missed), dur(maxUpLag), dur(maxOutageLag), bound)
}
