package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/cli"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/submit"
)

// The inspection and administration commands: status, batches, cancel and dlq. Each
// parses its flags anywhere among its arguments, prints for people or, with --json, JSON.

// adminFor connects to NATS and opens the storage (when configured) for the admin
// commands; the function returned closes both.
func adminFor(ctx context.Context, cfg config.Submit) (*submit.Admin, func(), error) {
	js, closeNATS, err := connect(cfg)
	if err != nil {
		return nil, nil, err
	}
	store, closeStore, err := openStore(cfg)
	if err != nil {
		closeNATS()
		return nil, nil, err
	}
	closeAll := func() { closeStore(); closeNATS() }
	a, err := submit.NewAdmin(ctx, js, store)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return a, closeAll, nil
}

// withAdmin loads the configuration, connects and runs fn; the exit code is fn's, or that
// of what failed first.
func withAdmin(ctx context.Context, cio IO, fn func(*submit.Admin) error) int {
	cfg, code, ok := configure(cio)
	if !ok {
		return code
	}
	a, closeAll, err := adminFor(ctx, cfg)
	if err != nil {
		return fail(cio, err)
	}
	defer closeAll()
	if err := fn(a); err != nil {
		return fail(cio, a.Refused(err))
	}
	return ExitOK
}

// statusOptions are `submit status`'s flags.
type statusOptions struct {
	batch, out string
	limit      int
	json       bool
}

func statusFlags(o *statusOptions) *flag.FlagSet {
	fs := newFlags("status")
	fs.StringVar(&o.batch, "batch", "", "count the jobs and results of batch `B`; with a SOURCE, look only in that batch")
	fs.StringVar(&o.out, "out", "", "output `DIR` of the run that submitted a SOURCE (default: the current directory, when it is one)")
	fs.IntVar(&o.limit, "limit", 10, "with no argument: show the `N` most recent batches (0: all)")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	return fs
}

func statusHelp(cio IO) cli.Help {
	var o statusOptions
	return withEnv(cli.Help{
		Usage: []string{"submit status [--json] [--limit N]", "submit status [--json] --batch B",
			"submit status [--json] ID | ID-PREFIX", "submit status [--json] [--out DIR] [--batch B] SOURCE"},
		Summary: "With no argument: the jobs in the queue, the dead-lettered ones and the most recent batches.\n" +
			"With --batch: that batch's jobs in the queue and its results by status. With a job id, or\n" +
			"at least " + fmt.Sprint(submit.MinPrefix) + " leading characters of one: its state, attempt, worker, cancel request and latest\n" +
			"result. With a SOURCE (an image path as given to submit, its path below the input, or a\n" +
			"URL): the jobs made from it, found in the output directory's records, else in LA_RESULTS\n" +
			"and LA_JOBS by the image's URL (or its uploaded copy).",
		Flags: statusFlags(&o),
	}, cio)
}

func statusCmd(ctx context.Context, args []string, cio IO) int {
	var o statusOptions
	rest, err := parseFlags(statusFlags(&o), args)
	if err != nil {
		return fail(cio, err)
	}
	if len(rest) > 1 {
		return fail(cio, usagef("status: give one SOURCE, job ID or ID prefix, or none"))
	}
	return withAdmin(ctx, cio, func(a *submit.Admin) error {
		switch {
		case len(rest) == 1:
			return printStatuses(ctx, a, rest[0], o, cio)
		case o.batch != "":
			b, err := a.BatchStatus(ctx, o.batch)
			if err != nil {
				return err
			}
			if o.json {
				return submit.WriteJSON(cio.Stdout, b)
			}
			b.Print(cio.Stdout)
			return nil
		}
		ov, err := a.Overview(ctx, o.limit)
		if err != nil {
			return err
		}
		if o.json {
			return submit.WriteJSON(cio.Stdout, ov)
		}
		ov.Print(cio.Stdout)
		return nil
	})
}

