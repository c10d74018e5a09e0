package submit

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// RetryReport is what Retry did: the jobs published again, and those of the batch that
// failed but could not be, each with the reason.
type RetryReport struct {
	Batch   string      `json:"batch"`
	Retried []string    `json:"retried"`
	Skipped []RetrySkip `json:"skipped"`
}

// RetrySkip is a failed job Retry left alone, and why.
type RetrySkip struct {
	ID  string `json:"id"`
	Why string `json:"why"`
}

// Retry runs the failed jobs of batch again: each job of the batch whose latest result
// failed and that has a dead-letter record is replayed as DLQReplay does (state back to
// queued, cancel request cleared, the claim released so that the one new message owns
// the id, the original bytes published under a fresh message id, the records removed).
// Each job keeps one result per message and one owner at a time: the old message's
// claim is gone before the new one is published, and a job whose latest result is not
// a failure (it succeeded since, or is being retried) is left alone. A failed job
// without a record (its record aged out of LA_DLQ, LA_DLQ_MAX_AGE) or whose record is a
// duplicate_id loser's (the id belongs to another job) is skipped with the reason.
func (a *Admin) Retry(ctx context.Context, batch string) (RetryReport, error) {
	rep := RetryReport{Batch: batch, Retried: []string{}, Skipped: []RetrySkip{}}
	if !jobs.ValidToken(batch) {
		return rep, &ArgumentError{Err: fmt.Errorf("batch %q must be 1-128 characters of [A-Za-z0-9_-]", batch)}
	}
	latest := map[string]jobs.Status{}
	var order []string
	err := jobs.ReadStream(ctx, a.js, jobs.ResultsStream, jobs.ResultSubjectPrefix+batch+".>", func(m jetstream.Msg) error {
		var r jobs.Result
		if err := json.Unmarshal(m.Data(), &r); err != nil || r.ID == "" {
			return nil // not a result: nothing to retry
		}
		if _, seen := latest[r.ID]; !seen {
			order = append(order, r.ID)
		}
		latest[r.ID] = r.Status
		return nil
	})
	if err != nil {
		return rep, err
	}
	entries, err := a.DLQList(ctx)
	if err != nil {
		return rep, err
	}
	record := map[string]jobs.DLQRecord{} // each job's latest record
	for _, e := range entries {
		record[e.Record.ID] = e.Record
	}
	for _, id := range order {
		if latest[id] != jobs.StatusFailed {
			continue
		}
		rec, ok := record[id]
		switch {
		case !ok:
			rep.Skipped = append(rep.Skipped, RetrySkip{ID: id, Why: "no dead-letter record (older than LA_DLQ_MAX_AGE, or removed): the job's bytes are gone; submit its input again"})
			continue
		case rec.Code == jobs.CodeDuplicateID:
			rep.Skipped = append(rep.Skipped, RetrySkip{ID: id, Why: "its message lost the id to another job (duplicate_id): submit it under an id of its own"})
			continue
		}
		if err := a.DLQReplay(ctx, id); err != nil {
			return rep, err
		}
		rep.Retried = append(rep.Retried, id)
	}
	return rep, nil
}

