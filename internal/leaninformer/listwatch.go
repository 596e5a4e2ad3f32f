package leaninformer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// minWatchTimeout is the shortest a watch asks the server to last, as
// client-go's reflector: each asks for a random duration between it and
// twice it, so that the watches of many informers do not all end at once.
const minWatchTimeout = 5 * time.Minute

// veryShortWatch is how long a watch that ends with no event must have
// lasted not to count as a failure (client-go's VeryShortWatchError).
const veryShortWatch = time.Second

type phase uint8

const (
	phaseConnecting phase = iota // a goroutine lists (if asked) and opens a watch
	phaseWatching                // the pump follows the watch
	phaseBackoff                 // waiting for the next attempt
)

// runState is what a pump knows of one of its informers: the informer's
// list-and-watch loop, as client-go's reflector runs it, taken apart into
// steps the pump takes as their time comes.
//
// Only the pump reads and writes it, but for the fields a connect
// goroutine is handed (ctx, logger, onWatchError, the list state) and
// returns in its connectResult.
type runState struct {
	i            *Informer
	pump         *pump
	ctx          context.Context // ends when the informer stops
	logger       klog.Logger
	onWatchError toolscache.WatchErrorHandlerWithContext
	carrier      *toolscache.Reflector // built on the first error, by a connect goroutine
	delay        wait.DelayFunc        // built on the first failure: most informers never fail

	phase      phase
	connecting bool // a connect goroutine has not reported yet
	stopping   bool // the informer's context has ended
	relist     bool // the attempt after the backoff lists first
	retryAt    time.Time

	w           followedWatch
	watchStart  time.Time
	events      int
	propagateRV bool // the watch started from a version of the list's
	sawNonAdd   bool // it is past any synthetic adds of its start

	// resync fires the next resync check, while the informer is past its
	// list; resyncSeq counts the timers, so that one stopped or replaced
	// after it fired is ignored.
	resync    clock.Timer
	resyncSeq uint64

	list listState

	// slot receives the stream of the watch being opened (take.go).
	slot takeSlot
	// untaken is set once the ListerWatcher turned out to do more with
	// client-go's watch than reading it: its streams are left to it.
	untaken bool
}

// listState is what a list remembers for the next, as client-go's
// reflector does.
type listState struct {
	rvUnavailable bool // the last list found the resource version expired or too new
	paginated     bool // the server pages lists from its watch cache: keep asking for pages
}

func newRunState(ctx context.Context, i *Informer, logger klog.Logger) *runState {
	st := &runState{
		i:            i,
		logger:       logger,
		onWatchError: i.onWatchError,
	}
	if i.runner != nil {
		// The informer's requests say whose they are (RunnerContext,
		// TakeWatch).
		ctx = context.WithValue(ctx, runKey{}, st)
	}
	st.ctx = ctx
	return st
}

// start begins the informer's first list, unless it was stopped before its
// pump took it (the stop found no pump to tell: see Informer.Stop). Called
// by its pump.
func (st *runState) start() {
	if st.ctx.Err() != nil {
		st.stopRequested()
		return
	}
	st.connect(true)
}

// nextDelay is how long to wait before the next attempt after a failure.
func (st *runState) nextDelay() time.Duration {
	if st.delay == nil {
		st.delay = backoff.DelayWithReset(st.i.clock, backoffReset)
	}
	return st.delay()
}

// stopRequested ends the informer's watch and stops it; the pump lets it
// go once no connect goroutine of it is left.
func (st *runState) stopRequested() {
	if st.stopping {
		return
	}
	st.stopping = true
	st.stopWatch()
	st.stopResync()
	if st.phase == phaseBackoff {
		st.phase = phaseConnecting // no more attempts
		if st.retryAt.Equal(st.pump.backoffAt) {
			st.pump.armBackoff() // it was the earliest
		}
	}
	st.i.halt()
	if !st.connecting {
		st.pump.release(st.i)
	}
}

func (st *runState) stopWatch() {
	if st.w != nil {
		st.w.Stop()
		st.w = nil
	}
}

func (st *runState) stopResync() {
	if st.resync != nil {
		st.resync.Stop()
		st.resync = nil
		st.resyncSeq++
	}
}

// startResync arms the resync timer, which posts to the pump when it
// fires.
func (st *runState) startResync() {
	st.stopResync()
	p, i, seq := st.pump, st.i, st.resyncSeq
	st.resync = i.clock.AfterFunc(i.resyncCheck, func() {
		p.post(message{kind: msgResync, informer: i, seq: seq})
	})
}

// connect starts a goroutine that lists (relist) and opens a watch from
// the resource version the informer last saw.
func (st *runState) connect(relist bool) {
	st.phase = phaseConnecting
	st.connecting = true
	if relist {
		// As client-go's reflector, resync checks start anew after a list.
		st.stopResync()
	}
	list := st.list
	go func() {
		res := st.dial(relist, list)
		st.pump.post(message{kind: msgConnected, informer: st.i, result: res})
	}()
}

