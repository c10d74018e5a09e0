package main

import (
	"io"
	"os"
	"slices"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/bench"
	"github.com/locateanything/detect/bench/loadtest"
	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/cli"
)

// Each command's --help. The flag sets are the ones the commands parse (built by the same
// functions); the variables and their defaults come from package config.

func runHelp() cli.Help {
	return cli.Help{
		Usage: []string{"worker [run]", "worker COMMAND [flags] [arguments]", "worker --version"},
		Summary: "Runs the detection service: one Runner per chip pulls jobs from NATS JetStream (an embedded\n" +
			"server when LA_NATS_URL is empty), /predict answers on LA_HTTP_ADDR and metrics on\n" +
			"LA_METRICS_ADDR, until SIGTERM or SIGINT drains it. It takes no flags: the configuration is\n" +
			"the environment below.\n\n" + overview(subcommands()),
		Env:       config.Settings(config.Worker{}, nil),
		Environ:   os.Environ(),
		BySection: true,
		Footer: "docs/worker.md says more about each variable; `worker config` prints the values in effect\n" +
			"and where each came from. An unknown LA_* variable stops the worker with the closest name.",
	}
}

func configHelp() cli.Help {
	return cli.Help{
		Usage: []string{"worker config"},
		Summary: "Prints every variable of the worker's configuration with the value in effect, where it came\n" +
			"from (the environment, the default, or derived from other settings where 0 or empty means\n" +
			"derived) and its meaning, secrets redacted; or exits 2 naming what does not load. It starts\n" +
			"nothing. The variables are those `worker --help` lists.",
	}
}

func tokenizeHelp() cli.Help {
	var o tokenizeOptions
	return cli.Help{
		Usage: []string{"worker tokenize [--weights DIR] TEXT...", "worker tokenize [--weights DIR] --decode '[ID,...]'"},
		Summary: "Prints the Qwen2 token ids of TEXT (the arguments joined by spaces) as a JSON array, or\n" +
			"with --decode the text of a JSON array of ids. Without --weights the tokenizer is that of\n" +
			"the checkpoint the worker would run (the variables below), down to the bundled model.",
		Flags:   tokenizeFlags(&o),
		FlagEnv: map[string]string{"weights": "LA_WEIGHTS_DIR"},
		Env:     config.Settings(config.Weights{}, nil),
		Environ: os.Environ(),
	}
}

func detectHelp() cli.Help {
	var o detectOptions
	return cli.Help{
		Usage: []string{"worker detect --image FILE --query TEXT [flags]"},
		Summary: "Runs one image and query straight through the engine, no queue and no server, and prints\n" +
			"the /predict-shaped answer with the generated ids and the model and engine that answered.\n" +
			"It reads the worker's configuration and opens the engine as the worker does: the weights\n" +
			"and engine variables below apply, down to the bundled model, and an unknown LA_* variable\n" +
			"stops it. The flags replace the variables they name; it runs one request (LA_MAX_BATCH 1).",
		Flags:   detectFlags(&o, helpConfig()),
		FlagEnv: detectFlagEnv,
		Env:     append(config.Settings(config.Engine{}, nil), config.Settings(config.Weights{}, nil)...),
		Environ: os.Environ(),
	}
}

func benchHelp() cli.Help {
	return cli.Help{
		Usage: []string{bench.Usage[len("usage: "):]},
		Summary: "Times the CPU backend's stages (vision, prefill, decode) on a checkpoint against the\n" +
			"machine's own memory bandwidth and sgemm rate, and prints medians (docs/cpu-backend.md).\n" +
			"Without --weights it times the checkpoint the worker would run (the variables below).",
		Flags:   bench.Flags(benchDefaults(helpConfig())),
		FlagEnv: map[string]string{"weights": "LA_WEIGHTS_DIR", "quant": "LA_WEIGHTS_QUANT", "threads": "LA_THREADS", "max-seq-len": "LA_MAX_SEQ_LEN"},
		Env:     append(workerVars("LA_ENGINE", "LA_WEIGHTS_QUANT", "LA_THREADS", "LA_MAX_SEQ_LEN"), config.Settings(config.Weights{}, nil)...),
		Environ: os.Environ(),
	}
}

func smokeHelp() cli.Help {
	var o smokeOptions
	return cli.Help{
		Usage: []string{"worker smoke --url URL --image FILE --query QUERY [flags]"},
		Summary: "Waits for GET /health to say ok, reads /info, POSTs one image to /predict with an overlay,\n" +
			"checks every field of the answer and prints one line: PASS with the figures, or why it\n" +
			"did not pass (exit 1). With LA_HTTP_TOKEN set it sends that token (Authorization: Bearer).",
		Flags:   smokeFlags(&o, helpConfig().HTTP),
		FlagEnv: map[string]string{"url": "LA_HTTP_ADDR"},
		Env:     workerVars("LA_HTTP_ADDR", "LA_HTTP_TOKEN"),
		Environ: os.Environ(),
	}
}

func preprocessHelp() cli.Help {
	var o preprocessOptions
	return cli.Help{
		Usage: []string{preprocessUsage[len("usage: "):]},
		Summary: "Writes the image the model sees (decode, RGB and every resize, before normalisation) as a\n" +
			"PNG and prints its sizes as JSON. No checkpoint is needed. The image settings are the\n" +
			"worker's (the variables below, on LA_ENGINE); the flags replace the variables they name.",
		Flags:   preprocessFlags(&o, helpConfig()),
		FlagEnv: preprocessFlagEnv,
		Env:     workerVars("LA_ENGINE", "LA_IN_TOKEN_LIMIT", "LA_CANON_GRID", "LA_CANON_ASPECT"),
		Environ: os.Environ(),
	}
}

func loadtestHelp() cli.Help {
	return cli.Help{
		Usage: []string{loadtest.Usage[len("usage: "):]},
		Summary: "Pushes 1080p JPEG jobs through the embedded NATS, the Runners and local storage on\n" +
			"simulated chips (LA_SIM_* is the cost model): a serial baseline, then each batch size for\n" +
			"each chip count; prints jobs/s, device busy, latency and host CPU per job (docs/sim.md).",
		Flags:   loadtest.Flags(helpConfig()),
		FlagEnv: map[string]string{"chips": "LA_CHIPS", "batch": "LA_MAX_BATCH"},
		Env: append(workerVars("LA_CHIPS", "LA_MAX_BATCH"), slices.DeleteFunc(config.Settings(config.Worker{}, nil),
			func(s config.Setting) bool { return s.Section != "Sim" })...),
		Environ: os.Environ(),
	}
}

// workerVars are the worker's settings of the given names, in that order.
func workerVars(names ...string) []config.Setting {
	all := config.Settings(config.Worker{}, nil)
	var out []config.Setting
	for _, n := range names {
		if i := slices.IndexFunc(all, func(s config.Setting) bool { return s.Name == n }); i >= 0 {
			out = append(out, all[i])
		}
	}
	return out
}

// helpConfig is the configuration as the environment gives it, for flag defaults that
// follow a variable; help never fails on it: a value that does not parse leaves the rest.
func helpConfig() config.Worker {
	var c config.Worker
	_ = envconfig.Process("", &c)
	return c
}

// flagError turns an error of a tool's flags into its result: help asked for prints the
// help (exit 0); anything else is a usage error (exit 2).
func flagError(err error, help func() cli.Help, stdout io.Writer) error {
	if cli.IsHelpErr(err) {
		if werr := help().Write(stdout); werr != nil {
			return werr
		}
		return err
	}
	return cli.UsageError{Err: err}
}
