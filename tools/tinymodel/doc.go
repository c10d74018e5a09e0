// Package tinymodel holds the Go side of the tiny-shapes model (models/tiny-shapes): tests
// that run the shipped checkpoint through the real engine (engine/tokenizer, engine/prompt,
// engine/pipeline with the C backend, engine/answer) and check it against what the Python
// trainer in this folder produced. The trainer itself is Python; see README.md.
package tinymodel
