package fakeapi

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// format is the encoding of an answer about resources: what a client that
// asks for protobuf gets from a kube-apiserver, or JSON. Discovery is
// always JSON, which is what clients ask for there.
type format int

const (
	formatJSON format = iota
	formatProtobuf
)

// contentType is the Content-Type of an answer in f; a watch's differs.
func (f format) contentType(watching bool) string {
	switch {
	case f == formatJSON:
		return runtime.ContentTypeJSON
	case watching:
		return runtime.ContentTypeProtobuf + ";stream=watch"
	default:
		return runtime.ContentTypeProtobuf
	}
}

// encode encodes obj, which has its apiVersion and kind set, in f.
func (f format) encode(obj runtime.Object) []byte {
	if f == formatProtobuf {
		return mustProtobuf(obj)
	}
	return mustJSON(obj)
}

// frame is what a watch in f carries for an event of typ about the object
// encoded in f: one JSON metav1.WatchEvent a line, or a protobuf one after
// its length.
func (f format) frame(typ watch.EventType, obj []byte) []byte {
	if f == formatProtobuf {
		return protobufFrame(typ, obj)
	}
	return jsonFrame(typ, obj)
}

// served are the media types a kube-apiserver offers for core/v1 objects,
// in its order of preference, and the format this server answers each
// with. It does not speak YAML and answers JSON instead, as it answered
// everything before it spoke protobuf. A server with CBOR enabled offers it
// too; clients ask for it only behind a feature gate.
var served = []struct {
	typ, subtype string
	stream       bool // has a watch encoding
	format       format
}{
	{"application", "json", true, formatJSON},
	{"application", "yaml", false, formatJSON},
	{"application", "vnd.kubernetes.protobuf", true, formatProtobuf},
}

// negotiate picks the format of the answer to a request with the Accept
// header accept the way a kube-apiserver does: the clauses by preference
// (q, then the specific before wildcards), and the first that names, or
// matches with wildcards, a type it serves with parameters it takes. A
// clause asking for a conversion (as=Table, as=PartialObjectMetadata, with
// g= and v=) is passed over, as a server would pass over one it cannot
// convert to: kubectl and the metadata client list plain JSON after it. No
// header is JSON. Where a real server would answer 406 because no clause
// fits, this one answers JSON.
func negotiate(accept string) format {
	if accept == "" {
		return formatJSON
	}
	for _, c := range parseAccept(accept) {
		for _, s := range served {
			if (c.typ == s.typ || c.typ == "*") && (c.subtype == s.subtype || c.subtype == "*") && takes(c.params, s.stream) {
				return s.format
			}
		}
	}
	return formatJSON
}

// takes reports whether a clause's parameters ask for nothing the server
// cannot do for a type with, or without, a watch encoding.
func takes(params map[string]string, stream bool) bool {
	for k, v := range params {
		switch k {
		case "as", "g", "v":
			return false
		case "stream":
			if v != "" && (!stream || v != "watch") {
				return false
			}
		case "sv":
			if v != "" {
				return false
			}
		}
	}
	return true
}

// clause is one media range of an Accept header.
type clause struct {
	typ, subtype string
	q            float64
	params       map[string]string
}

// parseAccept splits an Accept header into its clauses, most preferred
// first, as leniently as the API server's parser: malformed clauses and
// parameters are dropped, a bad q is 0, and a q of 0 only puts a clause
// last.
func parseAccept(header string) []clause {
	var out []clause
	for part := range strings.SplitSeq(header, ",") {
		mt, params, _ := strings.Cut(strings.Trim(part, " "), ";")
		typ, subtype, ok := strings.Cut(mt, "/")
		typ = strings.Trim(typ, " ")
		switch {
		case !ok && typ == "*":
			subtype = "*"
		case !ok || strings.Contains(subtype, "/"):
			continue
		}
		c := clause{typ: typ, subtype: strings.Trim(subtype, " "), q: 1}
		for p := range strings.SplitSeq(params, ";") {
			k, v, ok := strings.Cut(p, "=")
			if !ok || strings.Contains(v, "=") {
				continue
			}
			k, v = strings.Trim(k, " "), strings.Trim(v, " ")
			if k == "q" {
				c.q, _ = strconv.ParseFloat(v, 32)
				continue
			}
			if c.params == nil {
				c.params = map[string]string{}
			}
			c.params[k] = v
		}
		out = append(out, c)
	}
	// More preferred first: a higher q, then a type, then a subtype that
	// is not a wildcard.
	slices.SortStableFunc(out, func(a, b clause) int {
		return cmp.Or(cmp.Compare(b.q, a.q), cmp.Compare(wild(a.typ), wild(b.typ)), cmp.Compare(wild(a.subtype), wild(b.subtype)))
	})
	return out
}

