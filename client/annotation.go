package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/mccr-dev/mccr/known"
)

// The annotation a fleet-wide List puts on its items never reaches an API
// server: Create and Update send the object without it, Patch sends a
// patch that does not mention it, and Apply an apply configuration
// without it.

// clusterAnnotationPath is known.ClusterAnnotation as a JSON patch path
// (RFC 6901: "/" is written "~1").
var clusterAnnotationPath = "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(known.ClusterAnnotation, "~", "~0"), "/", "~1")

// clusterAnnotationHint is a part of the annotation's key that a document
// mentioning it contains unless it escapes a character of it (see
// mayMention).
var clusterAnnotationHint = []byte(strings.SplitN(known.ClusterAnnotation, "/", 2)[0])

// mayMention reports whether data may mention known.ClusterAnnotation: it
// contains the key's first part, or an escape (JSON's \u, YAML's \x...),
// which may spell any part of it. A document it clears needs no look.
func mayMention(data []byte) bool {
	return bytes.Contains(data, clusterAnnotationHint) || bytes.IndexByte(data, '\\') >= 0
}

// stripClusterAnnotation removes the annotation a fleet-wide List put on a
// returned copy, so that writing the copy back never stores it. It returns
// the value it removed ("" if none).
func stripClusterAnnotation(obj crclient.Object) string {
	a := obj.GetAnnotations()
	v, ok := a[known.ClusterAnnotation]
	if !ok {
		return ""
	}
	delete(a, known.ClusterAnnotation)
	obj.SetAnnotations(a)
	return v
}

// unmarkedPatch is a Patch that never mentions known.ClusterAnnotation.
//
// A merge patch is computed from a base and the object. When neither is a
// listed item, the patch is controller-runtime's, byte for byte. When the
// base is a listed item (its copy taken before the object was stripped),
// computed as it is the patch would remove the annotation, and with it,
// when it was the only one, every annotation of the live object
// ("annotations": null). So a patch that mentions the annotation, or
// removes all annotations, is computed again with the object annotated as
// the listed item was (mark): if the base carried it, the two agree on it
// and the patch changes the annotations the caller changed, and no other;
// if the base did not, the first patch stands. Every mention of the
// annotation is then removed from the document sent.
type unmarkedPatch struct {
	crclient.Patch
	mark string // the annotation's value on the listed item, or the cluster's name
}

// unmarked wraps patch for a write of obj, stripped of the annotation,
// which had value listed ("" if none) before, to cluster.
func unmarked(patch crclient.Patch, listed, cluster string) crclient.Patch {
	if listed == "" {
		listed = cluster
	}
	return unmarkedPatch{Patch: patch, mark: listed}
}

// Data implements client.Patch. obj is left as it was given.
func (p unmarkedPatch) Data(obj crclient.Object) ([]byte, error) {
	data, err := p.Patch.Data(obj)
	if err != nil {
		return nil, err
	}
	pt := p.Type()
	if pt != types.MergePatchType && pt != types.StrategicMergePatchType {
		// A JSON patch is the caller's own document, and an apply
		// patch the object itself: neither depends on a base.
		return unmarkPatchData(pt, data)
	}
	if !bytes.Contains(data, []byte("annotations")) && !mayMention(data) {
		return data, nil // nothing about annotations: controller-runtime's
	}
	doc, ok := objectPatch(pt, data)
	if !ok || !touchesMark(doc) {
		return data, nil
	}
	given := obj.GetAnnotations()
	marked := make(map[string]string, len(given)+1)
	maps.Copy(marked, given)
	marked[known.ClusterAnnotation] = p.mark
	obj.SetAnnotations(marked)
	again, err := p.Patch.Data(obj)
	obj.SetAnnotations(given)
	if err != nil {
		return nil, err
	}
	if d, ok := objectPatch(pt, again); ok && setsMark(d) {
		// The base did not carry the annotation as the listed item
		// did: the first patch is the caller's.
		return unmarkPatchData(pt, data)
	}
	return unmarkPatchData(pt, again)
}

