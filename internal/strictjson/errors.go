package strictjson

import (
	"errors"
	"fmt"
	"strconv"
)

// The error kinds of package strictjson: a document that is not an object, a member name
// given twice, a number that is not an integer.

// ErrNotObject is returned by Object for a JSON document that is not an object.
var ErrNotObject = errors.New("the document is not a JSON object")

// DuplicateError is a member name that appears twice in one object. encoding/json (and
// JavaScript's JSON.parse) keep the last of the two, so a reader that looks at the first
// would see another document than the one that runs: such a document is refused.
type DuplicateError struct {
	// Pointer is where the object with the duplicate is (RFC 6901), "" for the
	// document itself.
	Pointer string
	// Name is the member name given twice, its escapes undone.
	Name string
	// Offset is the byte offset of the second occurrence.
	Offset int
}

func (e *DuplicateError) Error() string {
	where := "the document"
	if e.Pointer != "" {
		where = e.Pointer
	}
	return fmt.Sprintf("member %s appears twice in %s (offset %d): names must be unique", strconv.Quote(e.Name), where, e.Offset)
}

// ErrNotInteger is returned by Integer for a value that is not one.
var ErrNotInteger = errors.New("want an integer")
