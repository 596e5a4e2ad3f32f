package fakeapi

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// TestNegotiate: the Accept headers clients send get the format a
// kube-apiserver answers them in; clauses asking for conversions are
// passed over; hostile headers are JSON, never a panic.
func TestNegotiate(t *testing.T) {
	for accept, want := range map[string]format{
		"": formatJSON,
		// client-go with ContentType protobuf, and its protobuf default.
		"application/vnd.kubernetes.protobuf, */*":             formatProtobuf,
		"application/vnd.kubernetes.protobuf,application/json": formatProtobuf,
		"application/json, */*":                                formatJSON,
		"application/json":                                     formatJSON,
		"*/*":                                                  formatJSON,
		"application/*":                                        formatJSON,
		"*":                                                    formatJSON,
		"application/vnd.kubernetes.protobuf;stream=watch":              formatProtobuf,
		" application/vnd.kubernetes.protobuf ; q=1 , application/json": formatProtobuf,
		// Preference by q, then by specificity.
		"application/json;q=0.5, application/vnd.kubernetes.protobuf":  formatProtobuf,
		"application/vnd.kubernetes.protobuf;q=0.1, application/json":  formatJSON,
		"*/*, application/vnd.kubernetes.protobuf":                     formatProtobuf,
		"application/vnd.kubernetes.protobuf;q=0, */*;q=0.1":           formatJSON,
		"application/vnd.kubernetes.protobuf;q=zero, application/json": formatJSON,
		// The metadata client and kubectl: the conversions are passed over.
		"application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json": formatJSON,
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json":                                               formatJSON,
		"application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/vnd.kubernetes.protobuf":                                                          formatProtobuf,
		// Streams other than watch, server versions, YAML (answered in
		// JSON), types not served.
		"application/vnd.kubernetes.protobuf;stream=other, application/json": formatJSON,
		"application/vnd.kubernetes.protobuf;sv=v1, application/json":        formatJSON,
		"application/yaml, application/vnd.kubernetes.protobuf":              formatJSON,
		"application/yaml;stream=watch, application/vnd.kubernetes.protobuf": formatProtobuf,
		"text/html, application/vnd.kubernetes.protobuf":                     formatProtobuf,
		"application/cbor": formatJSON,
		"application/vnd.kubernetes.protobuf;pretty=1;export=1;profile=x;foo=bar": formatProtobuf,
		// Hostile.
		",,,":  formatJSON,
		"/":    formatJSON,
		";;;=": formatJSON,
		"a/b/c, application/vnd.kubernetes.protobuf":    formatProtobuf,
		"application/vnd.kubernetes.protobuf;;=;a==b;q": formatProtobuf,
		"application":      formatJSON,
		"\x00/\x00;q=\x00": formatJSON,
	} {
		if got := negotiate(accept); got != want {
			t.Errorf("negotiate(%q) = %v, want %v", accept, got, want)
		}
	}
}

// TestProtobufEncodings: what the server stores and composes is byte for
// byte what apimachinery's serializer writes for the typed objects, and a
// frame decodes with client-go's protobuf watch decoder.
func TestProtobufEncodings(t *testing.T) {
	var st store
	st.history = 10
	st.init()
	k := kindFor("configmaps")
	st.mu.Lock()
	items := make([]corev1.ConfigMap, 0, 3)
	encoded := make([][]byte, 0, 3)
	for i := range 3 {
		e, err := st.create(k, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "c" + strconv.Itoa(i), Labels: map[string]string{"z": "1", "a": "2"}},
			Data:       map[string]string{"k": "v", "b": "w"}, BinaryData: map[string][]byte{"x": {0, 1, 2}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := protobufInfo.Serializer.Encode(e.obj, &want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.pb, want.Bytes()) || !bytes.HasPrefix(e.pb, []byte("k8s\x00")) {
			t.Fatalf("stored protobuf of %s differs from the serializer's", e.obj.GetName())
		}
		items = append(items, *e.obj.(*corev1.ConfigMap))
		encoded = append(encoded, e.pb)
	}
	st.mu.Unlock()

	for n := range len(items) + 1 {
		list := &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"},
			ListMeta: metav1.ListMeta{ResourceVersion: "42"}, Items: items[:n]}
		if got, want := protobufList("ConfigMapList", "42", encoded[:n]), mustProtobuf(list); !bytes.Equal(got, want) {
			t.Fatalf("list of %d: composed protobuf differs from the serializer's\n got %q\nwant %q", n, got, want)
		}
	}

	// Frames, one after another, as client-go decodes a protobuf watch.
	var stream bytes.Buffer
	stream.Write(protobufFrame(watch.Added, encoded[0]))
	stream.Write(formatProtobuf.frame(watch.Error, formatProtobuf.encode(apiStatus(apierrors.NewResourceExpired("too old")))))
	info := protobufInfo
	dec := restclientwatch.NewDecoder(
		streaming.NewDecoder(info.StreamSerializer.NewFrameReader(nopCloser{&stream}), info.StreamSerializer.Serializer),
		scheme.Codecs.UniversalDeserializer())
	typ, obj, err := dec.Decode()
	if err != nil || typ != watch.Added || obj.(*corev1.ConfigMap).Name != "c0" {
		t.Fatalf("first frame: %s %v %v", typ, obj, err)
	}
	typ, obj, err = dec.Decode()
	if err != nil || typ != watch.Error || obj.(*metav1.Status).Code != 410 {
		t.Fatalf("second frame: %s %v %v", typ, obj, err)
	}
}

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

// FuzzNegotiate: whatever a client sends as its Accept header, negotiate
// answers JSON or protobuf (never panics, never something else), and a
// header that names no protobuf media type at all gets JSON.
func FuzzNegotiate(f *testing.F) {
	for _, seed := range []string{
		"", "*/*", "application/json", "application/vnd.kubernetes.protobuf, */*",
		"application/vnd.kubernetes.protobuf;stream=watch", "application/json;as=Table;v=v1;g=meta.k8s.io",
		"application/vnd.kubernetes.protobuf;q=0.1, application/json", ";;;,,,q=", "application/json;q=NaN",
		"application/vnd.kubernetes.protobuf;q=1e309", "\x00\xff;q=-1", strings.Repeat("a/b;q=0.5,", 1000),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		got := negotiate(accept)
		if got != formatJSON && got != formatProtobuf {
			t.Fatalf("negotiate(%q) = %v, want JSON or protobuf", accept, got)
		}
		if got == formatProtobuf && !strings.Contains(strings.ToLower(accept), "protobuf") {
			t.Fatalf("negotiate(%q) chose protobuf, which the header does not name", accept)
		}
	})
}
