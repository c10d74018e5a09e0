package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/locateanything/detect/internal/cli"
	"github.com/locateanything/detect/submit"
)

// retryOptions are `submit retry`'s flags.
type retryOptions struct {
	batch                     string
	failed, expired, canceled bool
	json                      bool
}

func retryFlags(o *retryOptions) *flag.FlagSet {
	fs := newFlags("retry")
	fs.StringVar(&o.batch, "batch", "", "the batch `B` whose jobs to run again (required)")
	fs.BoolVar(&o.failed, "failed", false, "run the batch's failed jobs again (the default)")
	fs.BoolVar(&o.expired, "expired", false, "expired jobs: refused, their messages are not kept (see docs/submit.md)")
	fs.BoolVar(&o.canceled, "canceled", false, "canceled jobs: refused, their messages are not kept (see docs/submit.md)")
	fs.BoolVar(&o.json, "json", false, "print what was done as JSON")
	return fs
}

func retryHelp(cio IO) cli.Help {
	var o retryOptions
	return withEnv(cli.Help{
		Usage: []string{"submit retry --batch B [--failed]"},
		Summary: "Runs a batch's failed jobs again, once their cause is fixed: each job whose latest result\n" +
			"failed is published again from its dead-letter record, as `submit dlq replay` does (its\n" +
			"claim released first, so the new message is the job's one owner). Rerun the batch's\n" +
			"`submit run` to collect the new results. Failed jobs without a record, or whose id is\n" +
			"another job's (duplicate_id), are listed as skipped. Canceled and expired jobs are not\n" +
			"dead-lettered, so nothing holds their messages: submit their inputs again instead.",
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
	switch {
	case len(rest) > 0:
		return fail(cio, usagef("retry takes no arguments, got %q", rest))
	case o.batch == "":
		return fail(cio, usagef("retry: --batch is required"))
	case o.expired || o.canceled:
		return fail(cio, usagef("retry: canceled and expired jobs are not dead-lettered, so their messages are gone once "+
			"they end; submit their inputs again with `submit run` (a new --out, or the same one after removing their rows)"))
	}
	return withAdmin(ctx, cio, func(a *submit.Admin) error {
		rep, err := a.Retry(ctx, o.batch)
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
		fmt.Fprintf(cio.Stdout, "batch %s: %d failed jobs published again, %d skipped\n", o.batch, len(rep.Retried), len(rep.Skipped))
		return nil
	})
}
