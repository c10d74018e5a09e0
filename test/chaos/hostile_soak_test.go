//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/testimage"
	"github.com/locateanything/detect/jobs"
)

// TestSoakHostile mixes hostile producers into a stream of good jobs, all through one
// worker on the single-machine default with NATS roles on (producers log in as producers,
// the accounting as the operator) and a small decoded-image budget. Every fourth job or so
// is an attack of one of these kinds, in a random order:
//
//   - same-id race: two messages with one id and different content (batch, query,
//     image), published back to back under different Nats-Msg-Ids;
//   - resubmission: the same bytes again under a new Nats-Msg-Id;
//   - squat: a job whose output is the folder <results>/<victim>.json/, then the victim;
//   - bombs: four PNGs of 4000x3000 16-bit pixels in a row (each fits the budget, four do
//     not), and one of 8000x5000 (more than the whole budget);
//   - forged state and results: a producer writes <id> = succeeded into LA_JOB_STATE and
//     publishes a result on la.results.>, then publishes the job itself.
//
// The pass condition: the ordinary accounting for every job (nothing lost, each outcome as
// the wire contract says); for each race, one owner (succeeded, stored, its own content)
// and one loser (duplicate_id on its own batch's subject, dead-lettered, nothing of the
// owner's overwritten); a resubmission adds no result; every forgery refused by the
// server; the worker's resident memory never above its start plus twice the image budget
// plus 256 MiB (docs/worker.md, "Memory"). CHAOS_SOAK=1 runs CHAOS_SOAK_JOBS (10,000) jobs;
// without it, the bounded form runs 160 within make test.
func TestSoakHostile(t *testing.T) {
	jobsN := 160
	if os.Getenv("CHAOS_SOAK") == "1" {
		jobsN = envInt(t, "CHAOS_SOAK_JOBS", 10_000)
	}
	if testing.Short() {
		t.Skip("the chaos suite starts real processes; -short skips it")
	}
	seed := uint64(envInt(t, "CHAOS_SEED", int(time.Now().UnixNano()%1_000_000)))
	rng := rand.New(rand.NewPCG(seed, seed))
	const budget = 256 << 20
	t.Logf("hostile soak: %d jobs, image budget %d MiB, CHAOS_SEED=%d", jobsN, budget>>20, seed)

	s := newScene(t)
	addr := freeport.MustAddr(t)
	w := s.worker("w1", map[string]string{
		"LA_NATS_LISTEN":            addr,
		"LA_NATS_USER":              "producer",
		"LA_NATS_PASSWORD":          "producer-secret",
		"LA_NATS_OPERATOR_USER":     "operator",
		"LA_NATS_OPERATOR_PASSWORD": "operator-secret",
		"LA_PREFETCH":               "4",
		"LA_MAX_DECODED_BYTES":      fmt.Sprint(budget),
	})
	bombs := map[string][]byte{
		"medium.png": testimage.UniformPNG(4000, 3000, true), // 96 MB decoded
		"huge.png":   testimage.UniformPNG(8000, 5000, true), // 320 MB decoded: over the budget
	}
	for name, b := range bombs {
		if err := os.WriteFile(filepath.Join(s.images, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w.start(t)
	s.connect("nats://operator:operator-secret@" + addr)
	prod := connect(t, "nats://producer:producer-secret@"+addr)
	rss := &rssSamples{}
	rss0, _ := w.proc.rssKB()
	rss.add(rss0, 0)

	h := &hostileSoak{s: s, prod: prod, rng: rng}
	start := time.Now()
	for i := 0; h.published < jobsN; i++ {
		for h.answered-s.resultCount() > 40 { // a bounded backlog: latency is the job's
			time.Sleep(50 * time.Millisecond)
		}
		if i%50 == 0 {
			if kb, err := w.proc.rssKB(); err == nil {
				rss.add(kb, s.resultCount())
			}
		}
		if rng.IntN(4) > 0 {
			h.good(i)
			continue
		}
		h.attack(i)
	}
	r := s.account(10 * time.Minute)
	if kb, err := w.proc.rssKB(); err == nil {
		rss.add(kb, s.resultCount())
	}
	h.checkRaces(t)
	h.checkResubmissions(t)
	w.checkLog(t)
	if w.starts != 1 || !w.proc.alive() {
		t.Error("the worker did not survive the hostile producers")
	}
	_, _, peak := rss.summary()
	bound := rss0 + 2*budget/1024 + 256<<10
	if peak > bound {
		t.Errorf("worker RSS peaked at %.0f MiB; the bound is %.0f MiB (start %.0f MiB + 2 x the %d MiB image budget + 256 MiB)",
			mib(peak), mib(bound), mib(rss0), budget>>20)
	}
	t.Logf("hostile soak figures (CHAOS_SEED=%d):\n"+
		"  jobs      %d tracked (%d messages) in %s (%.1f messages/s); attacks: %s\n"+
		"  outcome   %s\n"+
		"  races     %d pairs, each one owner and one duplicate_id loser\n"+
		"  forgeries %d refused by the server\n"+
		"  RSS       %.0f MiB at start, peak %.0f MiB (bound %.0f MiB)",
		seed, r.Published, h.published, time.Since(start).Round(time.Second), float64(h.published)/time.Since(start).Seconds(),
		h.kindSummary(), r.String(), len(h.races), h.forgeriesRefused, mib(rss0), mib(peak), mib(bound))
}

// hostileSoak is the publishing side of TestSoakHostile.
type hostileSoak struct {
	s         *scene
	prod      *client // logged in as a producer
	rng       *rand.Rand
	published int // messages published, attacks included
	answered  int // of them, those that get a result message (a resubmission gets none)

	kinds            map[string]int
	races            []racePair
	resubmitted      []string // ids published twice with the same bytes
	forgeriesRefused int
}

// racePair is two messages with one id and different content.
type racePair struct {
	id      string
	batches [2]string
	queries [2]string
}

func (h *hostileSoak) count(kind string) {
	if h.kinds == nil {
		h.kinds = map[string]int{}
	}
	h.kinds[kind]++
}

func (h *hostileSoak) kindSummary() string {
	var parts []string
	for _, k := range []string{"race", "resubmit", "squat", "bombs", "forge"} {
		parts = append(parts, fmt.Sprintf("%s %d", k, h.kinds[k]))
	}
	return strings.Join(parts, ", ")
}

func (h *hostileSoak) submitJob(j jobs.Job, w want) {
	h.s.t.Helper()
	if err := h.s.led.submitJob(h.prod, j, h.s.results, w); err != nil {
		h.s.t.Fatal(err)
	}
	h.published++
	h.answered++
}

// publishRaw publishes data under msgID without recording it in the ledger; answered says
// whether it gets a result message of its own.
func (h *hostileSoak) publishRaw(data []byte, msgID string, answered bool) {
	h.s.t.Helper()
	if _, err := h.prod.publish(jobs.JobSubject(jobs.DefaultClass), data, msgID, 2*time.Minute); err != nil {
		h.s.t.Fatal(err)
	}
	h.published++
	if answered {
		h.answered++
	}
}

func (h *hostileSoak) good(i int) {
	h.submitJob(jobs.Job{ID: fmt.Sprintf("good-%05d", i), Image: h.s.imageURL(i), Query: "red circle"}, succeeded)
}

func (h *hostileSoak) attack(i int) {
	t := h.s.t
	switch h.rng.IntN(5) {
	case 0: // two messages, one id, different content
		h.count("race")
		p := racePair{id: fmt.Sprintf("race-%05d", i), batches: [2]string{"race-a", "race-b"},
			queries: [2]string{"red circle", "blue square"}}
		for k := range 2 {
			j := jobs.Job{ID: p.id, Image: h.s.imageURL(i + k), Query: p.queries[k], Batch: p.batches[k],
				Metadata: json.RawMessage(fmt.Sprintf(`{"side":%d}`, k))}
			data, err := json.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			h.publishRaw(data, fmt.Sprintf("%s-%d", p.id, k), true)
		}
		h.races = append(h.races, p)
	case 1: // the same bytes under a new message id: answered by the first result
		h.count("resubmit")
		j := jobs.Job{ID: fmt.Sprintf("again-%05d", i), Image: h.s.imageURL(i), Query: "red circle"}
		h.submitJob(j, succeeded)
		data, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		h.publishRaw(data, j.ID+"-again", false)
		h.resubmitted = append(h.resubmitted, j.ID)
	case 2: // a squatter on the victim's result name, then the victim
		h.count("squat")
		victim := fmt.Sprintf("victim-%05d", i)
		squat := jobs.Job{ID: fmt.Sprintf("squat-%05d", i), Image: h.s.imageURL(i), Query: "red circle",
			Output: h.s.results + victim + ".json/"}
		data, err := json.Marshal(squat)
		if err != nil {
			t.Fatal(err)
		}
		// Refused up front, its result is stored under the worker's default output.
		if err := h.s.led.submit(h.prod, data, squat.ID, squat.ID, h.s.results, want{status: jobs.StatusFailed, code: jobs.CodeBadURL}); err != nil {
			t.Fatal(err)
		}
		h.published++
		h.answered++
		h.submitJob(jobs.Job{ID: victim, Image: h.s.imageURL(i), Query: "red circle"}, succeeded)
	case 3: // four images that fit the budget one at a time, and one that never fits
		h.count("bombs")
		for k := range 4 {
			h.submitJob(jobs.Job{ID: fmt.Sprintf("bomb-%05d-%d", i, k), Image: "file://" + filepath.Join(h.s.images, "medium.png"),
				Query: "red circle"}, succeeded)
		}
		h.submitJob(jobs.Job{ID: fmt.Sprintf("bomb-%05d-huge", i), Image: "file://" + filepath.Join(h.s.images, "huge.png"),
			Query: "red circle"}, want{status: jobs.StatusFailed, code: "image_too_large"})
	case 4: // forged state and a forged result, then the job itself
		h.count("forge")
		id := fmt.Sprintf("forged-%05d", i)
		h.forge(id)
		h.submitJob(jobs.Job{ID: id, Image: h.s.imageURL(i), Query: "red circle"}, succeeded)
	}
}

// forge tries, as a producer, to mark job id succeeded in the state bucket and to publish
// a result for it; the server must refuse both.
func (h *hostileSoak) forge(id string) {
	t := h.s.t
	// A refused request is never answered: it ends at its deadline, kept short.
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	kv, err := h.prod.js.KeyValue(ctx, jobs.StateBucket) // producers may read the state
	if err != nil {
		t.Fatalf("a producer cannot open %s to read job state: %v", jobs.StateBucket, err)
	}
	if _, err := kv.Put(ctx, id, []byte(`{"status":"succeeded"}`)); err == nil {
		t.Errorf("a producer wrote the state of job %s", id)
	} else {
		h.forgeriesRefused++
	}
	forged := fmt.Sprintf(`{"id":%q,"status":"succeeded","result_url":"file:///etc/shadow"}`, id)
	if _, err := h.prod.js.Publish(ctx, jobs.ResultSubject(jobs.DefaultBatch, id), []byte(forged),
		jetstream.WithMsgID(id+"-forged")); err == nil {
		t.Errorf("a producer published a result for job %s", id)
	} else {
		h.forgeriesRefused++
	}
}

// checkRaces checks every same-id pair: one owner that succeeded with its own content
// stored, one loser failed duplicate_id on its own batch and dead-lettered once.
func (h *hostileSoak) checkRaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results, err := readStream(ctx, h.s.c, jobs.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := readStream(ctx, h.s.c, jobs.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	states, err := readStates(ctx, h.s.c)
	if err != nil {
		t.Fatal(err)
	}
	resultsByID, dlqByID := groupByID(results, jobs.ResultSubjectPrefix), groupByID(dlq, jobs.DLQSubjectPrefix)
	bad := 0
	for _, p := range h.races {
		if why := h.checkRace(ctx, p, resultsByID[p.id], dlqByID[p.id], states[p.id]); why != "" {
			if bad++; bad <= 20 {
				t.Errorf("race %s: %s", p.id, why)
			}
		}
	}
	if bad > 20 {
		t.Errorf("... %d of %d races wrong in all", bad, len(h.races))
	}
}

func (h *hostileSoak) checkRace(ctx context.Context, p racePair, results, dlq []streamMsg, st *jobs.State) string {
	if st == nil || st.Status != jobs.StatusSucceeded {
		return fmt.Sprintf("state %+v; want the owner's succeeded", st)
	}
	owner, loser := -1, -1
	for _, m := range results {
		var res jobs.Result
		if err := json.Unmarshal(m.data, &res); err != nil {
			return "a result message is not a result: " + err.Error()
		}
		side := -1
		for k := range 2 {
			if res.Batch == p.batches[k] && m.subject == jobs.ResultSubject(p.batches[k], p.id) {
				side = k
			}
		}
		switch {
		case side < 0:
			return fmt.Sprintf("result on %s with batch %q belongs to neither message", m.subject, res.Batch)
		case res.Status == jobs.StatusSucceeded && res.Query == p.queries[side]:
			if owner >= 0 && owner != side {
				return "both messages succeeded"
			}
			owner = side
		case res.Status == jobs.StatusFailed && res.Error != nil && res.Error.Code == jobs.CodeDuplicateID:
			if res.ResultURL != "" {
				return "the loser's result names a stored file " + res.ResultURL
			}
			loser = side
		default:
			return fmt.Sprintf("unexpected result %s %+v on %s", res.Status, res.Error, m.subject)
		}
	}
	if owner < 0 || loser < 0 || owner == loser {
		return fmt.Sprintf("owner side %d, loser side %d in %d results; want one of each", owner, loser, len(results))
	}
	if len(dlq) != 1 {
		return fmt.Sprintf("%d dead-letter records; want the loser's one", len(dlq))
	}
	var rec jobs.DLQRecord
	if err := json.Unmarshal(dlq[0].data, &rec); err != nil || rec.Code != jobs.CodeDuplicateID || rec.Batch != p.batches[loser] {
		return fmt.Sprintf("dead-letter record %+v (%v); want duplicate_id of batch %s", rec, err, p.batches[loser])
	}
	b, err := h.s.read(ctx, jobs.ResultURL(h.s.results, p.id))
	if err != nil {
		return "the owner's result is not stored: " + err.Error()
	}
	var stored jobs.Result
	if err := json.Unmarshal(b, &stored); err != nil {
		return "stored result: " + err.Error()
	}
	if stored.Batch != p.batches[owner] || stored.Query != p.queries[owner] || stored.Status != jobs.StatusSucceeded {
		return fmt.Sprintf("stored result is batch %s query %q %s; want the owner's (batch %s)", stored.Batch, stored.Query,
			stored.Status, p.batches[owner])
	}
	return ""
}

// checkResubmissions checks that the same bytes under a new message id added no result.
func (h *hostileSoak) checkResubmissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results, err := readStream(ctx, h.s.c, jobs.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	byID := groupByID(results, jobs.ResultSubjectPrefix)
	for _, id := range h.resubmitted {
		if n := len(byID[id]); n != 1 {
			t.Errorf("resubmitted job %s has %d result messages; want the first's one", id, n)
		}
	}
}
