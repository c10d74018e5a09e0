package worker

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
)

// probeStatus is the HTTP status of GET url and its "status" field ("" when unreachable).
func probeStatus(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var body struct{ Status string }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Status
}

// probeBody is the body of GET url, for a failure message.
func probeBody(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Defect 4 through the whole worker: the shared consumer is deleted under it. /readyz
// answers 503 while the worker cannot pull and 200 again once the consumer is recreated;
// /health keeps the upstream contract (200 "ok": /predict still works); the recreation is
// on /metrics; a job published afterwards runs.
func TestWorkerRecreatesADeletedConsumerAndReadyzTellsIt(t *testing.T) {
	dataDir := t.TempDir()
	addr := freeport.MustAddr(t)
	cfg := singleMachineConfig(t, dataDir, addr)
	cfg.HTTP.Addr, cfg.Observe.MetricsAddr = freeport.MustAddr(t), freeport.MustAddr(t)
	startWorker(t, cfg, enginetest.New())
	js := publisher(t, addr)
	base, metrics := "http://"+cfg.HTTP.Addr, "http://"+cfg.Observe.MetricsAddr
	waitHealthy(t, base)
	testwait.Until(t, time.Minute, "/readyz to say ok", func() bool {
		code, _ := probeStatus(metrics + "/readyz")
		return code == http.StatusOK
	})

	// Watch the probes from now on, so that a short not-ready spell is seen.
	var mu sync.Mutex
	readyz := []int{http.StatusOK} // the changes of /readyz's status, from the 200 above
	healthNotOK := 0
	stopWatching := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatching:
				return
			case <-time.After(20 * time.Millisecond):
			}
			code, _ := probeStatus(metrics + "/readyz")
			hcode, hstatus := probeStatus(base + "/health")
			mu.Lock()
			if len(readyz) == 0 || readyz[len(readyz)-1] != code {
				readyz = append(readyz, code)
			}
			if hcode != http.StatusOK || hstatus != "ok" {
				healthNotOK++
			}
			mu.Unlock()
		}
	}()

	if err := js.DeleteConsumer(t.Context(), jobs.JobsStream, jobs.ConsumerName); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		seen := slices.Clone(readyz)
		mu.Unlock()
		if len(seen) >= 3 && seen[len(seen)-1] == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz went %v in 30 s (last: %s); want 200, 503, 200", seen, probeBody(metrics+"/readyz"))
		}
	}
	close(stopWatching)
	<-watched
	if readyz[0] != http.StatusOK || readyz[1] != http.StatusServiceUnavailable {
		t.Errorf("/readyz went %v; want 200, 503, 200", readyz)
	}
	if healthNotOK != 0 {
		t.Errorf("/health was not 200 ok %d times", healthNotOK)
	}
	if v, _ := sample(scrape(t, metrics+"/metrics"), "la_topology_recreated_total", map[string]string{"object": jobs.ConsumerName}); v != 1 {
		t.Errorf("la_topology_recreated_total{object=%q} = %v; want 1", jobs.ConsumerName, v)
	}

	publishJob(t, js, "after-delete", "dog")
	var r jobs.Result
	testwait.Until(t, time.Minute, "the job published after the deletion to finish", func() bool {
		var ok bool
		r, ok = readResult(t, dataDir, "after-delete")
		return ok
	})
	if r.Status != jobs.StatusSucceeded {
		t.Fatalf("status %s %+v", r.Status, r.Error)
	}
}
