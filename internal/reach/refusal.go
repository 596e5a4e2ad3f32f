package reach

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// refusal is a Monitor's state of refused credentials: since when the API
// server refuses them, while the Monitor waits RefreshGrace for them to be
// renewed. A member's credentials are renewed where they are held, not
// here: a refused request was already sent once more if that could help
// (internal/credential); a probe is such a request, so each probe of a
// refusal judges the freshest credentials the member can have.
type refusal struct {
	// telling orders what the Observer is told of refusals: a refusal's
	// Refused before the Accepted that ends it, however the request that
	// was refused and the probe that was accepted race. Taken before mu.
	telling sync.Mutex

	mu    sync.Mutex
	since time.Time // zero: the credentials are not refused
	err   error     // the first refusal's
}

// rejection describes a request whose answer refused or rejected the
// credentials: the request's method and path, never its headers.
func rejection(req *http.Request, code int) error {
	return fmt.Errorf("credentials rejected: %s %s answered %d %s", req.Method, req.URL.Path, code, http.StatusText(code))
}

// refused is told every refusal of the member's credentials. While the
// member starts (before Start) it is Rejected at once: that start fails,
// and the next one starts on whatever credentials are current then. Once
// the Monitor is started, a refusal begins, and it probes every
// OutageInterval until one probe is accepted or RefreshGrace has passed
// (see judge).
func (m *Monitor) refused(err error) {
	if !m.running.Load() {
		m.obs.Rejected(err)
		return
	}
	m.ref.telling.Lock()
	m.ref.mu.Lock()
	first := m.ref.since.IsZero()
	if first {
		m.ref.since, m.ref.err = time.Now(), err
	}
	m.ref.mu.Unlock()
	if first {
		m.obs.Refused(err)
	}
	m.ref.telling.Unlock()
	if first {
		m.sched.hurry()
	}
}

// refusing reports whether a refusal is under way.
func (m *Monitor) refusing() bool {
	m.ref.mu.Lock()
	defer m.ref.mu.Unlock()
	return !m.ref.since.IsZero()
}

// judge weighs a probe against the refusal under way, if any: a probe
// accepted ends it (Accepted); a probe refused RefreshGrace or more after
// it began makes the member Rejected, and judge returns true (the Monitor
// probes no more); a probe without an answer is the outage logic's to
// weigh.
func (m *Monitor) judge(res Result) (rejected bool) {
	m.ref.telling.Lock()
	defer m.ref.telling.Unlock()
	m.ref.mu.Lock()
	since, err := m.ref.since, m.ref.err
	if since.IsZero() || res.Err != nil {
		m.ref.mu.Unlock()
		return false
	}
	if !res.refused {
		m.ref.since, m.ref.err = time.Time{}, nil
		m.ref.mu.Unlock()
		m.obs.Accepted()
		return false
	}
	m.ref.mu.Unlock()
	if res.At.Sub(since) < m.o.RefreshGrace {
		return false
	}
	m.obs.Rejected(fmt.Errorf("%w; still refused %s later", err, res.At.Sub(since).Round(time.Millisecond)))
	return true
}
