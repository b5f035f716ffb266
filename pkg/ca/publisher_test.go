package ca

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRootPublisher(t *testing.T) {
	ns := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	client := fake.NewClientset(ns("app"), ns("web"), ns("kube-system"))
	c, err := New(t.Context(), testOptions(), client, newLogger(&logBuffer{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := c.NewRootPublisher(namespaceInformer(t, client))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, pub.Start)

	published := func(ns, want string) func() bool {
		return func() bool {
			cm, err := client.CoreV1().ConfigMaps(ns).Get(t.Context(), RootConfigMap, metav1.GetOptions{})
			return err == nil && cm.Data[RootConfigMapKey] == want
		}
	}
	root := string(c.RootPEM())
	waitFor(t, 10*time.Second, "the root in app", published("app", root))
	waitFor(t, 10*time.Second, "the root in web", published("web", root))

	if _, err := client.CoreV1().Namespaces().Create(t.Context(), ns("late"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the root in a namespace created later", published("late", root))

	cm, _ := client.CoreV1().ConfigMaps("app").Get(t.Context(), RootConfigMap, metav1.GetOptions{})
	cm.Data[RootConfigMapKey] = "tampered"
	if _, err := client.CoreV1().ConfigMaps("app").Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the edited ConfigMap restored", published("app", root))

	next, err := NewSelfSignedBundle("cluster.local", KeyTypeECDSA, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c.authority.Set(next)
	for _, n := range []string{"app", "web", "late"} {
		waitFor(t, 10*time.Second, "the new root in "+n, published(n, string(next.RootPEM())))
	}
	if _, err := client.CoreV1().ConfigMaps("kube-system").Get(t.Context(), RootConfigMap, metav1.GetOptions{}); err == nil {
		t.Fatal("kube-system got the root without --ca-publish-system-namespaces")
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := map[string]struct {
		edit    func(*Options)
		wantErr bool
	}{
		"accepts the defaults":                              {edit: func(*Options) {}},
		"accepts a maximum TTL of 90 days":                  {edit: func(o *Options) { o.MaxCertTTL = MaxCertTTLLimit }},
		"refuses a maximum TTL above 90 days":               {edit: func(o *Options) { o.MaxCertTTL = MaxCertTTLLimit + time.Hour }, wantErr: true},
		"refuses a default TTL above the maximum":           {edit: func(o *Options) { o.DefaultCertTTL = 48 * time.Hour }, wantErr: true},
		"refuses an unknown key type":                       {edit: func(o *Options) { o.KeyType = "DSA" }, wantErr: true},
		"refuses an impersonator that is not ns/sa":         {edit: func(o *Options) { o.Impersonators = []string{"ztunnel"} }, wantErr: true},
		"refuses a token file outside file mode":            {edit: func(o *Options) { o.TokenFile = "/tokens" }, wantErr: true},
		"refuses a trust domain with a slash":               {edit: func(o *Options) { o.TrustDomain = "a/b" }, wantErr: true},
		"refuses a rate limit without a burst":              {edit: func(o *Options) { o.CSRBurst = 0 }, wantErr: true},
		"refuses an empty audience":                         {edit: func(o *Options) { o.TokenAudience = "" }, wantErr: true},
		"refuses a per-identity rate limit without a burst": {edit: func(o *Options) { o.CSRBurstPerIdentity = 0 }, wantErr: true},
		"accepts no per-identity limit and no burst":        {edit: func(o *Options) { o.CSRRateLimitPerIdentity, o.CSRBurstPerIdentity = 0, 0 }},
		"refuses a negative failure rate limit":             {edit: func(o *Options) { o.AuthnFailureRateLimit = -1 }, wantErr: true},
		"refuses a per-peer failure limit without a burst":  {edit: func(o *Options) { o.AuthnFailureBurstPerPeer = 0 }, wantErr: true},
		"accepts no per-peer failure limit":                 {edit: func(o *Options) { o.AuthnFailureRateLimitPerPeer = 0 }},
		"refuses a negative negative-cache TTL":             {edit: func(o *Options) { o.TokenNegativeCacheTTL = -time.Second }, wantErr: true},
		"refuses a refusal log burst without an interval":   {edit: func(o *Options) { o.RefusalLogInterval = 0 }, wantErr: true},
		"accepts logging every refusal":                     {edit: func(o *Options) { o.RefusalLogBurst, o.RefusalLogInterval = 0, 0 }},
		"refuses a serving certificate shorter than 10 min": {edit: func(o *Options) { o.ServingCertTTL = time.Minute }, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			tc.edit(&o)
			if err := o.Validate(); (err != nil) != tc.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
