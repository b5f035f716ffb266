package gatewaydeploy

import (
	"context"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	gw "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// ClassDescription is the description istiod gives its default class.
const ClassDescription = "The default Istio GatewayClass"

// ClassController creates Istio's GatewayClass `istio` (controllerName
// istio.io/gateway-controller) when it does not exist, and again when it
// is deleted, as istiod's class controller does. An existing class of that
// name is left as it is, whoever made it. Chosen differently from
// istiod: `istio-remote` (istio.io/unmanaged-gateway) is not created, as
// discovery does not implement that class. Run Start on the leader.
type ClassController struct {
	kube kubernetes.Interface
	gwc  gatewayclient.Interface
	log  *slog.Logger
	poll time.Duration
}

// NewClassController returns a ClassController that looks for the Gateway
// API CRDs every poll while they are not installed.
func NewClassController(kube kubernetes.Interface, gwc gatewayclient.Interface, log *slog.Logger, poll time.Duration) *ClassController {
	return &ClassController{kube: kube, gwc: gwc, log: log.With("component", "gateway-class"), poll: poll}
}

// Start waits for the CRDs, then keeps the class until ctx ends.
func (c *ClassController) Start(ctx context.Context) error {
	crds := (&Controller{kube: c.kube}).crdsInstalled
	if err := wait.PollUntilContextCancel(ctx, c.poll, true, crds); err != nil {
		return nil // ctx ended
	}
	f := gatewayinformers.NewSharedInformerFactoryWithOptions(c.gwc, 0, gatewayinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", gatewayapi.DefaultClassName).String()
	}))
	inf := f.Gateway().V1().GatewayClasses().Informer()
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { poke() }}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	poke()
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		}
		if err := c.ensure(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("could not create the GatewayClass; retrying", "class", gatewayapi.DefaultClassName, "err", err, "retry", backoff)
			time.AfterFunc(backoff, poke)
			backoff = min(2*backoff, 5*time.Minute)
			continue
		}
		backoff = time.Second
	}
}

// ensure creates the class unless it exists.
func (c *ClassController) ensure(ctx context.Context) error {
	_, err := c.gwc.GatewayV1().GatewayClasses().Get(ctx, gatewayapi.DefaultClassName, metav1.GetOptions{})
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	desc := ClassDescription
	_, err = c.gwc.GatewayV1().GatewayClasses().Create(ctx, &gw.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayapi.DefaultClassName},
		Spec:       gw.GatewayClassSpec{ControllerName: gatewayapi.ControllerName, Description: &desc},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err == nil {
		c.log.Info("created the GatewayClass", "class", gatewayapi.DefaultClassName, "controller", gatewayapi.ControllerName)
	}
	return err
}
