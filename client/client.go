package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/mccr-dev/mccr/internal/writegrace"
	"github.com/mccr-dev/mccr/known"
)

// Member is one cluster of the fleet as the fan-out client sees it.
type Member struct {
	// Name is the cluster's name.
	Name string
	// Client reaches the cluster; nil unless it is Ready.
	Client crclient.Client
	// Context ends when Client stops being the cluster's route: the cluster
	// was deleted, restarted, or is no longer Ready. A fleet-wide List stops
	// waiting for the cluster then, and so does a write not sent yet; a
	// write already sent gets Options.WriteGrace more for its answer. Nil
	// when Client is nil.
	Context context.Context
	// Reachable, when set, ends with Context and also when the cluster is
	// marked unreachable, its cause then the error a fleet-wide List
	// reports for the cluster (wrapping ErrClusterUnreachable): a
	// fleet-wide List waiting on the cluster stops waiting then. Calls
	// aimed at the cluster alone do not use it. Nil: Context alone.
	Reachable context.Context
	// Err, when set, is why a fleet-wide List cannot read the cluster now;
	// it wraps ErrClusterNotReady or ErrClusterUnreachable.
	Err error
}

// Fleet is what the fan-out client routes over. A Server provides one;
// implementations must be safe for concurrent use and cheap to call, since
// every call through the fan-out client asks it.
type Fleet interface {
	// Route returns the named cluster's entry (Name, Client and Context
	// set), or an error wrapping ErrClusterNotFound or ErrClusterNotReady.
	Route(name string) (Member, error)
	// Members returns every cluster of the fleet, Ready or not, sorted by
	// name. Callers must not modify the slice.
	Members() []Member
}

// DefaultWriteGrace is Options.WriteGrace when it is zero: long enough
// for an API server's answer to a write (a Create, an Update: milliseconds;
// one behind slow admission webhooks: seconds), short enough that a
// cluster's Delete, which waits for its writes in flight, stays prompt.
const DefaultWriteGrace = 10 * time.Second

// Options configures a fan-out Client. New fills in the defaults.
type Options struct {
	// Scheme answers Scheme and GroupVersionKindFor. Required.
	Scheme *runtime.Scheme
	// RESTMapper answers RESTMapper and IsObjectNamespaced. Required; mccr
	// passes the host cluster's mapper. For a kind it has no match for,
	// the running members' mappers are asked in name order, and the first
	// that has one answers (a kind installed in the members alone).
	RESTMapper meta.RESTMapper
	// WriteGrace is how long a write already sent when its cluster's
	// route ends (the cluster is deleted or restarts) may still wait for
	// its answer, so that the caller learns what the API server did. The
	// caller's ctx bounds it too. Zero is DefaultWriteGrace; negative
	// gives no grace: such a write returns ErrOutcomeUnknown at once.
	WriteGrace time.Duration
}

// Client is a controller-runtime client.Client that sends each call to the
// cluster named in its ctx, and lists across the fleet when ctx names none.
// See the package documentation for the rules.
type Client struct {
	fleet  Fleet
	scheme *runtime.Scheme
	mapper meta.RESTMapper
	grace  time.Duration
	// graceEnded is the cause a write is cut with once its grace ends.
	graceEnded error
}

var _ crclient.Client = &Client{}

// New returns a fan-out client over fleet.
func New(fleet Fleet, opts Options) *Client {
	switch {
	case opts.WriteGrace == 0:
		opts.WriteGrace = DefaultWriteGrace
	case opts.WriteGrace < 0:
		opts.WriteGrace = 0
	}
	return &Client{
		fleet: fleet, scheme: opts.Scheme, mapper: fleetMapper{first: opts.RESTMapper, fleet: fleet}, grace: opts.WriteGrace,
		graceEnded: fmt.Errorf("no answer within the write grace of %s after the cluster's route ended", opts.WriteGrace),
	}
}

// For returns the client of the cluster ctx names, or an error wrapping
// ErrNoClusterInContext, ErrClusterNotFound or ErrClusterNotReady. Calls
// made on it directly are not ended when the cluster leaves the fleet; the
// Client's own methods are.
func (c *Client) For(ctx context.Context) (crclient.Client, error) {
	m, err := c.route(ctx)
	if err != nil {
		return nil, err
	}
	return m.Client, nil
}

