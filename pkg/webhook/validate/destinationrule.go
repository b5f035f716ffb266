package validate

import (
	"math"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

func checkDestinationRule(m proto.Message, md *meta, p *problems) {
	dr := m.(*networking.DestinationRule)
	if dr.Host == "" {
		p.add("spec.host", "a DestinationRule must have a host")
	} else {
		checkWildcardDomain(p, "spec.host", dr.Host)
	}
	checkTrafficPolicy(p, "spec.trafficPolicy", md.namespace(), dr.TrafficPolicy)
	seen := map[string]bool{}
	for i, s := range dr.Subsets {
		path := at("spec.subsets", i)
		if s == nil {
			p.add(path, "subset may not be null")
			continue
		}
		if seen[s.Name] {
			p.add(path+".name", "duplicate subset names: %s", s.Name)
		}
		seen[s.Name] = true
		switch {
		case s.Name == "":
			p.add(path+".name", "subset name cannot be empty")
		case !isDNS1123Label(s.Name):
			p.add(path+".name", "subset name is invalid: %s", s.Name)
		}
		checkLabels(p, path+".labels", s.Labels)
		p.errorsOnly(func(q *problems) { checkTrafficPolicy(q, path+".trafficPolicy", md.namespace(), s.TrafficPolicy) })
	}
	sel := dr.GetWorkloadSelector()
	checkExportTo(p, md.namespace(), dr.ExportTo, false, sel != nil)
	if sel != nil {
		checkSelectorLabels(p, "spec.workloadSelector.matchLabels", sel.MatchLabels)
		if len(sel.MatchLabels) == 0 {
			p.warn("spec.workloadSelector", "workload selector specified without labels")
		}
	}
}

func checkTrafficPolicy(p *problems, path, namespace string, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	if tp.OutlierDetection == nil && tp.ConnectionPool == nil && tp.LoadBalancer == nil && tp.Tls == nil &&
		tp.PortLevelSettings == nil && tp.Tunnel == nil && tp.ProxyProtocol == nil && tp.RetryBudget == nil {
		p.add(path, "traffic policy must have at least one field")
		return
	}
	if tp.Tunnel != nil && tp.ProxyProtocol != nil {
		p.add(path, "tunnel and proxyProtocol must not be set together")
		return
	}
	checkOutlier(p, path+".outlierDetection", tp.OutlierDetection)
	checkConnectionPool(p, path+".connectionPool", tp.ConnectionPool)
	checkLoadBalancer(p, path+".loadBalancer", tp.LoadBalancer)
	checkClientTLS(p, path+".tls", namespace, tp.Tls)
	if len(tp.PortLevelSettings) > 4096 {
		p.add(path+".portLevelSettings", "at most 4096 port-level settings")
	}
	for i, pl := range tp.PortLevelSettings {
		pp := at(path+".portLevelSettings", i)
		if pl == nil {
			p.add(pp, "traffic policy may not be null")
			continue
		}
		if pl.Port == nil {
			p.add(pp+".port", "portTrafficPolicy must have valid port")
		}
		if pl.OutlierDetection == nil && pl.ConnectionPool == nil && pl.LoadBalancer == nil && pl.Tls == nil {
			p.add(pp, "port traffic policy must have at least one field")
			continue
		}
		p.errorsOnly(func(q *problems) {
			checkOutlier(q, pp+".outlierDetection", pl.OutlierDetection)
			checkConnectionPool(q, pp+".connectionPool", pl.ConnectionPool)
			checkLoadBalancer(q, pp+".loadBalancer", pl.LoadBalancer)
			checkClientTLS(q, pp+".tls", namespace, pl.Tls)
		})
	}
	if t := tp.Tunnel; t != nil {
		if t.Protocol != "" && t.Protocol != "CONNECT" && t.Protocol != "POST" {
			p.add(path+".tunnel.protocol", `tunnel protocol must be "CONNECT" or "POST"`)
		}
		if fqdnProblem(t.TargetHost) != "" && !isIP(t.TargetHost) {
			p.add(path+".tunnel.targetHost", "tunnel target host must be valid FQDN or IP address")
		}
		checkPort(p, path+".tunnel.targetPort", t.TargetPort)
	}
	if pp := tp.ProxyProtocol; pp != nil && pp.Version != 0 && pp.Version != 1 {
		p.add(path+".proxyProtocol.version", "proxy protocol version is invalid: %d", pp.Version)
	}
	if rb := tp.RetryBudget; rb != nil && rb.Percent != nil && (rb.Percent.Value < 0 || rb.Percent.Value > 100) {
		p.add(path+".retryBudget.percent", "%v is not in 0..100", rb.Percent.Value)
	}
}

func checkOutlier(p *problems, path string, o *networking.OutlierDetection) {
	if o == nil {
		return
	}
	checkDuration(p, path+".baseEjectionTime", o.BaseEjectionTime)
	checkDuration(p, path+".interval", o.Interval)
	if o.ConsecutiveErrors != 0 { //nolint:staticcheck // deprecated: Istio warns
		p.warn(path+".consecutiveErrors", "outlier detection consecutive errors is deprecated, use consecutiveGatewayErrors or consecutive5xxErrors instead")
	}
	if !o.SplitExternalLocalOriginErrors && o.ConsecutiveLocalOriginFailures.GetValue() > 0 {
		p.add(path+".consecutiveLocalOriginFailures", "outlier detection consecutive local origin failures is specified, but split external local origin errors is set to false")
	}
	for _, f := range []struct {
		name string
		v    int32
	}{{"maxEjectionPercent", o.MaxEjectionPercent}, {"minHealthPercent", o.MinHealthPercent}} {
		if f.v < 0 || f.v > 100 {
			p.add(path+"."+f.name, "percentage %v is not in range 0..100", f.v)
		}
	}
	for _, c := range o.OutlierDetectionHttpErrorCodes {
		if c < 100 || c > 599 {
			p.add(path+".outlierDetectionHttpErrorCodes", "%d is not an HTTP status (100-599)", c)
		}
	}
}

func checkConnectionPool(p *problems, path string, c *networking.ConnectionPoolSettings) {
	if c == nil {
		return
	}
	if c.Http == nil && c.Tcp == nil {
		p.add(path, "connection pool must have at least one field")
		return
	}
	if h := c.Http; h != nil {
		for _, f := range []struct {
			name string
			v    int32
		}{
			{"http1MaxPendingRequests", h.Http1MaxPendingRequests},
			{"http2MaxRequests", h.Http2MaxRequests},
			{"maxRequestsPerConnection", h.MaxRequestsPerConnection},
			{"maxRetries", h.MaxRetries},
			{"maxConcurrentStreams", h.MaxConcurrentStreams},
		} {
			if f.v < 0 {
				p.add(path+".http."+f.name, "must be non-negative")
			}
		}
		checkDuration(p, path+".http.idleTimeout", h.IdleTimeout)
		if h.H2UpgradePolicy == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE && h.UseClientProtocol {
			p.add(path+".http.useClientProtocol", "use client protocol must not be true when H2UpgradePolicy is UPGRADE")
		}
		if ka := h.Http2KeepAlive; ka != nil {
			if ka.Interval == nil || ka.Timeout == nil {
				p.add(path+".http.http2KeepAlive", "http2 keepalive interval and timeout are required")
			}
			checkDuration(p, path+".http.http2KeepAlive.interval", ka.Interval)
			checkDuration(p, path+".http.http2KeepAlive.timeout", ka.Timeout)
		}
	}
	if t := c.Tcp; t != nil {
		if t.MaxConnections < 0 {
			p.add(path+".tcp.maxConnections", "must be non-negative")
		}
		checkDuration(p, path+".tcp.connectTimeout", t.ConnectTimeout)
		checkDuration(p, path+".tcp.maxConnectionDuration", t.MaxConnectionDuration)
		if t.IdleTimeout != nil && t.IdleTimeout.AsDuration().Milliseconds() != 0 {
			checkDuration(p, path+".tcp.idleTimeout", t.IdleTimeout) // 0s turns it off
		}
		if ka := t.TcpKeepalive; ka != nil {
			checkDuration(p, path+".tcp.tcpKeepalive.time", ka.Time)
			checkDuration(p, path+".tcp.tcpKeepalive.interval", ka.Interval)
		}
	}
}

func checkLoadBalancer(p *problems, path string, lb *networking.LoadBalancerSettings) {
	if lb == nil {
		return
	}
	if ch := lb.GetConsistentHash(); ch != nil {
		checkConsistentHash(p, path+".consistentHash", ch)
	}
	if lb.LocalityLbSetting != nil && lb.ZoneAwareLbSetting != nil {
		p.add(path, "only one of localityLbSetting and zoneAwareLbSetting can be set")
	}
	if z := lb.ZoneAwareLbSetting; z != nil && z.MinClusterSize != nil && z.MinClusterSize.Value < 1 {
		p.add(path+".zoneAwareLbSetting.minClusterSize", "must be at least 1")
	}
	if w := lb.Warmup; w != nil {
		if w.Duration == nil {
			p.add(path+".warmup.duration", "duration is required")
		}
		checkDuration(p, path+".warmup.duration", w.Duration)
		if w.MinimumPercent != nil && (w.MinimumPercent.Value < 0 || w.MinimumPercent.Value > 100) {
			p.add(path+".warmup.minimumPercent", "minimumPercent value should be in 0..100")
		}
		if w.Aggression != nil && w.Aggression.Value <= 0 {
			p.add(path+".warmup.aggression", "aggression should be greater than 0")
		}
	}
	checkDuration(p, path+".warmupDurationSecs", lb.WarmupDurationSecs)
}

func checkConsistentHash(p *problems, path string, ch *networking.LoadBalancerSettings_ConsistentHashLB) {
	if c := ch.GetHttpCookie(); c != nil {
		if c.Name == "" {
			p.add(path+".httpCookie.name", "name required for HttpCookie")
		}
		names := map[string]bool{}
		for _, a := range c.Attributes {
			switch {
			case a.GetName() == "":
				p.add(path+".httpCookie.attributes", "cookie attribute name cannot be empty")
			case names[a.Name]:
				p.add(path+".httpCookie.attributes", "duplicate cookie attribute name: %s", a.Name)
			}
			names[a.GetName()] = true
		}
	}
	if ch.MinimumRingSize != 0 { //nolint:staticcheck // deprecated: Istio warns
		p.warn(path+".minimumRingSize", "consistent hash MinimumRingSize is deprecated, use ConsistentHashLB's RingHash configuration instead")
		if ch.GetHashAlgorithm() != nil {
			p.add(path, "only one of MinimumRingSize or Maglev/Ringhash can be specified")
		}
	}
	if ml := ch.GetMaglev(); ml != nil {
		switch {
		case ml.TableSize == 0:
			p.add(path+".maglev.tableSize", "tableSize must be set for maglev")
		case ml.TableSize >= 5000011:
			p.add(path+".maglev.tableSize", "tableSize must be less than 5000011 for maglev")
		case !prime(ml.TableSize):
			p.add(path+".maglev.tableSize", "tableSize must be a prime number for maglev")
		}
	}
}

// prime is Envoy's test of a Maglev table size.
func prime(x uint64) bool {
	if x < 4 {
		return x != 0
	}
	if x%2 == 0 {
		return false
	}
	for f := uint64(3); f <= uint64(math.Sqrt(float64(x))); f += 2 {
		if x%f == 0 {
			return false
		}
	}
	return true
}

// checkClientTLS applies Istio's rules for an upstream TLS setting.
func checkClientTLS(p *problems, path, namespace string, t *networking.ClientTLSSettings) {
	if t == nil {
		return
	}
	if rest, ok := strings.CutPrefix(t.CredentialName, "configmap://"); ok {
		if ns, _, found := strings.Cut(rest, "/"); found && ns != namespace {
			p.add(path+".credentialName", "invalid configmap:// credentialName: namespace must match the configuration namespace %q", namespace)
		}
	}
	if t.GetInsecureSkipVerify().GetValue() {
		if t.Mode == networking.ClientTLSSettings_SIMPLE && (t.CaCertificates != "" || t.CredentialName != "" || t.SubjectAltNames != nil) {
			p.add(path, "cannot specify CaCertificates or CredentialName or SubjectAltNames when InsecureSkipVerify is set true")
		}
		if t.Mode == networking.ClientTLSSettings_MUTUAL && (t.CaCertificates != "" || t.SubjectAltNames != nil) {
			p.add(path, "cannot specify CaCertificates or SubjectAltNames when InsecureSkipVerify is set true")
		}
	}
	if (t.Mode == networking.ClientTLSSettings_SIMPLE || t.Mode == networking.ClientTLSSettings_MUTUAL) && t.CredentialName != "" {
		if t.ClientCertificate != "" || t.CaCertificates != "" || t.PrivateKey != "" || t.CaCrl != "" {
			p.add(path, "cannot specify client certificates or CA certificate or CA CRL If credentialName is set")
		}
		return
	}
	if t.Mode == networking.ClientTLSSettings_MUTUAL {
		if t.ClientCertificate == "" {
			p.add(path+".clientCertificate", "client certificate required for mutual tls")
		}
		if t.PrivateKey == "" {
			p.add(path+".privateKey", "private key required for mutual tls")
		}
	}
}
