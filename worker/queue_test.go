package worker

import (
	"strings"
	"testing"

	"github.com/locateanything/detect/config"
)

// TestQueueDescriptionHidesURLCredentials: /info names the queue and is not authenticated,
// so credentials written into LA_NATS_URL must not reach it.
func TestQueueDescriptionHidesURLCredentials(t *testing.T) {
	var cfg config.Worker
	cfg.NATS.URL = "nats://alice:s3cret@n1:4222,nats://t0ken@n2:4222"
	got := queueDescription(cfg)
	if strings.Contains(got, "s3cret") || strings.Contains(got, "t0ken") || !strings.Contains(got, "n1:4222") {
		t.Fatalf("queue described as %q; want the servers without their credentials", got)
	}
}
