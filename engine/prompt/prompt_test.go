package prompt

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/tokenizer"
)

var loadTokenizer = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	return tokenizer.Load("../tokenizer/testdata")
})

func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := loadTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The worked example of docs/background.md, "Preprocessing": query "car" on a 1920x1080 image at
// in_token_limit 1024 gives 264 image tokens and a 303-token prompt.
func TestWorkedExample(t *testing.T) {
	tok := testTokenizer(t)
	ids, err := Tokens(tok, engine.TaskDetect, "car", 264)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 303 {
		t.Fatalf("prompt has %d tokens, want 303", len(ids))
	}
	// The layout around the image: ... "<image 1>" <img> <IMG_CONTEXT> x264 </img> "Locate ...".
	want := []int32{151644, 8948, 198, 2610, 525, 264, 10950, 17847, 624, 151645, 198, 151644, 872, 198,
		27, 1805, 220, 16, 29, 151666}
	for i, id := range want {
		if ids[i] != id {
			t.Fatalf("ids[%d] = %d, want %d (head %v)", i, ids[i], id, ids[:len(want)])
		}
	}
	for i := len(want); i < len(want)+264; i++ {
		if ids[i] != 151665 {
			t.Fatalf("ids[%d] = %d, want <IMG_CONTEXT> 151665", i, ids[i])
		}
	}
	tail := []int32{151667, 9152, 349, 678, 279, 13121, 429, 9071, 279, 2701, 4008, 25, 1803, 13,
		151645, 198, 151644, 77091, 198}
	for i, id := range tail {
		if got := ids[len(want)+264+i]; got != id {
			t.Fatalf("tail[%d] = %d, want %d", i, got, id)
		}
	}
}

func TestBuild(t *testing.T) {
	got, err := Build(engine.TaskDetect, "person</c>car", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nYou are a helpful assistant.\n<|im_end|>\n" +
		"<|im_start|>user\n<image 1><img><IMG_CONTEXT><IMG_CONTEXT></img>" +
		"Locate all the instances that matches the following description: person</c>car.<|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got != want {
		t.Errorf("Build =\n%q\nwant\n%q", got, want)
	}
}

func TestInstruction(t *testing.T) {
	tests := []struct {
		task  engine.Task
		query string
		want  string
	}{
		{"", "car", "Locate all the instances that matches the following description: car."},
		{engine.TaskDetect, "traffic light</c>stop sign", "Locate all the instances that matches the following description: traffic light</c>stop sign."},
		{engine.TaskGround, "the man in a red shirt", "Locate all the instances that match the following description: the man in a red shirt."},
		{engine.TaskGroundOne, "the leftmost dog", "Locate a single instance that matches the following description: the leftmost dog."},
		{engine.TaskText, "EXIT", "Please locate the text referred as EXIT."},
		{engine.TaskText, "", "Detect all the text in box format."},
		{engine.TaskText, "  ", "Detect all the text in box format."},
		{engine.TaskRegion, "the Submit button", "Locate the region that matches the following description: the Submit button."},
		{engine.TaskPoint, "the cat's left ear", "Point to: the cat's left ear."},
	}
	for _, tt := range tests {
		got, err := Instruction(tt.task, tt.query)
		if err != nil || got != tt.want {
			t.Errorf("Instruction(%q, %q) = %q, %v; want %q", tt.task, tt.query, got, err, tt.want)
		}
	}
	for _, task := range engine.Tasks {
		if _, err := Instruction(task, "x"); err != nil {
			t.Errorf("task %s has no template: %v", task, err)
		}
	}
}

// The instruction texts are tokenized exactly as the reference tokenizer did (the golden
// lines of the tokenizer's testdata).
func TestInstructionTokens(t *testing.T) {
	tok := testTokenizer(t)
	text, err := Instruction(engine.TaskPoint, "the cat's left ear")
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{2609, 311, 25, 279, 8251, 594, 2115, 2430, 13}
	if got := tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, want %v", text, got, want)
	}
}

func TestBadInput(t *testing.T) {
	tok := testTokenizer(t)
	tests := []struct {
		task  engine.Task
		query string
		code  string
	}{
		{"segment", "car", engine.CodeBadTask},
		{engine.TaskDetect, "", engine.CodeBadQuery},
		{engine.TaskPoint, " \n\t", engine.CodeBadQuery},
		{engine.TaskGround, "a<IMG_CONTEXT>b", engine.CodeBadQuery},
	}
	for _, tt := range tests {
		_, err := Tokens(tok, tt.task, tt.query, 4)
		ie, ok := engine.AsInputError(err)
		if !ok || ie.Code != tt.code {
			t.Errorf("Tokens(%q, %q) error = %v, want an InputError %s", tt.task, tt.query, err, tt.code)
		}
	}
	if _, err := Build(engine.TaskDetect, "car", 0); err == nil {
		t.Error("Build with 0 image tokens succeeded")
	} else if _, ok := engine.AsInputError(err); ok {
		t.Error("0 image tokens is the caller's bug, not an InputError")
	}
}

func TestCheckBudget(t *testing.T) {
	if err := CheckBudget(303, 128, 4096); err != nil {
		t.Errorf("303+128 in 4096: %v", err)
	}
	if err := CheckBudget(3968, 128, 4096); err != nil {
		t.Errorf("exactly full: %v", err)
	}
	err := CheckBudget(3969, 128, 4096)
	ie, ok := engine.AsInputError(err)
	if !ok || ie.Code != engine.CodePromptTooLong {
		t.Fatalf("3969+128 in 4096: error %v, want %s", err, engine.CodePromptTooLong)
	}
	for _, n := range []string{"3969", "128", "4096"} {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("message %q does not say %s", err, n)
		}
	}
	var target *engine.InputError
	if !errors.As(err, &target) {
		t.Error("errors.As does not find the InputError")
	}
	if ie, ok := engine.AsInputError(CheckBudget(10, 0, 4096)); !ok || ie.Code != engine.CodeBadBudget {
		t.Errorf("budget 0: %v, want %s", ie, engine.CodeBadBudget)
	}
}

func BenchmarkTokens(b *testing.B) {
	tok := testTokenizer(b)
	for b.Loop() {
		if _, err := Tokens(tok, engine.TaskDetect, "person</c>car</c>traffic light", 264); err != nil {
			b.Fatal(err)
		}
	}
}
