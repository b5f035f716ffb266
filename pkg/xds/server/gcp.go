package server

import (
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Every place this server writes into go-control-plane's own state is in
// this file, and gcp_test.go holds go-control-plane to what these writes
// assume; an upgrade that changes it fails there, not in production.
// The same helpers write the returned maps of delta streams, which are
// this server's own (deltastream.go, subscription.go).
//
// cachev3.Subscription's ReturnedResources says its map "must not be
// altered by the Cache". This server alters it for state-of-the-world
// Route, Endpoint and Secret responses, because the alternative, handing
// go-control-plane a new map with every response, copies the map of
// every name the proxy holds (thousands of endpoint names per proxy at
// 1,000 services) for every push to every proxy: that copy was most of a
// push's cost. What makes the writes safe (gcp_test.go):
//   - ReturnedResources is the map go-control-plane keeps for the
//     stream and type, not a copy, and the map a response carries
//     (PassthroughResponse.ReturnedResources) becomes it, not a copy of
//     it, when the response is sent;
//   - go-control-plane changes the map only while handling a request
//     (it swaps it on send, prunes unsubscribed names on a new
//     request), and the handling of a request ends in CreateWatch,
//     which takes the conn's mu, as every write here is made under it;
//   - a state-of-the-world request gets a new map of subscribed names,
//     which go-control-plane does not change after (unchanged keeps it).

// markReturned records that the response about to be handed over
// carries rs: the map it was handed with (returned) is the one
// go-control-plane installs when it sends the response. Called with
// c.mu held, right after handing the response over.
func markReturned(returned map[string]string, rs []*gen.Resource) {
	for _, r := range rs {
		returned[r.Name] = r.Hash
	}
}

// forgetReturned records that the response about to be handed over
// removes names, where no base holds them (Secrets).
func forgetReturned(returned map[string]string, names []string) {
	for _, n := range names {
		delete(returned, n)
	}
}

// unmarkReturned undoes markReturned for a state-of-the-world response
// go-control-plane dropped unsent (the client never got those names).
func unmarkReturned(sub cachev3.Subscription, names []string) {
	returned := sub.ReturnedResources()
	for _, n := range names {
		delete(returned, n)
	}
}

// markHeldNothing records, for a delta stream whose base holds a name the
// client does not (subscribed anew, or just unsubscribed, which left the
// map), that the client holds nothing of it.
func markHeldNothing(returned map[string]string, base typeBase, names []string) {
	for _, n := range names {
		if _, ok := returned[n]; !ok && base.has(n) {
			returned[n] = ""
		}
	}
}
