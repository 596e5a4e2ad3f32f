package fleetz

import (
	"cmp"
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Page is everything the fleet page shows; HTML and JSON are two
// renderings of it.
type Page struct {
	// Generated is when the data was read.
	Generated time.Time `json:"generated"`
	// Replica is this process's part in the fleet.
	Replica Replica `json:"replica"`
	// Total counts every member, whatever the filter.
	Total int `json:"total"`
	// Phases counts the members per phase, whatever the filter.
	Phases []PhaseCount `json:"phases"`
	// Controllers are the controllers' totals over every member.
	Controllers []ControllerTotals `json:"controllers"`
	// RateWindow is the interval the reconcile rates are measured over;
	// zero when no rate is known yet (the page's first view).
	RateWindow Duration `json:"rateWindow"`
	// Phase is the filter applied ("" for none) and Sort the order.
	Phase string `json:"phase,omitempty"`
	Sort  string `json:"sort"`
	// Clusters are the members shown: filtered and sorted.
	Clusters []Cluster `json:"clusters"`
	// Refresh is how often the HTML page reloads itself.
	Refresh Duration `json:"-"`
}

// Replica says what this process is in the fleet.
type Replica struct {
	// Role is "leader", "standby" (leader election, not leading),
	// "single" (no leader election) or "shard" (sharding).
	Role string `json:"role"`
	// Identity is a sharded replica's identity.
	Identity string `json:"identity,omitempty"`
}

// PhaseCount is how many members are in one phase.
type PhaseCount struct {
	Phase string `json:"phase"`
	Count int    `json:"count"`
}

// ControllerTotals is one controller over every member. QueueDepth is
// controller-runtime's workqueue depth for the controller's name, which
// the same controller in every member adds to: it has no per-cluster
// figure.
type ControllerTotals struct {
	Name       string   `json:"name"`
	Reconciles float64  `json:"reconciles"`
	Errors     float64  `json:"errors"`
	Rate       *float64 `json:"ratePerSecond,omitempty"`
	QueueDepth *float64 `json:"queueDepth,omitempty"`
}

// Cluster is one member's row.
type Cluster struct {
	Name   string    `json:"name"`
	Phase  string    `json:"phase"`
	Since  time.Time `json:"since"`
	Source string    `json:"source,omitempty"`
	Owner  string    `json:"owner,omitempty"`
	// Reachable is "yes", "no" or "unknown".
	Reachable string    `json:"reachable"`
	LastProbe time.Time `json:"lastProbe,omitzero"`
	// ProbeLatency is how long the last probe took.
	ProbeLatency Duration          `json:"probeLatency,omitempty"`
	LastError    string            `json:"lastError,omitempty"`
	NextRetry    time.Time         `json:"nextRetry,omitzero"`
	Failures     int               `json:"failures"`
	Restarts     int               `json:"restarts"`
	TimeToReady  Duration          `json:"timeToReady,omitempty"`
	WaitingFor   []string          `json:"waitingFor,omitempty"`
	Properties   map[string]string `json:"properties,omitempty"`
	// Controllers are this member's controllers, by name.
	Controllers []ControllerStat `json:"controllers,omitempty"`
}

// ControllerStat is one controller in one member.
type ControllerStat struct {
	Name       string   `json:"name"`
	Reconciles float64  `json:"reconciles"`
	Errors     float64  `json:"errors"`
	Rate       *float64 `json:"ratePerSecond,omitempty"`
}

// Duration renders as Go's duration string in JSON ("1.5s").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// The orders Select knows; SortName is the default.
const (
	SortName  = "name"
	SortPhase = "phase"
	SortSince = "since"
)

// Sorts are the orders Select knows, the default first.
var Sorts = []string{SortName, SortPhase, SortSince}

// Select keeps the clusters in phase (all for "") and orders them by
// sortBy: by name; by phase in the order of phases, then name; or by
// since, the latest change first. An unknown order is by name; Select
// returns the order it used.
func Select(rows []Cluster, phase, sortBy string, phases []string) ([]Cluster, string) {
	if phase != "" {
		rows = slices.DeleteFunc(rows, func(c Cluster) bool { return c.Phase != phase })
	}
	byName := func(a, b Cluster) int { return strings.Compare(a.Name, b.Name) }
	switch sortBy {
	case SortPhase:
		rank := func(p string) int {
			if i := slices.Index(phases, p); i >= 0 {
				return i
			}
			return len(phases)
		}
		slices.SortStableFunc(rows, func(a, b Cluster) int {
			return cmp.Or(cmp.Compare(rank(a.Phase), rank(b.Phase)), strings.Compare(a.Phase, b.Phase), byName(a, b))
		})
	case SortSince:
		slices.SortStableFunc(rows, func(a, b Cluster) int { return cmp.Or(b.Since.Compare(a.Since), byName(a, b)) })
	default:
		sortBy = SortName
		slices.SortStableFunc(rows, byName)
	}
	return rows, sortBy
}

// WriteJSON writes the page as JSON.
func WriteJSON(w io.Writer, p *Page) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(p)
}

// Link returns the page's relative URL for a filter and an order, keeping
// the defaults out of it.
func Link(phase, sortBy string) string {
	q := url.Values{}
	if phase != "" {
		q.Set("phase", phase)
	}
	if sortBy != "" && sortBy != SortName {
		q.Set("sort", sortBy)
	}
	if len(q) == 0 {
		return "?"
	}
	return "?" + q.Encode()
}
