// Package push decides when to push and paces the pushing.
//
// In: model.Updates, as the Store publishes them (one per applied batch of
// events).
//
// Out: Debouncer merges updates until the World has been quiet for a while
// (or a maximum delay has passed) and hands one Request, with every change
// merged, to its handler. Queue holds one pending item per proxy, merging
// a new push into one still waiting, and hands items to a bounded number
// of workers, so a slow proxy never delays the others and the pending work
// never grows beyond one item per proxy.
//
// Between them, planning: Split sorts a Request's changes, and
// Changes.For decides what they mean for one proxy (nothing, new
// endpoints of the services it sees, or a full push) from what the
// proxy's last configuration read (gen.Reads: a change touches it when
// generation read the object, or listed its kind by a rule that chooses
// it before or after; no rule per kind is written here);
// Classes holds each proxy class's newest configuration, generated once
// per World for all its proxies, and ChangedSince names what a proxy's
// new configuration changed. The server (pkg/xds/server) holds the
// streams: it asks the planner, queues the plans and answers the watches.
package push
