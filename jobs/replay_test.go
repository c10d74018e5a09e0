package jobs

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// replayJob is the bytes of a valid job id of batch b.
func replayJob(t *testing.T, id string) []byte {
	t.Helper()
	data, err := json.Marshal(Job{V: SchemaVersion, ID: id, Image: "s3://images/x.png", Query: "car", Batch: "b"})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// endJob leaves job id as a worker leaves an ended one: a terminal state and its claim.
func endJob(t *testing.T, topo *Topology, id string, data []byte) {
	t.Helper()
	if err := topo.State.Put(t.Context(), id, State{Status: StatusCanceled}); err != nil {
		t.Fatal(err)
	}
	c, err := json.Marshal(Claim{StreamSeq: 1, Subject: JobSubject(DefaultClass), Batch: "b", Digest: Digest(data), Worker: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.State.KV().Put(t.Context(), ClaimKey(id), c); err != nil {
		t.Fatal(err)
	}
}

// A replay of job X at DLQ sequence 57 is not swallowed by the duplicate window when a real
// job whose id is what the old scheme made of it (X-replay-57, X-retry-57: ids may hold
// '-') was published just before under its own id, as producers publish: the replay is
// stored, as the job's bytes under its own message id.
func TestReplayNotSwallowedByJobNamedLikeItsMessageID(t *testing.T) {
	js, topo := connectTopology(t, natstest.Start(t), testTopology())
	ctx := t.Context()
	for _, kind := range []string{"replay", "retry"} {
		id := "X" + kind
		other := id + "-" + kind + "-57"
		if _, err := js.Publish(ctx, JobSubject(DefaultClass), replayJob(t, other), jetstream.WithMsgID(other)); err != nil {
			t.Fatal(err)
		}
		data := replayJob(t, id)
		endJob(t, topo, id, data)
		var err error
		if kind == "replay" {
			err = Replay(ctx, js, topo.State, nil, 57, DLQRecord{ID: id, Code: CodeCanceled, Subject: JobSubject(DefaultClass), Job: data})
		} else {
			err = Republish(ctx, js, topo.State, JobSubject(DefaultClass), id, data, RepublishMsgID(kind, id, 57))
		}
		if err != nil {
			t.Fatalf("%s of %s: %v", kind, id, err)
		}
		m, err := topo.Jobs.GetLastMsgForSubject(ctx, JobSubject(DefaultClass))
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != string(data) || m.Header.Get(nats.MsgIdHdr) == other {
			t.Errorf("%s of %s: the last job message is %s (msg id %q); want the job's own bytes, published after %s",
				kind, id, m.Data, m.Header.Get(nats.MsgIdHdr), other)
		}
		if st, _, err := topo.State.Get(ctx, id); err != nil || st.Status != StatusQueued {
			t.Errorf("%s of %s: state %v, %v; want queued", kind, id, st.Status, err)
		}
	}
}

// Republish returns an error when JetStream acknowledges its publish as a duplicate (no
// message was stored), and leaves the job as it found it: its terminal state and its
// claim, not queued with no message.
func TestRepublishDuplicateAckIsAnError(t *testing.T) {
	js, topo := connectTopology(t, natstest.Start(t), testTopology())
	ctx := t.Context()
	data := replayJob(t, "Y")
	msgID := RepublishMsgID("retry", "Y", 3)
	if _, err := js.Publish(ctx, JobSubject(DefaultClass), data, jetstream.WithMsgID(msgID)); err != nil {
		t.Fatal(err)
	}
	endJob(t, topo, "Y", data)
	err := Republish(ctx, js, topo.State, JobSubject(DefaultClass), "Y", data, msgID)
	if err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("Republish under a message id already in the window: %v; want a duplicate error", err)
	}
	if st, _, err := topo.State.Get(ctx, "Y"); err != nil || st.Status != StatusCanceled {
		t.Errorf("after the duplicate: state %v, %v; want canceled, as before", st.Status, err)
	}
	if c, ok, err := topo.State.ClaimOf(ctx, "Y"); err != nil || !ok || c.Digest != Digest(data) {
		t.Errorf("after the duplicate: claim %+v, %v, %v; want the old one back", c, ok, err)
	}
	if info, err := topo.Jobs.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Errorf("LA_JOBS: %v, %v; want the one first message", info, err)
	}
}