// connectResult is what a connect goroutine hands back to the pump.
type connectResult struct {
	w      watch.Interface // nil on failure
	start  time.Time
	rv     string // the resource version the watch started from
	listed bool
	err    error
	relist bool // after a failure: list again, after the backoff
	list   listState
}

// connected takes the outcome of a connect goroutine.
func (st *runState) connected(res connectResult) {
	st.connecting = false
	st.list = res.list
	if st.stopping {
		if res.w != nil {
			res.w.Stop()
		}
		st.pump.release(st.i)
		return
	}
	if res.listed && st.i.resyncCheck > 0 {
		st.startResync()
	}
	if res.err != nil {
		st.pump.retryLater(st, res.relist)
		return
	}
	st.phase = phaseWatching
	w := followable(res.w)
	st.w = w
	st.watchStart = res.start
	st.events = 0
	st.propagateRV = res.rv != "" && res.rv != "0"
	st.sawNonAdd = false
	p, i := st.pump, st.i
	w.follow(func(e watch.Event, ended bool) {
		p.post(message{kind: msgEvent, informer: i, watch: w, event: e, ended: ended})
	})
}

// dial lists (relist) and opens a watch, in a connect goroutine. It calls
// the watch-error handler with the failures client-go's reflector hands
// it: a list that failed, a watch that could not be opened for a reason
// other than a refused connection or too many requests (those are tried
// again, after the backoff, without a list).
func (st *runState) dial(relist bool, list listState) connectResult {
	i := st.i
	res := connectResult{list: list}
	if relist && i.streams {
		w, start, err := st.streamInto(&res.list)
		switch {
		case err == nil:
			res.w, res.start, res.listed = w, start, true
			res.rv = i.LastSyncResourceVersion()
			return res
		case st.ctx.Err() != nil || retriable(err):
			st.logger.V(2).Info("Watch-list failed - backing off", "type", st.description(), "err", err)
			res.err, res.relist = err, true
			return res
		}
		st.logger.V(4).Info("Data couldn't be fetched in watchlist mode. Falling back to regular list.", "type", st.description(), "err", err)
	}
	if relist {
		if err := st.listInto(&res.list); err != nil {
			st.report(err)
			res.err, res.relist = err, true
			return res
		}
		res.listed = true
	}
	res.rv = i.LastSyncResourceVersion()
	timeout := int64((minWatchTimeout + time.Duration(rand.Int64N(int64(minWatchTimeout)))).Seconds()) //nolint:gosec // G404: spreads the watches' ends, no secret
	res.start = i.clock.Now()
	w, err := st.openWatch(metav1.ListOptions{
		ResourceVersion:     res.rv,
		TimeoutSeconds:      &timeout,
		AllowWatchBookmarks: true,
	})
	if err != nil {
		res.err = err
		if retriable(err) {
			st.logger.V(4).Info("Watch failed - backing off", "type", st.description(), "err", err)
			return res
		}
		st.report(err)
		res.relist = true
		return res
	}
	res.w = w
	return res
}

// report hands err to the watch-error handler, unless the informer is
// stopping (its requests were cut for that).
func (st *runState) report(err error) {
	if st.ctx.Err() != nil {
		return
	}
	if st.carrier == nil {
		st.carrier = nameCarrier(st.i, st.logger)
	}
	st.onWatchError(st.ctx, st.carrier, err)
}

func (st *runState) description() string { return fmt.Sprintf("%T", st.i.example) }

// listInto lists the informer's objects into its store, as client-go's
// reflector does: from the watch cache first (resource version "0"), then
// from the last version seen, and from etcd ("") once that version is gone;
// in pages when the server pages.
func (st *runState) listInto(ls *listState) error {
	i := st.i
	options := metav1.ListOptions{ResourceVersion: i.LastSyncResourceVersion()}
	switch {
	case ls.rvUnavailable:
		options.ResourceVersion = ""
	case options.ResourceVersion == "":
		options.ResourceVersion = "0"
	}
	pg := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		return i.lw.ListWithContext(st.ctx, opts)
	}))
	if !ls.paginated && options.ResourceVersion != "" && options.ResourceVersion != "0" {
		// From a version the watch cache may hold: unpaged, so that it
		// serves the list rather than etcd.
		pg.PageSize = 0
	}
	list, paginated, err := pg.ListWithAlloc(st.ctx, options)
	if isExpiredError(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		ls.rvUnavailable = true
		list, paginated, err = pg.ListWithAlloc(st.ctx, metav1.ListOptions{ResourceVersion: ""})
	}
	if err != nil {
		return fmt.Errorf("listing %s: %w", st.description(), err)
	}
	if options.ResourceVersion == "0" && paginated {
		ls.paginated = true
	}
	ls.rvUnavailable = false
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return fmt.Errorf("reading the list of %s: %w", st.description(), err)
	}
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return fmt.Errorf("reading the list of %s: %w", st.description(), err)
	}
	objs := make([]any, len(items))
	for n, item := range items {
		objs[n] = item
	}
	rv := listMeta.GetResourceVersion()
	if err := i.replace(objs, rv); err != nil {
		return fmt.Errorf("storing the list of %s: %w", st.description(), err)
	}
	i.setLastSyncResourceVersion(rv)
	return nil
}

