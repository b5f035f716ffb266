package file

import (
	"fmt"
	"strings"

	"github.com/meshplane/discovery/pkg/model"
)

// DocError is a document of a config file that was not loaded, or a file
// that could not be read at all.
type DocError struct {
	// File is the file's path: Options.Dir joined with its path in the
	// directory.
	File string `json:"file"`
	// Doc is the document's index in the file's YAML stream, counting from
	// 0 and skipping empty documents; -1 when the whole file failed.
	Doc int `json:"doc"`
	// Item is the index in a List's items, or -1 outside a List.
	Item int `json:"item"`
	// Line is the 1-based line where the document starts (its first line
	// that is neither blank nor a comment); 0 when the whole file failed.
	Line int `json:"line"`
	// Err is the reason.
	Err error `json:"-"`
}

// Error reads "FILE:LINE: document N[, item M]: reason".
func (e *DocError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Doc < 0 {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
		return b.String()
	}
	fmt.Fprintf(&b, ":%d: document %d", e.Line, e.Doc)
	if e.Item >= 0 {
		fmt.Fprintf(&b, ", item %d", e.Item)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the reason.
func (e *DocError) Unwrap() error { return e.Err }

// DuplicateError says that an object is defined in more than one place. The
// definition that comes first in path order (then document order) is used.
type DuplicateError struct {
	Key model.Key
	// First is where the definition in force comes from.
	FirstFile string
	FirstLine int
	FirstDoc  int
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("%s is also defined in %s:%d (document %d), which comes first and is used; this definition is ignored",
		e.Key, e.FirstFile, e.FirstLine, e.FirstDoc)
}

// compareDocErrors orders errors by file, document, item, then message.
func compareDocErrors(a, b *DocError) int {
	if c := strings.Compare(a.File, b.File); c != 0 {
		return c
	}
	if a.Doc != b.Doc {
		return a.Doc - b.Doc
	}
	if a.Item != b.Item {
		return a.Item - b.Item
	}
	return strings.Compare(a.Err.Error(), b.Err.Error())
}
