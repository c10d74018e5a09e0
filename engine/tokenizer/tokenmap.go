package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// parseTokenMap parses a flat JSON object from token to id, the shape of vocab.json and
// added_tokens.json. It is a small hand-written scanner because encoding/json's
// reflection made it the slowest part of Load (the vocabulary has 151k entries); keys
// with escapes, rare in a byte-level vocabulary, are still decoded by encoding/json.
// A key given twice is an error.
func parseTokenMap(data []byte) (map[string]int32, error) {
	p := tokenMapParser{data: data}
	tokens := make(map[string]int32, len(data)/20)
	p.skipSpace()
	if !p.consume('{') {
		return nil, p.errorf("want '{'")
	}
	p.skipSpace()
	if p.consume('}') {
		return tokens, p.end()
	}
	for {
		p.skipSpace()
		key, err := p.string()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if !p.consume(':') {
			return nil, p.errorf("want ':' after %q", key)
		}
		p.skipSpace()
		id, err := p.int32()
		if err != nil {
			return nil, err
		}
		if _, dup := tokens[key]; dup {
			return nil, p.errorf("token %q given twice", key)
		}
		tokens[key] = id
		p.skipSpace()
		if p.consume('}') {
			return tokens, p.end()
		}
		if !p.consume(',') {
			return nil, p.errorf("want ',' or '}' after the id of %q", key)
		}
	}
}

type tokenMapParser struct {
	data []byte
	pos  int
}

func (p *tokenMapParser) errorf(format string, args ...any) error {
	return fmt.Errorf("JSON offset %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *tokenMapParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *tokenMapParser) consume(c byte) bool {
	if p.pos < len(p.data) && p.data[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// end checks that nothing but whitespace follows the object.
func (p *tokenMapParser) end() error {
	p.skipSpace()
	if p.pos != len(p.data) {
		return p.errorf("unexpected data after the object")
	}
	return nil
}

// string reads a JSON string.
func (p *tokenMapParser) string() (string, error) {
	start := p.pos
	if !p.consume('"') {
		return "", p.errorf("want a string")
	}
	escaped := false
	for ; p.pos < len(p.data); p.pos++ {
		switch c := p.data[p.pos]; {
		case c == '\\':
			escaped = true
			p.pos++ // skip the escaped byte, which may be a quote
		case c == '"':
			p.pos++
			quoted := p.data[start:p.pos]
			if !utf8.Valid(quoted) {
				return "", fmt.Errorf("JSON offset %d: string is not valid UTF-8", start)
			}
			if !escaped {
				return string(quoted[1 : len(quoted)-1]), nil
			}
			var s string
			if err := json.Unmarshal(quoted, &s); err != nil {
				return "", fmt.Errorf("JSON offset %d: %w", start, err)
			}
			return s, nil
		case c < 0x20:
			return "", p.errorf("control character in a string")
		}
	}
	return "", p.errorf("unterminated string")
}

// int32 reads a JSON integer that fits an int32.
func (p *tokenMapParser) int32() (int32, error) {
	start := p.pos
	if p.pos < len(p.data) && p.data[p.pos] == '-' {
		p.pos++
	}
	digits := p.pos
	for p.pos < len(p.data) && '0' <= p.data[p.pos] && p.data[p.pos] <= '9' {
		p.pos++
	}
	if p.pos-digits > 1 && p.data[digits] == '0' {
		return 0, fmt.Errorf("JSON offset %d: want an integer id: leading zero", start)
	}
	v, err := strconv.ParseInt(string(p.data[start:p.pos]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("JSON offset %d: want an integer id: %w", start, err)
	}
	return int32(v), nil
}
