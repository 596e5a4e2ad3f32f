package configwatcher

import (
	"fmt"

	"github.com/mccr-dev/mccr/config"
)

// EventType says what happened to a cluster.
type EventType int

const (
	// Added means a cluster appeared. Config is complete.
	Added EventType = iota + 1
	// Updated means a known cluster is now reached or described differently
	// (new endpoint, rotated credentials, other Properties, another file or
	// object serving it, …). Config is complete.
	Updated
	// Deleted means a cluster is gone. Only Config.Name is guaranteed to be
	// set: the source of its config may already have vanished.
	Deleted
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "Added"
	case Updated:
		return "Updated"
	case Deleted:
		return "Deleted"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one change to the fleet, as a watcher saw it.
type Event struct {
	Type   EventType
	Config *config.NamedConfig
}

// ConfigWatcher delivers the clusters of a fleet as a stream of events: the
// clusters present when it starts as Added events, then every change.
//
// Implementations keep to these rules, which the Server relies on:
//   - a cluster is Added before it is Updated or Deleted, and an Updated event
//     means the content really changed (compare NamedConfig.Fingerprint);
//   - Stop is idempotent, returns once the watcher's goroutines have ended,
//     and then closes both channels;
//   - nothing read from Errors is required: a watcher whose errors nobody
//     reads drops them rather than block.
type ConfigWatcher interface {
	// Events delivers changes to the fleet. It is closed after Stop.
	Events() <-chan Event
	// Errors delivers problems with the source (a broken file, a missing
	// Secret), each naming what it is about. It is closed after Stop.
	Errors() <-chan error
	// Stop ends the watcher and releases its resources.
	Stop()
}
