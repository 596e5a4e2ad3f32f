package reach

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
)

// Options tunes a Monitor.
type Options struct {
	// CheckTimeout bounds Check.
	CheckTimeout time.Duration
	// Interval is the time between probes while the API server answers;
	// zero or less: no periodic probe (a member then hears of an outage
	// only from its own requests).
	Interval time.Duration
	// OutageInterval is the time between probes once a request got no
	// answer, and while the API server does not answer.
	OutageInterval time.Duration
	// Timeout bounds one probe: a probe without an answer by then finds
	// the API server unreachable.
	Timeout time.Duration
	// Limit bounds the probes in flight, shared by every Monitor of a
	// fleet (nil: no bound).
	Limit *Limiter
	// RefreshGrace is how long a running member's credentials may stay
	// refused (401) before it is Rejected: time for them to be renewed
	// (see Observer.Refused).
	RefreshGrace time.Duration
	// Busy, if set, says whether the process has better use for its CPU
	// than periodic probes (members of the fleet wait to start). A
	// periodic probe due while it says so is left out, MaxLeftOut times in
	// a row at most: the member is probed at least every MaxLeftOut+1
	// Intervals. Only a member that answered its last probe, with no
	// request or watch failed since, and no refusal under way, has a probe
	// left out.
	Busy func() bool
	// MaxLeftOut bounds the periodic probes left out in a row (see Busy).
	MaxLeftOut int
}

// Result is one probe's outcome.
type Result struct {
	// At is when the probe finished; Took how long it waited for its
	// answer (not counting the wait for a Limiter's slot).
	At   time.Time
	Took time.Duration
	// Err is nil when the API server answered.
	Err error
	// refused says the API server answered a probe refusing the
	// credentials (401).
	refused bool
}

// Observer is told what a Monitor finds. Its methods are called from the
// member's requests and from the Monitor's probes, at any time until the
// Monitor has finished (Start's done) and the member's Manager has
// stopped: they must be quick and must not wait.
type Observer interface {
	// Probed is told the outcome of every probe and of Check.
	Probed(Result)
	// Unreachable is told once per outage: a probe of an API server that
	// had answered got no answer.
	Unreachable(err error)
	// Reconnected is told when, after Unreachable, a probe got an answer
	// and the outage broke something: a request or watch of the member
	// failed without an answer, or more than one probe went unanswered.
	// The Monitor probes no more after it, and finishes: the member should
	// restart, with fresh lists, rather than wait for its informers' retry
	// backoff (up to 30s in client-go).
	Reconnected()
	// Recovered is told when, after Unreachable, the very next probe got
	// an answer, the one it follows timed out, and no request or watch of
	// the member failed meanwhile: one slow answer (a busy API server), its
	// watches intact. The member
	// is reachable again as it is; restarting it would only add a relist
	// to the load of a server that is slow already. The Monitor goes on.
	Recovered()
	// Rejected is told when the API server rejected the member's
	// credentials for good: its Manager could only ever see stale data.
	// That is a 403 on discovery (which every user may read), a 401 while
	// the member starts, or a 401 that lasted RefreshGrace (see Refused);
	// the Monitor probes no more after the last.
	Rejected(err error)
	// Refused is told when the API server refused the running member's
	// credentials (401) after whatever renewal they allow on the spot (an
	// exec plugin run again, a token file read again, a Holder's new
	// credentials): they were revoked, or expired, and nothing renewed
	// them yet. The member goes on as it is, its requests refused, and is
	// probed every OutageInterval; the first probe accepted ends the
	// refusal (Accepted), a probe refused RefreshGrace after it began makes
	// it Rejected.
	Refused(err error)
	// Accepted is told when a probe was accepted after Refused: the
	// member's credentials were renewed in place.
	Accepted()
	// WatchFailed is told every other failed list or watch of the member's
	// informers, which retry by themselves.
	WatchFailed(err error)
}

