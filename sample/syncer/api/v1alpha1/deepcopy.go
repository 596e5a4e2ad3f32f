package v1alpha1

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// DeepCopy functions, written by hand: the types are few and small. Maps
// and slices are cloned (maps.Clone and slices.Clone keep nil as nil, as
// generated code does); everything else is a value.

// deepCopy returns a new copy of in; nil stays nil.
func deepCopy[T any, P interface {
	*T
	DeepCopyInto(*T)
}](in P) P {
	if in == nil {
		return nil
	}
	out := P(new(T))
	in.DeepCopyInto(out)
	return out
}

// object is o as a runtime.Object: nil, not a typed nil, when o is nil.
func object[P interface {
	comparable
	runtime.Object
}](o P) runtime.Object {
	var none P
	if o == none {
		return nil
	}
	return o
}

// copyItems deep-copies the items of a list; nil stays nil.
func copyItems[T any, P interface {
	*T
	DeepCopyInto(*T)
}](in []T) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i := range in {
		P(&in[i]).DeepCopyInto(&out[i])
	}
	return out
}

// DeepCopyInto copies the receiver into out.
func (in *FleetSetting) DeepCopyInto(out *FleetSetting) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a copy of the receiver.
func (in *FleetSetting) DeepCopy() *FleetSetting { return deepCopy(in) }

// DeepCopyObject implements runtime.Object.
func (in *FleetSetting) DeepCopyObject() runtime.Object { return object(in.DeepCopy()) }

// DeepCopyInto copies the receiver into out.
func (in *FleetSettingSpec) DeepCopyInto(out *FleetSettingSpec) {
	*out = *in
	out.Clusters = slices.Clone(in.Clusters)
	out.ClusterSelector = in.ClusterSelector.DeepCopy()
	out.Template.Labels = maps.Clone(in.Template.Labels)
	out.Template.Data = maps.Clone(in.Template.Data)
}

// DeepCopyInto copies the receiver into out.
func (in *FleetSettingStatus) DeepCopyInto(out *FleetSettingStatus) {
	*out = *in
	out.Clusters = slices.Clone(in.Clusters) // ClusterSync holds only values
}

// DeepCopyInto copies the receiver into out.
func (in *FleetSettingList) DeepCopyInto(out *FleetSettingList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = copyItems(in.Items)
}

// DeepCopy returns a copy of the receiver.
func (in *FleetSettingList) DeepCopy() *FleetSettingList { return deepCopy(in) }

// DeepCopyObject implements runtime.Object.
func (in *FleetSettingList) DeepCopyObject() runtime.Object { return object(in.DeepCopy()) }

// DeepCopyInto copies the receiver into out.
func (in *Setting) DeepCopyInto(out *Setting) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Data = maps.Clone(in.Spec.Data)
}

// DeepCopy returns a copy of the receiver.
func (in *Setting) DeepCopy() *Setting { return deepCopy(in) }

// DeepCopyObject implements runtime.Object.
func (in *Setting) DeepCopyObject() runtime.Object { return object(in.DeepCopy()) }

// DeepCopyInto copies the receiver into out.
func (in *SettingList) DeepCopyInto(out *SettingList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = copyItems(in.Items)
}

// DeepCopy returns a copy of the receiver.
func (in *SettingList) DeepCopy() *SettingList { return deepCopy(in) }

// DeepCopyObject implements runtime.Object.
func (in *SettingList) DeepCopyObject() runtime.Object { return object(in.DeepCopy()) }
