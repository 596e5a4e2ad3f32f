package leaninformer

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// streamFault is a fakeServer that serves watch-list and breaks its
// streams as told, and records the options of every watch.
type streamFault struct {
	*fakeServer
	fault string // "refuse", "cut", "expire-from-version" or ""

	mu   sync.Mutex
	seen []metav1.ListOptions
}

func newStreamFault(fault string, names ...string) *streamFault {
	s := &streamFault{fakeServer: newFakeServer(names...), fault: fault}
	s.watchList = true
	return s
}

func (s *streamFault) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	s.seen = append(s.seen, opts)
	s.mu.Unlock()
	if opts.SendInitialEvents == nil || !*opts.SendInitialEvents {
		return s.fakeServer.Watch(opts)
	}
	switch s.fault {
	case "refuse": // as a server that predates watch-list refuses it
		return nil, apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "", field.ErrorList{
			field.Forbidden(field.NewPath("resourceVersionMatch"), "resourceVersionMatch is forbidden for watch"),
		})
	case "cut": // one object, then the stream ends without its bookmark
		ch := make(chan watch.Event, 1)
		ch <- watch.Event{Type: watch.Added, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "half", ResourceVersion: "1"}}}
		close(ch)
		return watch.NewProxyWatcher(ch), nil
	case "expire-from-version":
		if opts.ResourceVersion != "" {
			return nil, apierrors.NewResourceExpired("too old resource version")
		}
	}
	return s.fakeServer.Watch(opts)
}

func (s *streamFault) options() []metav1.ListOptions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

func newLean(lw toolscache.ListerWatcher) toolscache.SharedIndexInformer {
	return New(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
}

// The initial list is streamed through the watch, as client-go streams it:
// one request, sendInitialEvents from a version not older than the one
// asked for, with bookmarks; no list.
func TestWatchListStreamsTheList(t *testing.T) {
	t.Parallel()
	srv := newStreamFault("", "a", "b")
	inf := newLean(srv)
	rec := newRecorder("lean")
	rec.register(t, inf, nil)
	runSynced(t, inf)
	srv.set("c", "1", true)
	want := srv.snapshot()
	waitFor(t, 5*time.Second, "the handler to get the streamed list and the watched change", func() bool { return rec.matches(want) })
	rec.noProblems(t)
	if s := rec.snapshot(); s.initial != 2 {
		t.Errorf("%d adds in the initial list, want 2", s.initial)
	}
	if lists, watches, watchLists, open := srv.counts(); lists != 0 || watches != 0 || watchLists != 1 || open != 1 {
		t.Errorf("%d lists, %d watches, %d watch-lists, %d open; want one watch-list, open, and nothing else", lists, watches, watchLists, open)
	}
	opts := srv.options()[0]
	if opts.ResourceVersion != "" || opts.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan || !opts.AllowWatchBookmarks || opts.TimeoutSeconds == nil {
		t.Errorf("watch-list options %+v, want resourceVersion \"\", NotOlderThan, bookmarks and a timeout", opts)
	}
}

// A server that refuses watch-list, or a stream that ends before its
// initial-events-end bookmark, makes the informer list and watch instead;
// what a cut stream delivered is not kept.
func TestWatchListFallsBack(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"refuse", "cut"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			srv := newStreamFault(fault, "a", "b")
			inf := newLean(srv)
			rec := newRecorder("lean")
			rec.register(t, inf, nil)
			runSynced(t, inf)
			want := srv.snapshot()
			if got := storeRVs(inf); !maps.Equal(got, want) {
				t.Fatalf("store %v after the fallback, want %v", got, want)
			}
			srv.set("c", "1", true)
			want = srv.snapshot()
			waitFor(t, 5*time.Second, "the handler to follow the watch after the list", func() bool { return rec.matches(want) })
			rec.noProblems(t)
			if lists, watches, _, _ := srv.counts(); lists != 1 || watches != 1 {
				t.Errorf("%d lists and %d watches, want 1 and 1", lists, watches)
			}
		})
	}
}

// A relist streams from the last version seen; once that version has
// expired, from the newest (""), and the store follows the server, the
// objects gone delivered as tombstones.
func TestWatchListRelistFromExpiredVersion(t *testing.T) {
	t.Parallel()
	srv := newStreamFault("expire-from-version", "a", "b", "c")
	inf := newLean(srv)
	rec := newRecorder("lean")
	rec.register(t, inf, nil)
	runSynced(t, inf)
	waitFor(t, 5*time.Second, "the watch", func() bool { _, _, _, open := srv.counts(); return open == 1 })
	last := inf.LastSyncResourceVersion()
	srv.remove("a", false)
	srv.set("d", "1", false)
	srv.expireWatches()
	want := srv.snapshot()
	waitFor(t, 10*time.Second, "the store to match the server", func() bool { return maps.Equal(storeRVs(inf), want) })
	waitFor(t, 5*time.Second, "the handler to match the store", func() bool { return rec.matches(want) })
	rec.noProblems(t)
	if s := rec.snapshot(); s.tombstones != 1 {
		t.Errorf("%d tombstones, want 1", s.tombstones)
	}
	seen := srv.options()
	rvs := make([]string, 0, len(seen))
	for _, o := range seen {
		rvs = append(rvs, o.ResourceVersion)
	}
	if want := []string{"", last, ""}; !slices.Equal(rvs, want) {
		t.Errorf("watch-lists from versions %q, want %q", rvs, want)
	}
	if lists, _, _, _ := srv.counts(); lists != 0 {
		t.Errorf("%d lists, want none", lists)
	}
}