// annotationsOf returns an object's (or a merge patch's)
// metadata.annotations, and whether it has that key (in a merge patch,
// present but null removes every annotation).
func annotationsOf(doc map[string]any) (a map[string]any, present bool) {
	md, _ := doc["metadata"].(map[string]any)
	v, present := md["annotations"]
	a, _ = v.(map[string]any)
	return a, present
}

// touchesMark reports whether a merge patch mentions the annotation or
// removes every annotation.
func touchesMark(doc map[string]any) bool {
	a, present := annotationsOf(doc)
	if !present {
		return false
	}
	if a == nil {
		return true // "annotations": null
	}
	_, ok := a[known.ClusterAnnotation]
	return ok
}

// setsMark reports whether a merge patch sets the annotation to a value.
func setsMark(doc map[string]any) bool {
	a, _ := annotationsOf(doc)
	v, ok := a[known.ClusterAnnotation]
	return ok && v != nil
}

// unmarkPatchData removes every mention of known.ClusterAnnotation from a
// patch document of type pt. A document that does not parse is returned
// as it is: the API server judges it. So is a CBOR apply patch, which
// controller-runtime does not make (its patches are JSON).
func unmarkPatchData(pt types.PatchType, data []byte) ([]byte, error) {
	if !mayMention(data) {
		return data, nil
	}
	switch pt {
	case types.JSONPatchType:
		var ops []map[string]any
		if decodeJSON(data, &ops) == nil && unmarkJSONPatch(&ops) {
			return json.Marshal(ops)
		}
	case types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType:
		if doc, ok := objectPatch(pt, data); ok && unmarkObject(doc, true) {
			return json.Marshal(doc)
		}
	case types.ApplyCBORPatchType:
	}
	return data, nil
}

