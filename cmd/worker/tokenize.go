package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/locateanything/detect/engine/tokenizer"
	"github.com/locateanything/detect/internal/cli"
	"github.com/locateanything/detect/worker"
)

const tokenizeUsage = "usage: worker tokenize [--weights DIR] [--decode] TEXT..."

// tokenizeOptions are `worker tokenize`'s flags.
type tokenizeOptions struct {
	weights string
	decode  bool
}

// tokenizeFlags defines `worker tokenize`'s flags on o.
func tokenizeFlags(o *tokenizeOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.weights, "weights", "", "`DIR` with vocab.json, merges.txt and added_tokens.json (empty: the tokenizer of the checkpoint the worker would run)")
	fs.BoolVar(&o.decode, "decode", false, "read a JSON array of ids and print their text")
	return fs
}

// runTokenize implements `worker tokenize [--weights DIR] [--decode] TEXT...`. It prints
// the token ids of TEXT (the arguments joined by spaces) as a JSON array; with --decode,
// TEXT is a JSON array of ids and it prints their text. DIR is a directory holding
// vocab.json, merges.txt and added_tokens.json; without it the tokenizer is that of the
// checkpoint the worker would run (worker.ChooseWeights on the worker's configuration).
// It says on stderr whose tokenizer answered: the model and its directory.
func runTokenize(args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	var o tokenizeOptions
	text, err := cli.Parse(tokenizeFlags(&o), args)
	if err != nil {
		return flagError(fmt.Errorf("%w\n%s", err, tokenizeUsage), tokenizeHelp, stdout)
	}
	if len(text) == 0 {
		return cli.UsageError{Err: fmt.Errorf("tokenize needs the text to encode (or, with --decode, the ids)\n%s", tokenizeUsage)}
	}
	input := strings.Join(text, " ")
	answered := "--weights"
	if o.weights == "" { // a bare tokenizer directory is enough for --weights, not for the rules
		choice, err := worker.ChooseWeights(context.Background(), cfg, toolSetup())
		if err != nil {
			return err
		}
		o.weights, answered = choice.Dir, choice.Model+", "+choice.Reason
	}

	tok, err := tokenizer.Load(o.weights)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	fmt.Fprintf(stderr, "worker tokenize: the tokenizer in %s (%s)\n", o.weights, answered)
	if o.decode {
		text, err := decodeIDs(tok, input)
		if err != nil {
			return fmt.Errorf("tokenize --decode: %w", err)
		}
		_, err = fmt.Fprintln(stdout, text)
		return err
	}
	ids := tok.Encode(input)
	if ids == nil {
		ids = []int32{} // print [] for empty text, not null
	}
	out, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}

// decodeIDs reads a JSON array of token ids and returns their text. Every id must be one
// the tokenizer knows.
func decodeIDs(tok *tokenizer.Tokenizer, input string) (string, error) {
	var ids []int32
	if err := json.Unmarshal([]byte(input), &ids); err != nil {
		return "", fmt.Errorf("want a JSON array of token ids such as [9707, 11]: %w", err)
	}
	if ids == nil {
		return "", errors.New("want a JSON array of token ids such as [9707, 11], got null")
	}
	for i, id := range ids {
		if _, ok := tok.Token(id); !ok {
			return "", fmt.Errorf("id %d (position %d) is not a token: ids run from 0 to %d", id, i, tok.VocabSize()-1)
		}
	}
	return tok.Decode(ids), nil
}
