package console

import (
	"errors"
	"fmt"

	"github.com/locateanything/detect/storage"
)

// The error kinds of package console: an API answer other than 200 (apiError), and the
// pictures' (bytes that are no picture, a thumbnail not made in time).

// apiError is an answer other than 200: its status and message.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// errNotPicture is makeThumb's answer to bytes it cannot decode.
var errNotPicture = fmt.Errorf("not a decodable PNG, JPEG, GIF or WebP: %w", storage.ErrNotFound)

// errThumbNotReady marks a thumbnail whose turn had not come in time (pictureError
// answers it 503 with Retry-After).
var errThumbNotReady = errors.New("the thumbnail is not made yet")
