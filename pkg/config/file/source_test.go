package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

func service(name string, port int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\nspec:\n  ports:\n  - name: http\n    port: %d\n", name, port)
}

func virtualService(name, subset string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: %s
spec:
  hosts: [%[1]s]
  http:
  - route:
    - destination: {host: %[1]s, subset: %s}
`, name, subset)
}

func namespace(name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", name)
}

// badDoc fails to decode: a field of the wrong type.
const badDoc = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: reviews\nspec:\n  hosts: 5\n"

func port(w *model.World, name string) int32 {
	s := w.Service("default", name)
	if s == nil || len(s.Ports) == 0 {
		return 0
	}
	return s.Ports[0].Port
}

func subset(w *model.World, name string) string {
	c := w.Config(model.KindVirtualService, "default", name)
	if c == nil {
		return ""
	}
	return c.Object.(*networkingv1.VirtualService).Spec.GetHttp()[0].GetRoute()[0].GetDestination().GetSubset()
}

func TestLoadsEveryConfigFileOfTheDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), namespace("shop")+"---\n"+service("reviews", 9080))
	writeFile(t, filepath.Join(dir, "sub/deeper/b.yml"), virtualService("reviews", "v1"))
	writeFile(t, filepath.Join(dir, "c.json"), `{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}`)
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), namespace("hidden"))
	writeFile(t, filepath.Join(dir, "..data/x.yaml"), namespace("hidden"))
	writeFile(t, filepath.Join(dir, "notes.txt"), "not: [config")
	h := start(t, dir)

	w := h.world()
	if got := len(w.Namespaces()); got != 2 || w.Namespace("shop") == nil || w.Namespace("other") == nil {
		t.Errorf("namespaces = %v", w.Namespaces())
	}
	if port(w, "reviews") != 9080 || subset(w, "reviews") != "v1" {
		t.Errorf("reviews: port %d, subset %q", port(w, "reviews"), subset(w, "reviews"))
	}
	if errs := h.src.Errors(); len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
	if got := testutil.ToFloat64(h.src.metrics.objects); got != 4 {
		t.Errorf("objects gauge = %v, want 4", got)
	}
}

func TestAnEditChangesTheWorldByItsDifferencesOnly(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, service("reviews", 9080)+"---\n"+virtualService("reviews", "v1"))
	writeFile(t, b, service("ratings", 9080))
	h := start(t, dir)
	var mu sync.Mutex
	var updates []*model.Update
	h.store.Subscribe(func(u *model.Update) {
		mu.Lock()
		defer mu.Unlock()
		updates = append(updates, u)
	})

	writeFile(t, a, service("reviews", 9080)+"---\n"+virtualService("reviews", "v2"))
	h.waitFor(t, "subset v2", func() bool { return subset(h.world(), "reviews") == "v2" })
	mu.Lock()
	got := updates
	mu.Unlock()
	want := []model.Change{{Key: model.Key{Kind: model.KindVirtualService, Namespace: "default", Name: "reviews"}, Op: model.OpUpsert}}
	if len(got) != 1 || !slices.Equal(got[0].Changes, want) {
		t.Fatalf("updates = %+v, want one with %v", got, want)
	}

	// Writing the same content again, or moving an object to another
	// file, changes nothing.
	version := h.world().Version
	h.waitReload(t, func() { writeFile(t, b, service("ratings", 9080)) })
	h.waitReload(t, func() {
		writeFile(t, a, virtualService("reviews", "v2"))
		writeFile(t, b, service("ratings", 9080)+"---\n"+service("reviews", 9080))
	})
	if v := h.world().Version; v != version {
		t.Errorf("World version %d -> %d for edits that change no object", version, v)
	}
}

func TestAMalformedEditKeepsThePreviousVersionOfThatFile(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, service("reviews", 9080)+"---\n"+virtualService("reviews", "v1"))
	writeFile(t, b, service("ratings", 9080))
	h := start(t, dir)

	// The Service document changes and is valid; the second one breaks.
	h.waitReload(t, func() { writeFile(t, a, service("reviews", 9999)+"---\n"+badDoc) })
	want := a + ":10: document 1: VirtualService: spec: json: cannot unmarshal number into a list"
	errs := h.src.Errors()
	if len(errs) != 1 || errs[0].Error() != want {
		t.Fatalf("errors = %v, want %s", errs, want)
	}
	if w := h.world(); port(w, "reviews") != 9080 || subset(w, "reviews") != "v1" {
		t.Errorf("a.yaml's previous version is not in force: port %d, subset %q", port(w, "reviews"), subset(w, "reviews"))
	}
	logged := h.logs.records("config document not loaded")
	if len(logged) != 1 || logged[0]["file"] != a || logged[0]["doc"] != 1.0 || logged[0]["line"] != 10.0 ||
		logged[0]["kept_previous"] != true || logged[0]["level"] != "ERROR" {
		t.Errorf("log records = %v", logged)
	}
	if got := testutil.ToFloat64(h.src.metrics.errors); got != 1 {
		t.Errorf("errors gauge = %v, want 1", got)
	}
	if st := h.src.Status(); len(st.Files) != 2 || !st.Files[0].Stale || st.Files[0].Errors != 1 || st.Files[1].Stale {
		t.Errorf("status files = %+v", st.Files)
	}

	// The rest of the directory is still served.
	writeFile(t, b, service("ratings", 7777))
	h.waitFor(t, "ratings on 7777", func() bool { return port(h.world(), "ratings") == 7777 })
	if got := len(h.logs.records("config document not loaded")); got != 1 {
		t.Errorf("the same error was logged %d times", got)
	}

	// Fixing the file brings its new version in, all of it.
	writeFile(t, a, service("reviews", 9999)+"---\n"+virtualService("reviews", "v2"))
	h.waitFor(t, "the fixed a.yaml", func() bool {
		w := h.world()
		return port(w, "reviews") == 9999 && subset(w, "reviews") == "v2"
	})
	if errs := h.src.Errors(); len(errs) != 0 {
		t.Errorf("errors after the fix: %v", errs)
	}
	if got := testutil.ToFloat64(h.src.metrics.errors); got != 0 {
		t.Errorf("errors gauge = %v, want 0", got)
	}
}

func TestAFileFirstSeenWithErrorsLoadsItsGoodDocuments(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	writeFile(t, a, service("reviews", 9080)+"---\n"+badDoc+"---\n"+service("ratings", 9080))
	h := start(t, dir)

	if w := h.world(); port(w, "reviews") != 9080 || port(w, "ratings") != 9080 {
		t.Errorf("good documents not loaded: %v", w.Services())
	}
	if errs := h.src.Errors(); len(errs) != 1 || errs[0].Doc != 1 || errs[0].Line != 10 {
		t.Errorf("errors = %v", errs)
	}

	// A second bad version keeps what the first put in force.
	h.waitReload(t, func() { writeFile(t, a, service("reviews", 1)+"---\n"+badDoc) })
	if w := h.world(); port(w, "reviews") != 9080 || port(w, "ratings") != 9080 {
		t.Errorf("first version not kept: %v", w.Services())
	}
}

func TestDeletingAFileDeletesItsObjects(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, service("reviews", 9080)+"---\n"+virtualService("reviews", "v1"))
	writeFile(t, b, service("ratings", 9080))
	h := start(t, dir)

	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "ratings deleted", func() bool { return h.world().Service("default", "ratings") == nil })

	// A file whose bad edit is pending goes too, errors and all.
	h.waitReload(t, func() { writeFile(t, a, badDoc) })
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "a.yaml's objects deleted", func() bool {
		w := h.world()
		return w.ServiceCount() == 0 && len(w.Configs(model.KindVirtualService)) == 0
	})
	if errs := h.src.Errors(); len(errs) != 0 {
		t.Errorf("errors = %v", errs)
	}
}

func TestRenameBasedWritesAreSeen(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	writeFile(t, a, virtualService("reviews", "v1"))
	h := start(t, dir)

	writeByRename(t, a, virtualService("reviews", "v2"))
	h.waitFor(t, "subset v2", func() bool { return subset(h.world(), "reviews") == "v2" })
	writeByRename(t, a, virtualService("reviews", "v3"))
	h.waitFor(t, "subset v3", func() bool { return subset(h.world(), "reviews") == "v3" })

	// A file renamed to a name that is not config is gone.
	if err := os.Rename(a, a+".bak"); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "reviews deleted", func() bool { return subset(h.world(), "reviews") == "" })
}

func TestFilesInNewSubdirectoriesAreLoaded(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir)

	writeFile(t, filepath.Join(dir, "x/y/z/a.yaml"), service("reviews", 9080))
	h.waitFor(t, "reviews", func() bool { return port(h.world(), "reviews") == 9080 })
	// The new directories are watched too.
	writeFile(t, filepath.Join(dir, "x/y/z/b.yaml"), service("ratings", 9080))
	h.waitFor(t, "ratings", func() bool { return port(h.world(), "ratings") == 9080 })
	writeFile(t, filepath.Join(dir, "x/y/z/a.yaml"), service("reviews", 1234))
	h.waitFor(t, "reviews on 1234", func() bool { return port(h.world(), "reviews") == 1234 })

	if err := os.RemoveAll(filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "everything deleted", func() bool { return h.world().ServiceCount() == 0 })
}

// TestConfigMapSymlinkSwapsAreSeen lays the directory out as the kubelet
// mounts a ConfigMap: files are symlinks through ..data, which is swapped
// atomically to a new timestamped directory on every update.
func TestConfigMapSymlinkSwapsAreSeen(t *testing.T) {
	dir := t.TempDir()
	publish := func(version, content string) {
		t.Helper()
		writeFile(t, filepath.Join(dir, version, "mesh.yaml"), content)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	publish("..2026_01_01_00_00_00.1", virtualService("reviews", "v1"))
	if err := os.Symlink("..data/mesh.yaml", filepath.Join(dir, "mesh.yaml")); err != nil {
		t.Fatal(err)
	}
	h := start(t, dir)
	if got := subset(h.world(), "reviews"); got != "v1" {
		t.Fatalf("subset = %q, want v1", got)
	}

	publish("..2026_01_01_00_01_00.2", virtualService("reviews", "v2"))
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "subset v2", func() bool { return subset(h.world(), "reviews") == "v2" })
	if got := len(h.world().Configs(model.KindVirtualService)); got != 1 {
		t.Errorf("%d VirtualServices, want 1 (the hidden directories must not be read)", got)
	}
}

func TestDuplicateDefinitionsKeepTheFirstFile(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, b, namespace("x")+"---\n"+service("reviews", 2222))
	writeFile(t, a, service("reviews", 1111))
	h := start(t, dir)

	if got := port(h.world(), "reviews"); got != 1111 {
		t.Errorf("port = %d, want a.yaml's 1111", got)
	}
	want := b + ":6: document 1: Service/default/reviews is also defined in " + a +
		":1 (document 0), which comes first and is used; this definition is ignored"
	errs := h.src.Errors()
	var dup *DuplicateError
	if len(errs) != 1 || errs[0].Error() != want || !errors.As(errs[0], &dup) {
		t.Fatalf("errors = %v, want %s", errs, want)
	}

	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "b.yaml's reviews", func() bool { return port(h.world(), "reviews") == 2222 })
	if errs := h.src.Errors(); len(errs) != 0 {
		t.Errorf("errors = %v", errs)
	}
}

func TestADirectoryGivenAsASymlinkIsFollowed(t *testing.T) {
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "real/sub/a.yaml"), service("reviews", 9080))
	link := filepath.Join(base, "config")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	h := start(t, link)
	if got := port(h.world(), "reviews"); got != 9080 {
		t.Fatalf("port = %d, want 9080", got)
	}
	writeFile(t, filepath.Join(base, "real/sub/a.yaml"), service("reviews", 1234))
	h.waitFor(t, "reviews on 1234", func() bool { return port(h.world(), "reviews") == 1234 })
	if st := h.src.Status(); len(st.Files) != 1 || st.Files[0].Path != filepath.Join(link, "sub/a.yaml") {
		t.Errorf("files = %+v", st.Files)
	}
}
