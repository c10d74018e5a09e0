package worker

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/jobs/natsembed"
)

// connectNATS connects to LA_NATS_URL, or, when it is empty, starts the embedded server
// (store under LA_DATA_DIR/jetstream, listening on LA_NATS_LISTEN) and connects to that.
// embedded is nil when an external server is used; the caller shuts it down after
// closing the connection.
func connectNATS(cfg config.Worker, log *slog.Logger) (nc *nats.Conn, embedded *natsembed.Server, err error) {
	url := cfg.NATS.URL
	if url == "" {
		store := filepath.Join(cfg.DataDir, "jetstream")
		embedded, err = natsembed.Start(natsembed.Options{Listen: cfg.Embedded.Listen, StoreDir: store, Logger: log})
		if err != nil {
			return nil, nil, fmt.Errorf("%w (set LA_NATS_LISTEN to another address, or LA_NATS_URL to use an existing server)", err)
		}
		url = embedded.ClientURL()
		log.Info("embedded NATS server started", "url", url, "store", store)
	}
	nc, err = cfg.NATS.Conn().Connect(url, "la-worker "+cfg.Runner.WorkerName, log)
	if err != nil {
		if embedded != nil {
			embedded.Shutdown()
		}
		return nil, nil, err
	}
	return nc, embedded, nil
}
