package leaninformer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/utils/ptr"
)

// Watch-list: the initial list streamed through the watch that follows it,
// as client-go's reflector streams it. One request instead of two (a list,
// then a watch): at start-up, when every member of a burst lists at once,
// the second request is what the API servers and the connections wait on.
// The watch asks for the initial events (sendInitialEvents) from a version
// not older than the one asked for (resourceVersionMatch=NotOlderThan),
// with bookmarks: the objects come as adds, then a bookmark annotated
// "k8s.io/initial-events-end" at the version they make up. The store is
// replaced with them at that bookmark, as a list replaces it (objects not
// streamed are deleted, tombstones to the handlers), and the watch goes on.
//
// As client-go, an informer streams its lists when client-go's
// WatchListClient feature is on and its ListerWatcher does not say it
// cannot (IsWatchListSemanticsUnSupported); a server that refuses the
// request (one that predates watch-list refuses resourceVersionMatch on a
// watch) or a stream that ends before its bookmark makes that attempt
// list and watch instead.

// errStreamEnded is a watch-list stream that ended before its
// initial-events-end bookmark.
var errStreamEnded = errors.New("watch-list stream ended before the initial-events-end bookmark")

// streamsLists reports whether an informer built on lw streams its lists.
func streamsLists(lw toolscache.ListerWatcher) bool {
	return clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) &&
		!watchlist.DoesClientNotSupportWatchListSemantics(lw)
}

// retriable reports whether a failed request is tried again after the
// backoff as it was (no fallback, no report): a refused connection, or
// too many requests.
func retriable(err error) bool {
	return utilnet.IsConnectionRefused(err) || apierrors.IsTooManyRequests(err)
}

// streamInto streams the informer's objects into its store, in a connect
// goroutine, and returns the watch, open past the initial-events-end
// bookmark, and when it started. From the last version seen, or from the
// newest ("") once that version has expired or is too new.
func (st *runState) streamInto(ls *listState) (watch.Interface, time.Time, error) {
	i := st.i
	for {
		rv := i.LastSyncResourceVersion()
		if ls.rvUnavailable {
			rv = ""
		}
		timeout := int64((minWatchTimeout + time.Duration(rand.Int64N(int64(minWatchTimeout)))).Seconds()) //nolint:gosec // G404: spreads the watches' ends, no secret
		start := i.clock.Now()
		w, err := st.openWatch(metav1.ListOptions{
			ResourceVersion:      rv,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			SendInitialEvents:    ptr.To(true),
			AllowWatchBookmarks:  true,
			TimeoutSeconds:       &timeout,
		})
		if err == nil {
			if err = st.receiveInitial(w, start); err == nil {
				ls.rvUnavailable = false
				return w, start, nil
			}
			w.Stop()
		}
		if !ls.rvUnavailable && (isExpiredError(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)) {
			ls.rvUnavailable = true
			continue
		}
		return nil, time.Time{}, err
	}
}

// receiveInitial takes w's initial events up to the initial-events-end
// bookmark, then replaces the store with the objects they made up.
func (st *runState) receiveInitial(w watch.Interface, start time.Time) error {
	i := st.i
	objs := make([]any, 0, 16)
	at := map[string]int{} // an object's index in objs, by key
	events := 0
	for {
		var e watch.Event
		var ok bool
		select {
		case <-st.ctx.Done():
			return st.ctx.Err()
		case e, ok = <-w.ResultChan():
		}
		if !ok {
			if events == 0 && i.clock.Since(start) < veryShortWatch {
				return &toolscache.VeryShortWatchError{Name: "leaninformer"}
			}
			return errStreamEnded
		}
		events++
		if e.Type == watch.Error {
			return apierrors.FromObject(e.Object)
		}
		m, ok := st.accept(e)
		if !ok {
			continue
		}
		if e.Type == watch.Bookmark {
			if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
				continue
			}
			rv := m.GetResourceVersion()
			if err := i.replace(objs, rv); err != nil {
				return fmt.Errorf("storing the streamed list of %s: %w", st.description(), err)
			}
			i.setLastSyncResourceVersion(rv)
			return nil
		}
		key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(e.Object)
		if err != nil {
			utilruntime.HandleErrorWithContext(st.ctx, err, "Unable to key watch event object", "type", st.description())
			continue
		}
		n, seen := at[key]
		switch {
		case e.Type == watch.Deleted && seen:
			last := len(objs) - 1
			objs[n] = objs[last]
			objs[last] = nil
			objs = objs[:last]
			if n < last {
				moved, _ := toolscache.DeletionHandlingMetaNamespaceKeyFunc(objs[n])
				at[moved] = n
			}
			delete(at, key)
		case e.Type == watch.Deleted:
		case seen:
			objs[n] = e.Object
		default:
			at[key] = len(objs)
			objs = append(objs, e.Object)
		}
	}
}
