package tokenizer

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// naiveMerge is the textbook form of BPE, rescanning the word after every merge. It is
// the oracle for the heap-based mergeWord.
func naiveMerge(t *Tokenizer, word string) []int32 {
	var symbols []int32
	for i := 0; i < len(word); i++ {
		symbols = append(symbols, t.byteIDs[word[i]])
	}
	for {
		best, at := merge{rank: math.MaxInt32}, -1
		for i := 0; i+1 < len(symbols); i++ {
			if m, ok := t.merges[pairKey(symbols[i], symbols[i+1])]; ok && m.rank < best.rank {
				best, at = m, i
			}
		}
		if at < 0 {
			return symbols
		}
		symbols = slices.Replace(symbols, at, at+2, best.id)
	}
}

func TestMergeWordMatchesNaive(t *testing.T) {
	tok := testTokenizer(t)
	rng := rand.New(rand.NewSource(7))
	alphabets := []string{"ab", "aeinrst", "abcdefghijklmnopqrstuvwxyz", "中文字 é"}
	for i := 0; i < 1000; i++ {
		alpha := []rune(alphabets[i%len(alphabets)])
		word := make([]rune, 1+rng.Intn(120))
		for j := range word {
			word[j] = alpha[rng.Intn(len(alpha))]
		}
		w := string(word)
		if got, want := tok.mergeWord(w), naiveMerge(tok, w); !slices.Equal(got, want) {
			t.Fatalf("mergeWord(%q)\n got %v\nwant %v", w, got, want)
		}
	}
}

const paragraph = `The detector reads a photo and a short query such as "person</c>car", and answers
with boxes: <ref>person</ref><box><282><414><606><794></box>. Workers pull jobs from NATS
JetStream, fetch images from S3, run the model through a C engine and publish the results.
In 2026 the fleet served 1,234,567 requests a day at a p99 of 0.3 s; it's fast, isn't it?
数字和中文混合 text, Ünïcödé café naïve, emoji 🚗🚕!`

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := Load("testdata"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode measures the steady state: the words are in the cache.
func BenchmarkEncode(b *testing.B) {
	tok := testTokenizer(b)
	n := len(tok.Encode(paragraph))
	b.SetBytes(int64(len(paragraph)))
	for b.Loop() {
		tok.Encode(paragraph)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncodeUncached measures text never seen before: every word is merged.
func BenchmarkEncodeUncached(b *testing.B) {
	tok, err := Load("testdata") // its own, since the benchmark replaces the cache
	if err != nil {
		b.Fatal(err)
	}
	n := len(tok.Encode(paragraph))
	b.SetBytes(int64(len(paragraph)))
	for b.Loop() {
		tok.cache = newWordCache(cacheWords)
		tok.Encode(paragraph)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncodeLongWord is one 64 KiB word of random letters: the worst case for BPE.
func BenchmarkEncodeLongWord(b *testing.B) {
	tok := testTokenizer(b)
	rng := rand.New(rand.NewSource(1))
	var sb strings.Builder
	for range 1 << 16 {
		sb.WriteByte(byte('a' + rng.Intn(26)))
	}
	word := sb.String()
	b.SetBytes(int64(len(word)))
	for b.Loop() {
		tok.Encode(word)
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := testTokenizer(b)
	ids := tok.Encode(paragraph)
	for b.Loop() {
		tok.Decode(ids)
	}
	b.ReportMetric(float64(len(ids)*b.N)/b.Elapsed().Seconds(), "tokens/s")
}
