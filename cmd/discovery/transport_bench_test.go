package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
)

// BenchmarkIdleTLSConnectionHeap reports the heap an idle TLS connection
// holds, for read buffers of gRPC's default (32 KiB), of 16 KiB and of
// none, with the server's write buffer as discovery sets it. Client and
// server are in one process; the client's own buffers are off, so the
// difference between two sizes is the server's. On the TLS port (15012,
// where sidecars connect) gRPC gives each connection a read buffer of its
// own for the connection's life; on a plain TCP port it takes one from a
// pool while it reads. b.N connections are opened; run with
// -benchtime=500x.
func BenchmarkIdleTLSConnectionHeap(b *testing.B) {
	cert := selfSigned(b)
	for _, read := range []int{32 << 10, 16 << 10, 0} {
		b.Run(fmt.Sprintf("read=%dKiB", read>>10), func(b *testing.B) {
			srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})),
				grpc.WriteBufferSize(transportBufferSize), grpc.ReadBufferSize(read))
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go srv.Serve(l) //nolint:errcheck // ends with Stop
			defer srv.Stop()
			before := heapInUse()
			conns := make([]*grpc.ClientConn, 0, b.N)
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			creds := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // a benchmark's own self-signed server
			for i := 0; i < b.N; i++ {
				c, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(creds),
					grpc.WithReadBufferSize(0), grpc.WithWriteBufferSize(0))
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
				ready(b, c)
			}
			b.ReportMetric(float64(heapInUse()-before)/float64(b.N), "heapB/conn")
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// ready connects c and waits until it is ready.
func ready(b *testing.B, c *grpc.ClientConn) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Connect()
	for s := c.GetState(); s != connectivity.Ready; s = c.GetState() {
		if !c.WaitForStateChange(ctx, s) {
			b.Fatalf("connection not ready: %v", s)
		}
	}
}

// selfSigned makes a serving certificate for 127.0.0.1.
func selfSigned(b *testing.B) tls.Certificate {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
