package validate

import (
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"
)

func checkDestinationRule(m proto.Message, p *problems) {
	dr := m.(*networking.DestinationRule)
	if dr.Host == "" {
		p.add("spec.host", "a DestinationRule must have a host")
	} else {
		checkHost(p, "spec.host", dr.Host)
	}
	checkTrafficPolicy(p, "spec.trafficPolicy", dr.TrafficPolicy)
	seen := map[string]bool{}
	for i, s := range dr.Subsets {
		path := at("spec.subsets", i)
		switch {
		case s.Name == "":
			p.add(path+".name", "a subset must have a name")
		case seen[s.Name]:
			p.add(path+".name", "subset %q is defined twice", s.Name)
		default:
			if errs := validation.IsDNS1123Label(s.Name); len(errs) > 0 {
				p.add(path+".name", "%q: %v", s.Name, errs)
			}
		}
		seen[s.Name] = true
		for k, v := range s.Labels {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				p.add(path+".labels", "label key %q: %v", k, errs)
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				p.add(path+".labels", "label %q value %q: %v", k, v, errs)
			}
		}
		checkTrafficPolicy(p, path+".trafficPolicy", s.TrafficPolicy)
	}
}

func checkTrafficPolicy(p *problems, path string, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	checkOutlier(p, path+".outlierDetection", tp.OutlierDetection)
	checkConnectionPool(p, path+".connectionPool", tp.ConnectionPool)
	checkClientTLS(p, path+".tls", tp.Tls)
	for i, pl := range tp.PortLevelSettings {
		pp := at(path+".portLevelSettings", i)
		if pl.Port == nil {
			p.add(pp+".port", "a port-level setting needs a port")
		} else {
			checkPort(p, pp+".port.number", pl.Port.Number)
		}
		checkOutlier(p, pp+".outlierDetection", pl.OutlierDetection)
		checkConnectionPool(p, pp+".connectionPool", pl.ConnectionPool)
		checkClientTLS(p, pp+".tls", pl.Tls)
	}
}

func checkOutlier(p *problems, path string, o *networking.OutlierDetection) {
	if o == nil {
		return
	}
	if o.ConsecutiveErrors < 0 {
		p.add(path+".consecutiveErrors", "must not be negative")
	}
	if o.MaxEjectionPercent < 0 || o.MaxEjectionPercent > 100 {
		p.add(path+".maxEjectionPercent", "%d is not in 0-100", o.MaxEjectionPercent)
	}
	if o.MinHealthPercent < 0 || o.MinHealthPercent > 100 {
		p.add(path+".minHealthPercent", "%d is not in 0-100", o.MinHealthPercent)
	}
	checkDuration(p, path+".interval", o.Interval)
	checkDuration(p, path+".baseEjectionTime", o.BaseEjectionTime)
}

func checkConnectionPool(p *problems, path string, c *networking.ConnectionPoolSettings) {
	if c == nil {
		return
	}
	if t := c.Tcp; t != nil {
		if t.MaxConnections < 0 {
			p.add(path+".tcp.maxConnections", "must not be negative")
		}
		checkDuration(p, path+".tcp.connectTimeout", t.ConnectTimeout)
	}
	if h := c.Http; h != nil {
		for _, f := range []struct {
			name string
			v    int32
		}{
			{"http1MaxPendingRequests", h.Http1MaxPendingRequests}, {"http2MaxRequests", h.Http2MaxRequests},
			{"maxRequestsPerConnection", h.MaxRequestsPerConnection}, {"maxRetries", h.MaxRetries},
		} {
			if f.v < 0 {
				p.add(path+".http."+f.name, "must not be negative")
			}
		}
		checkDuration(p, path+".http.idleTimeout", h.IdleTimeout)
	}
}

func checkClientTLS(p *problems, path string, t *networking.ClientTLSSettings) {
	if t == nil || t.Mode != networking.ClientTLSSettings_MUTUAL || t.CredentialName != "" {
		return
	}
	if t.ClientCertificate == "" || t.PrivateKey == "" {
		p.add(path, "MUTUAL needs credentialName, or clientCertificate and privateKey")
	}
}
