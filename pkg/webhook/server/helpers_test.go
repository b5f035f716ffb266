package server

import (
	"bytes"
	"encoding/json"
)

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func equalJSON(a, b any) bool { return bytes.Equal([]byte(toJSON(a)), []byte(toJSON(b))) }
