package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/prompt"
)

// What the simulated model answers (docs/sim.md, "Answers"): for every category of a
// detect query, and for the phrase of the other tasks, one <ref> and one to three boxes
// (points for the point task, a single box for ground_one), placed by a generator seeded
// from the image the device was given and the label, then EOS. The same image and query
// give the same answer, on any chip, alone or in a batch.

// query is what the simulated model reads from the prompt: the task and its labels.
type query struct {
	task   engine.Task
	labels []string
}

// readInstruction recovers the task and the query from the instruction text of the
// prompt, by matching the templates package prompt builds it from. An instruction that
// matches none (a prompt not built by package prompt) is answered as a detection of
// "object".
func readInstruction(instruction string) query {
	if instruction == prompt.AllTextInstruction {
		return query{task: engine.TaskText, labels: []string{"text"}}
	}
	for _, task := range engine.Tasks {
		const hole = "\x00"
		tmpl, err := prompt.Instruction(task, hole)
		if err != nil {
			continue
		}
		prefix, suffix, _ := strings.Cut(tmpl, hole)
		if len(instruction) < len(prefix)+len(suffix) ||
			!strings.HasPrefix(instruction, prefix) || !strings.HasSuffix(instruction, suffix) {
			continue
		}
		q := instruction[len(prefix) : len(instruction)-len(suffix)]
		parts := []string{q}
		if task == engine.TaskDetect {
			parts = strings.Split(q, prompt.CategorySep)
		}
		var labels []string
		for _, p := range parts {
			if l := cleanLabel(p); l != "" {
				labels = append(labels, l)
			}
		}
		if len(labels) == 0 {
			labels = []string{"object"}
		}
		return query{task: task, labels: labels}
	}
	return query{task: engine.TaskDetect, labels: []string{"object"}}
}

// cleanLabel trims a label and drops angle brackets, so that no label can open or close
// a tag of the answer grammar and every answer parses.
func cleanLabel(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '<' || r == '>' {
			return -1
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// answerText is the simulated answer, without the EOS, for an image whose patches hashed
// to image.
func answerText(image uint64, q query) string {
	var b strings.Builder
	for i, label := range q.labels {
		rng := newRNG(image, uint64(i), string(q.task), label)
		n := 1 + int(rng.next()%3)
		if q.task == engine.TaskGroundOne {
			n = 1
		}
		b.WriteString("<ref>" + label + "</ref>")
		seen := map[[4]int]bool{}
		for len(seen) < n {
			var c [4]int
			if q.task == engine.TaskPoint {
				c = [4]int{int(rng.next() % 1001), int(rng.next() % 1001)}
			} else {
				c = rng.box()
			}
			if seen[c] {
				continue // the parser drops exact repeats; every box counts
			}
			seen[c] = true
			if q.task == engine.TaskPoint {
				fmt.Fprintf(&b, "<box><%d><%d></box>", c[0], c[1])
			} else {
				fmt.Fprintf(&b, "<box><%d><%d><%d><%d></box>", c[0], c[1], c[2], c[3])
			}
		}
	}
	return b.String()
}

// rng is splitmix64: small, fast, and the same sequence on every machine.
type rng struct{ state uint64 }

// newRNG seeds a generator from the image hash, the label's position and the label.
func newRNG(image, index uint64, task, label string) *rng {
	h := fnv.New64a()
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], image)
	binary.LittleEndian.PutUint64(buf[8:], index)
	h.Write(buf[:])
	h.Write([]byte(task + "\x00" + label))
	return &rng{state: h.Sum64()}
}

func (r *rng) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// box is a box of at least 20 per mille a side, inside 0..1000, corners in order.
func (r *rng) box() [4]int {
	w := 20 + int(r.next()%481) // 20..500
	h := 20 + int(r.next()%481)
	x := int(r.next() % uint64(1001-w))
	y := int(r.next() % uint64(1001-h))
	return [4]int{x, y, x + w, y + h}
}

// tokenProb is the probability the simulated model gives the token it generates at
// position pos of its answer to an image: between 0.5 and 1, spread by a hash of the
// three, so that scores made of it vary from box to box like a model's and stay the same
// for the same image and query, alone or in a batch.
func tokenProb(image uint64, pos int, tok int32) float32 {
	r := rng{state: image ^ uint64(pos)<<32 ^ uint64(uint32(tok))}
	return 0.5 + float32(r.next()>>40)/float32(1<<25) // 24 bits over [0, 0.5)
}

// hashPatches is what the simulated model "sees" of an image: a 64-bit hash of every
// patch value (FNV-1a over the float32 bits, one word at a time).
func hashPatches(patches []float32) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for _, v := range patches {
		h ^= uint64(math.Float32bits(v))
		h *= prime
	}
	return h
}
