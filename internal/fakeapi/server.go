package fakeapi

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
)

// Server is a fake API server. Create it with New, serve with Start, and
// Close it when done. All methods are safe for concurrent use.
type Server struct {
	store

	watchList bool
	plainHTTP bool
	http2     bool
	cert      *tls.Certificate // nil: httptest's
	token     string
	ts        *httptest.Server
	done      chan struct{} // closed by Close: ends watches, hangs and delays
	closeOnce sync.Once

	requests     atomic.Int64
	latency      atomic.Int64 // a time.Duration
	unauthorized atomic.Bool

	faultMu   sync.Mutex
	forbidden map[string]bool
	// groups are the group-versions ServeDiscovery added, by group.
	groups map[string]map[string][]metav1.APIResource
	hang   chan struct{} // non-nil while requests hang; closed to let them go
}

// Option configures a Server.
type Option func(*Server)

// WithHistory sets how many past events the server keeps to resume watches
// from an older resourceVersion (default 10000). A watch from before them
// gets 410 Gone, as from a compacted etcd, and the reflector lists again.
func WithHistory(n int) Option { return func(s *Server) { s.history = max(n, 1) } }

// WithoutWatchList makes the server refuse watches with sendInitialEvents
// the way a kube-apiserver without the WatchList feature does (422), so
// that client-go informers fall back to list, then watch.
func WithoutWatchList() Option { return func(s *Server) { s.watchList = false } }

// WithPlainHTTP serves plain HTTP. TLS is the default because that is what
// clients of real clusters set up, and cache.
func WithPlainHTTP() Option { return func(s *Server) { s.plainHTTP = true } }

// WithHTTP2 offers HTTP/2 over TLS, as a kube-apiserver does: a client
// then carries its watches, probes and requests on one connection per
// server, as it would to a real cluster. Without it clients speak
// HTTP/1.1, with a connection per request in flight.
func WithHTTP2() Option { return func(s *Server) { s.http2 = true } }

// WithCertificate serves TLS with cert (see LoopbackCertificate) instead
// of httptest's, whose RSA-2048 key costs the server a millisecond or two
// of CPU per handshake: thousands of servers taking their first
// connections at once on a shared machine want an ECDSA key. Config's CA
// is then cert's own leaf.
func WithCertificate(cert tls.Certificate) Option { return func(s *Server) { s.cert = &cert } }

// New returns a Server that does not serve yet; Seed may preload it.
func New(opts ...Option) *Server {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	s := &Server{watchList: true, token: hex.EncodeToString(b), done: make(chan struct{}), forbidden: map[string]bool{}}
	s.history = 10000
	for _, o := range opts {
		o(s)
	}
	s.init()
	return s
}

// Start serves on a loopback port. Like httptest, it panics if it cannot
// listen. Call it once.
func (s *Server) Start() {
	s.ts = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	// Clients that give up mid-handshake are routine in fault tests.
	s.ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.ts.EnableHTTP2 = s.http2
	if s.cert != nil {
		s.ts.TLS = &tls.Config{Certificates: []tls.Certificate{*s.cert}}
	}
	if s.plainHTTP {
		s.ts.Start()
	} else {
		s.ts.StartTLS()
	}
}

// Config returns a new rest.Config for the started server: URL, CA, bearer
// token. Client-side rate limiting is off (QPS -1), since the server is
// there to be fast; set QPS and Burst on the copy to have it back.
func (s *Server) Config() *rest.Config {
	cfg := &rest.Config{Host: s.ts.URL, BearerToken: s.token, QPS: -1}
	if !s.plainHTTP {
		cfg.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ts.Certificate().Raw})
	}
	return cfg
}

// Close ends every open watch and every hung or delayed request, stops
// serving and returns once every handler has. It is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		if s.ts != nil {
			s.ts.Close()
		}
	})
}

// SetLatency delays every request that arrives from now on by d; 0 turns
// it off. Events on watches already open are not delayed.
func (s *Server) SetLatency(d time.Duration) { s.latency.Store(int64(d)) }

// SetUnauthorized makes every request fail with 401, as if the token had
// been revoked, until it is called with false.
func (s *Server) SetUnauthorized(on bool) { s.unauthorized.Store(on) }

// Forbid makes requests for resource ("configmaps", "secrets" or
// "namespaces") fail with 403, as RBAC would, while discovery and the
// other resources work. Watches already open go on.
func (s *Server) Forbid(resource string) { s.setForbidden(resource, true) }

// Permit undoes Forbid.
func (s *Server) Permit(resource string) { s.setForbidden(resource, false) }

func (s *Server) setForbidden(resource string, on bool) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.forbidden[resource] = on
}

// Hang(true) makes requests that arrive from now on block, like an API
// server that accepts connections and never answers, until Hang(false),
// Close or the client gives up.
func (s *Server) Hang(on bool) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if on && s.hang == nil {
		s.hang = make(chan struct{})
	} else if !on && s.hang != nil {
		close(s.hang)
		s.hang = nil
	}
}