func (c *Client) route(ctx context.Context) (Member, error) {
	name, ok := known.ClusterFrom(ctx)
	if !ok {
		return Member{}, ErrNoClusterInContext
	}
	return c.fleet.Route(name)
}

// read runs a read against the cluster ctx names. Reads are served from
// the member's cache, which ends any wait of its own (a kind whose
// informer has not synced) when the member stops; the hot path, a read
// from a synced cache, costs no more than the member's own client.
func (c *Client) read(ctx context.Context, call func(context.Context, crclient.Client) error) error {
	m, err := c.route(ctx)
	if err != nil {
		return err
	}
	err = call(ctx, m.Client)
	if err != nil {
		return c.readError(ctx, m, err)
	}
	return nil
}

// readLive runs a read that goes to the API server (a subresource's Get)
// under a context that also ends when the cluster's route does: a read
// has no outcome to lose, so it returns as soon as its cluster goes away.
func (c *Client) readLive(ctx context.Context, call func(context.Context, crclient.Client) error) error {
	m, err := c.route(ctx)
	if err != nil {
		return err
	}
	rctx, done := routeContext(ctx, m.Context)
	err = call(rctx, m.Client)
	done()
	if err != nil {
		return c.readError(ctx, m, err)
	}
	return nil
}

// readError is what a failed read returns: the API server's answer as it
// is; any other error that comes back after the cluster's route ended, or
// that says its member stopped under the read, is reported as the cluster
// leaving, stopping or restarting, while ctx runs.
func (c *Client) readError(ctx context.Context, m Member, err error) error {
	if ctx.Err() == nil && !isAnswer(err) && memberStopped(m, err) {
		return c.routeEnded(m.Name)
	}
	return err
}

// write runs a write against the cluster ctx names, under a context that
// also ends when that cluster's route does (it is deleted or restarts),
// so that no write waits on a cluster that went away for the caller's
// deadline, which a Reconcile's ctx does not have: a write not sent yet
// then ends at once; one already sent gets the grace to receive its
// answer, since the API server may apply it all the same. See writeError
// for what the caller is told.
func (c *Client) write(ctx context.Context, call func(context.Context, crclient.Client) error) error {
	m, err := c.route(ctx)
	if err != nil {
		return err
	}
	wctx, w := writegrace.Start(ctx, m.Context, c.grace, errRouteEnded, c.graceEnded)
	err = call(wctx, m.Client)
	w.Done()
	if err != nil {
		return c.writeError(ctx, m, err, w.Sent())
	}
	return nil
}

// writeError says what became of a failed write: the API server's answer
// as it is, whatever happened to the route meanwhile; ErrClusterNotFound or
// ErrClusterNotReady only when nothing was sent (the route ended, or the
// member stopped, before a request left); ErrOutcomeUnknown, wrapping the
// error, for a write sent that got no answer, or only a server error that
// does not say whether it was applied (see unsettled); any other error (one
// that kept the request from leaving: a refused connection) as it is.
func (c *Client) writeError(ctx context.Context, m Member, err error, sent bool) error {
	routeEnded := m.Context != nil && m.Context.Err() != nil
	switch {
	case sent && unsettled(err):
		return outcomeUnknown(m.Name, "the write got a server error, which does not say whether it was applied", err)
	case isAnswer(err):
		return err
	case !sent && (routeEnded && ctx.Err() == nil || errors.Is(err, ErrClusterNotReady)):
		return c.routeEnded(m.Name)
	case !sent:
		return err
	case routeEnded:
		if _, rerr := c.fleet.Route(m.Name); errors.Is(rerr, ErrClusterNotFound) {
			return outcomeUnknown(m.Name, "left the fleet while the write was in flight", err)
		}
		return outcomeUnknown(m.Name, "restarted while the write was in flight", err)
	case ctx.Err() != nil:
		return outcomeUnknown(m.Name, "the caller's context ended while the write was in flight", err)
	}
	return outcomeUnknown(m.Name, "the write got no answer", err)
}

