package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mccr-dev/mccr/sample/syncer/api/v1alpha1"
	"github.com/mccr-dev/mccr/server"
)

const (
	// managedByLabel marks the copies the syncer made, and only those: a
	// Setting of the same name without it belongs to someone else and is
	// left alone (the host's status says Conflict).
	managedByLabel = "sample.mccr.dev/managed-by"
	managedByValue = "mccr-syncer"

	// sourceGenerationAnnotation on a copy is the FleetSetting generation
	// it was written from.
	sourceGenerationAnnotation = "sample.mccr.dev/source-generation"

	// finalizer holds a FleetSetting being deleted until no Ready member
	// holds its copy.
	finalizer = "sample.mccr.dev/syncer"

	// fieldOwner is the syncer's field manager for its server-side applies
	// in members.
	fieldOwner = "mccr-syncer"

	// defaultPatrolPeriod is how often the patroller looks for drift.
	defaultPatrolPeriod = 30 * time.Second
)

// settingKind is how Status.WaitingFor names Setting.
var settingKind = v1alpha1.GroupVersion.WithKind("Setting").String()

// syncerOptions configures the syncer's controllers.
type syncerOptions struct {
	// PatrolPeriod is how often each member's copies are compared with
	// what the host asks for, and each FleetSetting's status worked out
	// again, whatever the events. Defaults to defaultPatrolPeriod.
	PatrolPeriod time.Duration

	// Drift, when set, is told each difference the patroller found and
	// queued for repair, after it is logged.
	Drift func(cluster string, key types.NamespacedName, why string)
}

// setup registers the syncer on srv: the host controller that keeps each
// FleetSetting's finalizer and status, and the member controller that
// keeps each member's copies, with its patroller. Call it before
// srv.Start.
func setup(srv *server.Server, o syncerOptions) error {
	if o.PatrolPeriod <= 0 {
		o.PatrolPeriod = defaultPatrolPeriod
	}
	status := &statusReconciler{srv: srv, host: srv.GetHostClient(), members: srv.GetClient(), patrol: o.PatrolPeriod}
	if err := status.setupWithServer(); err != nil {
		return fmt.Errorf("host controller: %w", err)
	}
	copies := &copyReconciler{
		srv: srv, host: srv.GetHostClient(), member: srv.GetClient(),
		patrolPeriod: o.PatrolPeriod, drift: o.Drift, log: srv.GetLogger().WithName("patrol"),
	}
	srv.AddReconcilerSetup(copies.SetupWithManager)
	return nil
}

// selection compiles spec's choice of member clusters: those Clusters
// names, and those whose properties ClusterSelector matches.
func selection(spec *v1alpha1.FleetSettingSpec) (func(cluster string, props map[string]string) bool, error) {
	sel := labels.Nothing()
	if spec.ClusterSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(spec.ClusterSelector); err != nil {
			return nil, fmt.Errorf("invalid clusterSelector: %w", err)
		}
	}
	return func(cluster string, props map[string]string) bool {
		return slices.Contains(spec.Clusters, cluster) || sel.Matches(labels.Set(props))
	}, nil
}

// managed reports whether the syncer made cp.
func managed(cp *v1alpha1.Setting) bool { return cp.Labels[managedByLabel] == managedByValue }

// sourceGeneration is the FleetSetting generation cp was written from, 0
// if it does not say.
func sourceGeneration(cp *v1alpha1.Setting) int64 {
	g, _ := strconv.ParseInt(cp.Annotations[sourceGenerationAnnotation], 10, 64)
	return g
}

// copyDrift says how cp differs from the copy fs asks for; "" when it does
// not. Labels other than the template's are someone else's and do not
// count.
func copyDrift(cp *v1alpha1.Setting, fs *v1alpha1.FleetSetting) string {
	if g := sourceGeneration(cp); g != fs.Generation {
		return fmt.Sprintf("written from generation %d, not %d", g, fs.Generation)
	}
	if !maps.Equal(cp.Spec.Data, fs.Spec.Template.Data) {
		return "spec.data differs"
	}
	for _, k := range slices.Sorted(maps.Keys(fs.Spec.Template.Labels)) {
		if k != managedByLabel && cp.Labels[k] != fs.Spec.Template.Labels[k] {
			return fmt.Sprintf("label %s differs", k)
		}
	}
	return ""
}

// desiredCopy is the copy of fs, as the syncer applies it: only the fields
// it owns, so that a server-side apply also drops what an earlier
// generation set and this one does not.
func desiredCopy(fs *v1alpha1.FleetSetting) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Setting"))
	u.SetNamespace(fs.Namespace)
	u.SetName(fs.Name)
	l := maps.Clone(fs.Spec.Template.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[managedByLabel] = managedByValue
	u.SetLabels(l)
	u.SetAnnotations(map[string]string{sourceGenerationAnnotation: strconv.FormatInt(fs.Generation, 10)})
	if len(fs.Spec.Template.Data) > 0 {
		if err := unstructured.SetNestedStringMap(u.Object, fs.Spec.Template.Data, "spec", "data"); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// action is what a member's copy needs.
type action int

const (
	keep action = iota
	write
	remove
)

// plan says what the copy cp in the member cluster (of these properties)
// needs for the FleetSetting fs of the same name, and why. A nil fs is a
// FleetSetting that does not exist; a nil cp, a copy that does not. The
// member controller carries the plan out; the patroller reports and
// queues every plan that is not keep.
func plan(fs *v1alpha1.FleetSetting, cp *v1alpha1.Setting, cluster string, props map[string]string) (action, string) {
	if cp != nil && !managed(cp) {
		return keep, "" // someone else's
	}
	var gone string
	switch {
	case fs == nil:
		gone = "its FleetSetting is gone"
	case !fs.DeletionTimestamp.IsZero():
		gone = "its FleetSetting is being deleted"
	default:
		selects, err := selection(&fs.Spec)
		if err != nil {
			// Copies stay as they are until the spec is fixed; the host's
			// status says what is wrong with it.
			return keep, ""
		}
		if !selects(cluster, props) {
			gone = "the cluster is not selected"
		}
	}
	switch {
	case gone != "" && cp != nil:
		return remove, gone
	case gone != "":
		return keep, ""
	case cp == nil:
		return write, "missing"
	}
	if why := copyDrift(cp, fs); why != "" {
		return write, why
	}
	return keep, ""
}
