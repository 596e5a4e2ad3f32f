package watchertest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
)

// Defaults of Harness.
const (
	// DefaultPatience bounds every wait for something that must happen:
	// an event, an error, Stop returning. The machine running the tests
	// may be busy.
	DefaultPatience = 30 * time.Second
	// DefaultQuiet is how long "nothing more happens" is watched for.
	DefaultQuiet = time.Second
	// DefaultErrorFlood is how many broken clusters the check of an unread
	// Errors channel writes: more than a watcher is likely to buffer.
	DefaultErrorFlood = 100
)

// Harness is what the author of a ConfigWatcher hands Run: a way to make
// sources of clusters and watchers of them, and the timing of the source.
type Harness struct {
	// NewSource sets up a source for one check: empty, apart from the
	// sources of the other checks (a namespace of its own, a directory of
	// its own), and cleaned up with t.Cleanup. Required.
	NewSource func(t *testing.T) Source

	// Patience bounds every wait for something that must happen.
	// Defaults to DefaultPatience.
	Patience time.Duration

	// Quiet is how long the kit watches for events that must not come:
	// longer than the watcher takes to notice a change (its debounce, its
	// resync) on a busy machine. Defaults to DefaultQuiet.
	Quiet time.Duration

	// ErrorFlood is how many broken clusters are written while nobody
	// reads Errors. Defaults to DefaultErrorFlood.
	ErrorFlood int

	// LeakOptions are passed to goleak when the kit checks that Stop left
	// no goroutine behind: to ignore goroutines the source itself starts
	// while it is written to (the watcher's own never are).
	LeakOptions []goleak.Option
}

func (h *Harness) defaults() {
	if h.Patience <= 0 {
		h.Patience = DefaultPatience
	}
	if h.Quiet <= 0 {
		h.Quiet = DefaultQuiet
	}
	if h.ErrorFlood <= 0 {
		h.ErrorFlood = DefaultErrorFlood
	}
}

// Cluster is a cluster as the kit asks a Source to describe it.
type Cluster struct {
	// Name names the cluster's object, file or entry in the source: a
	// DNS label of at most 20 characters, unique in the Source. The
	// Source says what the watcher names the cluster (Source.ClusterName).
	Name string
	// Credentials says which of the source's credentials the cluster is
	// reached with: 0 or 1. Writing a cluster with other credentials
	// than before is a rotation. A Source maps them to whatever it holds:
	// two tokens, two certificates, two arguments of an exec plugin.
	Credentials int
}

// Source is one place clusters are written to, as the tools that own it
// write them, and the watcher of it that the kit checks. The kit calls
// its methods from the test's goroutine, so they may end the test with
// t.Fatal (of the t given to NewSource) as well as return an error.
//
// Each of Write, Touch, Break and Delete returns once the change is made
// (the API server answered, the file is in place); the kit then waits for
// what the watcher makes of it.
type Source interface {
	// Watch makes and starts a watcher of the source. The kit stops it.
	Watch() (configwatcher.ConfigWatcher, error)

	// Write makes the source describe c as its owner would: a new object
	// (file, entry) the first time, or after Delete; an update of it
	// after, a rotation when c.Credentials changed and the same content
	// rewritten when they did not.
	Write(ctx context.Context, c Cluster) error

	// Touch changes what its owner changes without changing c's config,
	// neither how c is reached nor its Properties: a status heartbeat, an
	// annotation the watcher does not read, a file rewritten with a
	// comment. c was written before.
	Touch(ctx context.Context, c Cluster) error

	// Break makes c's description invalid in a way its owner could (a
	// malformed kubeconfig, a Secret without its token), creating it
	// broken if it was not written before.
	Break(ctx context.Context, c Cluster) error

	// Delete removes c as its owner would.
	Delete(ctx context.Context, c Cluster) error

	// ClusterName is the name the watcher gives c.
	ClusterName(c Cluster) string

	// Object is how the watcher's errors and config.Source name c's
	// object: "Secret ns/name", the file's path.
	Object(c Cluster) string

	// Reaches checks that cfg, published for c, carries c's current
	// credentials and reaches its cluster.
	Reaches(ctx context.Context, cfg *config.NamedConfig, c Cluster) error
}

// NameWriter is implemented by a Source whose clusters are named after
// what an object holds (a Secret's data, a kubeconfig's context, a
// status property) rather than the object's own name, which the API
// server has checked already. The kit then writes clusters under hostile
// names.
type NameWriter interface {
	// WriteNamed writes c as Write does, but with name as the cluster's
	// name wherever the source keeps it. It returns false, writing
	// nothing, if the source cannot hold name as it is (an API field
	// that turns bytes that are not UTF-8 into U+FFFD, say).
	WriteNamed(ctx context.Context, c Cluster, name string) (bool, error)
}

// SecretHolder is implemented by a Source whose credentials are strings
// (tokens, passwords, keys). The kit then checks that no error, and no
// description of a config's source, quotes one of them.
type SecretHolder interface {
	Secrets() []string
}