// printStatuses prints the status of the job arg names: a job id, an id prefix (one job:
// an object in JSON) or a source image (every job made from it: an array).
func printStatuses(ctx context.Context, a *submit.Admin, arg string, o statusOptions, cio IO) error {
	if jobs.ValidToken(arg) {
		s, err := jobByIDOrPrefix(ctx, a, arg)
		if err != nil {
			return err
		}
		if o.json {
			return submit.WriteJSON(cio.Stdout, s)
		}
		s.Print(cio.Stdout)
		return nil
	}
	dir := o.out
	if dir == "" && isOutDir(".") {
		dir = "."
	}
	ids, err := a.SourceJobs(ctx, arg, dir, o.batch)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		where := "LA_RESULTS or LA_JOBS"
		if dir != "" {
			where = dir + ", " + where
		}
		return fmt.Errorf("no job was made from %s (looked in %s; --out names the run's output directory): %w", arg, where, submit.ErrUnknownJob)
	}
	all := make([]submit.JobStatus, 0, len(ids))
	for _, id := range ids {
		s, err := a.Status(ctx, id)
		if errors.Is(err, submit.ErrUnknownJob) {
			s = submit.JobStatus{ID: id, Status: "unknown"} // recorded here, expired there
		} else if err != nil {
			return err
		}
		all = append(all, s)
	}
	if o.json {
		return submit.WriteJSON(cio.Stdout, all)
	}
	for _, s := range all {
		s.Print(cio.Stdout)
	}
	return nil
}

// jobByIDOrPrefix is the status of job id, or of the one job whose id starts with it.
func jobByIDOrPrefix(ctx context.Context, a *submit.Admin, id string) (submit.JobStatus, error) {
	s, err := a.Status(ctx, id)
	if !errors.Is(err, submit.ErrUnknownJob) || len(id) < submit.MinPrefix {
		return s, err
	}
	const most = 10
	ids, perr := a.JobsWithPrefix(ctx, id, most)
	switch {
	case perr != nil:
		return s, perr
	case len(ids) == 0:
		return s, err
	case len(ids) > 1:
		more := ""
		if len(ids) > most {
			ids, more = ids[:most], ", ..."
		}
		return s, &submit.ArgumentError{Err: fmt.Errorf("%q is the start of several job ids (%s%s): give more of it", id, strings.Join(ids, ", "), more)}
	}
	return a.Status(ctx, ids[0])
}

// isOutDir reports whether dir is a submit output directory.
func isOutDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, submit.StateFile))
	return err == nil
}

// batchesOptions are `submit batches`'s flags.
type batchesOptions struct {
	limit int
	json  bool
}

func batchesFlags(o *batchesOptions) *flag.FlagSet {
	fs := newFlags("batches")
	fs.IntVar(&o.limit, "limit", 0, "show the `N` most recent batches (0: all)")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	return fs
}

func batchesHelp(cio IO) cli.Help {
	var o batchesOptions
	return withEnv(cli.Help{
		Usage: []string{"submit batches [--json] [--limit N]"},
		Summary: "Lists every batch with jobs in LA_JOBS or results in LA_RESULTS, the latest activity\n" +
			"first: jobs in the queue (queued or running), jobs finished and their latest results by\n" +
			"status. It reads both streams whole, so it takes a moment on a deep queue.",
		Flags: batchesFlags(&o),
	}, cio)
}

func batchesCmd(ctx context.Context, args []string, cio IO) int {
	var o batchesOptions
	rest, err := parseFlags(batchesFlags(&o), args)
	if err != nil {
		return fail(cio, err)
	}
	if len(rest) > 0 {
		return fail(cio, usagef("batches takes no arguments, got %q", rest))
	}
	return withAdmin(ctx, cio, func(a *submit.Admin) error {
		all, err := a.Batches(ctx)
		if err != nil {
			return err
		}
		if o.limit > 0 && len(all) > o.limit {
			all = all[:o.limit]
		}
		if o.json {
			return submit.WriteJSON(cio.Stdout, all)
		}
		submit.PrintBatches(cio.Stdout, all)
		return nil
	})
}

// cancelOptions are `submit cancel`'s flags.
type cancelOptions struct {
	batch, reason string
}

func cancelFlags(o *cancelOptions) *flag.FlagSet {
	fs := newFlags("cancel")
	fs.StringVar(&o.batch, "batch", "", "cancel every job of batch `B` still in the queue")
	fs.StringVar(&o.reason, "reason", "", "why (kept with the cancel request and in the canceled result)")
	return fs
}

