// Package server serves the webhooks over HTTPS and keeps the API
// server's trust in them.
//
// In: the /inject and /validate handlers (packages inject and validate), a
// TLS configuration whose certificate comes from the CA, and the CA's root.
//
// Out: an HTTPS server on :15017 (Server), and, on the leader only, the
// caBundle of the MutatingWebhookConfiguration istio-sidecar-injector[-rev]
// and the ValidatingWebhookConfiguration istio-validator[-rev]-<namespace>
// (Istio's names) kept equal to the root (CABundlePatcher), and with
// PatcherOptions.TagWebhooks the injector webhooks of every
// MutatingWebhookConfiguration labelled with the revision (its revision
// tags), as istiod keeps them. Nothing else in those configurations is
// ever changed.
//
// Wiring, in cmd/discovery (every replica unless noted):
//
//	injector, _ := inject.New(inject.Options{Namespace: ns, Revision: rev, ConfigMap: flag}, kubeClient, reg, log)
//	validator, _ := validate.New(reg, log)
//	srv, _ := server.New(serverOpts, ca.ServerTLSConfig(), injector.Handler(), validator.Handler(), log)
//	injector.RegisterDebug(debugMux)                  // /debug/inject on :15014
//	run injector.Start(ctx) and srv.Start(ctx)        // neither needs the leader
//	patcher, _ := server.NewCABundlePatcher(server.PatcherOptions{Namespace: ns, Revision: rev}, kubeClient,
//		func() ([]byte, <-chan struct{}) { b, ch := ca.Authority().Watch(); return b.RootPEM(), ch }, reg, log)
//	leader.Add("webhook-cabundle", true, patcher.Start) // leader only
package server
