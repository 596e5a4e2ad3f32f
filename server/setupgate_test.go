package server_test

import (
	"sync"
	"sync/atomic"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/server"
)

// heldSetups is a reconciler setup that holds the members it picks in
// their setups until released, and counts those that entered: a start
// kept in the CPU-heavy part of its start, holding its slot if it has one.
type heldSetups struct {
	entered atomic.Int32
	gate    chan struct{}
	release func() // lets every held setup, and any later one, return
}

// holdSetups adds a setup to srv that holds the members whose Manager
// reaches one of hosts (every member when none is given) until release.
func holdSetups(srv *server.Server, hosts ...string) *heldSetups {
	held := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		held[h] = true
	}
	h := &heldSetups{gate: make(chan struct{})}
	h.release = sync.OnceFunc(func() { close(h.gate) })
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		if len(held) == 0 || held[mgr.GetConfig().Host] {
			h.entered.Add(1)
			<-h.gate
		}
		return nil
	})
	return h
}
