package imageproc

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
)

// TestUnrecognisedFormatDoesNotQuoteTheBytes: the message of an unrecognised image goes
// into results and dead-letter records, so it must not carry any of the bytes (a job
// naming file:///etc/shadow would otherwise publish the start of the file), nor its size
// (which tells one secret file from another).
func TestUnrecognisedFormatDoesNotQuoteTheBytes(t *testing.T) {
	secret := []byte("root:*:20000:0:99999:7:::\ndaemon:*:20000:0:99999:7:::\n")
	_, _, err := Decode(secret, 0)
	wantInputError(t, err, engine.CodeBadImage, "unrecognised")
	msg := err.Error()
	if strings.Contains(msg, "54") || strings.Contains(msg, "bytes") {
		t.Errorf("message %q gives the size of the input", msg)
	}
	for _, n := range []int{2, 4, 8} {
		for _, leak := range []string{string(secret[:n]), hex.EncodeToString(secret[:n])} {
			if strings.Contains(msg, leak) {
				t.Errorf("message %q quotes the input (%q)", msg, leak)
			}
		}
	}
}
