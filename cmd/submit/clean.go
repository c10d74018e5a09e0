package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/locateanything/detect/internal/cli"
	"github.com/locateanything/detect/submit"
)

// cleanOptions are `submit clean`'s flags.
type cleanOptions struct {
	batch, olderThan string
	yes, json        bool
}

func cleanFlags(o *cleanOptions) *flag.FlagSet {
	fs := newFlags("clean")
	fs.StringVar(&o.batch, "batch", "", "remove the stored files of batch `B`'s results")
	fs.StringVar(&o.olderThan, "older-than", "", "remove the stored files of every result finished more than `D` ago (7d, 36h, 90m)")
	fs.BoolVar(&o.yes, "yes", false, "remove them; without it, list what would be removed")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	return fs
}

func cleanHelp(cio IO) cli.Help {
	var o cleanOptions
	return withEnv(cli.Help{
		Usage: []string{"submit clean --batch B [--yes]", "submit clean --older-than D [--yes]"},
		Summary: "Removes what workers stored for results, on file:// and s3:// alike: each result's JSON,\n" +
			"its overlay and a dead-lettered job's spilled bytes, for one batch or for every result\n" +
			"finished more than D ago. Without --yes it lists them and removes nothing. The result\n" +
			"messages in LA_RESULTS age out by themselves (LA_RESULTS_MAX_AGE), and the copies a run\n" +
			"wrote into its --out directory are yours: neither is touched.",
		Flags: cleanFlags(&o),
	}, cio)
}

// parseAge reads a duration as time.ParseDuration does, with d for days (7d, 1d12h).
func parseAge(s string) (time.Duration, error) {
	var days time.Duration
	if i := strings.Index(s, "d"); i >= 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q: want a duration such as 7d, 36h or 90m", s)
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration such as 7d, 36h or 90m", s)
	}
	return days + d, nil
}

func cleanCmd(ctx context.Context, args []string, cio IO) int {
	var o cleanOptions
	rest, err := parseFlags(cleanFlags(&o), args)
	if err != nil {
		return fail(cio, err)
	}
	var f submit.CleanFilter
	switch {
	case len(rest) > 0:
		return fail(cio, usagef("clean takes no arguments, got %q", rest))
	case (o.batch == "") == (o.olderThan == ""):
		return fail(cio, usagef("clean: give --batch or --older-than (one of them)"))
	case o.batch != "":
		f.Batch = o.batch
	default:
		age, err := parseAge(o.olderThan)
		if err != nil || age <= 0 {
			return fail(cio, usagef("clean: --older-than %s", cmpMessage(err, "want a positive duration")))
		}
		f.Before = time.Now().Add(-age)
	}
	return withAdmin(ctx, cio, func(a *submit.Admin) error {
		rep, err := a.Clean(ctx, f, o.yes)
		if err != nil {
			return err
		}
		if o.json {
			return submit.WriteJSON(cio.Stdout, rep)
		}
		if !o.yes {
			for _, u := range rep.Objects {
				fmt.Fprintf(cio.Stdout, "would remove %s\n", u)
			}
			fmt.Fprintf(cio.Stdout, "%d results, %d stored files would be removed; add --yes to remove them\n", rep.Results, len(rep.Objects))
			return nil
		}
		fmt.Fprintf(cio.Stdout, "%d results, %d stored files removed\n", rep.Results, rep.Removed)
		return nil
	})
}

// cmpMessage is err's text, or fallback when err is nil.
func cmpMessage(err error, fallback string) string {
	if err != nil {
		return err.Error()
	}
	return fallback
}