// objectPatch decodes a merge, strategic merge or apply patch (JSON, or
// YAML for an apply patch); false when it does not parse.
func objectPatch(pt types.PatchType, data []byte) (map[string]any, bool) {
	var doc map[string]any
	if decodeJSON(data, &doc) == nil {
		return doc, true
	}
	if pt != types.ApplyYAMLPatchType {
		return nil, false
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil || decodeJSON(j, &doc) != nil {
		return nil, false
	}
	return doc, true
}

// unmarkObject removes known.ClusterAnnotation from an object's (or a
// merge patch's) metadata.annotations; with prune, it also removes the
// annotations and metadata maps the removal leaves empty (in a merge
// patch, an empty map changes nothing; in an apply patch, it claims an
// empty map). It reports whether it removed anything.
func unmarkObject(doc map[string]any, prune bool) bool {
	if !hasClusterAnnotation(doc) {
		return false
	}
	a, _ := annotationsOf(doc)
	delete(a, known.ClusterAnnotation)
	if md := doc["metadata"].(map[string]any); prune && len(a) == 0 {
		delete(md, "annotations")
		if len(md) == 0 {
			delete(doc, "metadata")
		}
	}
	return true
}

// unmarkJSONPatch removes from a JSON patch the operations on
// known.ClusterAnnotation, and the annotation from the values written at
// metadata.annotations, metadata or the whole object. It reports whether
// it changed anything.
func unmarkJSONPatch(ops *[]map[string]any) bool {
	changed := false
	kept := (*ops)[:0]
	for _, op := range *ops {
		if op["path"] == clusterAnnotationPath || op["from"] == clusterAnnotationPath {
			changed = true
			continue
		}
		switch op["path"] {
		case "/metadata/annotations":
			if a, ok := op["value"].(map[string]any); ok {
				if _, ok := a[known.ClusterAnnotation]; ok {
					delete(a, known.ClusterAnnotation)
					changed = true
				}
			}
		case "/metadata":
			if md, ok := op["value"].(map[string]any); ok {
				changed = unmarkObject(map[string]any{"metadata": md}, false) || changed
			}
		case "":
			if doc, ok := op["value"].(map[string]any); ok {
				changed = unmarkObject(doc, false) || changed
			}
		}
		kept = append(kept, op)
	}
	*ops = kept
	return changed
}

// applyUnmarked runs apply with obj or, when obj carries
// known.ClusterAnnotation (an apply configuration made from a listed
// item), with a copy of it without the annotation, of obj's own type (so
// that the member's client treats it as it treats obj: a typed apply
// configuration stays typed, and read-your-writes records the write for
// the typed kind); obj is not changed to send it, and gets the API
// server's answer, as controller-runtime writes it into the apply
// configuration it sent.
func applyUnmarked(obj runtime.ApplyConfiguration, apply func(runtime.ApplyConfiguration) error) error {
	if u, ok := obj.(runtime.Unstructured); ok {
		return applyUnmarkedUnstructured(obj, u, apply)
	}
	data, err := json.Marshal(obj)
	if err != nil || !mayMention(data) {
		return apply(obj)
	}
	var content map[string]any
	if decodeJSON(data, &content) != nil || !unmarkObject(content, true) {
		return apply(obj)
	}
	sent, ok := typedLike(obj, content)
	if !ok {
		// No value of obj's type holds the unmarked content: send it
		// unstructured.
		u := &unstructured.Unstructured{Object: content}
		if err := apply(crclient.ApplyConfigurationFromUnstructured(u)); err != nil {
			return err
		}
		return answerInto(obj, u.Object)
	}
	if err := apply(sent); err != nil {
		return err
	}
	return answerInto(obj, sent)
}

// applyUnmarkedUnstructured is applyUnmarked for unstructured content u
// (obj itself).
func applyUnmarkedUnstructured(obj runtime.ApplyConfiguration, u runtime.Unstructured, apply func(runtime.ApplyConfiguration) error) error {
	if !hasClusterAnnotation(u.UnstructuredContent()) {
		return apply(obj)
	}
	data, err := json.Marshal(u.UnstructuredContent())
	if err != nil {
		return apply(obj)
	}
	var content map[string]any
	if decodeJSON(data, &content) != nil || !unmarkObject(content, true) {
		return apply(obj)
	}
	sent := &unstructured.Unstructured{Object: content}
	if err := apply(crclient.ApplyConfigurationFromUnstructured(sent)); err != nil {
		return err
	}
	u.SetUnstructuredContent(sent.Object)
	return nil
}

// typedLike returns a new value of obj's type (a pointer to a struct, as
// every generated apply configuration is) holding content; false when obj
// is of another kind of type or content does not decode into it.
func typedLike(obj runtime.ApplyConfiguration, content map[string]any) (runtime.ApplyConfiguration, bool) {
	t := reflect.TypeOf(obj)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	data, err := json.Marshal(content)
	if err != nil {
		return nil, false
	}
	sent, ok := reflect.TypeAssert[runtime.ApplyConfiguration](reflect.New(t.Elem()))
	if !ok || json.Unmarshal(data, sent) != nil {
		return nil, false
	}
	return sent, true
}

// answerInto writes the answer an apply configuration sent in obj's place
// got into obj, as controller-runtime writes it into the configuration it
// sends.
func answerInto(obj runtime.ApplyConfiguration, answer any) error {
	data, err := json.Marshal(answer)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, obj)
}

// hasClusterAnnotation reports whether unstructured content carries
// known.ClusterAnnotation.
func hasClusterAnnotation(content map[string]any) bool {
	a, _ := annotationsOf(content)
	_, ok := a[known.ClusterAnnotation]
	return ok
}

// decodeJSON decodes data into v keeping numbers as they were written
// (json.Number), so that a document re-encoded after a change differs
// from the original only by the change.
func decodeJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errTrailingData
	}
	return nil
}

var errTrailingData = errors.New("data after the JSON document")
