package configwatcher

import (
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"

	"github.com/mccr-dev/mccr/config"
)

// claim is what one object of a host cluster (a Secret, a Cluster API
// Cluster) says about the cluster it describes. Watchers whose objects name
// their clusters themselves turn every object into a claim, and
// settleClaims decides the fleet.
type claim struct {
	// ref names the object in messages ("ns/name"); claims of one name
	// are ordered by it.
	ref string
	// id is the object's identity from one sync to the next: its ref, or
	// its UID where an object deleted and created again under the same
	// name must count as another.
	id string
	// name is the cluster name claimed; "" when not even that is known.
	name string
	// cfg is the cluster's config; nil when the object is broken, and
	// err says why.
	cfg *config.NamedConfig
	err error
	// quiet leaves err unreported: it is expected (the object is being
	// deleted, say). A cluster the object serves still keeps its last good
	// config.
	quiet bool
}

// claimsOutcome is the fleet settleClaims decided.
type claimsOutcome struct {
	// desired is the complete set of clusters, for publisher.apply.
	desired map[string]*config.NamedConfig
	// owners maps each cluster name in desired to the id of the object
	// serving it; the next sync passes it back.
	owners map[string]string
	// problems are the errors to report, keyed by the claim's ref.
	problems map[string]error
}

// settleClaims decides which object serves each cluster name. The object
// already serving a name keeps it; otherwise a usable claim wins over a
// broken one, then ref order decides. Every other claim of the name is a
// problem that duplicate words. An object that served a cluster and is now
// broken keeps it with its last good config (published by pub), so that an
// object rewritten by mistake does not stop the controllers of a whole
// cluster; a broken object that served nothing serves nothing.
//
// A claim of a name that config.ValidateName refuses is a broken object
// too: settleClaims turns it into a broken claim of the name its object
// served (none if it served nothing), so that a name rewritten into one
// that can never be published keeps the cluster its object served, with
// its last good config, instead of deleting it.
//
// owners is what the previous sync returned; settleClaims belongs to the
// goroutine calling pub.apply.
func settleClaims(claims []*claim, owners map[string]string, pub *publisher, log logr.Logger, duplicate func(c, owner *claim) error) claimsOutcome {
	byName := map[string][]*claim{}
	out := claimsOutcome{problems: map[string]error{}}
	var served map[string]string // object id -> name, built when needed
	for _, c := range claims {
		if c.name != "" {
			if err := config.ValidateName(c.name); err != nil {
				if served == nil {
					served = make(map[string]string, len(owners))
					for name, id := range owners {
						served[id] = name
					}
				}
				refuseClaimName(c, served[c.id], err)
			}
		}
		if c.err != nil && !c.quiet {
			out.problems[c.ref] = c.err
		}
		if c.name != "" {
			byName[c.name] = append(byName[c.name], c)
		}
	}
	out.desired = make(map[string]*config.NamedConfig, len(byName))
	out.owners = make(map[string]string, len(byName))
	for name, cs := range byName {
		slices.SortFunc(cs, func(a, b *claim) int { return strings.Compare(a.ref, b.ref) })
		owner := cs[0]
		if i := slices.IndexFunc(cs, func(c *claim) bool { return c.id == owners[name] }); i >= 0 {
			owner = cs[i]
		} else if i := slices.IndexFunc(cs, func(c *claim) bool { return c.cfg != nil }); i >= 0 {
			owner = cs[i]
		}
		for _, c := range cs {
			if c != owner {
				out.problems[c.ref] = duplicate(c, owner)
			}
		}
		switch last, ok := pub.published(name); {
		case owner.cfg != nil:
			out.desired[name] = owner.cfg
		case ok && owners[name] == owner.id:
			out.desired[name] = last
			if !owner.quiet {
				out.problems[owner.ref] = fmt.Errorf("%w; keeping its last good config", owner.err)
			}
			log.V(1).Info("keeping the last good config", "cluster", name, "source", owner.ref)
		default:
			continue
		}
		out.owners[name] = owner.id
	}
	return out
}

// refuseClaimName makes c, whose name config.ValidateName refused with
// err, a broken claim of last, the name its object served ("" for none).
// A claim broken already keeps its own error, which names its object; a
// usable one gets err, naming the object as its config's Source does.
func refuseClaimName(c *claim, last string, err error) {
	if c.err == nil {
		src := c.ref
		if c.cfg != nil && c.cfg.Source.String() != "" {
			src = c.cfg.Source.String()
		}
		c.err = fmt.Errorf("configwatcher: %s: %w", src, err)
	}
	c.name, c.cfg = last, nil
}

// claimsState is what a watcher whose objects claim their clusters keeps
// from one sync to the next. It belongs to the run goroutine.
type claimsState struct {
	// owners maps a published cluster name to the id of the object
	// serving it.
	owners map[string]string
	// reported holds the problems reported, by object.
	reported problemReports
}

// served maps the id of each object serving a cluster to that cluster's
// name.
func (s *claimsState) served() map[string]string {
	m := make(map[string]string, len(s.owners))
	for name, id := range s.owners {
		m[id] = name
	}
	return m
}

func newClaimsState() claimsState {
	return claimsState{owners: map[string]string{}, reported: problemReports{}}
}

// publish settles claims (see settleClaims), publishes the fleet through
// h and reports the problems. It returns false once the watcher is
// stopped.
func (s *claimsState) publish(h *hostCache, claims []*claim, duplicate func(c, owner *claim) error) bool {
	out := settleClaims(claims, s.owners, h.pub, h.log, duplicate)
	if !h.pub.apply(out.desired, h.ctx.Done()) {
		return false
	}
	s.owners = out.owners
	s.reported.report(h.pub, out.problems)
	return true
}

// problemReports remembers the problems a watcher has reported, by what
// they are about, so that each is reported once.
type problemReports map[string]string

// report reports each problem of now once, again only when its message
// changes, and forgets those that are gone so that they are reported again
// if they come back. Messages are redacted; they are reported in key order.
func (r problemReports) report(pub *publisher, now map[string]error) {
	for key := range r {
		if now[key] == nil {
			delete(r, key)
		}
	}
	keys := make([]string, 0, len(now))
	for key := range now {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		err := config.RedactError(now[key])
		if r[key] == err.Error() {
			continue
		}
		r[key] = err.Error()
		pub.report(err)
	}
}