func cancelHelp(cio IO) cli.Help {
	var o cancelOptions
	return withEnv(cli.Help{
		Usage: []string{"submit cancel [--reason R] ID", "submit cancel [--reason R] --batch B"},
		Summary: "Requests the cancel of a job: a queued job ends canceled when a worker picks it up, a\n" +
			"running one stops at its next decode step. With --batch, of every job of the batch still\n" +
			"in LA_JOBS; stop a `submit run` of that batch first, or it goes on publishing the rest.",
		Flags: cancelFlags(&o),
	}, cio)
}

func cancelCmd(ctx context.Context, args []string, cio IO) int {
	var o cancelOptions
	rest, err := parseFlags(cancelFlags(&o), args)
	if err != nil {
		return fail(cio, err)
	}
	if (o.batch == "") == (len(rest) == 0) || len(rest) > 1 {
		return fail(cio, usagef("cancel: give one job ID or --batch B"))
	}
	return withAdmin(ctx, cio, func(a *submit.Admin) error {
		if o.batch != "" {
			n, err := a.CancelBatch(ctx, o.batch, o.reason)
			if err != nil {
				return err
			}
			fmt.Fprintf(cio.Stdout, "cancel requested for %d queued or running jobs of batch %s\n", n, o.batch)
			return nil
		}
		if err := a.Cancel(ctx, rest[0], o.reason); err != nil {
			return err
		}
		fmt.Fprintf(cio.Stdout, "cancel requested for job %s\n", rest[0])
		return nil
	})
}

// dlqUsage is the error for a dlq command line that names no known subcommand.
const dlqUsage = "dlq: want list, show ID or replay ID|--all"

func dlqHelp(cio IO) cli.Help {
	cmds := commands()
	return withEnv(cli.Help{
		Usage: []string{"submit dlq list [--json] [--batch B]", "submit dlq show ID", "submit dlq replay ID | --all"},
		Summary: "The dead-letter queue, LA_DLQ: jobs that failed for good, with the reason.\n" +
			"  list    " + cmds["dlq list"].summary + "\n" +
			"  show    " + cmds["dlq show"].summary + "\n" +
			"  replay  " + cmds["dlq replay"].summary + "\n" +
			"submit dlq SUBCOMMAND --help lists each one's flags.",
	}, cio)
}

// dlqCmd is `submit dlq` without a known subcommand.
func dlqCmd(_ context.Context, _ []string, cio IO) int {
	return fail(cio, usagef(dlqUsage))
}

// dlqListOptions are `submit dlq list`'s flags.
type dlqListOptions struct {
	batch string
	json  bool
}

func dlqListFlags(o *dlqListOptions) *flag.FlagSet {
	fs := newFlags("dlq list")
	fs.StringVar(&o.batch, "batch", "", "only the jobs of batch `B`")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	return fs
}

func dlqListHelp(cio IO) cli.Help {
	var o dlqListOptions
	return withEnv(cli.Help{
		Usage: []string{"submit dlq list [--json] [--batch B]"},
		Summary: "Lists the dead-lettered jobs, oldest first: id, batch, failure code, attempts, time and\n" +
			"reason. The batch is read from the job each record carries (\"?\" for a job too large to\n" +
			"carry, stored at its job_url; --batch leaves those out).",
		Flags: dlqListFlags(&o),
	}, cio)
}

func dlqListCmd(ctx context.Context, args []string, cio IO) int {
	var o dlqListOptions
	rest, err := parseFlags(dlqListFlags(&o), args)
	if err != nil {
		return fail(cio, err)
	}
	if len(rest) > 0 {
		return fail(cio, usagef(dlqUsage))
	}
	if o.batch != "" && !jobs.ValidToken(o.batch) {
		return fail(cio, usagef("--batch %q must be 1-128 characters of [A-Za-z0-9_-]", o.batch))
	}
	return withAdmin(ctx, cio, func(a *submit.Admin) error {
		entries, err := a.DLQList(ctx)
		if err != nil {
			return err
		}
		if o.batch != "" {
			kept, unknown := entries[:0], 0
			for _, e := range entries {
				switch e.Batch {
				case o.batch:
					kept = append(kept, e)
				case "":
					unknown++
				}
			}
			entries = kept
			if unknown > 0 {
				fmt.Fprintf(cio.Stderr, "submit: note: %d records do not carry their job (stored at job_url): their batch is not known and they are left out\n", unknown)
			}
		}
		if o.json {
			if entries == nil {
				entries = []submit.DLQEntry{}
			}
			return submit.WriteJSON(cio.Stdout, entries)
		}
		submit.PrintDLQ(cio.Stdout, entries)
		return nil
	})
}

