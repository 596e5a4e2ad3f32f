package watchertest_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test/watchertest"
)

// TestFileWatcher runs the kit on the FileWatcher: a watcher that keeps
// the rules passes every check.
func TestFileWatcher(t *testing.T) {
	leakcheck.Cleanup(t)
	watchertest.Run(t, watchertest.Harness{NewSource: newKubeconfigDir, Quiet: 500 * time.Millisecond})
}

// faultEnv names, in the process TestKitCatchesFaults starts, the fault
// its watcher has.
const faultEnv = "WATCHERTEST_FAULT"

// A fault breaks one rule; the kit's check must fail, saying so.
type fault struct {
	name  string
	check string // Run's subtest that must fail
	says  string // in its failure
}

var faults = []fault{
	{"duplicateAdded", "JoinBeforeStart", `got Added "a" again, without a Deleted since its first Added`},
	{"renamed", "JoinAfterStart", `want Added "a"; got Added "x-a"`},
	{"updateAfterAdded", "NoOpUpdates", `want no event; got Updated "a"`},
	{"dropDeleted", "Removal", `a deleted: want Deleted "a"; Deleted "a" did not come within`},
	{"deleteBroken", "Broken", `and no event; got Deleted "a"`},
	{"swallowErrors", "Broken", `a broken: want an error naming`},
	{"quoteToken", "Broken", `quotes a credential of the source`},
	{"unsafeName", "HostileNames", `carries the name's character U+000A raw`},
	{"noClose", "Stop", `Events is still open`},
	{"leak", "Stop", `goroutines started with the watcher are still running`},
	{"blockingErrors", "UnreadErrors", `Added "good" did not come within`},
	{"blockingStop", "StopWithUnreadEvents", `Stop did not return within`},
}

// TestKitCatchesFaults runs each check on a FileWatcher wrapped to break
// one rule, in a process of its own (a failing check fails its test), and
// checks that the check fails and says why.
func TestKitCatchesFaults(t *testing.T) {
	if f := os.Getenv(faultEnv); f != "" {
		// The process started below: the kit against the faulty watcher.
		watchertest.Run(t, watchertest.Harness{
			NewSource: func(t *testing.T) watchertest.Source {
				src := newKubeconfigDir(t).(*kubeconfigDir)
				src.watch = func(dir string) (configwatcher.ConfigWatcher, error) {
					w, err := configwatcher.NewFileWatcher(dir, configwatcher.WithDebounce(20*time.Millisecond))
					if err != nil {
						return nil, err
					}
					return wrap(w, f), nil
				}
				return src
			},
			Patience:   3 * time.Second,
			Quiet:      300 * time.Millisecond,
			ErrorFlood: 10,
		})
		return
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestKitCatchesFaults$/^"+f.check+"$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), faultEnv+"="+f.name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s passed on a watcher with fault %s:\n%s", f.check, f.name, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestKitCatchesFaults/"+f.check) || !strings.Contains(string(out), f.says) {
				t.Fatalf("%s on a watcher with fault %s: want its failure to say %q:\n%s", f.check, f.name, f.says, out)
			}
		})
	}
}

// faulty is a watcher that forwards another's events and errors, breaking
// the rule its fault names.
type faulty struct {
	inner  configwatcher.ConfigWatcher
	fault  string
	events chan configwatcher.Event
	errs   chan error
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	never  chan struct{}
}

func wrap(inner configwatcher.ConfigWatcher, fault string) *faulty {
	f := &faulty{
		inner: inner, fault: fault,
		events: make(chan configwatcher.Event, 16), errs: make(chan error, 16),
		stop: make(chan struct{}), done: make(chan struct{}), never: make(chan struct{}),
	}
	switch fault {
	case "blockingErrors":
		f.errs = make(chan error)
	case "blockingStop":
		f.events = make(chan configwatcher.Event)
	}
	if fault == "leak" {
		go func() { <-f.never }()
	}
	go f.run()
	return f
}

func (f *faulty) Events() <-chan configwatcher.Event { return f.events }
func (f *faulty) Errors() <-chan error               { return f.errs }

func (f *faulty) Stop() {
	f.once.Do(func() {
		if f.fault != "blockingStop" {
			close(f.stop)
		}
		f.inner.Stop()
	})
	<-f.done
}

func (f *faulty) run() {
	defer close(f.done)
	if f.fault != "noClose" {
		defer close(f.errs)
		defer close(f.events)
	}
	in, inErrs := f.inner.Events(), f.inner.Errors()
	live := map[string]bool{}
	for in != nil || inErrs != nil {
		select {
		case ev, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			for _, out := range f.events1(ev, live) {
				select {
				case f.events <- out:
				case <-f.stop:
					return
				}
			}
		case err, ok := <-inErrs:
			if !ok {
				inErrs = nil
				continue
			}
			if !f.error1(err, live) {
				return
			}
		case <-f.stop:
			return
		}
	}
}

// events1 is what the faulty watcher makes of one event.
func (f *faulty) events1(ev configwatcher.Event, live map[string]bool) []configwatcher.Event {
	if ev.Type == configwatcher.Deleted {
		delete(live, ev.Config.Name)
	} else {
		live[ev.Config.Name] = true
	}
	switch {
	case f.fault == "duplicateAdded" && ev.Type == configwatcher.Added:
		return []configwatcher.Event{ev, ev}
	case f.fault == "updateAfterAdded" && ev.Type == configwatcher.Added:
		return []configwatcher.Event{ev, {Type: configwatcher.Updated, Config: ev.Config}}
	case f.fault == "dropDeleted" && ev.Type == configwatcher.Deleted:
		return nil
	case f.fault == "renamed":
		nc := *ev.Config
		nc.Name = "x-" + nc.Name
		return []configwatcher.Event{{Type: ev.Type, Config: &nc}}
	}
	return []configwatcher.Event{ev}
}

// error1 forwards one error the faulty way; false once stopped.
func (f *faulty) error1(err error, live map[string]bool) bool {
	switch f.fault {
	case "swallowErrors":
		return true
	case "quoteToken":
		err = fmt.Errorf("%w (it had token %s)", err, tokens[0])
	case "unsafeName":
		err = fmt.Errorf("%w (raw: %s)", err, "prod\nlevel=error msg=forged")
	case "deleteBroken":
		for name := range live {
			if strings.Contains(err.Error(), "/"+name+".kubeconfig") {
				delete(live, name)
				select {
				case f.events <- configwatcher.Event{Type: configwatcher.Deleted, Config: &config.NamedConfig{Name: name}}:
				case <-f.stop:
					return false
				}
			}
		}
	}
	select {
	case f.errs <- err:
	case <-f.stop:
		return false
	}
	return true
}
