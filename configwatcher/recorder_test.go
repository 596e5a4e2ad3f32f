package configwatcher_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/configwatcher"
)

// recorder reads a watcher's two channels for a test.
type recorder struct {
	t    *testing.T
	w    configwatcher.ConfigWatcher
	errs []error
}

// startRecorder starts a watcher of a host cluster with start, checks that
// it did not wait for the host, and stops it when the test ends.
func startRecorder(t *testing.T, start func() (configwatcher.ConfigWatcher, error)) *recorder {
	t.Helper()
	begin := time.Now()
	w, err := start()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("starting the watcher took %s: it should not wait for the host", d)
	}
	t.Cleanup(w.Stop)
	return &recorder{t: t, w: w}
}

// settled checks that nothing more comes for kfQuiet, errors included.
func (r *recorder) settled() {
	r.t.Helper()
	r.quiet(kfQuiet)
	r.noErrors()
}

// event waits for the next event and checks it. Errors seen meanwhile are
// kept for noErrors.
func (r *recorder) event(typ configwatcher.EventType, name string) configwatcher.Event {
	r.t.Helper()
	timeout := time.After(kfPatience)
	for {
		select {
		case ev, ok := <-r.w.Events():
			if !ok {
				r.t.Fatalf("Events closed while waiting for %s %s", typ, name)
			}
			if ev.Type != typ || ev.Config == nil || ev.Config.Name != name {
				r.t.Fatalf("got event %s %v, want %s %s", ev.Type, ev.Config, typ, name)
			}
			return ev
		case err := <-r.w.Errors():
			r.t.Logf("error while waiting for %s %s: %v", typ, name, err)
			r.errs = append(r.errs, err)
		case <-timeout:
			r.t.Fatalf("no %s %s within %s (errors: %v)", typ, name, kfPatience, r.errs)
		}
	}
}

// quiet checks that no event comes for d. Errors are kept for noErrors.
func (r *recorder) quiet(d time.Duration) {
	r.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev := <-r.w.Events():
			r.t.Fatalf("unexpected event %s %v", ev.Type, ev.Config)
		case err := <-r.w.Errors():
			r.errs = append(r.errs, err)
		case <-timeout:
			return
		}
	}
}

func (r *recorder) noErrors() {
	r.t.Helper()
	if len(r.errs) > 0 {
		r.t.Fatalf("unexpected errors: %v", r.errs)
	}
}

// err waits for an error that wraps target (any error if nil) and
// mentions every part; no event may come meanwhile. Other errors are logged
// and skipped.
func (r *recorder) err(target error, parts ...string) {
	r.t.Helper()
	_ = r.errFound(target, parts...)
}

// errFound is err, returning the error for more checks.
func (r *recorder) errFound(target error, parts ...string) error {
	r.t.Helper()
	timeout := time.After(kfPatience)
	for {
		select {
		case ev := <-r.w.Events():
			r.t.Fatalf("unexpected event %s %v while waiting for an error", ev.Type, ev.Config)
		case err := <-r.w.Errors():
			if (target == nil || errors.Is(err, target)) && containsAll(err.Error(), parts) {
				return err
			}
			r.t.Logf("skipping error %v", err)
		case <-timeout:
			r.t.Fatalf("no error %q mentioning %q within %s", target, parts, kfPatience)
		}
	}
}