// ServeDiscovery makes discovery list gv with resources (/apis and
// /apis/<group>/<version>), as a CRD's would be once installed; nil
// resources take it out again. Only discovery: requests for the resources
// themselves still get 404.
func (s *Server) ServeDiscovery(gv schema.GroupVersion, resources []metav1.APIResource) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if s.groups == nil {
		s.groups = map[string]map[string][]metav1.APIResource{}
	}
	if resources == nil {
		delete(s.groups[gv.Group], gv.Version)
		if len(s.groups[gv.Group]) == 0 {
			delete(s.groups, gv.Group)
		}
		return
	}
	if s.groups[gv.Group] == nil {
		s.groups[gv.Group] = map[string][]metav1.APIResource{}
	}
	s.groups[gv.Group][gv.Version] = slices.Clone(resources)
}

func (s *Server) groupList() metav1.APIGroupList {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	l := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, name := range slices.Sorted(maps.Keys(s.groups)) {
		g := metav1.APIGroup{Name: name}
		for _, v := range slices.Sorted(maps.Keys(s.groups[name])) {
			g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v})
		}
		g.PreferredVersion = g.Versions[0]
		l.Groups = append(l.Groups, g)
	}
	return l
}

func (s *Server) groupVersion(path string) (*metav1.APIResourceList, bool) {
	group, version, ok := strings.Cut(path, "/")
	if !ok || strings.Contains(version, "/") {
		return nil, false
	}
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	rs, ok := s.groups[group][version]
	if !ok {
		return nil, false
	}
	return &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: group + "/" + version, APIResources: slices.Clone(rs),
	}, true
}

// RequestCount is the number of requests received so far, including those
// that failed or still hang.
func (s *Server) RequestCount() int64 { return s.requests.Load() }

// OpenWatches is the number of watches being served. Clients that stopped
// cleanly leave none.
func (s *Server) OpenWatches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers)
}

// serve is the entry point of every request: faults, authentication, then
// discovery or a resource.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	if !s.delay(r) {
		// Answer only a client that still waits: one that gave up must see
		// its own ctx error, not a reply that raced it. Returning without
		// a word would be one (an empty 200): abort the response instead.
		if r.Context().Err() != nil {
			panic(http.ErrAbortHandler)
		}
		writeError(w, r, apierrors.NewServiceUnavailable("shutting down"))
		return
	}
	if s.unauthorized.Load() || r.Header.Get("Authorization") != "Bearer "+s.token {
		writeError(w, r, apierrors.NewUnauthorized("Unauthorized"))
		return
	}
	path := strings.Trim(r.URL.Path, "/")
	switch path {
	case "version":
		writeRaw(w, http.StatusOK, mustJSON(version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.0-fakeapi"}))
	case "api":
		writeRaw(w, http.StatusOK, mustJSON(metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}}))
	case "api/v1":
		l := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1"}
		for _, k := range kinds {
			l.APIResources = append(l.APIResources, metav1.APIResource{
				Name: k.resource, SingularName: strings.ToLower(k.kind), Namespaced: k.namespaced, Kind: k.kind,
				Verbs: metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"},
			})
		}
		writeRaw(w, http.StatusOK, mustJSON(l))
	case "apis":
		// The core group is not listed here. client-go asks for
		// aggregated discovery first; a plain APIGroupList makes it use
		// /api/v1 and /apis/<group>/<version> instead, as with servers
		// older than 1.26.
		writeRaw(w, http.StatusOK, mustJSON(s.groupList()))
	default:
		if gv, ok := strings.CutPrefix(path, "apis/"); ok {
			l, found := s.groupVersion(gv)
			if !found {
				writeError(w, r, apierrors.NewNotFound(schema.GroupResource{}, path))
				return
			}
			writeRaw(w, http.StatusOK, mustJSON(l))
			return
		}
		rest, ok := strings.CutPrefix(path, "api/v1/")
		if !ok {
			writeError(w, r, apierrors.NewNotFound(schema.GroupResource{}, path))
			return
		}
		s.resource(w, r, strings.Split(rest, "/"))
	}
}

// delay applies Hang and SetLatency. It reports false if the server closed
// or the client went away meanwhile.
func (s *Server) delay(r *http.Request) bool {
	s.faultMu.Lock()
	hang := s.hang
	s.faultMu.Unlock()
	if hang != nil && !waitFor(r, s.done, hang) {
		return false
	}
	if d := time.Duration(s.latency.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		return waitFor(r, s.done, t.C)
	}
	return true
}

func waitFor[T any](r *http.Request, closed <-chan struct{}, c <-chan T) bool {
	select {
	case <-c:
		return true
	case <-r.Context().Done():
	case <-closed:
	}
	return false
}

func (s *Server) isForbidden(resource string) bool {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.forbidden[resource]
}

// writeRaw answers JSON, as discovery does whatever the Accept header
// asked for: clients decode by the Content-Type of the answer.
func writeRaw(w http.ResponseWriter, code int, b []byte) { writeAs(w, code, formatJSON, b) }

// writeAs answers b, encoded in f.
func writeAs(w http.ResponseWriter, code int, f format, b []byte) {
	w.Header().Set("Content-Type", f.contentType(false))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// writeError answers err as the metav1.Status a real server sends, in the
// format r negotiates, which client-go turns back into an error that
// apierrors.IsNotFound and the like recognize.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	st := apiStatus(err)
	f := negotiate(r.Header.Get("Accept"))
	writeAs(w, int(st.Code), f, f.encode(st))
}

func apiStatus(err error) *metav1.Status {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	st := se.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	return &st
}

func badRequest(format string, a ...any) error {
	return apierrors.NewBadRequest(fmt.Sprintf(format, a...))
}