// Monitor watches one start of one member cluster: New makes every
// request of the member report to it, Check tells whether the member may
// start, WatchError is the member's informers' error hook, and Start
// probes the API server while the member runs.
type Monitor struct {
	o    Options
	obs  Observer
	host string // redacted, for errors
	// base is HTTPClient. rc, on it, is how Check and a probe ask; version
	// is the URL of /version below the host's path, if it has one (a
	// proxy in front of the cluster).
	base    *http.Client
	rc      *rest.RESTClient
	version string

	// running is set from Start until the Monitor has finished: before
	// that, the member is starting and its start's own timeouts judge it.
	running atomic.Bool
	// broken says a request or watch got no answer since the API server
	// last answered a probe.
	broken atomic.Bool
	// ref is the state of a refusal of the member's credentials.
	ref refusal
	// sched says when the next probe runs, and runs it.
	sched schedule

	// The outage under way, if any; read and written by probes alone,
	// which run one at a time: down since a probe went unanswered, missed
	// probes since, and whether the last of them timed out (slow).
	down   bool
	missed int
	slow   bool
	// leftOut counts the periodic probes left out in a row (Options.Busy);
	// read and written by the rounds alone.
	leftOut int
}

// New returns a Monitor for the member reached through cfg. It wraps cfg's
// transport, so that every request made through cfg from now on (the
// member's Manager is to be built from it) reports to the Monitor. Its
// Check and probes go through HTTPClient, which the member's own requests
// are to use too: they then share its connections.
func New(cfg *rest.Config, o Options, obs Observer) (*Monitor, error) {
	m := &Monitor{o: o, obs: obs, host: config.RedactURL(cfg.Host)}
	cfg.Wrap(m.transport)
	base, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, config.RedactError(fmt.Errorf("building the HTTP client for %s: %w", m.host, err))
	}
	rc, err := restClient(cfg, base)
	if err != nil {
		return nil, err
	}
	m.base, m.rc, m.version = base, rc, rc.Get().AbsPath("/version").URL().String()
	return m, nil
}

// HTTPClient is the client, built once from New's cfg, whose transport
// Check and the probes send through (wrapped to send a request refused
// with 401 once more when cfg's credential refreshes): the member's own
// clients are to be built on it, wrapped likewise, and not on a client
// built from cfg anew, which for some configs (an exec plugin's, which
// dials through a tracker of its own) gets a transport, and so a
// connection, of its own.
func (m *Monitor) HTTPClient() *http.Client { return m.base }

func (m *Monitor) transport(rt http.RoundTripper) http.RoundTripper {
	return &transport{
		next:    rt,
		onError: func(error) { m.suspectOutage() },
		onRefused: func(req *http.Request, code int) {
			m.refused(rejection(req, code))
		},
		onRejected: func(req *http.Request, code int) {
			m.obs.Rejected(rejection(req, code))
		},
	}
}

// Check tells, before a member's Manager is built, whether its API server
// answers and accepts the credentials: discovery is open to every
// authenticated user, so 401 or 403 means bad credentials and a dial error
// means unreachable. It fails fast where a Manager would wait for its
// cache sync timeout. It is told to the Observer as a probe.
//
// It reads the core group's resource list (GET /api/v1), which it returns:
// the member's REST mapper starts from it (leanmapper.NewWithCore), so the
// check costs no request of its own.
func (m *Monitor) Check(ctx context.Context) ([]byte, error) {
	begin := time.Now()
	body, err := check(ctx, m.rc, m.host, m.o.CheckTimeout)
	if ctx.Err() == nil {
		res := Result{At: time.Now(), Took: time.Since(begin)}
		if err != nil && !apierrors.IsUnauthorized(err) && !apierrors.IsForbidden(err) {
			res.Err = err
		}
		m.obs.Probed(res)
	}
	return body, err
}

// WatchError sees every failed list or watch of the member's informers
// (after the user's handler). Refused credentials (401) are a refusal (see
// Observer.Refused); the rest is WatchFailed, and an error without an
// answer (a restarting API server, a network blip) brings the next probe
// forward.
func (m *Monitor) WatchError(err error) {
	if apierrors.IsUnauthorized(err) {
		m.refused(fmt.Errorf("credentials rejected: %w", err))
		return
	}
	m.obs.WatchFailed(err)
	if IsConnectionError(err) {
		m.suspectOutage()
	}
}

func (m *Monitor) suspectOutage() {
	if !m.running.Load() {
		return
	}
	m.broken.Store(true)
	m.sched.hurry()
}

// Start probes the API server from now on (call it once the member is
// Ready), until ctx ends, or until the API server answers again after an
// outage (Reconnected) or rejects the credentials for good (Rejected). It
// returns at once: between probes the Monitor holds no goroutine, only a
// timer, and each probe runs in the goroutine of the timer that made it
// due. done, if not nil, is called once, when the Monitor has finished:
// no probe runs or will run, and no timer is left. Call Start once.
//
// A request that got no answer brings the next probe forward to
// OutageInterval; if that probe is answered it was a passing blip, and
// nothing changes.
func (m *Monitor) Start(ctx context.Context, done func()) {
	m.sched.start(ctx, m, done)
}

