package submit

import (
	"strings"

	"github.com/locateanything/detect/internal/settings"
)

// Settings are submit's own settings, declared once here: each field's `envconfig` tag is
// its variable, `default` its default and `desc` its meaning. Package config embeds
// Settings in submit's configuration beside the NATS and storage settings it shares with
// the worker (natsconn.Config, storage.Config) and reads them from the environment;
// Validate is the one check of the values.
type Settings struct {
	// UploadPrefix is where local images are uploaded (--upload overrides it).
	UploadPrefix string `envconfig:"LA_SUBMIT_UPLOAD" desc:"s3:// prefix local images are uploaded under (--upload overrides it); empty passes them to the worker as file:// URLs"`
}

// Validate reports every setting submit cannot run with, each naming its variable.
func (s Settings) Validate() error {
	var v settings.Check
	if s.UploadPrefix != "" && !strings.HasPrefix(s.UploadPrefix, "s3://") {
		v.Add("LA_SUBMIT_UPLOAD is %q, want an s3:// prefix (or nothing: local images then go as file:// URLs)", s.UploadPrefix)
	}
	return v.Err()
}
