package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/locateanything/detect/internal/cli"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/submit"
)

// retryOptions are `submit retry`'s flags.
type retryOptions struct {
	batch                     string
	failed, expired, canceled bool
	out                       string
	json                      bool
}

func retryFlags(o *retryOptions) *flag.FlagSet {
	fs := newFlags("retry")
	fs.StringVar(&o.batch, "batch", "", "the batch `B` whose jobs to run again (required)")
	fs.BoolVar(&o.failed, "failed", false, "run the batch's failed jobs again (the default)")
	fs.BoolVar(&o.canceled, "canceled", false, "run the batch's canceled jobs again, from the jobs recorded in --out that match their id's claim")
	fs.BoolVar(&o.expired, "expired", false, "list the batch's expired jobs, each skipped with the reason: nothing is published (a job's deadline is in its bytes, so it would expire again at once)")
	fs.StringVar(&o.out, "out", "", "the batch's output `DIR` (of its submit run): needed by --canceled and --expired")
	fs.BoolVar(&o.json, "json", false, "print what was done as JSON")
	return fs
}

func retryHelp(cio IO) cli.Help {
	var o retryOptions
	return withEnv(cli.Help{
		Usage: []string{"submit retry --batch B [--failed] [--canceled] [--expired --out DIR]"},
		Summary: "Runs a batch's failed jobs again, once their cause is fixed: each job whose latest result\n" +
			"failed is published again from its dead-letter record, as `submit dlq replay` does (its\n" +
			"claim released first, so the new message is the job's one owner). Failed jobs without a\n" +
			"record, or whose id is another job's (duplicate_id), are listed as skipped.\n" +
			"With --canceled (and --out, the batch's output directory), the batch's canceled jobs are\n" +
			"published again the same way from the jobs `submit run` recorded there (their messages\n" +
			"are not dead-lettered), each only if it is exactly the message that owned its id (the\n" +
			"digest and batch in claim.<id>); others are listed as skipped. --expired publishes\n" +
			"nothing: it lists the batch's expired jobs as skipped, with the reason (the deadline is\n" +
			"in a job's bytes; submit sets none). Rerun the batch's `submit run` to collect the new\n" +
			"results.",
		Flags:  retryFlags(&o),
		Footer: "Needs the permissions of `submit dlq replay` (the operator's role on the embedded server).",
	}, cio)
}

func retryCmd(ctx context.Context, args []string, cio IO) int {
	var o retryOptions
	rest, err := parseFlags(retryFlags(&o), args)
	if err != nil {
		return fail(cio, err)
	}
	var ended []jobs.Status // the kinds of job rerun from the output directory's records
	var kinds []string
	if o.failed || (!o.canceled && !o.expired) {
		o.failed, kinds = true, append(kinds, "failed")
	}
	if o.canceled {
		ended, kinds = append(ended, jobs.StatusCanceled), append(kinds, "canceled")
	}
	if o.expired {
		ended, kinds = append(ended, jobs.StatusExpired), append(kinds, "expired")
	}
	switch {
	case len(rest) > 0:
		return fail(cio, usagef("retry takes no arguments, got %q", rest))
	case o.batch == "":
		return fail(cio, usagef("retry: --batch is required"))
	case len(ended) > 0 && o.out == "":
		return fail(cio, usagef("retry: --canceled and --expired need --out DIR, the batch's output directory: their messages "+
			"are not dead-lettered, so they are published again from the jobs `submit run` recorded there"))
	case len(ended) == 0 && o.out != "":
		return fail(cio, usagef("retry: --out is read only with --canceled or --expired (failed jobs come from their dead-letter records)"))
	}
	return withAdmin(ctx, cio, func(a *submit.Admin) error {
		rep := submit.RetryReport{Batch: o.batch, Retried: []string{}, Skipped: []submit.RetrySkip{}}
		var err error
		if o.failed {
			rep, err = a.Retry(ctx, o.batch)
		}
		if err == nil && len(ended) > 0 {
			var more submit.RetryReport
			more, err = a.RetryEnded(ctx, o.batch, o.out, ended...)
			rep.Retried, rep.Skipped = append(rep.Retried, more.Retried...), append(rep.Skipped, more.Skipped...)
		}
		if o.json {
			if werr := submit.WriteJSON(cio.Stdout, rep); err == nil {
				err = werr
			}
			return err
		}
		for _, id := range rep.Retried {
			fmt.Fprintf(cio.Stdout, "retried %s\n", id)
		}
		for _, s := range rep.Skipped {
			fmt.Fprintf(cio.Stdout, "skipped %s: %s\n", s.ID, s.Why)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(cio.Stdout, "batch %s: %d %s jobs published again, %d skipped\n",
			o.batch, len(rep.Retried), strings.Join(kinds, " or "), len(rep.Skipped))
		return nil
	})
}
