package gatewaydeploy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the controller's metrics.
type Metrics struct {
	reconciles *prometheus.CounterVec
}

// NewMetrics registers the controller's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "discovery_gateway_deployment_reconciles_total",
		Help: "Reconciliations of a Gateway API Gateway's Deployment, Service and ServiceAccount, by result (ok, failed).",
	}, []string{"result"})}
	if err := reg.Register(m.reconciles); err != nil {
		return nil, fmt.Errorf("gateway deployment metrics: %w", err)
	}
	return m, nil
}
