package server

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/internal/syncinformer"
)

// recordHostForbidden returns the host Manager's options with a watch
// error handler that adds to forbidden each kind the host's identity may
// not list or watch (a 403), logging it the first time, before calling
// the user's handler (or client-go's default). Host kinds of member
// controllers (HostKind, HostObject) read the set: such a kind does not
// hold up the member's sync, and the member's Status.Unserved names it.
// The host's own controllers wait for the kind as controller-runtime's do.
//
// A kind leaves the set once its reflector lists or watches again (the
// rule was granted): whether it had synced before the rule went missing,
// and whether or not any member watches it then.
func recordHostForbidden(opts ctrl.Options, forbidden *syncinformer.Kinds) ctrl.Options {
	next := opts.Cache.DefaultWatchErrorHandler
	if next == nil {
		next = toolscache.DefaultWatchErrorHandler
	}
	log := opts.Logger.WithName("mccr")
	var following sync.Map // kind → struct{}: a goroutine waits for its recovery
	opts.Cache.DefaultWatchErrorHandler = func(ctx context.Context, r *toolscache.Reflector, err error) {
		if apierrors.IsForbidden(err) {
			kind := r.TypeDescription()
			if !forbidden.Has(kind) {
				log.Info("the host cluster's identity may not list or watch a kind: member controllers watching it run without it until the RBAC rule is granted", "kind", kind, "error", err.Error())
			}
			forbidden.Forbid(kind)
			if _, loaded := following.LoadOrStore(kind, struct{}{}); !loaded {
				go func() {
					defer following.Delete(kind)
					if recovered(ctx, r, r.LastSyncResourceVersion()) {
						forbidden.Allow(kind)
						log.Info("the host cluster's identity may list and watch a kind again", "kind", kind)
					}
				}()
			}
		}
		next(ctx, r, err)
	}
	return opts
}

// hostRecoveryPoll is how often a reflector refused a kind is looked at
// for a list or watch that worked since.
const hostRecoveryPoll = time.Second

// recovered waits until r has listed or watched since it last stood at
// version (its last sync's resource version changes), and says so; false
// if ctx ends first.
func recovered(ctx context.Context, r *toolscache.Reflector, version string) bool {
	t := time.NewTicker(hostRecoveryPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			if r.LastSyncResourceVersion() != version {
				return true
			}
		}
	}
}

// hostMisses is the host's REST mapper as member controllers waiting for
// a host kind ask it (fleetsource.Host.Mapper): a kind it does not map is
// asked about again, for all of them, at most once a second, since each
// miss of the host's mapper may be a discovery request to the host.
type hostMisses struct {
	meta.RESTMapper

	mu     sync.Mutex
	missed map[schema.GroupVersionKind]hostMiss
}

type hostMiss struct {
	at  time.Time
	err error
}

// hostMissRetry is how long a miss is the answer for every member asking.
const hostMissRetry = time.Second

func (m *hostMisses) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) != 1 {
		return m.RESTMapper.RESTMapping(gk, versions...)
	}
	gvk := gk.WithVersion(versions[0])
	m.mu.Lock()
	defer m.mu.Unlock()
	if miss, ok := m.missed[gvk]; ok && time.Since(miss.at) < hostMissRetry {
		return nil, miss.err
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err == nil {
		delete(m.missed, gvk)
		return mapping, nil
	}
	if m.missed == nil {
		m.missed = map[schema.GroupVersionKind]hostMiss{}
	}
	m.missed[gvk] = hostMiss{at: time.Now(), err: err}
	return mapping, err
}
