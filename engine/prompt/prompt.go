// Package prompt builds LocateAnything's chat prompt: the ChatML string with one
// <IMG_CONTEXT> placeholder per image embedding and the task's instruction, its token
// ids, and the check that the prompt plus the generation budget fits the context.
package prompt

import (
	"fmt"
	"strings"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/tokenizer"
)

// The added tokens the prompt is made of.
const (
	ImageToken      = "<IMG_CONTEXT>" // one per image embedding; the backend splices over them
	ImageStartToken = "<img>"
	ImageEndToken   = "</img>"
	CategorySep     = "</c>" // joins detection categories; plain text to the tokenizer
)

// AllTextInstruction is the text task's instruction when the query is empty.
const AllTextInstruction = "Detect all the text in box format."

// Instruction returns the user instruction for task and query (docs/background.md, "Tasks
// and query templates"). The query is used as given: for TaskDetect it is the category
// list already joined by "</c>". An empty task means TaskDetect. An unknown task or an
// empty query (allowed only for TaskText) is an *engine.InputError.
func Instruction(task engine.Task, query string) (string, error) {
	if task == "" {
		task = engine.TaskDetect
	}
	if !task.Valid() {
		return "", engine.InputErrorf(engine.CodeBadTask, "unknown task %q (want one of %v)", task, engine.Tasks)
	}
	if strings.TrimSpace(query) == "" {
		if task == engine.TaskText {
			return AllTextInstruction, nil
		}
		return "", engine.InputErrorf(engine.CodeBadQuery, "task %s needs a query", task)
	}
	if strings.Contains(query, ImageToken) {
		return "", engine.InputErrorf(engine.CodeBadQuery, "the query must not contain the image token %s", ImageToken)
	}
	switch task {
	case engine.TaskDetect:
		// "matches" (sic) is how NVIDIA's worker code words it; the model was trained on it.
		return "Locate all the instances that matches the following description: " + query + ".", nil
	case engine.TaskGround:
		return "Locate all the instances that match the following description: " + query + ".", nil
	case engine.TaskGroundOne:
		return "Locate a single instance that matches the following description: " + query + ".", nil
	case engine.TaskText:
		return "Please locate the text referred as " + query + ".", nil
	case engine.TaskRegion:
		return "Locate the region that matches the following description: " + query + ".", nil
	case engine.TaskPoint:
		return "Point to: " + query + ".", nil
	}
	return "", engine.InputErrorf(engine.CodeBadTask, "task %q has no prompt template", task)
}

// Build returns the chat prompt for one image of numImageTokens embeddings:
//
//	<|im_start|>system\nYou are a helpful assistant.\n<|im_end|>\n
//	<|im_start|>user\n<image 1><img><IMG_CONTEXT>...</img>INSTRUCTION<|im_end|>\n
//	<|im_start|>assistant\n
//
// as one string: the breaks above are for reading, only the written \n are in it. The
// checkpoint's chat_template.json is the authority on this layout; see docs/tokenizer.md.
func Build(task engine.Task, query string, numImageTokens int) (string, error) {
	if numImageTokens <= 0 {
		return "", fmt.Errorf("build prompt: %d image tokens, want at least 1", numImageTokens)
	}
	instruction, err := Instruction(task, query)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(200 + len(instruction) + numImageTokens*len(ImageToken))
	b.WriteString("<|im_start|>system\nYou are a helpful assistant.\n<|im_end|>\n")
	b.WriteString("<|im_start|>user\n<image 1>" + ImageStartToken)
	for range numImageTokens {
		b.WriteString(ImageToken)
	}
	b.WriteString(ImageEndToken + instruction + "<|im_end|>\n")
	b.WriteString("<|im_start|>assistant\n")
	return b.String(), nil
}

// Tokens builds the prompt and tokenizes it. It checks that the ids hold exactly
// numImageTokens image tokens, so the backend's splice cannot go out of step with the
// vision output.
func Tokens(tok *tokenizer.Tokenizer, task engine.Task, query string, numImageTokens int) ([]int32, error) {
	text, err := Build(task, query, numImageTokens)
	if err != nil {
		return nil, err
	}
	imageID, ok := tok.ID(ImageToken)
	if !ok {
		return nil, fmt.Errorf("tokenize prompt: the tokenizer has no %s token", ImageToken)
	}
	ids := tok.Encode(text)
	count := 0
	for _, id := range ids {
		if id == imageID {
			count++
		}
	}
	if count != numImageTokens {
		return nil, fmt.Errorf("tokenize prompt: %d image tokens in the ids, want %d", count, numImageTokens)
	}
	return ids, nil
}

// CheckBudget returns an *engine.InputError with engine.CodePromptTooLong when a prompt
// of promptLen tokens plus maxNewTokens generated ones would not fit a context of
// maxSeqLen tokens, and one with engine.CodeBadBudget when maxNewTokens is below 1.
// Pass the padded prefill length as promptLen on a backend that pads.
func CheckBudget(promptLen, maxNewTokens, maxSeqLen int) error {
	if maxNewTokens < 1 {
		return engine.InputErrorf(engine.CodeBadBudget, "max_new_tokens is %d, want at least 1", maxNewTokens)
	}
	if promptLen+maxNewTokens > maxSeqLen {
		return engine.InputErrorf(engine.CodePromptTooLong,
			"prompt of %d tokens plus max_new_tokens %d needs %d tokens, over the context limit of %d",
			promptLen, maxNewTokens, promptLen+maxNewTokens, maxSeqLen)
	}
	return nil
}
