// Package rawjson writes JSON the way the service's answers carry it: compact and without
// HTML escaping, so that <, > and & stay one byte each. Answers are full of them (raw_text
// is the model's <ref> and <box> tags), and json.Marshal would write each as a six-byte
// \u escape: a different body from the upstream server's and a bigger result message.
package rawjson

import (
	"bytes"
	"encoding/json"
)

// Marshal is json.Marshal without HTML escaping (and without json.Encoder's newline).
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
