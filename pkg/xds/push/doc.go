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
package push
