package file

import (
	"encoding/json"
	"net/http"
)

// RegisterDebug serves /debug/config_dirz: the directory's files, how many
// objects each has in force, and every document that is not loaded.
func (s *Source) RegisterDebug(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/config_dirz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s.Status()); err != nil {
			s.log.Debug("writing /debug/config_dirz", "error", err)
		}
	})
}

// MarshalJSON adds the reason and the whole message to the fields.
func (e *DocError) MarshalJSON() ([]byte, error) {
	type fields DocError
	return json.Marshal(struct {
		*fields
		Error   string `json:"error"`
		Message string `json:"message"`
	}{(*fields)(e), e.Err.Error(), e.Error()})
}
