package mesh

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// validate applies the checks of istiod's agent.ValidateMeshConfig that
// decide whether a MeshConfig is accepted: ports, durations, the proxies'
// default configuration, locality load balancing, trust domains. It
// returns Istio's warnings. Checks Istio only warns about (extension
// providers) are warnings here too. Not reproduced: the TLS defaults'
// ECDH curve names and the meshMTLS settings (discovery does not apply
// them, and reports them as ignored).
func validate(mc *meshv1alpha1.MeshConfig) ([]string, error) {
	var errs []error
	add := func(prefix string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", prefix, err))
		}
	}
	add("invalid proxy listen port", checkPort(int(mc.GetProxyListenPort())))
	add("invalid connect timeout", checkConnectTimeout(mc.GetConnectTimeout()))
	add("invalid protocol detection timeout", checkProtocolDetectionTimeout(mc.GetProtocolDetectionTimeout()))
	if mc.GetDefaultConfig() == nil {
		errs = append(errs, errors.New("missing default config"))
	} else {
		errs = append(errs, checkProxyConfig(mc.GetDefaultConfig())...)
	}
	add("localityLbSetting", checkLocalityLB(mc.GetLocalityLbSetting()))
	for i, s := range mc.GetServiceSettings() {
		for _, h := range s.GetHosts() {
			add(fmt.Sprintf("serviceSettings[%d], host `%s`", i, h), checkWildcardDomain(h))
		}
	}
	add("trustDomain", checkTrustDomain(mc.GetTrustDomain()))
	for i, d := range mc.GetTrustDomainAliases() {
		add(fmt.Sprintf("trustDomainAliases[%d], domain `%s`", i, d), checkTrustDomain(d))
	}
	var warnings []string
	seen := map[string]bool{}
	for _, p := range mc.GetExtensionProviders() {
		switch {
		case p.GetName() == "":
			warnings = append(warnings, "extension provider without a name (ignored where it is named)")
		case seen[p.GetName()]:
			warnings = append(warnings, fmt.Sprintf("extension provider %q is defined twice: the first one is used", p.GetName()))
		}
		seen[p.GetName()] = true
	}
	return warnings, errors.Join(errs...)
}

func checkPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port number %d must be in the range 1..65535", port)
	}
	return nil
}

func checkDuration(d *durationpb.Duration) error {
	dur := d.AsDuration()
	if dur < time.Millisecond {
		return errors.New("duration must be greater than 1ms")
	}
	if dur%time.Millisecond != 0 {
		return errors.New("only durations to ms precision are supported")
	}
	return nil
}

func checkConnectTimeout(d *durationpb.Duration) error {
	if err := checkDuration(d); err != nil {
		return err
	}
	if dur := d.AsDuration(); dur < time.Millisecond || dur > time.Hour {
		return fmt.Errorf("time %v must be >1ms and <1h0m0s", dur)
	}
	return nil
}

func checkProtocolDetectionTimeout(d *durationpb.Duration) error {
	dur := d.AsDuration()
	if dur != 0 && dur%time.Millisecond != 0 {
		return errors.New("only durations to ms precision are supported")
	}
	return nil
}

// checkProxyConfig is istiod's ValidateMeshConfigProxyConfig for the
// fields it refuses on.
func checkProxyConfig(pc *meshv1alpha1.ProxyConfig) []error {
	var errs []error
	add := func(prefix string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("defaultConfig: %s%w", prefix, err))
		}
	}
	if pc.GetConfigPath() == "" {
		add("", errors.New("config path must be set"))
	}
	if pc.GetBinaryPath() == "" {
		add("", errors.New("binary path must be set"))
	}
	switch n := pc.GetClusterName().(type) {
	case *meshv1alpha1.ProxyConfig_ServiceCluster:
		if n.ServiceCluster == "" {
			add("", errors.New("service cluster must be specified"))
		}
	case *meshv1alpha1.ProxyConfig_TracingServiceName_:
	default:
		add("", errors.New("oneof service cluster or tracing service name must be specified"))
	}
	if err := checkDuration(pc.GetDrainDuration()); err != nil {
		add("invalid drain duration: ", err)
	} else if pc.GetDrainDuration().AsDuration()%time.Second != 0 {
		add("", errors.New("drain time only supports durations to seconds precision"))
	}
	if pc.GetDiscoveryAddress() == "" {
		add("", errors.New("discovery address must be set to the proxy discovery service"))
	} else {
		add("invalid discovery address: ", checkProxyAddress(pc.GetDiscoveryAddress()))
	}
	if z := pc.GetTracing().GetZipkin(); z != nil {
		add("invalid zipkin config: ", checkProxyAddress(z.GetAddress()))
	}
	if d := pc.GetTracing().GetDatadog(); d != nil {
		add("invalid datadog config: ", checkProxyAddress(d.GetAddress()))
	}
	if a := pc.GetStatsdUdpAddress(); a != "" {
		add(fmt.Sprintf("invalid statsd udp address %q: ", a), checkProxyAddress(a))
	}
	if s := pc.GetEnvoyMetricsService(); s != nil && s.GetAddress() != "" {
		add("invalid envoy metrics service address: ", checkProxyAddress(s.GetAddress()))
	}
	if s := pc.GetEnvoyAccessLogService(); s != nil && s.GetAddress() != "" {
		add("invalid envoy access log service address: ", checkProxyAddress(s.GetAddress()))
	}
	add("invalid proxy admin port: ", checkPort(int(pc.GetProxyAdminPort())))
	add("invalid status port: ", checkPort(int(pc.GetStatusPort())))
	if p := pc.GetControlPlaneAuthPolicy(); p != meshv1alpha1.AuthenticationPolicy_NONE && p != meshv1alpha1.AuthenticationPolicy_MUTUAL_TLS {
		add("invalid authentication policy: ", fmt.Errorf("unrecognized control plane auth policy %q", p))
	}
	return errs
}

