package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/known"
)

// Partial opts a fleet-wide List into partial results: clusters that fail
// are recorded in Failed instead of failing the call. Pass a pointer:
//
//	var partial client.Partial
//	err := c.List(ctx, &pods, &partial)
//	// err is nil unless ctx ended; partial.Failed names the clusters
//	// that could not be read, and pods holds the items of the others.
//
// A List of one cluster (ctx names it) only resets Failed: its error is
// returned as is.
type Partial struct {
	// Failed maps each cluster that could not be listed to its error. It is
	// reset by every List.
	Failed map[string]error
}

// ApplyToList implements client.ListOption; Partial changes nothing in the
// request sent to each cluster.
func (*Partial) ApplyToList(*crclient.ListOptions) {}

var (
	// errRouteEnded is the cause given to a cluster's List when the
	// cluster leaves the fleet (or restarts) while the List waits for it.
	errRouteEnded = errors.New("cluster left the fleet or restarted during the call")
	// errLeftFleet marks a cluster deleted during the List: not a failure
	// of a List over the whole fleet (one over clusters named with
	// known.WithClusters reports it as not found).
	errLeftFleet = errors.New("cluster left the fleet")
)

// listFleet lists every cluster of the fleet (or the subset set with
// known.WithClusters) concurrently and merges the items, marking each with
// known.ClusterAnnotation.
func (c *Client) listFleet(ctx context.Context, list crclient.ObjectList, opts []crclient.ListOption) error {
	partial, fwd, err := fleetListOptions(opts)
	if err != nil {
		return err
	}

	targets, subset := c.targets(ctx)
	var failed map[string]error
	fail := func(name string, err error) {
		if failed == nil {
			failed = map[string]error{}
		}
		failed[name] = err
	}
	// live holds the indexes of the targets to ask, in name order.
	live := make([]int, 0, len(targets))
	for i, m := range targets {
		if m.Err != nil {
			fail(m.Name, m.Err)
			continue
		}
		live = append(live, i)
	}

	// The first live cluster lists straight into the caller's list (no copy
	// for the common one-cluster case); the others into lists of the same
	// type, merged afterwards.
	// The scratch lists are made before any List runs: a member's List may
	// write the caller's list's kind while they are being made otherwise.
	lists := make([]crclient.ObjectList, len(live))
	for j := range lists {
		if j == 0 {
			lists[j] = list
		} else {
			lists[j] = emptyListLike(list)
		}
	}
	errs := make([]error, len(live))
	listOne := func(j int) {
		errs[j] = c.listMember(ctx, targets[live[j]], lists[j], ownRaw(fwd))
	}
	// The caller works through the clusters itself, helped by one
	// goroutine per other cluster taking the next one not yet taken. Cached
	// Lists (CPU only) end up on as many goroutines as there are CPUs free
	// to run them, the rest of the helpers finding nothing left to do;
	// Lists that wait on the network each get a goroutine of their own.
	switch len(live) {
	case 0:
	case 1:
		listOne(0)
	default:
		var next atomic.Int32
		// A member's List that panics makes the List panic, once every
		// cluster's has returned, on the caller's goroutine, as a List
		// of one cluster would: a reconciler's panic is recovered by
		// controller-runtime, where one on a helper goroutine would end
		// the process.
		var panicked atomic.Pointer[memberPanic]
		work := func() {
			for j := int(next.Add(1)) - 1; j < len(live); j = int(next.Add(1)) - 1 {
				func() {
					defer func() {
						if v := recover(); v != nil {
							panicked.CompareAndSwap(nil, &memberPanic{cluster: targets[live[j]].Name, value: v, stack: debug.Stack()})
						}
					}()
					listOne(j)
				}()
			}
		}
		var wg sync.WaitGroup
		for range len(live) - 1 {
			wg.Go(work)
		}
		work()
		wg.Wait()
		if p := panicked.Load(); p != nil {
			panic(p)
		}
	}

	if len(live) == 0 || errs[0] != nil {
		// Whatever the failed List left in the caller's list is not part of
		// the answer.
		if err := meta.SetList(list, nil); err != nil {
			return err
		}
	}
	for j, err := range errs {
		if err == nil {
			continue
		}
		lists[j] = nil
		name := targets[live[j]].Name
		switch {
		case !errors.Is(err, errLeftFleet):
			fail(name, err)
		case subset:
			// Named by the caller: as a List started after the Delete
			// reports it.
			fail(name, c.absent(name).Err)
		}
	}
	if err := mergeInto(list, lists); err != nil {
		return err
	}
	// A resourceVersion or continue token of one cluster means nothing for
	// the union.
	if lm, err := meta.ListAccessor(list); err == nil {
		lm.SetResourceVersion("")
		lm.SetContinue("")
		lm.SetRemainingItemCount(nil)
	}

	if len(failed) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		// The caller gave up; that is no cluster's failure.
		return fmt.Errorf("fleet-wide List: %w", context.Cause(ctx))
	}
	if partial != nil {
		partial.Failed = failed
		return nil
	}
	return &ListError{Failed: failed, Total: len(targets)}
}