// round is one probe and what it tells the Observer. It reports whether
// the Monitor is over: ctx ended, or the member was Reconnected or
// Rejected.
func (m *Monitor) round(ctx context.Context) (over bool) {
	if m.leaveOut() {
		return false
	}
	res, ok := m.probe(ctx)
	if !ok {
		return true
	}
	m.obs.Probed(res)
	if m.judge(res) {
		return true
	}
	switch {
	case res.Err != nil:
		m.missed++
		m.slow = errors.Is(res.Err, ErrNoAnswer)
		if !m.down {
			m.down = true
			m.obs.Unreachable(res.Err)
		}
	case m.down && m.missed == 1 && m.slow && !m.broken.Load():
		m.down, m.missed = false, 0
		m.obs.Recovered()
	case m.down:
		m.obs.Reconnected()
		return true
	default:
		m.missed = 0
		m.broken.Store(false)
	}
	return false
}

// leaveOut says whether the probe due is left out (Options.Busy): the
// member answered its last probe, nothing failed since, and fewer than
// MaxLeftOut probes in a row were left out.
func (m *Monitor) leaveOut() bool {
	if m.o.Busy == nil || m.down || m.broken.Load() || m.refusing() || m.leftOut >= m.o.MaxLeftOut || !m.o.Busy() {
		m.leftOut = 0
		return false
	}
	m.leftOut++
	return true
}

// next is when to probe next, and whether to at all.
func (m *Monitor) next() (time.Time, bool) {
	if m.down || m.refusing() {
		return time.Now().Add(m.o.OutageInterval), true
	}
	return time.Now().Add(m.o.Interval), m.o.Interval > 0
}

// probe asks the API server for its version (GET /version: small, served
// by every API server, open to every user), within Timeout. Any answer
// but a server error (5xx, what a proxy or load balancer in front of a
// dead API server says) counts: a 401 is the API server speaking, and the
// transport reports it as refused credentials. ok is false when ctx ended
// first.
func (m *Monitor) probe(ctx context.Context) (res Result, ok bool) {
	if !m.o.Limit.acquire(ctx) {
		return Result{}, false
	}
	defer m.o.Limit.release()
	pctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	begin := time.Now()
	code, err := m.ask(pctx)
	res.At = time.Now()
	res.Took = res.At.Sub(begin)
	if ctx.Err() != nil {
		return Result{}, false
	}
	switch {
	case err == nil && code < http.StatusInternalServerError:
		res.refused = code == http.StatusUnauthorized
	case err == nil:
		res.Err = fmt.Errorf("API server %s unreachable: it answered %d %s", m.host, code, http.StatusText(code))
	case pctx.Err() != nil:
		res.Err = fmt.Errorf("API server %s did not answer within %s: %w", m.host, m.o.Timeout, ErrNoAnswer)
	default:
		res.Err = fmt.Errorf("API server %s unreachable: %w", m.host, err)
	}
	return res, true
}

// maxProbeAnswer bounds what is read of an answer to a probe (a version,
// or a Status: a few hundred bytes).
const maxProbeAnswer = 64 << 10

// ask sends one GET /version and reads the whole answer: an answer whose
// body stops coming is no answer, like one whose headers never come. It
// goes straight to the member's transport, without a REST client's
// request building, retries and metrics: a fleet of thousands sends
// thousands of probes a minute, and the answer's status is all a probe
// reads.
func (m *Monitor) ask(ctx context.Context) (code int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.version, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := m.rc.Client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeAnswer))
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	return resp.StatusCode, err
}

// ErrNoAnswer is wrapped by a probe's error when the API server did not
// answer in time (a hung server, a network partition).
var ErrNoAnswer = errors.New("no answer")

// Limiter bounds how many probes are in flight at once, across every
// Monitor that shares it. A nil Limiter bounds nothing.
type Limiter struct{ slots chan struct{} }

// NewLimiter returns a Limiter of n slots; nil when n < 1.
func NewLimiter(n int) *Limiter {
	if n < 1 {
		return nil
	}
	return &Limiter{slots: make(chan struct{}, n)}
}

func (l *Limiter) acquire(ctx context.Context) bool {
	if l == nil {
		return ctx.Err() == nil
	}
	select {
	case l.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *Limiter) release() {
	if l != nil {
		<-l.slots
	}
}
