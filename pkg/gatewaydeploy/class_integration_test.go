package gatewaydeploy

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// TestIntegrationClassController: with the CRDs installed after it
// starts, the leader creates GatewayClass istio with Istio's controller
// name, and creates it again after it is deleted.
func TestIntegrationClassController(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	gc := gatewayclient.NewForConfigOrDie(env.Config)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	background(t, NewClassController(env.Client, gc, log, 100*time.Millisecond).Start)
	kubetest.InstallGatewayAPICRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config))

	created := func() (bool, string) {
		c, err := gc.GatewayV1().GatewayClasses().Get(ctx, gatewayapi.DefaultClassName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return string(c.Spec.ControllerName) == gatewayapi.ControllerName && c.Spec.Description != nil && *c.Spec.Description == ClassDescription,
			string(c.Spec.ControllerName)
	}
	poll(t, "GatewayClass istio", created)
	if err := gc.GatewayV1().GatewayClasses().Delete(ctx, gatewayapi.DefaultClassName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "GatewayClass istio again after its deletion", created)
}
