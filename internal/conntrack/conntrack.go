// Package conntrack closes every connection a rest.Config opened.
//
// client-go keeps HTTP keep-alive connections (two goroutines each) in
// transports it caches process-wide, so a stopped Manager's connections to
// its API server outlive it for minutes. A member cluster that is deleted
// must leave nothing behind, so each member dials through a Tracker, which
// also keeps client-go from sharing the transport, and closes all its
// connections when the member stops.
package conntrack

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// ErrClosed is returned by Dial after Close.
var ErrClosed = errors.New("conntrack: closed")

// Tracker dials and remembers connections until they close.
type Tracker struct {
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
}

// Wrap returns a copy of cfg that dials through a new Tracker, keeping any
// dialer cfg already had.
func Wrap(cfg *rest.Config) (*rest.Config, *Tracker) {
	cfg = rest.CopyConfig(cfg)
	t := &Tracker{dial: cfg.Dial, conns: map[*conn]struct{}{}}
	if t.dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		t.dial = d.DialContext
	}
	cfg.Dial = t.DialContext
	return cfg, t
}

// DialContext dials and tracks the connection.
func (t *Tracker) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := t.dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, t: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		_ = c.Close()
		return nil, ErrClosed
	}
	t.conns[tc] = struct{}{}
	return tc, nil
}

// Close closes every tracked connection and refuses new ones.
func (t *Tracker) Close() {
	t.mu.Lock()
	t.closed = true
	conns := t.conns
	t.conns = map[*conn]struct{}{}
	t.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

type conn struct {
	net.Conn
	t    *Tracker
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}
