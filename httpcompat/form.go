package httpcompat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"unicode/utf8"

	"github.com/locateanything/detect/engine"
)

// maxFormParts bounds the parts of a multipart/form-data body: the request has seven fields,
// so a body of thousands of tiny parts is refused instead of parsed part by part.
const maxFormParts = 32

// parseBody reads a /predict body by its Content-Type: multipart/form-data as an upload
// (curl -F image=@photo.jpg -F query=dog), anything else as the contract's JSON body,
// exactly as before. The error is a body that cannot be read as the form it says it is (a
// 400); the field errors are FastAPI's 422 entries.
func (s *Server) parseBody(contentType string, body []byte) (predictRequest, []fieldError, error) {
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil || mediaType != "multipart/form-data" {
		req, invalid := parsePredictRequest(body)
		return req, invalid, nil
	}
	if params["boundary"] == "" {
		return predictRequest{}, nil, errors.New("multipart/form-data body without a boundary in its Content-Type")
	}
	return parseForm(body, params["boundary"])
}

// parseForm reads a multipart/form-data /predict body: the image as a file part named
// "image" (its bytes as they are, not base64), the other fields as the JSON body's, their
// values read as pydantic reads form fields. A field given twice is refused, as a name given
// twice in the JSON body is; parts the server does not know are ignored.
func parseForm(body []byte, boundary string) (predictRequest, []fieldError, error) {
	var req predictRequest
	values := map[string][]byte{}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return req, nil, fmt.Errorf("cannot read the multipart/form-data body: %w", err)
		}
		if n == maxFormParts {
			return req, nil, fmt.Errorf("multipart/form-data body has more than %d parts; /predict reads seven fields", maxFormParts)
		}
		name := part.FormName()
		if !isFormField(name) {
			continue // NextPart skips what is left of it
		}
		v, err := io.ReadAll(part)
		if err != nil {
			return req, nil, fmt.Errorf("cannot read the multipart/form-data part %q: %w", name, err)
		}
		if _, dup := values[name]; dup {
			return req, []fieldError{{
				Type: "value_error", Loc: []any{"body", name},
				Msg: fmt.Sprintf("Value error, %s is given more than once; give each field once", name),
			}}, nil
		}
		values[name] = v
	}

	var errs []fieldError
	text := func(name string, required bool) string {
		v, ok := values[name]
		if !ok || (!required && len(v) == 0) {
			if required {
				errs = append(errs, fieldError{Type: "missing", Loc: []any{"body", name}, Msg: "Field required"})
			}
			return ""
		}
		if !utf8.Valid(v) {
			errs = append(errs, fieldError{Type: "string_unicode", Loc: []any{"body", name}, Msg: "Input should be a valid string, unable to parse raw data as a unicode string"})
			return ""
		}
		return string(v)
	}
	req.ImageURL = text("image_url", false)
	img, hasImage := values["image"]
	switch {
	case hasImage && req.ImageURL != "":
		errs = append(errs, bothImagesError())
	case hasImage:
		req.ImageBytes = img
		if req.ImageBytes == nil {
			req.ImageBytes = []byte{} // an empty file: checkRequest says so
		}
	case req.ImageURL == "":
		errs = append(errs, fieldError{Type: "missing", Loc: []any{"body", "image"}, Msg: "Field required"})
	}
	req.Query = text("query", true)
	req.Task = engine.Task(text("task", false))
	req.GenerationMode = engine.GenerationMode(text("generation_mode", false))
	if v := text("max_new_tokens", false); v != "" {
		if n, fe := laxInt(quoted(v)); fe != nil {
			fe.Loc = []any{"body", "max_new_tokens"}
			errs = append(errs, *fe)
		} else {
			req.MaxNewTokens = &n
		}
	}
	if v := text("return_overlay", false); v != "" {
		if b, fe := laxBool(quoted(v)); fe != nil {
			fe.Loc = []any{"body", "return_overlay"}
			errs = append(errs, *fe)
		} else {
			req.ReturnOverlay = b
		}
	}
	return req, errs, nil
}

// isFormField reports whether /predict reads the form field name.
func isFormField(name string) bool {
	switch name {
	case "image", "image_url", "query", "max_new_tokens", "return_overlay", "task", "generation_mode":
		return true
	}
	return false
}

// quoted is a form value as the JSON string laxInt and laxBool read: a form field is always
// text, as a quoted JSON value is.
func quoted(v string) json.RawMessage {
	b, _ := json.Marshal(v) // a string always encodes
	return b
}
