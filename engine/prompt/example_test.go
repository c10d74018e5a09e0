package prompt_test

import (
	"fmt"
	"log"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/prompt"
)

func ExampleBuild() {
	text, err := prompt.Build(engine.TaskDetect, "person</c>car", 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", text)
	// Output:
	// "<|im_start|>system\nYou are a helpful assistant.\n<|im_end|>\n<|im_start|>user\n<image 1><img><IMG_CONTEXT><IMG_CONTEXT></img>Locate all the instances that matches the following description: person</c>car.<|im_end|>\n<|im_start|>assistant\n"
}

func ExampleCheckBudget() {
	err := prompt.CheckBudget(4000, 128, 4096)
	if ie, ok := engine.AsInputError(err); ok {
		fmt.Println(ie.Code+":", ie)
	}
	// Output:
	// prompt_too_long: prompt of 4000 tokens plus max_new_tokens 128 needs 4128 tokens, over the context limit of 4096
}