func isExpiredError(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// accept checks that a watch event's object is of the informer's type
// and kind and has object metadata, as client-go's reflector does; an
// event that is not is reported and passed over.
func (st *runState) accept(e watch.Event) (metav1.Object, bool) {
	i := st.i
	if a := reflect.TypeOf(e.Object); i.expectedType != nil && a != i.expectedType {
		utilruntime.HandleErrorWithContext(st.ctx, nil, "Unexpected watch event object type", "type", st.description(), "actualType", a)
		return nil, false
	}
	if i.expectedGVK != nil {
		if a := e.Object.GetObjectKind().GroupVersionKind(); a != *i.expectedGVK {
			utilruntime.HandleErrorWithContext(st.ctx, nil, "Unexpected watch event object gvk", "expectedGVK", *i.expectedGVK, "actualGVK", a)
			return nil, false
		}
	}
	m, err := meta.Accessor(e.Object)
	if err != nil {
		utilruntime.HandleErrorWithContext(st.ctx, err, "Unable to understand watch event", "type", st.description(), "event", e)
		return nil, false
	}
	return m, true
}

// handle stores what one watch event reports and queues it for the
// handlers, as client-go's reflector and informer do.
func (st *runState) handle(e watch.Event) {
	i := st.i
	if e.Type == watch.Error {
		st.watchEnded(apierrors.FromObject(e.Object))
		return
	}
	m, ok := st.accept(e)
	if !ok {
		return
	}
	var err error
	rv := m.GetResourceVersion()
	switch e.Type {
	case watch.Added:
		err = i.upsert(e.Object)
	case watch.Modified:
		st.sawNonAdd = true
		err = i.upsert(e.Object)
	case watch.Deleted:
		st.sawNonAdd = true
		err = i.remove(e.Object)
	case watch.Bookmark:
		st.sawNonAdd = true
		i.indexer.Bookmark(rv)
	default:
		utilruntime.HandleErrorWithContext(st.ctx, nil, "Unknown watch event", "type", st.description(), "event", e)
	}
	if err != nil {
		utilruntime.HandleErrorWithContext(st.ctx, err, "Unable to store watch event object", "type", st.description(), "event", e.Type)
	}
	// A watch started without a version of the list's begins with adds in
	// no particular order: its version counts once something else came.
	if st.propagateRV || st.sawNonAdd {
		i.setLastSyncResourceVersion(rv)
	}
	st.events++
}

// watchEnded follows a watch's end as client-go's reflector does: one that
// ended on its own (its timeout, a dropped connection) is opened again at
// once from the last resource version; one that ended with an error, or
// without an event within a second, is followed by a list after the
// backoff; one refused for too many requests is opened again after it. One
// cut because the informer is stopping ends quietly.
func (st *runState) watchEnded(err error) {
	st.stopWatch()
	if st.ctx.Err() != nil {
		// The informer is stopping: its requests were cut for that, and
		// its stop is on the way to the pump (Informer.Stop). Nothing
		// failed, and nothing is to be tried again.
		return
	}
	if err == nil && st.events == 0 && st.i.clock.Since(st.watchStart) < veryShortWatch {
		err = &toolscache.VeryShortWatchError{Name: "leaninformer"}
	}
	if err == nil {
		st.logger.V(4).Info("Watch closed", "type", st.description(), "totalItems", st.events)
		st.connect(false)
		return
	}
	switch {
	case isExpiredError(err):
		st.logger.V(4).Info("Watch closed", "type", st.description(), "err", err)
	case apierrors.IsTooManyRequests(err):
		st.logger.V(2).Info("Watch returned 429 - backing off", "type", st.description())
		st.pump.retryLater(st, false)
		return
	default:
		st.logger.Info("Warning: watch ended with error", "type", st.description(), "err", err)
	}
	st.pump.retryLater(st, true)
}

// resyncDue runs a resync check: the handlers whose resync is due get
// every stored object as an update to itself.
func (st *runState) resyncDue() {
	if st.resync == nil || st.stopping {
		return
	}
	if st.i.shouldResync() {
		st.i.resync()
	}
	// A timer of its own for the next check: a fake clock's AfterFunc
	// timer, once reset after it fired, blocks the clock's next step.
	st.startResync()
}
