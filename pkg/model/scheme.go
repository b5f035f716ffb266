package model

import (
	istioscheme "istio.io/client-go/pkg/clientset/versioned/scheme"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	gatewayscheme "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/scheme"
)

// istioScheme knows the Go types of Kubernetes' and Istio's APIs.
var istioScheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // static registration; fails only on a programming error
	}
	if err := istioscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := gatewayscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Scheme returns a runtime.Scheme with the Go types of every kind discovery
// reads (Kubernetes' core and discovery APIs, Istio's networking and
// security APIs in all served versions, the Gateway API's). Callers must not register more
// types in it.
func Scheme() *runtime.Scheme { return istioScheme }