func dlqShowFlags(asJSON *bool) *flag.FlagSet {
	fs := newFlags("dlq show")
	fs.BoolVar(asJSON, "json", false, "print JSON (what show always prints; accepted like the other commands')")
	return fs
}

func dlqShowHelp(cio IO) cli.Help {
	var j bool
	return withEnv(cli.Help{
		Usage:   []string{"submit dlq show ID"},
		Summary: "Prints a job's latest dead-letter record as JSON, the original job included (or, for a\njob too large to carry, its job_url).",
		Flags:   dlqShowFlags(&j),
	}, cio)
}

func dlqShowCmd(ctx context.Context, args []string, cio IO) int {
	var asJSON bool
	rest, err := parseFlags(dlqShowFlags(&asJSON), args)
	if err != nil {
		return fail(cio, err)
	}
	if len(rest) != 1 {
		return fail(cio, usagef(dlqUsage))
	}
	return withAdmin(ctx, cio, func(a *submit.Admin) error {
		e, err := a.DLQShow(ctx, rest[0])
		if err != nil {
			return err
		}
		return submit.WriteJSON(cio.Stdout, e.Record)
	})
}

func dlqReplayFlags(all *bool) *flag.FlagSet {
	fs := newFlags("dlq replay")
	fs.BoolVar(all, "all", false, "replay every dead-lettered job")
	return fs
}

func dlqReplayHelp(cio IO) cli.Help {
	var all bool
	return withEnv(cli.Help{
		Usage: []string{"submit dlq replay ID", "submit dlq replay --all"},
		Summary: "Publishes dead-lettered jobs again once the cause is fixed: sets the job's state back to\n" +
			"queued, clears a cancel request, releases the id's claim, publishes the original job to its\n" +
			"subject and removes its records from LA_DLQ. A duplicate_id record (the id is another job's)\n" +
			"is not replayed. Rerun the original `submit run` to collect the new results.",
		Flags: dlqReplayFlags(&all),
	}, cio)
}

func dlqReplayCmd(ctx context.Context, args []string, cio IO) int {
	var all bool
	rest, err := parseFlags(dlqReplayFlags(&all), args)
	if err != nil {
		return fail(cio, err)
	}
	if all == (len(rest) == 1) || len(rest) > 1 {
		return fail(cio, usagef(dlqUsage))
	}
	return withAdmin(ctx, cio, func(a *submit.Admin) error {
		if !all {
			if err := a.DLQReplay(ctx, rest[0]); err != nil {
				return err
			}
			fmt.Fprintf(cio.Stdout, "replayed %s\n", rest[0])
			return nil
		}
		ids, err := a.DLQReplayAll(ctx)
		for _, id := range ids {
			fmt.Fprintf(cio.Stdout, "replayed %s\n", id)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(cio.Stdout, "%d jobs replayed\n", len(ids))
		return nil
	})
}

// dryRunCmd is `submit run --dry-run`: NATS is asked when it can be reached, and the run
// goes on without it when not (the output directory is then the only evidence).
func dryRunCmd(ctx context.Context, rc submit.RunConfig, cfg config.Submit, store storage.Store, asJSON bool, cio IO) int {
	env := submit.Env{Store: store}
	js, closeNATS, err := connect(cfg)
	if err != nil {
		fmt.Fprintf(cio.Stderr, "submit: note: %v\nsubmit: note: jobs that other runs published are not known: only %s is read\n", err, rc.OutDir)
	} else {
		defer closeNATS()
		env.JS = js
	}
	rep, err := submit.DryRun(ctx, rc, env)
	if err != nil {
		return fail(cio, err)
	}
	if asJSON {
		if err := submit.WriteJSON(cio.Stdout, rep); err != nil {
			return fail(cio, err)
		}
		return ExitOK
	}
	rep.Print(cio.Stdout)
	return ExitOK
}
