package console

import (
	"net/http"
)

// pictures serves a job's overlay or input image (pictures.go's real work lands next).
func (c *Console) pictures(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "pictures are not served yet")
}