// isAnswer reports whether err is an answer of the API server (a Status:
// NotFound, Conflict, AlreadyExists, Invalid, ...), which says what became
// of the call.
func isAnswer(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// unsettled reports whether err is a Status that does not say what became
// of a write it answers: a server error (5xx: the API server's
// InternalError, ServiceUnavailable, or the answer of a gateway in front
// of it, such as a load balancer's 502, 503 or 504 with a body that is no
// Status), or a timeout (Timeout, ServerTimeout), after which the API
// server may still apply the write, or may have applied it and lost the
// answer. Client errors (4xx: Conflict, Invalid, Forbidden, NotFound,
// TooManyRequests, ...) say that the write was refused.
func unsettled(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	switch s.Reason {
	case metav1.StatusReasonTimeout, metav1.StatusReasonServerTimeout,
		metav1.StatusReasonInternalError, metav1.StatusReasonServiceUnavailable:
		return true
	default:
		return s.Code >= http.StatusInternalServerError
	}
}

// routeEnded is the error of a call whose cluster's route ended under it.
func (c *Client) routeEnded(name string) error {
	if _, err := c.fleet.Route(name); errors.Is(err, ErrClusterNotFound) {
		return fmt.Errorf("cluster %q left the fleet during the call: %w", name, ErrClusterNotFound)
	}
	return fmt.Errorf("cluster %q stopped or restarted during the call: %w", name, ErrClusterNotReady)
}

// Get reads through the client of the cluster named in ctx: from its
// informer cache, as a Manager's client does.
func (c *Client) Get(ctx context.Context, key crclient.ObjectKey, obj crclient.Object, opts ...crclient.GetOption) error {
	return c.read(ctx, func(ctx context.Context, cl crclient.Client) error { return cl.Get(ctx, key, obj, opts...) })
}

// List lists in the cluster named in ctx, as that cluster's client would
// (from its cache, items unmarked). With no cluster in ctx it lists across
// the fleet: every cluster, or those named with known.WithClusters, each
// item marked with known.ClusterAnnotation; a cluster that cannot be read
// makes it return a *ListError, or fills Partial.Failed when a *Partial is
// among opts. Limit and Continue are refused then (ErrFleetPagination). See
// the package documentation.
func (c *Client) List(ctx context.Context, list crclient.ObjectList, opts ...crclient.ListOption) error {
	if _, ok := known.ClusterFrom(ctx); ok {
		for _, o := range opts {
			if p, ok := o.(*Partial); ok {
				p.Failed = nil
			}
		}
		return c.read(ctx, func(ctx context.Context, cl crclient.Client) error { return cl.List(ctx, list, opts...) })
	}
	return c.listFleet(ctx, list, opts)
}

// Create creates obj in the cluster named in ctx.
// known.ClusterAnnotation, which a fleet-wide List sets, is removed from obj
// first.
func (c *Client) Create(ctx context.Context, obj crclient.Object, opts ...crclient.CreateOption) error {
	return c.write(ctx, func(ctx context.Context, cl crclient.Client) error {
		stripClusterAnnotation(obj)
		return cl.Create(ctx, obj, opts...)
	})
}

// Delete deletes obj from the cluster named in ctx.
func (c *Client) Delete(ctx context.Context, obj crclient.Object, opts ...crclient.DeleteOption) error {
	return c.write(ctx, func(ctx context.Context, cl crclient.Client) error { return cl.Delete(ctx, obj, opts...) })
}

// Update updates obj in the cluster named in ctx.
// known.ClusterAnnotation, which a fleet-wide List sets, is removed from obj
// first.
func (c *Client) Update(ctx context.Context, obj crclient.Object, opts ...crclient.UpdateOption) error {
	return c.write(ctx, func(ctx context.Context, cl crclient.Client) error {
		stripClusterAnnotation(obj)
		return cl.Update(ctx, obj, opts...)
	})
}

// Patch patches obj in the cluster named in ctx.
// known.ClusterAnnotation, which a fleet-wide List sets, is removed from obj
// first, and the patch sent never mentions it: a patch computed from a
// listed item (client.MergeFrom of one) changes the annotations the caller
// changed, and no other.
func (c *Client) Patch(ctx context.Context, obj crclient.Object, patch crclient.Patch, opts ...crclient.PatchOption) error {
	name, _ := known.ClusterFrom(ctx)
	return c.write(ctx, func(ctx context.Context, cl crclient.Client) error {
		listed := stripClusterAnnotation(obj)
		return cl.Patch(ctx, obj, unmarked(patch, listed, name), opts...)
	})
}

// Apply server-side applies obj in the cluster named in ctx. An apply
// configuration made from a listed item is sent without
// known.ClusterAnnotation (obj itself is not changed to send it).
func (c *Client) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...crclient.ApplyOption) error {
	return c.write(ctx, func(ctx context.Context, cl crclient.Client) error {
		return applyUnmarked(obj, func(ac runtime.ApplyConfiguration) error { return cl.Apply(ctx, ac, opts...) })
	})
}

