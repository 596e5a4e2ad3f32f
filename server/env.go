package server

import (
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/internal/conntrack"
	"github.com/mccr-dev/mccr/internal/router"
)

// env is what a generation needs from the Server, and no more: the
// connection pool, the routing table and the fleet feed its cluster record
// writes, the
// reconciler setups (an append-only snapshot) and the options. Nothing in
// it calls back into the Server.
type env struct {
	conns      *conntrack.Pool
	routes     *router.Table
	feed       *fleetFeed
	setups     *setupList
	memberOpts ctrl.Options
	opts       Options
	log        logr.Logger
	// sharded: a member runs only once this replica holds its lease.
	sharded bool
}

// setupList is the registered reconciler setups: appended to under its
// lock, read as an immutable snapshot without one.
type setupList struct {
	mu  sync.Mutex
	cur atomic.Pointer[[]func(ctrl.Manager) error]
}

func (l *setupList) add(f func(ctrl.Manager) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var next []func(ctrl.Manager) error
	if cur := l.cur.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, f)
	l.cur.Store(&next)
}

func (l *setupList) snapshot() []func(ctrl.Manager) error {
	if cur := l.cur.Load(); cur != nil {
		return *cur
	}
	return nil
}
