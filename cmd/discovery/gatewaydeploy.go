package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshplane/discovery/pkg/gatewaydeploy"
	"github.com/meshplane/discovery/pkg/webhook/inject"
)

var _ gatewaydeploy.PodRenderer = (*inject.Injector)(nil)

// gatewayDeployment registers the Gateway API's automated deployment on
// the leader: its pods are rendered by the injector (after it has read its
// configuration), and what it sees of each Gateway's Service and
// Deployment goes into the status the Auditor writes.
func gatewayDeployment(o *serveOptions, cfg *rest.Config, client kubernetes.Interface, injector *inject.Injector, p *parts, log *slog.Logger, reg prometheus.Registerer) error {
	gwc, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if o.gwDeploy.Class {
		classes := gatewaydeploy.NewClassController(client, gwc, log, o.gwDeploy.CRDPoll)
		p.runner.Add("gateway class", true, classes.Start)
	}
	if !o.gwDeploy.Enabled {
		log.Info("Gateway API automated deployment is off (--gateway-deployment-controller=false)")
		return nil
	}
	m, err := gatewaydeploy.NewMetrics(reg)
	if err != nil {
		return err
	}
	ctrl, err := gatewaydeploy.New(o.gwDeploy, client, gwc, injector, p.auditor.GatewayInfraChanged, log, m)
	if err != nil {
		return err
	}
	p.auditor.SetGatewayInfra(ctrl)
	p.runner.Add("gateway deployment", true, func(ctx context.Context) error {
		// Rendering with the built-in injection values before the
		// ConfigMap is read would roll every gateway out twice.
		if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
			return injector.HasSynced(), nil
		}); err != nil {
			return nil
		}
		return ctrl.Start(ctx)
	})
	return nil
}
