package jobs

import (
	"testing"
	"time"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

func TestReplicatedTopologySurvivesANodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node JetStream cluster")
	}
	cluster := natstest.StartCluster(t, 3)
	cfg := TopologyConfig{Replicas: 3, AckWait: 5 * time.Second, MaxDeliver: 20}
	e := newTestEnvOn(t, cluster.URLs(), cfg)
	if got := e.topo.Jobs.CachedInfo().Config.Replicas; got != 3 {
		t.Fatalf("LA_JOBS has %d replicas, want 3", got)
	}
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))

	e.publishJob(t, Job{ID: "before", Image: img, Query: "dog"})
	if res := e.publishedResult(t, DefaultBatch, "before"); res.Status != StatusSucceeded {
		t.Fatalf("before the loss: %s %+v", res.Status, res.Error)
	}

	cluster.Servers[2].Shutdown() // two of three keep the quorum
	e.publishJob(t, Job{ID: "after", Image: img, Query: "dog"})
	if res := e.publishedResult(t, DefaultBatch, "after"); res.Status != StatusSucceeded {
		t.Fatalf("after the loss: %s %+v", res.Status, res.Error)
	}
}
