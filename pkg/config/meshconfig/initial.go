package meshconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/model"
)

// Initial is the MeshConfig text found before the sources start.
type Initial struct {
	Text   string
	Source string
	Found  bool
}

// ReadInitial reads the MeshConfig once, before anything starts, from
// where the Watcher will watch it: the --mesh-config file, else the
// ConfigMap through client (nil: no cluster), else a ConfigMap in the
// config directory dir (""; none). The CA's trust domain is decided from
// it. Nothing found is not an error (Istio's defaults apply); a cluster
// that cannot be asked is.
func ReadInitial(ctx context.Context, opts Options, client kubernetes.Interface, dir string) (Initial, error) {
	if opts.File != "" {
		b, err := os.ReadFile(opts.File)
		if errors.Is(err, fs.ErrNotExist) {
			return Initial{Source: "file " + opts.File + " (not found)"}, nil
		}
		if err != nil {
			return Initial{}, fmt.Errorf("--mesh-config: %w", err)
		}
		return Initial{Text: string(b), Source: "file " + opts.File, Found: true}, nil
	}
	name := opts.ConfigMapName()
	if client != nil {
		cm, err := client.CoreV1().ConfigMaps(opts.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return Initial{Source: "ConfigMap " + opts.Namespace + "/" + name + " (not found)"}, nil
		}
		if err != nil {
			return Initial{}, fmt.Errorf("read the mesh ConfigMap %s/%s: %w", opts.Namespace, name, err)
		}
		return fromConfigMap(cm), nil
	}
	if dir != "" {
		return fromDir(dir, opts.Namespace, name), nil
	}
	return Initial{Source: "defaults"}, nil
}

func fromConfigMap(cm *corev1.ConfigMap) Initial {
	text, ok := cm.Data[ConfigMapKey]
	src := fmt.Sprintf("ConfigMap %s/%s (resourceVersion %s)", cm.Namespace, cm.Name, cm.ResourceVersion)
	return Initial{Text: text, Source: src, Found: ok}
}

// fromDir finds the mesh's ConfigMap among the config directory's files,
// read as the file source reads them. Only files that mention a ConfigMap
// are parsed.
func fromDir(dir, ns, name string) Initial {
	out := Initial{Source: "defaults"}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if path != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(b, []byte("ConfigMap")) {
			return nil
		}
		objs, _ := file.Parse(path, b)
		for _, o := range objs {
			if o.Key.Kind == model.KindConfigMap && o.Key.Namespace == ns && o.Key.Name == name {
				if cm, ok := o.Object.(*corev1.ConfigMap); ok {
					out = fromConfigMap(cm)
					out.Source = fmt.Sprintf("ConfigMap %s/%s in %s", ns, name, path)
					return filepath.SkipAll
				}
			}
		}
		return nil
	})
	return out
}