// DeleteAllOf deletes every matching object of obj's kind in the cluster
// named in ctx. It never spans the fleet.
func (c *Client) DeleteAllOf(ctx context.Context, obj crclient.Object, opts ...crclient.DeleteAllOfOption) error {
	return c.write(ctx, func(ctx context.Context, cl crclient.Client) error { return cl.DeleteAllOf(ctx, obj, opts...) })
}

// Status returns a writer for the status subresource; each call goes to the
// cluster named in its ctx.
func (c *Client) Status() crclient.SubResourceWriter {
	return &subResourceClient{c: c, name: "status"}
}

// SubResource returns a client for the named subresource; each call goes to
// the cluster named in its ctx.
func (c *Client) SubResource(subResource string) crclient.SubResourceClient {
	return &subResourceClient{c: c, name: subResource}
}

// Scheme returns the scheme shared by every cluster of the Server.
func (c *Client) Scheme() *runtime.Scheme { return c.scheme }

// RESTMapper returns the fleet's REST mapper: the host cluster's, and for
// a kind the host does not serve, the first Ready member's (in name order)
// that does.
func (c *Client) RESTMapper() meta.RESTMapper { return c.mapper }

// GroupVersionKindFor looks obj up in the shared scheme (unstructured
// objects carry their own kind).
func (c *Client) GroupVersionKindFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, c.scheme)
}

// IsObjectNamespaced asks the fleet's REST mapper (see RESTMapper).
func (c *Client) IsObjectNamespaced(obj runtime.Object) (bool, error) {
	return apiutil.IsObjectNamespaced(obj, c.scheme, c.mapper)
}

type subResourceClient struct {
	c    *Client
	name string
}

// do writes through the subresource on the API server itself.
func (s *subResourceClient) do(ctx context.Context, call func(context.Context, crclient.SubResourceClient) error) error {
	return s.c.write(ctx, func(ctx context.Context, cl crclient.Client) error { return call(ctx, cl.SubResource(s.name)) })
}

// Get reads the subresource from the API server (subresources are never
// cached).
func (s *subResourceClient) Get(ctx context.Context, obj, subResource crclient.Object, opts ...crclient.SubResourceGetOption) error {
	return s.c.readLive(ctx, func(ctx context.Context, cl crclient.Client) error {
		return cl.SubResource(s.name).Get(ctx, obj, subResource, opts...)
	})
}

func (s *subResourceClient) Create(ctx context.Context, obj, subResource crclient.Object, opts ...crclient.SubResourceCreateOption) error {
	return s.do(ctx, func(ctx context.Context, cl crclient.SubResourceClient) error {
		return cl.Create(ctx, obj, subResource, opts...)
	})
}

func (s *subResourceClient) Update(ctx context.Context, obj crclient.Object, opts ...crclient.SubResourceUpdateOption) error {
	return s.do(ctx, func(ctx context.Context, cl crclient.SubResourceClient) error {
		stripClusterAnnotation(obj)
		return cl.Update(ctx, obj, opts...)
	})
}

func (s *subResourceClient) Patch(ctx context.Context, obj crclient.Object, patch crclient.Patch, opts ...crclient.SubResourcePatchOption) error {
	name, _ := known.ClusterFrom(ctx)
	return s.do(ctx, func(ctx context.Context, cl crclient.SubResourceClient) error {
		listed := stripClusterAnnotation(obj)
		return cl.Patch(ctx, obj, unmarked(patch, listed, name), opts...)
	})
}

func (s *subResourceClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...crclient.SubResourceApplyOption) error {
	return s.do(ctx, func(ctx context.Context, cl crclient.SubResourceClient) error {
		return applyUnmarked(obj, func(ac runtime.ApplyConfiguration) error { return cl.Apply(ctx, ac, opts...) })
	})
}
