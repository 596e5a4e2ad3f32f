package watchertest

import (
	"context"

	"github.com/mccr-dev/mccr/config"
)

// The kit's changes to a source. Each fails the check if the source
// cannot make it, saying what it was doing, and remembers under which
// name the watcher will publish the cluster.

func (s *stream) write(c Cluster) {
	s.t.Helper()
	s.do("writing", c, s.src.Write)
}

func (s *stream) touch(c Cluster) {
	s.t.Helper()
	s.do("touching", c, s.src.Touch)
}

func (s *stream) breakCluster(c Cluster) {
	s.t.Helper()
	s.do("breaking", c, s.src.Break)
}

func (s *stream) delete(c Cluster) {
	s.t.Helper()
	s.do("deleting", c, s.src.Delete)
}

func (s *stream) do(what string, c Cluster, change func(context.Context, Cluster) error) {
	s.t.Helper()
	if err := change(s.t.Context(), c); err != nil {
		s.t.Fatalf("%s %s (credentials %d) in the source: %v", what, c.Name, c.Credentials, err)
	}
	s.written[s.src.ClusterName(c)] = c
}

// writeNamed writes c under name through nw; false if the source cannot
// hold name.
func (s *stream) writeNamed(nw NameWriter, c Cluster, name string) bool {
	s.t.Helper()
	ok, err := nw.WriteNamed(s.t.Context(), c, name)
	if err != nil {
		s.t.Fatalf("writing %s named %s in the source: %v", c.Name, config.QuoteName(name), err)
	}
	if ok {
		s.written[name] = c
	}
	return ok
}

// reaches checks that cfg, published for c, reaches c's cluster with c's
// credentials.
func (s *stream) reaches(while string, cfg *config.NamedConfig, c Cluster) {
	s.t.Helper()
	if err := s.src.Reaches(s.t.Context(), cfg, c); err != nil {
		s.t.Errorf("%s: the config of %s does not reach its cluster with credentials %d: %v", while, config.QuoteName(cfg.Name), c.Credentials, err)
	}
}
