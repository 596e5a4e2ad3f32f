package configwatcher

import (
	"maps"
	"slices"
	"unicode/utf8"
)

// LabelPropertyPrefix precedes the key of each label of the object a
// cluster comes from (a ClusterProfile, a Cluster API Cluster, an Argo CD
// cluster Secret) in its Properties: label team=a is property "label:team".
// It is ArgoCDLabelPropertyPrefix, which came first.
const LabelPropertyPrefix = "label:"

// Bounds on the labels and annotations of an object offered as
// Properties, which are copied into every Status: an object's annotations
// may hold up to 256 KiB, and its labels are whatever its writer chose. A
// longer value, or one that is not UTF-8, is left out; past
// maxMetaProperties entries (in key order), the rest are too.
const (
	maxPropertyValue  = 4096
	maxMetaProperties = 128
)

// propertyValueOK tells whether v may be a property value.
func propertyValueOK(v string) bool {
	return len(v) <= maxPropertyValue && utf8.ValidString(v)
}

// addMetaProperties adds to p the entries of meta (labels and annotations,
// their keys already prefixed) that the bounds above let through: those
// whose values propertyValueOK accepts, the first maxMetaProperties of them
// in key order.
func addMetaProperties(p, meta map[string]string) {
	addMetaPropertiesFirst(p, meta)
}

// addMetaPropertiesFirst is addMetaProperties, with the keys first (those
// of meta's entries that propertyValueOK accepts) taken before the others,
// so that the cut at maxMetaProperties never leaves them out.
func addMetaPropertiesFirst(p, meta map[string]string, first ...string) {
	keys := make([]string, 0, len(meta))
	for _, k := range first {
		if v, ok := meta[k]; ok && propertyValueOK(v) && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	ahead := len(keys)
	for k, v := range meta {
		if propertyValueOK(v) && !slices.Contains(keys[:ahead], k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys[ahead:])
	for _, k := range keys[:min(len(keys), maxMetaProperties)] {
		p[k] = meta[k]
	}
}

// labelProperties is an object's labels as Properties, each under
// LabelPropertyPrefix, within the bounds above; nil if none.
func labelProperties(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	meta := make(map[string]string, len(labels))
	for k, v := range labels {
		meta[LabelPropertyPrefix+k] = v
	}
	p := map[string]string{}
	addMetaProperties(p, meta)
	if len(p) == 0 {
		return nil
	}
	return p
}

// mergeProperties returns the union of ps, a later map winning a key over
// an earlier one; nil if empty.
func mergeProperties(ps ...map[string]string) map[string]string {
	var out map[string]string
	for _, p := range ps {
		if len(p) == 0 {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(p))
		}
		maps.Copy(out, p)
	}
	return out
}