// fleetListOptions sorts out a fleet-wide List's options: the caller's
// Partial, if any (its Failed reset), and the options to forward to each
// cluster (all but Partial). Pagination is ErrFleetPagination, before
// Partial is touched.
func fleetListOptions(opts []crclient.ListOption) (*Partial, []crclient.ListOption, error) {
	var partial *Partial
	var lo crclient.ListOptions
	for _, o := range opts {
		if p, ok := o.(*Partial); ok {
			partial = p
			continue
		}
		o.ApplyToList(&lo)
	}
	if lo.Limit > 0 || lo.Continue != "" {
		return nil, nil, ErrFleetPagination
	}
	fwd := opts
	if partial != nil {
		partial.Failed = nil
		// Members must not see the option; copy only when it is there.
		fwd = slices.DeleteFunc(slices.Clone(opts), func(o crclient.ListOption) bool {
			_, ok := o.(*Partial)
			return ok
		})
	}
	return partial, fwd, nil
}

// memberPanic is the panic of one cluster's List in a fleet-wide List,
// carried to the caller's goroutine.
type memberPanic struct {
	cluster string
	value   any
	stack   []byte
}

func (p *memberPanic) Error() string {
	return fmt.Sprintf("fleet-wide List: the List of cluster %q panicked: %v\n%s", p.cluster, p.value, p.stack)
}

// Unwrap lets errors.Is and errors.As see a panic value that is an error.
func (p *memberPanic) Unwrap() error {
	err, _ := p.value.(error)
	return err
}

// ownRaw returns opts, with every *client.ListOptions that carries Raw
// replaced by a copy with a Raw of its own. controller-runtime writes a
// List's selectors into the Raw it is given (ListOptions.AsListOptions,
// for each List that reaches the API server): the clusters of a
// fleet-wide List are listed concurrently, and must not share one, nor
// write into the caller's.
func ownRaw(opts []crclient.ListOption) []crclient.ListOption {
	var out []crclient.ListOption
	for i, o := range opts {
		lo, ok := o.(*crclient.ListOptions)
		if !ok || lo.Raw == nil {
			continue
		}
		if out == nil {
			out = slices.Clone(opts)
		}
		own, raw := *lo, *lo.Raw
		own.Raw = &raw
		out[i] = &own
	}
	if out == nil {
		return opts
	}
	return out
}

// listMember lists cluster m of a fleet-wide List into list and marks the
// items (markItems). It returns errLeftFleet when the cluster left the
// fleet during the call, and the cluster's error (wrapping
// ErrClusterUnreachable) when it was marked unreachable while the List
// waited on it.
func (c *Client) listMember(ctx context.Context, m Member, list crclient.ObjectList, fwd []crclient.ListOption) error {
	for retried := false; ; retried = true {
		lctx, done := routeContext(ctx, m.waitContext())
		err := m.Client.List(lctx, list, fwd...)
		done()
		switch {
		case err == nil:
			return markItems(list, m.Name)
		case ctx.Err() != nil:
			return err
		case !memberStopped(m, err):
			if m.Reachable != nil && m.Reachable.Err() != nil && !isAnswer(err) {
				return context.Cause(m.Reachable)
			}
			return err
		}
		// The cluster left the fleet, restarted or stopped while we listed
		// it. Deleted: it is no longer part of the answer, and its error (a
		// stopped cache) is not the caller's problem. Restarted: ask the
		// new Manager, once; restarted again, or stopped: not ready.
		now, ok := c.member(m.Name)
		switch {
		case !ok:
			return errLeftFleet
		case now.Err != nil:
			return now.Err
		case retried || now.Context == m.Context:
			return fmt.Errorf("cluster %q stopped or restarted during the List: %w", m.Name, ErrClusterNotReady)
		}
		m = now
	}
}

// waitContext is the context a fleet-wide List waits on m under.
func (m Member) waitContext() context.Context {
	if m.Reachable != nil {
		return m.Reachable
	}
	return m.Context
}

// memberStopped reports whether a call to m that failed with err (no
// answer of the API server) was cut because m stopped: its route ended,
// or its Manager stopped before the route did (a member that fails ends
// its Manager first), which the member's client reports with an error
// wrapping ErrClusterNotReady.
func memberStopped(m Member, err error) bool {
	return m.Context != nil && m.Context.Err() != nil || errors.Is(err, ErrClusterNotReady)
}

// routeContext returns a context that ends with ctx or when the cluster's
// route does, so that a call waiting on a cluster being deleted (a cache
// that will never sync) returns instead of waiting for the caller's
// deadline.
func routeContext(ctx, route context.Context) (context.Context, func()) {
	if route == nil {
		return ctx, func() {}
	}
	lctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(route, func() { cancel(errRouteEnded) })
	return lctx, func() {
		stop()
		cancel(nil)
	}
}

