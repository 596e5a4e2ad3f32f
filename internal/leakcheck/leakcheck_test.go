package leakcheck

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// recordingT keeps the errors reported to it instead of failing the test.
type recordingT struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingT) Error(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprint(args...))
}

// A goroutine that ends after goleak's own retries gave up (about half a
// second) is waited for; one that outlives the patience is reported.
func TestVerifyWithin(t *testing.T) {
	ignore := goleak.IgnoreCurrent()

	slow := make(chan struct{})
	go func() {
		time.Sleep(time.Second)
		close(slow)
	}()
	if err := goleak.Find(ignore); err == nil {
		t.Fatal("goleak found no goroutine where one sleeps")
	}
	rec := &recordingT{TB: t}
	verifyWithin(rec, 10*time.Second, ignore)
	if len(rec.errs) != 0 {
		t.Errorf("a goroutine ending after a second was reported: %v", rec.errs)
	}
	<-slow

	stuck := make(chan struct{})
	defer close(stuck)
	go func() { <-stuck }()
	rec = &recordingT{TB: t}
	begin := time.Now()
	verifyWithin(rec, 300*time.Millisecond, ignore)
	if len(rec.errs) == 0 || !strings.Contains(strings.Join(rec.errs, "\n"), "TestVerifyWithin") {
		t.Errorf("a stuck goroutine was not reported with its stack: %v", rec.errs)
	}
	if took := time.Since(begin); took < 300*time.Millisecond {
		t.Errorf("reported after %s, before the patience", took)
	}
}
