package configwatcher

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/config"
)

func pubConfig(name, host, token string) *config.NamedConfig {
	return config.NewNamedConfig(name, &rest.Config{Host: host, BearerToken: token})
}

func fleetOf(cfgs ...*config.NamedConfig) map[string]*config.NamedConfig {
	m := map[string]*config.NamedConfig{}
	for _, c := range cfgs {
		m[c.Name] = c
	}
	return m
}

// drainPublished returns the events waiting on the channel.
func drainPublished(p *publisher) []string {
	var got []string
	for {
		select {
		case ev := <-p.events:
			got = append(got, ev.Type.String()+" "+ev.Config.Name)
		default:
			return got
		}
	}
}

func sameEvents(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func TestPublishDiffs(t *testing.T) {
	p := newPublisher(logr.Discard())
	defer p.close()
	stop := make(chan struct{})

	steps := []struct {
		name    string
		desired map[string]*config.NamedConfig
		want    []string
	}{
		{"start", fleetOf(pubConfig("b", "https://b", "t"), pubConfig("a", "https://a", "t")),
			[]string{"Added a", "Added b"}},
		// New pointers, same content (and a fresh func field would not
		// matter either): nothing to say.
		{"same again", fleetOf(pubConfig("a", "https://a", "t"), pubConfig("b", "https://b", "t")),
			nil},
		{"token rotated", fleetOf(pubConfig("a", "https://a", "t2"), pubConfig("b", "https://b", "t")),
			[]string{"Updated a"}},
		{"one gone, one new, one changed", fleetOf(pubConfig("a", "https://a2", "t2"), pubConfig("c", "https://c", "t")),
			[]string{"Deleted b", "Updated a", "Added c"}},
		{"empty", nil, []string{"Deleted a", "Deleted c"}},
		{"nil value is absent", map[string]*config.NamedConfig{"x": nil}, nil},
	}
	for _, s := range steps {
		if !p.apply(s.desired, stop) {
			t.Fatalf("%s: apply reported stop", s.name)
		}
		if got := drainPublished(p); !sameEvents(got, s.want) {
			t.Errorf("%s: got %v, want %v", s.name, got, s.want)
		}
	}
}

func TestPublishDeletedCarriesTheName(t *testing.T) {
	p := newPublisher(logr.Discard())
	defer p.close()
	a := pubConfig("a", "https://a", "t")
	a.Source.Object = "KubeFedCluster ns/a"
	p.apply(fleetOf(a), nil)
	<-p.events
	if got, ok := p.published("a"); !ok || got != a {
		t.Fatalf("published(a) = %v, %v", got, ok)
	}
	p.apply(nil, nil)
	ev := <-p.events
	if ev.Type != Deleted || ev.Config == nil || ev.Config.Name != "a" {
		t.Fatalf("got %v %v, want Deleted a", ev.Type, ev.Config)
	}
	if _, ok := p.published("a"); ok {
		t.Fatal("a still published after Deleted")
	}
}

func TestPublishStopsWaitingForTheReader(t *testing.T) {
	p := newPublisher(logr.Discard())
	defer p.close()
	desired := map[string]*config.NamedConfig{}
	for i := range publishEventBuffer + 10 {
		c := pubConfig(fmt.Sprintf("c%03d", i), "https://x", "t")
		desired[c.Name] = c
	}
	stop := make(chan struct{})
	done := make(chan bool)
	go func() { done <- p.apply(desired, stop) }()
	// The buffer fills, then apply waits for a reader.
	for deadline := time.Now().Add(10 * time.Second); len(p.events) < cap(p.events); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events buffered after 10s", len(p.events), cap(p.events))
		}
	}
	select {
	case <-done:
		t.Fatal("apply returned with nobody reading a full channel")
	case <-time.After(100 * time.Millisecond):
	}
	close(stop)
	if ok := <-done; ok {
		t.Fatal("apply said it delivered everything")
	}
	// What was delivered is remembered; the rest comes on the next apply.
	if n := len(drainPublished(p)); n != publishEventBuffer {
		t.Fatalf("%d events buffered, want %d", n, publishEventBuffer)
	}
	if !p.apply(desired, make(chan struct{})) {
		t.Fatal("second apply reported stop")
	}
	if got := drainPublished(p); len(got) != 10 || got[0] != fmt.Sprintf("Added c%03d", publishEventBuffer) {
		t.Fatalf("second apply sent %v", got)
	}
}