// targets resolves which clusters a fleet-wide List reads, sorted by name:
// the whole fleet, or the clusters named with known.WithClusters (subset;
// a name that is not among this replica's members becomes a target that
// fails as a call aimed at it does: ErrClusterNotFound, or an
// *ElsewhereError for a cluster another replica runs).
func (c *Client) targets(ctx context.Context) (targets []Member, subset bool) {
	all := c.fleet.Members()
	names, subset := known.ClustersFrom(ctx)
	if !subset {
		return all, false
	}
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	out := make([]Member, 0, len(names))
	for _, n := range names {
		i, ok := slices.BinarySearchFunc(all, n, byName)
		if !ok {
			out = append(out, c.absent(n))
			continue
		}
		out = append(out, all[i])
	}
	return out, true
}

// absent returns the target of a fleet-wide List for a name that is not
// among the fleet's members: one that fails with the error a call aimed at
// the cluster gets.
func (c *Client) absent(name string) Member {
	_, err := c.fleet.Route(name)
	if err == nil {
		// Joined since Members was read: as if the List had started first.
		err = NotFound(name)
	}
	return Member{Name: name, Err: err}
}

// member returns the fleet's current entry for name.
func (c *Client) member(name string) (Member, bool) {
	all := c.fleet.Members()
	i, ok := slices.BinarySearchFunc(all, name, byName)
	if !ok {
		return Member{}, false
	}
	return all[i], true
}

func byName(m Member, name string) int { return strings.Compare(m.Name, name) }

// emptyListLike returns a new, empty list of list's type and kind (the kind
// matters for unstructured and metadata-only lists).
func emptyListLike(list crclient.ObjectList) crclient.ObjectList {
	t := reflect.TypeOf(list).Elem()
	out := reflect.New(t).Interface().(crclient.ObjectList)
	out.GetObjectKind().SetGroupVersionKind(list.GetObjectKind().GroupVersionKind())
	return out
}

// markItems sets known.ClusterAnnotation on every item of l. The items may
// share their maps with the member's cache, which hands out its objects
// without copying them when told so (client.UnsafeDisableDeepCopy among
// the List's options, or the cache's own DefaultUnsafeDisableDeepCopy or
// ByObject UnsafeDisableDeepCopy, which the List cannot see): the
// annotation is set on copies of the maps it changes, never on the maps
// themselves.
func markItems(l crclient.ObjectList, cluster string) error {
	return meta.EachListItem(l, func(obj runtime.Object) error {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			markUnstructured(u, cluster)
			return nil
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		m.SetAnnotations(withMark(m.GetAnnotations(), cluster))
		return nil
	})
}

// withMark returns a copy of annotations with known.ClusterAnnotation set
// to cluster.
func withMark(annotations map[string]string, cluster string) map[string]string {
	a := make(map[string]string, len(annotations)+1)
	maps.Copy(a, annotations)
	a[known.ClusterAnnotation] = cluster
	return a
}

// markUnstructured sets known.ClusterAnnotation on u, whose content gets
// copies of the maps on the way to the annotations (the object, its
// metadata, the annotations); the rest of the content is shared.
func markUnstructured(u *unstructured.Unstructured, cluster string) {
	md, _ := u.Object["metadata"].(map[string]any)
	old, _ := md["annotations"].(map[string]any)
	a := make(map[string]any, len(old)+1)
	maps.Copy(a, old)
	a[known.ClusterAnnotation] = cluster
	metadata := make(map[string]any, len(md)+1)
	maps.Copy(metadata, md)
	metadata["annotations"] = a
	content := make(map[string]any, len(u.Object)+1)
	maps.Copy(content, u.Object)
	content["metadata"] = metadata
	u.Object = content
}

// mergeInto appends the items of lists[1:] to those of lists[0], which is
// dst itself (or nil when its List failed; dst was emptied then).
func mergeInto(dst crclient.ObjectList, lists []crclient.ObjectList) error {
	n := 0
	for _, l := range lists[min(1, len(lists)):] {
		if l != nil {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if items, ok := itemsField(dst); ok {
		total := items.Len()
		parts := make([]reflect.Value, 0, n)
		for _, l := range lists[1:] {
			if l == nil {
				continue
			}
			p, _ := itemsField(l)
			parts = append(parts, p)
			total += p.Len()
		}
		merged := items
		if total > items.Cap() {
			merged = reflect.MakeSlice(items.Type(), items.Len(), total)
			reflect.Copy(merged, items)
		}
		for _, p := range parts {
			merged = reflect.AppendSlice(merged, p)
		}
		items.Set(merged)
		return nil
	}
	// A list type without an Items slice: go through runtime.Objects.
	all, err := meta.ExtractList(dst)
	if err != nil {
		return err
	}
	for _, l := range lists[1:] {
		if l == nil {
			continue
		}
		part, err := meta.ExtractList(l)
		if err != nil {
			return err
		}
		all = append(all, part...)
	}
	return meta.SetList(dst, all)
}

// itemsField returns the settable Items slice of a list struct.
func itemsField(l crclient.ObjectList) (reflect.Value, bool) {
	v := reflect.ValueOf(l)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	f := v.Elem().FieldByName("Items")
	if !f.IsValid() || f.Kind() != reflect.Slice || !f.CanSet() {
		return reflect.Value{}, false
	}
	return f, true
}
