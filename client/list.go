package client

import (
	"context"
	"errors"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/known"
)

// Partial opts a fleet-wide List into partial results: clusters that fail
// are recorded in Failed instead of failing the call. Pass a pointer:
//
//	var partial client.Partial
//	err := c.List(ctx, &pods, &partial)
//	// err == nil; partial.Failed names the clusters that did not answer.
//
// Listing one cluster ignores it.
type Partial struct {
	// Failed maps each cluster that could not be listed to its error. It is
	// reset by every List.
	Failed map[string]error
}

// ApplyToList implements client.ListOption; Partial changes nothing in the
// request sent to each cluster.
func (*Partial) ApplyToList(*crclient.ListOptions) {}

// listFleet lists every Ready cluster (or the subset set with
// known.WithClusters) concurrently and merges the items, marking each with
// known.ClusterAnnotation.
func (c *Client) listFleet(ctx context.Context, list crclient.ObjectList, opts []crclient.ListOption) error {
	var partial *Partial
	var lo crclient.ListOptions
	fwd := make([]crclient.ListOption, 0, len(opts))
	for _, o := range opts {
		if p, ok := o.(*Partial); ok {
			partial = p
			continue
		}
		o.ApplyToList(&lo)
		fwd = append(fwd, o)
	}
	if lo.Limit > 0 || lo.Continue != "" {
		return ErrFleetPagination
	}
	if partial != nil {
		partial.Failed = nil
	}

	targets, failed := c.targets(ctx)
	total := len(targets) + len(failed)
	lists := make([]crclient.ObjectList, len(targets))
	errs := make([]error, len(targets))
	listOne := func(i int) {
		lists[i] = emptyListLike(list)
		errs[i] = targets[i].Client.List(ctx, lists[i], fwd...)
	}
	if len(targets) == 1 {
		listOne(0)
	} else {
		var wg sync.WaitGroup
		for i := range targets {
			wg.Go(func() { listOne(i) })
		}
		wg.Wait()
	}

	// A cluster removed from the fleet while the List ran is no longer part
	// of the answer; its error (a stopped cache) is not the caller's problem.
	for i, err := range errs {
		if err == nil {
			continue
		}
		if _, lookErr := c.fleet.Cluster(targets[i].Name); errors.Is(lookErr, ErrClusterNotFound) {
			lists[i] = nil
			continue
		}
		if failed == nil {
			failed = map[string]error{}
		}
		failed[targets[i].Name] = err
		lists[i] = nil
	}

	copyItems := lo.UnsafeDisableDeepCopy != nil && *lo.UnsafeDisableDeepCopy
	var items []runtime.Object
	for i, l := range lists {
		if l == nil {
			continue
		}
		part, err := meta.ExtractList(l)
		if err != nil {
			return err
		}
		for _, obj := range part {
			if copyItems {
				// The items are the cache's own objects; mark a copy.
				obj = obj.DeepCopyObject()
			}
			markCluster(obj, targets[i].Name)
			items = append(items, obj)
		}
	}
	if err := meta.SetList(list, items); err != nil {
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
	if partial != nil {
		partial.Failed = failed
		return nil
	}
	return &ListError{Failed: failed, Total: total}
}

// targets resolves which clusters a fleet-wide List reads. Clusters named
// with known.WithClusters that cannot be read are returned as failures.
func (c *Client) targets(ctx context.Context) ([]Member, map[string]error) {
	names, subset := known.ClustersFrom(ctx)
	if !subset {
		return c.fleet.ReadyClusters(), nil
	}
	var out []Member
	var failed map[string]error
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		cl, err := c.fleet.Cluster(n)
		if err != nil {
			if failed == nil {
				failed = map[string]error{}
			}
			failed[n] = err
			continue
		}
		out = append(out, Member{Name: n, Client: cl})
	}
	return out, failed
}

// emptyListLike returns a new, empty list of list's type and kind (the kind
// matters for unstructured and metadata-only lists).
func emptyListLike(list crclient.ObjectList) crclient.ObjectList {
	t := reflect.TypeOf(list).Elem()
	out := reflect.New(t).Interface().(crclient.ObjectList)
	out.GetObjectKind().SetGroupVersionKind(list.GetObjectKind().GroupVersionKind())
	return out
}

func markCluster(obj runtime.Object, cluster string) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	a := m.GetAnnotations()
	if a == nil {
		a = make(map[string]string, 1)
	}
	a[known.ClusterAnnotation] = cluster
	m.SetAnnotations(a)
}
