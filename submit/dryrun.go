package submit

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/jobs"
)

// DryRunReport is what Run would do with the same inputs and output directory.
type DryRunReport struct {
	// Batch is the output directory's batch or --batch; "" when a run would name a new one
	// (the job ids below then change with that name, and are left out).
	Batch       string `json:"batch"`
	Total       int    `json:"total"`        // distinct jobs in the input set
	ToSubmit    int    `json:"to_submit"`    // would be published
	AlreadyDone int    `json:"already_done"` // have a row in results.jsonl
	Succeeded   int    `json:"succeeded"`    // of those already done
	Failed      int    `json:"failed"`       // of those already done: failed, canceled or expired
	// Waiting were published before (by a run into this directory or, per the state
	// bucket, by any other) and have no row yet: a run waits for them, publishing nothing.
	Waiting int `json:"waiting"`
	// StateChecked says the state bucket was consulted; false when NATS was not reachable,
	// so jobs published by other runs count as to submit.
	StateChecked bool        `json:"state_checked"`
	Jobs         []DryRunJob `json:"jobs"` // those to submit, by source
}

// DryRunJob is one job a run would publish.
type DryRunJob struct {
	ID     string      `json:"id,omitempty"` // "" when the batch is not named yet
	Source string      `json:"source"`
	File   string      `json:"file"` // the image's path below its input (the output mirrors it)
	Query  string      `json:"query"`
	Task   engine.Task `json:"task"`
}

// DryRun plans the input set as Run does (listing the inputs, hashing local images, asking
// the state bucket when env.JS is set) and reports what Run would publish and what is
// already done, without uploading, publishing or writing anything.
func DryRun(ctx context.Context, cfg RunConfig, env Env) (DryRunReport, error) {
	cfg.dryRun = true
	r, err := newBatchRun(ctx, cfg, env)
	if err != nil {
		return DryRunReport{}, err
	}
	rep := DryRunReport{Batch: r.cfg.Defaults.Batch, StateChecked: r.state != nil}
	named := r.prior.HasHeader || cfg.Defaults.Batch != ""
	if !named {
		rep.Batch = ""
	}
	planCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for p := range r.startPlanners(planCtx, &wg) {
		if p.err != nil {
			return rep, p.err
		}
		id := p.job.ID
		if _, dup := r.expected[id]; dup {
			continue
		}
		r.expected[id] = expectedJob{source: p.source}
		row, hadRow := r.prior.Done[id]
		switch {
		case hadRow && !replayedSince(row, p):
			rep.AlreadyDone++
			if row.Status == jobs.StatusSucceeded {
				rep.Succeeded++
			} else {
				rep.Failed++
			}
		case hadRow || p.hasState || r.prior.Published[id]:
			rep.Waiting++
		default:
			j := DryRunJob{Source: p.source, File: p.rel, Query: p.job.Query, Task: p.job.Task}
			if named {
				j.ID = id
			}
			rep.Jobs = append(rep.Jobs, j)
		}
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	slices.SortFunc(rep.Jobs, func(a, b DryRunJob) int { return strings.Compare(a.Source, b.Source) })
	if rep.Jobs == nil {
		rep.Jobs = []DryRunJob{}
	}
	rep.Total, rep.ToSubmit = len(r.expected), len(rep.Jobs)
	return rep, nil
}

// Print prints the report for people: each job a run would publish, then the counts.
func (rep DryRunReport) Print(w io.Writer) {
	if rep.Batch == "" {
		fmt.Fprintln(w, "batch: new (a run names it; job ids follow from the name)")
	} else {
		fmt.Fprintf(w, "batch %s\n", rep.Batch)
	}
	for _, j := range rep.Jobs {
		if j.ID != "" {
			fmt.Fprintf(w, "would submit %s  (job %s)\n", j.Source, j.ID)
		} else {
			fmt.Fprintf(w, "would submit %s\n", j.Source)
		}
	}
	fmt.Fprintf(w, "%d would be submitted, %d already done (%d succeeded, %d failed), %d queued before and waited for; %d jobs in all\n",
		rep.ToSubmit, rep.AlreadyDone, rep.Succeeded, rep.Failed, rep.Waiting, rep.Total)
}
