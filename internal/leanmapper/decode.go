package leanmapper

import (
	"crypto/sha256"
	"encoding/json"
	"runtime"
	"sync"
	"weak"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// resourceList is the compact form of one discovery document.
type resourceList struct{ resources []resource }

// decoded holds, by digest, the compact form of every discovery document
// some Mapper still uses. Clusters of one Kubernetes version serve the
// same documents, so a fleet decodes and keeps each of them once, not once
// per cluster; an entry goes when no Mapper holds it any more.
var decoded = struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]weak.Pointer[resourceList]
}{m: map[[sha256.Size]byte]weak.Pointer[resourceList]{}}

// decode returns the compact form of body, a JSON APIResourceList: the one
// already decoded from the same bytes if a Mapper still holds it.
func decode(body []byte) (*resourceList, error) {
	sum := sha256.Sum256(body)
	if l := lookupDecoded(sum); l != nil {
		return l, nil
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	l := &resourceList{resources: compact(&list)}
	decoded.mu.Lock()
	defer decoded.mu.Unlock()
	if prev := decoded.m[sum].Value(); prev != nil {
		return prev, nil // decoded meanwhile by another Mapper
	}
	decoded.m[sum] = weak.Make(l)
	runtime.AddCleanup(l, forgetDecoded, sum)
	return l, nil
}

func lookupDecoded(sum [sha256.Size]byte) *resourceList {
	decoded.mu.Lock()
	defer decoded.mu.Unlock()
	return decoded.m[sum].Value()
}

// forgetDecoded drops the entry of a list no Mapper holds any more, unless
// the same document was decoded again since.
func forgetDecoded(sum [sha256.Size]byte) {
	decoded.mu.Lock()
	defer decoded.mu.Unlock()
	if decoded.m[sum].Value() == nil {
		delete(decoded.m, sum)
	}
}