func wild(s string) int {
	if s == "*" {
		return 1
	}
	return 0
}

// protobufInfo is apimachinery's protobuf serializer, the one a
// kube-apiserver encodes with: objects behind the "k8s\x00" magic in a
// runtime.Unknown that names their apiVersion and kind, and watch events
// bare, each after its length.
var protobufInfo = func() runtime.SerializerInfo {
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok || info.StreamSerializer == nil {
		panic("fakeapi: apimachinery has no protobuf serializer")
	}
	return info
}()

// mustProtobuf encodes obj, which has its apiVersion and kind set, as a
// kube-apiserver answers it in protobuf. The API types cannot fail to.
func mustProtobuf(obj runtime.Object) []byte {
	var b bytes.Buffer
	if err := protobufInfo.Serializer.Encode(obj, &b); err != nil {
		panic(fmt.Sprintf("fakeapi: encoding %T in protobuf: %v", obj, err))
	}
	return b.Bytes()
}

// protobufFrame is a protobuf watch's frame for an event of typ about obj,
// which mustProtobuf encoded: the metav1.WatchEvent, without a magic of
// its own, after its length in 4 bytes, big-endian.
func protobufFrame(typ watch.EventType, obj []byte) []byte {
	var ev bytes.Buffer
	if err := protobufInfo.StreamSerializer.Encode(&metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: obj}}, &ev); err != nil {
		panic(fmt.Sprintf("fakeapi: encoding a watch event in protobuf: %v", err))
	}
	var b bytes.Buffer
	b.Grow(4 + ev.Len())
	if _, err := protobufInfo.StreamSerializer.Framer.NewFrameWriter(&b).Write(ev.Bytes()); err != nil {
		panic(fmt.Sprintf("fakeapi: framing a watch event: %v", err))
	}
	return b.Bytes()
}

// protobufList encodes the list of kind listKind at resourceVersion rv
// whose items mustProtobuf encoded, byte for byte as the serializer
// encodes the typed list, without decoding or encoding the objects again:
// a list's message is its ListMeta (field 1) and the items' messages
// (field 2), which are what the items' envelopes carry.
func protobufList(listKind, rv string, items [][]byte) []byte {
	meta := metav1.ListMeta{ResourceVersion: rv}
	lm, err := meta.Marshal()
	if err != nil {
		panic(fmt.Sprintf("fakeapi: encoding ListMeta: %v", err))
	}
	// A field takes its tag (1 byte here), its length (at most
	// binary.MaxVarintLen64) and its bytes.
	size := 1 + binary.MaxVarintLen64 + len(lm)
	msgs := make([][]byte, len(items))
	for i, it := range items {
		msgs[i] = unknownRaw(it)
		size += 1 + binary.MaxVarintLen64 + len(msgs[i])
	}
	msg := make([]byte, 0, size)
	msg = appendField(msg, 1, lm)
	for _, m := range msgs {
		msg = appendField(msg, 2, m)
	}
	return mustProtobuf(&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: listKind}, Raw: msg})
}

// appendField appends a length-delimited protobuf field.
func appendField(b []byte, field uint64, v []byte) []byte {
	b = binary.AppendUvarint(b, field<<3|2)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// unknownRaw returns the object's own message inside what mustProtobuf
// encoded: the Raw field of the runtime.Unknown after the magic.
func unknownRaw(enc []byte) []byte {
	var u runtime.Unknown
	if err := u.Unmarshal(enc[len("k8s\x00"):]); err != nil {
		panic(fmt.Sprintf("fakeapi: decoding a protobuf envelope: %v", err))
	}
	return u.Raw
}
