// Package file is the config-directory source: it serves the mesh from
// Kubernetes-style YAML files instead of a cluster
// (discovery serve --config-dir DIR).
//
// In: every *.yaml, *.yml and *.json file under DIR, recursively, each a
// stream of documents separated by "---" lines. A document is one object
// with apiVersion and kind (v1 Service, Pod and Namespace,
// discovery.k8s.io/v1 EndpointSlice, networking.istio.io v1, v1beta1 and
// v1alpha3, security.istio.io v1 and v1beta1) or a v1 List of them. Older
// Istio versions are read into the v1 types. Namespaced objects without a
// namespace go to "default". Names starting with "." are skipped (hidden
// files, editor temporaries, and the "..data" and "..<timestamp>"
// directories of a mounted ConfigMap, whose files are reached through the
// symlinks next to them); symlinked files are followed, symlinked
// directories are not.
//
// Out: model.Events to a config.Sink, first the whole directory, then, after
// every change (watched with fsnotify and debounced), only the
// differences: an upsert for every object that is new or whose content
// changed, a delete for every object no longer defined anywhere. One
// reload is one Sink.Apply, so one World.
//
// Rules for bad input. Decoding is strict: bad YAML, a duplicate key, an
// unknown kind or version, an unknown field (also inside Istio specs), a
// field of the wrong type or a missing or invalid name fails the document
// (or the List item). Istio specs are read with Istio's own decoder (Go
// durations such as "3m" included), and an Istio object is judged by the
// same function as /validate (validate.Check): what Istio would refuse
// fails the document too, and what Istio would warn about is loaded and
// its warnings logged. Each failure is a DocError naming the file, the
// document's index (from 0, empty documents not counted), the line where
// the document starts, and the decoder's message; it is logged once, kept
// in Errors(), shown at /debug/config_dirz and counted in the
// discovery_config_file_errors gauge. The rest of the directory still
// loads. A file is the unit of update: when a file's new content has any
// failing document, the objects of that file that were in force before
// stay in force, all of them and unchanged, until the file is fixed or
// deleted. A file seen for the first time with failing documents has no
// earlier version, so its good documents are loaded. Deleting a file
// deletes its objects, whatever state it was in.
//
// Reads that may be the middle of a rewrite. A file that had objects and
// is read with no documents (empty, blank, only comments), as a tool that
// truncates it and then writes it leaves it, keeps its objects in force
// for --config-dir-empty-grace (2s): it is read again at its next change
// or when the grace ends, and only if it is still empty then are its
// objects deleted. A half-written file whose last document does not parse
// keeps them by the rule above. The same grace holds the objects of the
// files that a directory just replaced lacks. Removing a file is not held:
// its objects go at the next read (a removal followed within the debounce
// by a new, empty file is one read of that empty file, so held). The file
// shows "held" at /debug/config_dirz, and discovery_config_file_held
// counts such files.
//
// The directory itself is watched through its parent too: removed,
// renamed away, replaced by another (rename, or a symlink pointed
// elsewhere, as ConfigMap volumes swap ..data) or made again, it is read
// again. While it is gone the objects last read from it stay in force
// (HasSynced stays true, so /ready too), it is looked for every second
// besides the parent's events, and it says so once in a warning, in the
// discovery_config_file_dir_missing gauge (1) and in /debug/config_dirz
// ("missing", "missing_since"). When it is back it is read whole and
// watched again.
//
// Two definitions of the same kind, namespace and name: the one in the
// file that comes first in byte order of paths relative to DIR (then the
// earlier document) is used, the other is reported as a DocError holding a
// DuplicateError that names both places.
//
// Every object's resourceVersion is replaced by a hash of its document,
// so that it changes exactly when the content does.
package file
