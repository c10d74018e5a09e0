package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/locateanything/detect/engine/tokenizer"
)

func Example() {
	tok, err := tokenizer.Load("testdata") // a checkpoint directory
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("<ref>person</c>car</ref><box><282>")
	fmt.Println(ids)
	fmt.Println(tok.Decode(ids[1:4]))
	// Output:
	// [151672 8987 522 66 29 6918 151673 151668 151959]
	// person</c
}