// RetryEnded runs again the jobs of batch whose latest result has one of statuses
// (canceled, expired). Only failed jobs are dead-lettered, so the queue keeps nothing of
// these: each is published again from the job submit recorded in outDir, the batch's
// output directory, when it published it (submit-state.jsonl). It goes out as Replay
// sends a dead-lettered job (jobs.Republish: state back to queued, cancel request cleared,
// claim released, then the same job bytes under a fresh message id,
// retry.<id>.<the ended result's sequence in LA_RESULTS>), so the id is kept and the
// batch's rerun of `submit run` collects the new result. outDir is the producer's file,
// and the republish runs with the operator's rights, so a recorded job goes out only when
// its bytes are those of the message that owned the id: claim.<id>'s digest
// (jobs.Digest, as the worker computed it) and batch must match. Skipped with the reason:
// a job outDir holds no record of (published by another producer, or by a submit that
// predates the record) or whose publish was acked as a duplicate (another message held
// the id); an expired one (its deadline is in its bytes: it would expire again at once);
// one whose state is no longer terminal (retried already and not ended again); and one
// whose record does not match its claim, or that has no claim.
func (a *Admin) RetryEnded(ctx context.Context, batch, outDir string, statuses ...jobs.Status) (RetryReport, error) {
	rep := RetryReport{Batch: batch, Retried: []string{}, Skipped: []RetrySkip{}}
	if !jobs.ValidToken(batch) {
		return rep, &ArgumentError{Err: fmt.Errorf("batch %q must be 1-128 characters of [A-Za-z0-9_-]", batch)}
	}
	local, err := readOutState(outDir, false)
	if err != nil {
		return rep, fmt.Errorf("output directory %s: %w", outDir, err)
	}
	switch {
	case !local.HasHeader:
		return rep, &ArgumentError{Err: fmt.Errorf("%s has no %s: not the output directory of a submit run", outDir, StateFile)}
	case local.Header.Batch != batch:
		return rep, &ArgumentError{Err: fmt.Errorf("%s is the output directory of batch %s, not %s", outDir, local.Header.Batch, batch)}
	}
	type ended struct {
		status jobs.Status
		seq    uint64
	}
	latest := map[string]ended{}
	var order []string
	err = jobs.ReadStream(ctx, a.js, jobs.ResultsStream, jobs.ResultSubjectPrefix+batch+".>", func(m jetstream.Msg) error {
		var r jobs.Result
		if err := json.Unmarshal(m.Data(), &r); err != nil || r.ID == "" {
			return nil // not a result: nothing to retry
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", jobs.ResultsStream, err)
		}
		if _, seen := latest[r.ID]; !seen {
			order = append(order, r.ID)
		}
		latest[r.ID] = ended{r.Status, md.Sequence.Stream}
		return nil
	})
	if err != nil {
		return rep, err
	}
	subject := jobs.JobSubject(cmp.Or(local.Header.Class, jobs.DefaultClass))
	for _, id := range order {
		e := latest[id]
		if !slices.Contains(statuses, e.status) {
			continue
		}
		job := local.Jobs[id]
		switch {
		case job == nil && local.Duplicates[id]:
			rep.Skipped = append(rep.Skipped, RetrySkip{ID: id, Why: "its publish was acknowledged as a duplicate: " +
				"the stream already held another message with this id, so the job recorded in " + outDir + " is not what ran"})
			continue
		case job == nil:
			rep.Skipped = append(rep.Skipped, RetrySkip{ID: id, Why: fmt.Sprintf("%s holds no record of this job "+
				"(published by another producer, or by an older submit): publish it again from its input", outDir)})
			continue
		case e.status == jobs.StatusExpired:
			rep.Skipped = append(rep.Skipped, RetrySkip{ID: id, Why: "it expired: its deadline is part of its bytes, " +
				"so the same job would expire again at once; submit its input again with a later deadline"})
			continue
		}
		st, ok, err := a.state.Get(ctx, id)
		if err != nil {
			return rep, err
		}
		if ok && !st.Status.Terminal() {
			rep.Skipped = append(rep.Skipped, RetrySkip{ID: id, Why: fmt.Sprintf("it is %s again (retried already)", st.Status)})
			continue
		}
		data, err := json.Marshal(job)
		if err != nil {
			return rep, fmt.Errorf("retry job %s: encoding: %w", id, err)
		}
		// The record is the producer's file: publish it, with the operator's rights, only
		// when it is exactly the message that owned the id, as the worker that claimed it
		// saw it (the same digest of the same bytes, of this batch).
		claim, ok, err := a.state.ClaimOf(ctx, id)
		if err != nil {
			return rep, fmt.Errorf("retry job %s: %w", id, err)
		}
		switch {
		case !ok:
			rep.Skipped = append(rep.Skipped, RetrySkip{ID: id, Why: fmt.Sprintf("no %s: the message that ran under "+
				"this id is not known, so the job recorded in %s cannot be checked against it", jobs.ClaimKey(id), outDir)})
			continue
		case claim.Digest != jobs.Digest(data) || claim.Batch != batch || job.Batch != batch:
			rep.Skipped = append(rep.Skipped, RetrySkip{ID: id, Why: fmt.Sprintf("the job recorded in %s is not the "+
				"message that owned this id (%s: stream sequence %d, batch %s, other bytes or batch): not published again",
				outDir, jobs.ClaimKey(id), claim.StreamSeq, claim.Batch)})
			continue
		}
		if err := jobs.Republish(ctx, a.js, a.state, subject, id, data, jobs.RepublishMsgID("retry", id, e.seq)); err != nil {
			return rep, fmt.Errorf("retry job %s: %w", id, err)
		}
		rep.Retried = append(rep.Retried, id)
	}
	return rep, nil
}
