// Package tokenizer is Qwen2's byte-level BPE tokenizer, loaded from a checkpoint's
// vocab.json, merges.txt and added_tokens.json.
//
// Encoding runs in five steps, each in its own file:
//
//  1. added tokens (special tokens, <IMG_CONTEXT>, <box>, <0>..<1000>, ...) are cut out of
//     the text whole, longest first, before anything else touches it (added.go);
//  2. every piece between them is put in Unicode NFC;
//  3. the pre-tokenizer splits each piece into words with Qwen2's split pattern
//     (pretokenize.go);
//  4. each word's UTF-8 bytes become byte-level symbols (GPT-2's bytes_to_unicode,
//     bytelevel.go);
//  5. byte pair merges are applied by rank, with a bounded cache of recent words (bpe.go).
//
// Decoding maps every id back to its bytes; added tokens decode to their own text.
// A Tokenizer is immutable after Load apart from its internal cache and is safe for
// concurrent use.
package tokenizer
