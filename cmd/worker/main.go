// Command worker runs LocateAnything detection: one Runner per chip pulls jobs from NATS
// JetStream, fetches images from storage, runs the engine, and stores and publishes the
// results, and /predict answers synchronous requests (package worker assembles it all;
// docs/worker.md). `worker <subcommand>` runs one of the tools below instead.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/cli"
	"github.com/locateanything/detect/internal/version"
	"github.com/locateanything/detect/worker"
)

// subcommand is a tool run as `worker <name> args...`: its answer goes to stdout, a note
// about it (what answered) to stderr.
type subcommand func(args []string, stdout, stderr io.Writer) error

// answerOnly is a subcommand that writes nothing on stderr.
func answerOnly(run func(args []string, stdout io.Writer) error) subcommand {
	return func(args []string, stdout, _ io.Writer) error { return run(args, stdout) }
}

// tool is one command of the binary: the service itself (run) or a subcommand.
type tool struct {
	summary string          // one line, for the overview
	help    func() cli.Help // its --help, built from the same flag set it parses
	run     subcommand      // nil for the service itself
}

// subcommands lists the commands: the service (run) and the tools besides it.
func subcommands() map[string]tool {
	return map[string]tool{
		"run":        {summary: "run the worker (the default; configuration: LA_* variables)", help: runHelp},
		"config":     {summary: "print the effective configuration and where each value came from", help: configHelp, run: answerOnly(runConfig)},
		"tokenize":   {summary: "text to token ids and back", help: tokenizeHelp, run: runTokenize},
		"detect":     {summary: "one image and query straight through the engine", help: detectHelp, run: answerOnly(runDetect)},
		"bench":      {summary: "time the CPU backend's stages against the machine's ceilings", help: benchHelp, run: answerOnly(runBench)},
		"smoke":      {summary: "check a running server's /health, /info and /predict", help: smokeHelp, run: answerOnly(runSmoke)},
		"preprocess": {summary: "write the image the model sees", help: preprocessHelp, run: runPreprocess},
		"loadtest":   {summary: "throughput on simulated chips through the real queue", help: loadtestHelp, run: answerOnly(runLoadtest)},
	}
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain dispatches and returns the exit code: 0 after a clean run or drain, or after
// --help or --version (which start nothing); 1 on a failure; 2 on a usage or configuration
// error.
func realMain(args []string, stdout, stderr io.Writer) int {
	tools := subcommands()
	name, rest := "run", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, rest = args[0], args[1:]
	}
	switch {
	case len(args) > 0 && cli.IsVersion(args[0]), name == "version":
		fmt.Fprintln(stdout, version.Get().String("worker"))
		return 0
	case name == "help": // worker help [TOOL]
		name, rest = "run", []string{"--help"}
		if len(args) > 1 {
			name = args[1]
		}
	}
	t, ok := tools[name]
	if !ok {
		fmt.Fprintf(stderr, "worker: unknown subcommand %q\n%s", name, overview(tools))
		return 2
	}
	if cli.AsksHelp(rest) {
		if err := t.help().Write(stdout); err != nil {
			return 1
		}
		return 0
	}
	if t.run == nil {
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "worker run: takes no arguments (configuration is LA_* variables; worker --help lists them), got %q\n", rest)
			return 2
		}
		return runService(stdout, stderr)
	}
	// Every tool runs on the worker's configuration (loadConfig): a misspelt variable
	// would otherwise be silently ignored by all of them.
	if err := config.Unknown(os.Environ(), knownVariables()); err != nil {
		fmt.Fprintf(stderr, "worker %s: configuration: %v\n", name, err)
		return 2
	}
	return exitCode(name, t.run(rest, stdout, stderr), stderr)
}

// exitCode prints a subcommand's error and says how the process exits.
func exitCode(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil, cli.IsHelpErr(err):
		return 0
	case cli.IsUsage(err):
		fmt.Fprintf(stderr, "worker %s: %v\n", name, err)
		return 2
	case errors.Is(err, errSmokeFailed):
		return 1
	default:
		fmt.Fprintf(stderr, "worker %s: %v\n", name, err)
		return 1
	}
}

// runService runs the worker itself until SIGTERM or SIGINT.
func runService(stdout, stderr io.Writer) int {
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}
	log := newLogger(stderr, cfg.Observe.LogFormat, cfg.Observe.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := worker.Run(ctx, cfg, worker.Options{Log: log, Landmarks: stdout, Open: worker.OpenEngine}); err != nil {
		log.Error("worker failed", "err", err)
		var busy *worker.DataDirBusyError
		if errors.As(err, &busy) { // a configuration error: two workers given one LA_DATA_DIR
			return 2
		}
		return 1
	}
	return 0
}

// overview lists the commands, one line each.
func overview(tools map[string]tool) string {
	summaries := make(map[string]string, len(tools))
	for n, t := range tools {
		summaries[n] = t.summary
	}
	return cli.Overview("worker", summaries)
}