func TestPublishReportNeverBlocks(t *testing.T) {
	p := newPublisher(logr.Discard())
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				p.report(fmt.Errorf("g%d e%d", g, i))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("report blocked with nobody reading")
	}
	p.report(errors.New("last"))
	p.report(nil) // ignored
	p.close()
	var got []error
	for err := range p.errors {
		got = append(got, err)
	}
	if len(got) != publishErrorBuffer {
		t.Fatalf("%d errors kept, want %d", len(got), publishErrorBuffer)
	}
	if got[len(got)-1].Error() != "last" {
		t.Fatalf("newest error was dropped: last kept is %v", got[len(got)-1])
	}
}

func TestPublishCloseOnce(t *testing.T) {
	p := newPublisher(logr.Discard())
	p.close()
	p.close()
	if _, ok := <-p.events; ok {
		t.Fatal("events not closed")
	}
	if _, ok := <-p.errors; ok {
		t.Fatal("errors not closed")
	}
}

// TestPublishNeverReadsWhatItHandedOut: a consumer copying a published
// config (rest.CopyConfig writes into the ExecProvider the copy shares
// with it) while the watcher publishes the same fleet again is no race.
func TestPublishNeverReadsWhatItHandedOut(t *testing.T) {
	p := newPublisher(logr.Discard())
	defer p.close()
	stop := make(chan struct{})
	defer close(stop)
	cfg := config.NewNamedConfig("exec", &rest.Config{Host: "https://a", ExecProvider: &clientcmdapi.ExecConfig{
		Command: "plugin", APIVersion: "client.authentication.k8s.io/v1",
		Config: &runtime.Unknown{Raw: []byte(`{"cluster":"a"}`)},
	}})
	first := make(chan struct{})
	go func() {
		defer close(first)
		p.apply(fleetOf(cfg), stop)
	}()
	ev := <-p.events
	<-first
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 100 {
			_ = rest.CopyConfig(ev.Config.Config)
		}
	})
	for range 100 {
		if !p.apply(fleetOf(cfg), stop) {
			t.Fatal("apply stopped")
		}
	}
	wg.Wait()
	if got := drainPublished(p); len(got) != 0 {
		t.Errorf("the same config again published %v", got)
	}
}

// A name the gate refuses is never published; the refusal names the source
// once while the source keeps giving it, and the rest of the fleet is
// published as usual.
func TestPublishRefusesInvalidNames(t *testing.T) {
	p := newPublisher(logr.Discard())
	defer p.close()
	bad := pubConfig("evil-\xff\xfe", "https://evil", "t")
	bad.Source.Object = "Secret argocd/evil"
	good := pubConfig("good", "https://good", "t")
	for range 3 {
		if !p.apply(fleetOf(bad, good), nil) {
			t.Fatal("apply reported stop")
		}
	}
	if got := drainPublished(p); !sameEvents(got, []string{"Added good"}) {
		t.Fatalf("published %v, want only Added good", got)
	}
	var errs []error
	for done := false; !done; {
		select {
		case err := <-p.errors:
			errs = append(errs, err)
		default:
			done = true
		}
	}
	if len(errs) != 1 {
		t.Fatalf("reported %d errors, want 1: %v", len(errs), errs)
	}
	if !errors.Is(errs[0], config.ErrInvalidName) || !strings.Contains(errs[0].Error(), "Secret argocd/evil") || strings.Contains(errs[0].Error(), "\xff") {
		t.Fatalf("error %q: want ErrInvalidName naming Secret argocd/evil without the raw bytes", errs[0])
	}
	// Gone and back: reported again.
	p.apply(fleetOf(good), nil)
	p.apply(fleetOf(bad, good), nil)
	select {
	case err := <-p.errors:
		if !errors.Is(err, config.ErrInvalidName) {
			t.Fatalf("got %v", err)
		}
	default:
		t.Fatal("a refused name that came back was not reported again")
	}
	if got := drainPublished(p); len(got) != 0 {
		t.Fatalf("published %v", got)
	}
}
