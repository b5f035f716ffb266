package istiovalidate

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// compared are the kinds discovery's /validate checks: every object of
// these kinds is judged by Istio and by discovery.
var compared = map[schema.GroupKind]bool{
	{Group: "networking.istio.io", Kind: "VirtualService"}:      true,
	{Group: "networking.istio.io", Kind: "DestinationRule"}:     true,
	{Group: "networking.istio.io", Kind: "Gateway"}:             true,
	{Group: "networking.istio.io", Kind: "ServiceEntry"}:        true,
	{Group: "networking.istio.io", Kind: "Sidecar"}:             true,
	{Group: "networking.istio.io", Kind: "WorkloadEntry"}:       true,
	{Group: "security.istio.io", Kind: "AuthorizationPolicy"}:   true,
	{Group: "security.istio.io", Kind: "PeerAuthentication"}:    true,
	{Group: "security.istio.io", Kind: "RequestAuthentication"}: true,
	{Group: "networking.istio.io", Kind: "EnvoyFilter"}:         true,
	{Group: "networking.istio.io", Kind: "WorkloadGroup"}:       true,
	{Group: "networking.istio.io", Kind: "ProxyConfig"}:         true,
	{Group: "extensions.istio.io", Kind: "WasmPlugin"}:          true,
	{Group: "extensions.istio.io", Kind: "TrafficExtension"}:    true,
}

// istioGroups are the API groups of Istio's own kinds.
var istioGroups = map[string]bool{
	"networking.istio.io": true, "security.istio.io": true,
	"telemetry.istio.io": true, "extensions.istio.io": true,
}

// doc is one object of the corpus: a YAML document of a file of Istio's
// module.
type doc struct {
	Key  string // "path/in/module.yaml#N": N counts the file's documents from 0
	GK   schema.GroupKind
	Name string
	Text []byte // the document as written
	JSON []byte // the document as the API server would send it
}

// corpusStats says what the walk read and skipped.
type corpusStats struct {
	Files        int // YAML files read
	Templates    int // files skipped for Helm/Go template syntax
	Unreadable   int // Istio-looking documents that are not YAML objects
	OtherIstio   map[string]int
	NotIstioDocs int
}

// istioModuleDir is where the pinned istio.io/istio module lies.
func istioModuleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio").Output()
	if err != nil {
		t.Fatalf("go list -m istio.io/istio: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatal("istio.io/istio is not in the module cache: run go mod download")
	}
	return dir
}

// readCorpus walks Istio's module for YAML documents of Istio's kinds. Files
// with template syntax ("{{") are skipped whole: they are not configs until
// rendered.
func readCorpus(t *testing.T, root string) ([]doc, corpusStats) {
	t.Helper()
	st := corpusStats{OtherIstio: map[string]int{}}
	var docs []doc
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(data, []byte(".istio.io/")) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if bytes.Contains(data, []byte("{{")) {
			st.Templates++
			return nil
		}
		st.Files++
		for i, text := range splitYAML(data) {
			d, ok := readDoc(&st, filepath.ToSlash(rel), i, text)
			if ok {
				docs = append(docs, d)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].Key < docs[j].Key })
	return docs, st
}

// expectation matches the line with which Istio's own CRD test fixtures
// (pkg/config/validation/testdata/crds) give the error they expect: it is
// not part of the object, and Istio's test drops it too.
var expectation = regexp.MustCompile(`(?m)^_err:.*\n?`)

func readDoc(st *corpusStats, rel string, i int, text []byte) (doc, bool) {
	text = expectation.ReplaceAll(text, nil)
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	js, err := yaml.YAMLToJSON(text)
	if err != nil || len(js) == 0 || js[0] != '{' || json.Unmarshal(js, &head) != nil {
		if bytes.Contains(text, []byte(".istio.io/")) {
			st.Unreadable++
		}
		return doc{}, false
	}
	gv, err := schema.ParseGroupVersion(head.APIVersion)
	if err != nil || !istioGroups[gv.Group] {
		st.NotIstioDocs++
		return doc{}, false
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: head.Kind}
	if !compared[gk] {
		st.OtherIstio[head.Kind]++
		return doc{}, false
	}
	return doc{Key: rel + "#" + itoa(i), GK: gk, Name: head.Metadata.Name, Text: text, JSON: js}, true
}

// splitYAML cuts a YAML stream at its "---" lines; documents of only blank
// lines and comments are dropped, but still counted, so that a key names
// the same document whatever is around it.
func splitYAML(data []byte) [][]byte {
	var out [][]byte
	var cur bytes.Buffer
	flush := func() {
		out = append(out, append([]byte(nil), cur.Bytes()...))
		cur.Reset()
	}
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		trimmed := bytes.TrimRight(line, " \t\r\n")
		if bytes.Equal(trimmed, []byte("---")) || bytes.HasPrefix(trimmed, []byte("--- ")) {
			flush()
			continue
		}
		cur.Write(line)
	}
	flush()
	return out
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