// checkProxyAddress accepts HOST:PORT with a valid port and an FQDN or IP.
func checkProxyAddress(addr string) error {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("unable to split %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return fmt.Errorf("port (%s) is not a number: %w", p, err)
	}
	if err := checkPort(port); err != nil {
		return err
	}
	if net.ParseIP(host) == nil && checkFQDN(host) != nil {
		return fmt.Errorf("%q is not a valid hostname or an IP address", host)
	}
	return nil
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// checkFQDN accepts names of DNS-1123 labels (a single label too, as
// Istio's ValidateFQDN does after its length checks).
func checkFQDN(name string) error {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > 255 {
		return fmt.Errorf("domain name %q invalid", name)
	}
	for _, l := range strings.Split(name, ".") {
		if len(l) > 63 || !dnsLabel.MatchString(strings.ToLower(l)) {
			return fmt.Errorf("domain name %q invalid", name)
		}
	}
	return nil
}

func checkWildcardDomain(d string) error {
	if rest, ok := strings.CutPrefix(d, "*"); ok {
		if rest == "" {
			return nil
		}
		if !strings.HasPrefix(rest, ".") {
			return fmt.Errorf("partial wildcard %q not allowed", d)
		}
		return checkFQDN(rest[1:])
	}
	return checkFQDN(d)
}

// checkTrustDomain is Istio's ValidateTrustDomain: DNS-1123 labels, the
// last of which may be empty (a trailing dot).
func checkTrustDomain(d string) error {
	if d == "" {
		return errors.New("empty domain name not allowed")
	}
	parts := strings.Split(d, ".")
	for i, l := range parts {
		if i == len(parts)-1 && l == "" {
			return nil
		}
		if len(l) > 63 || !dnsLabel.MatchString(l) {
			return fmt.Errorf("trust domain name %q invalid", d)
		}
	}
	return nil
}

// checkLocalityLB is Istio's ValidateLocalityLbSetting for the mesh:
// distribute and failover exclude each other, weights are 1-100 and add
// up to 100, localities are region[/zone[/subzone]] with at most one
// trailing "*".
func checkLocalityLB(lb *networking.LocalityLoadBalancerSetting) error {
	if lb == nil {
		return nil
	}
	if len(lb.GetDistribute()) > 0 && len(lb.GetFailover()) > 0 {
		return errors.New("can not simultaneously specify 'distribute' and 'failover'")
	}
	for _, d := range lb.GetDistribute() {
		var total uint32
		for loc, w := range d.GetTo() {
			if w == 0 || w > 100 {
				return errors.New("locality weight must be in range [1, 100]")
			}
			if err := checkLocality(loc); err != nil {
				return err
			}
			total += w
		}
		if total != 100 {
			return fmt.Errorf("total locality weight %v != 100", total)
		}
		if err := checkLocality(d.GetFrom()); err != nil {
			return err
		}
	}
	for _, f := range lb.GetFailover() {
		if f.GetFrom() == f.GetTo() {
			return errors.New("locality lb failover settings must specify different regions")
		}
		if strings.Contains(f.GetFrom(), "/") || strings.Contains(f.GetTo(), "/") {
			return errors.New("locality lb failover only specify region")
		}
		if strings.Contains(f.GetTo(), "*") || strings.Contains(f.GetFrom(), "*") {
			return errors.New("locality lb failover region should not contain '*' wildcard")
		}
	}
	return nil
}

func checkLocality(loc string) error {
	if n := strings.Count(loc, "*"); n > 1 || (n == 1 && !strings.HasSuffix(loc, "*")) {
		return fmt.Errorf("locality %s wildcard '*' number can not exceed 1 and must be in the end", loc)
	}
	parts := strings.Split(loc, "/")
	if len(parts) > 3 {
		return fmt.Errorf("locality %s must not contain more than region/zone/subzone", loc)
	}
	for _, p := range parts {
		if p == "" {
			return fmt.Errorf("locality %s must not contain empty region/zone/subzone info", loc)
		}
	}
	return nil
}
