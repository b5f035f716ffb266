package istiovalidate

import (
	"fmt"
	"strings"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/webhook/validate"
)

// discoveryWebhook judges an object as discovery's /validate does.
func discoveryWebhook(d doc) judgement {
	w, err := validate.Check(d.GK, d.JSON)
	switch {
	case err != nil:
		return judgement{refuse, err.Error()}
	case len(w.Istio) > 0:
		return judgement{warn, fmt.Sprint(w.Istio)}
	}
	return judgement{accept, ""}
}

// discoveryFile judges an object as file mode does: the document, as
// written, read by the file source's parser.
func discoveryFile(d doc) judgement {
	objs, errs := file.Parse(d.Key, d.Text)
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return judgement{refuse, strings.Join(msgs, "; ")}
	}
	if len(objs) != 1 {
		return judgement{refuse, fmt.Sprintf("%d objects read", len(objs))}
	}
	if w := objs[0].Warnings; len(w) > 0 {
		return judgement{warn, fmt.Sprint(w)}
	}
	return judgement{accept, ""}
}
