package ca

import (
	"crypto"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

var benchKeys = map[string]func(testing.TB) crypto.Signer{
	"ECDSA-P256": ecKey,
	"RSA-2048": func(t testing.TB) crypto.Signer {
		t.Helper()
		return rsaKey(t, 2048)
	},
}

// BenchmarkSignInProcess measures the CPU path of one request: parse and
// check the CSR, check its SANs, sign, encode the chain.
func BenchmarkSignInProcess(b *testing.B) {
	for name, newKey := range benchKeys {
		b.Run(name, func(b *testing.B) {
			c := newTestCA(b, testOptions(), &logBuffer{})
			csr := makeCSR(b, newKey(b), csrSpec{uris: []string{idA}})
			id := Identity{"cluster.local", "app", "a"}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				req, err := ParseCSR(csr)
				if err != nil {
					b.Fatal(err)
				}
				if err := checkSANs(req, id); err != nil {
					b.Fatal(err)
				}
				if _, _, err := c.authority.SignWorkload(req.PublicKey, id, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "csr/s")
		})
	}
}

// BenchmarkCreateCertificateOverTLS sends CSRs over gRPC + TLS from many
// concurrent clients: 32 connections shared by 16 goroutines per GOMAXPROCS,
// each sending a bearer token (its TokenReview cached) and a CSR.
func BenchmarkCreateCertificateOverTLS(b *testing.B) {
	const conns = 32
	for name, newKey := range benchKeys {
		b.Run(name, func(b *testing.B) {
			c := newTestCA(b, testOptions(), &logBuffer{})
			addr := serve(b, c)
			clients := make([]pb.IstioCertificateServiceClient, conns)
			for i := range clients {
				clients[i] = dial(b, addr, c.RootPEM(), "istio-system", nil)
			}
			req := &pb.IstioCertificateRequest{Csr: string(makeCSR(b, newKey(b), csrSpec{uris: []string{idA}})), ValidityDuration: 86400}
			ctx := ctxWithToken(b.Context(), tok("token-a"))
			var (
				next      atomic.Int64
				mu        sync.Mutex
				latencies []time.Duration
			)
			b.ReportAllocs()
			b.SetParallelism(conns / 2)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				client := clients[next.Add(1)%conns]
				var mine []time.Duration
				for pb.Next() {
					start := time.Now()
					if _, err := client.CreateCertificate(ctx, req); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				latencies = append(latencies, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "csr/s")
			if len(latencies) > 0 {
				slices.Sort(latencies)
				b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
			}
		})
	}
}
