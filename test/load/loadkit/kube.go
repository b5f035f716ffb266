package loadkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

// kubeSink writes the world into a Kubernetes API server instead of a
// directory: each document of a "file" is applied (server-side apply) or
// deleted.
type kubeSink struct {
	dyn dynamic.Interface
}

var gvrByKind = map[string]schema.GroupVersionResource{
	"Namespace":      {Version: "v1", Resource: "namespaces"},
	"Service":        {Version: "v1", Resource: "services"},
	"EndpointSlice":  {Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
	"VirtualService": {Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"},
}

// newKubeSink connects to the API server of kubeconfig and makes sure the
// VirtualService CRD is there.
func newKubeSink(ctx context.Context, kubeconfig string) (*kubeSink, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000 // the world is written once, fast
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ext, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	crd := kubetest.CRD(model.KindVirtualService)
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("install the VirtualService CRD: %w", err)
	}
	if err := kubetest.WaitEstablished(ctx, ext, crd.Name, time.Minute); err != nil {
		return nil, err
	}
	return &kubeSink{dyn: dyn}, nil
}

func (k *kubeSink) objects(content string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(content, "\n---\n") {
		doc = strings.TrimPrefix(strings.TrimSpace(doc), "---")
		if strings.TrimSpace(doc) == "" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, err
		}
		if _, ok := gvrByKind[u.GetKind()]; !ok {
			return nil, fmt.Errorf("kind %q is not written to the API server", u.GetKind())
		}
		out = append(out, u)
	}
	return out, nil
}

func (k *kubeSink) resource(u *unstructured.Unstructured) dynamic.ResourceInterface {
	r := k.dyn.Resource(gvrByKind[u.GetKind()])
	if u.GetNamespace() == "" {
		return r
	}
	return r.Namespace(u.GetNamespace())
}

// apply applies every document of content.
func (k *kubeSink) apply(ctx context.Context, content string) error {
	objs, err := k.objects(content)
	if err != nil {
		return err
	}
	for _, u := range objs {
		if _, err := k.resource(u).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "discovery-load", Force: true}); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	return nil
}

// delete deletes every document of content.
func (k *kubeSink) delete(ctx context.Context, content string) error {
	objs, err := k.objects(content)
	if err != nil {
		return err
	}
	var errs []error
	for _, u := range objs {
		if err := k.resource(u).Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
