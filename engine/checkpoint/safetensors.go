package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"syscall"
)

// DType is an element type. Its values equal the C ABI's la_dtype.
type DType int

const (
	F32  DType = 0
	F16  DType = 1
	BF16 DType = 2
)

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// String is the safetensors spelling ("F32", "F16", "BF16").
func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// parseDType maps a safetensors dtype string to a DType; only the three float types a
// backend computes with are accepted.
func parseDType(s string) (DType, bool) {
	switch s {
	case "F32":
		return F32, true
	case "F16":
		return F16, true
	case "BF16":
		return BF16, true
	}
	return 0, false
}

// Tensor is one named array. Data is little-endian, row-major, and points into a
// read-only memory mapping: it stays valid until the Model that owns it is closed, and
// writing to it faults.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// Elements is the product of the shape.
func (t *Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// maxHeaderBytes bounds the JSON header. The real 3B checkpoint's headers are about
// 100 KB; anything near this limit is a corrupt length field, not a header.
const maxHeaderBytes = 100 << 20

// headerEntry is one tensor's record in a safetensors header.
type headerEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// mappedFile is one safetensors file mapped read-only, with the tensors it holds.
type mappedFile struct {
	path    string
	mapping []byte
	tensors []Tensor
}

// openSafetensors maps path and parses its header. The caller owns the mapping and
// must call unmap.
func openSafetensors(path string) (*mappedFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	size := info.Size()
	if size < 8 {
		return nil, fmt.Errorf("%s: %d bytes, too short for a safetensors file (header length alone is 8)", path, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("%s: %d bytes, too large to map", path, size)
	}
	mapping, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	tensors, err := parseSafetensors(mapping)
	if err != nil {
		_ = syscall.Munmap(mapping)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &mappedFile{path: path, mapping: mapping, tensors: tensors}, nil
}

func (m *mappedFile) unmap() error {
	if m.mapping == nil {
		return nil
	}
	err := syscall.Munmap(m.mapping)
	m.mapping, m.tensors = nil, nil
	if err != nil {
		return fmt.Errorf("%s: munmap: %w", m.path, err)
	}
	return nil
}

// parseSafetensors parses a whole safetensors file held in buf and returns its tensors,
// sorted by name, with Data slicing into buf.
func parseSafetensors(buf []byte) ([]Tensor, error) {
	if len(buf) < 8 {
		return nil, fmt.Errorf("%d bytes, too short for a safetensors file", len(buf))
	}
	headerLen := binary.LittleEndian.Uint64(buf[:8])
	if headerLen > maxHeaderBytes {
		return nil, fmt.Errorf("header length %d bytes is over the %d-byte limit (corrupt or not a safetensors file)", headerLen, maxHeaderBytes)
	}
	if headerLen > uint64(len(buf)-8) {
		return nil, fmt.Errorf("header length %d bytes runs past the end of the %d-byte file (truncated?)", headerLen, len(buf))
	}
	header := buf[8 : 8+headerLen]
	data := buf[8+headerLen:]

	var entries map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("header is not a JSON object: %w", err)
	}

	tensors := make([]Tensor, 0, len(entries))
	for name, raw := range entries {
		if name == "__metadata__" {
			continue
		}
		t, err := parseEntry(name, raw, data)
		if err != nil {
			return nil, err
		}
		tensors = append(tensors, t)
	}
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].Name < tensors[j].Name })
	return tensors, nil
}

func parseEntry(name string, raw json.RawMessage, data []byte) (Tensor, error) {
	var e headerEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return Tensor{}, fmt.Errorf("tensor %q: bad header entry %s: %w", name, clip(raw), err)
	}
	dt, ok := parseDType(e.DType)
	if !ok {
		return Tensor{}, fmt.Errorf("tensor %q: dtype %q is not supported (want BF16, F16 or F32)", name, e.DType)
	}
	if len(e.DataOffsets) != 2 {
		return Tensor{}, fmt.Errorf("tensor %q: data_offsets %v, want [begin, end]", name, e.DataOffsets)
	}
	begin, end := e.DataOffsets[0], e.DataOffsets[1]
	if begin < 0 || end < begin || end > int64(len(data)) {
		return Tensor{}, fmt.Errorf("tensor %q: data_offsets [%d, %d] outside the %d data bytes of the file (truncated?)",
			name, begin, end, len(data))
	}
	elements := int64(1)
	for _, d := range e.Shape {
		if d < 0 {
			return Tensor{}, fmt.Errorf("tensor %q: negative dimension in shape %v", name, e.Shape)
		}
		if d > 0 && elements > math.MaxInt64/d {
			return Tensor{}, fmt.Errorf("tensor %q: shape %v overflows", name, e.Shape)
		}
		elements *= d
	}
	if elements > math.MaxInt64/int64(dt.Size()) {
		return Tensor{}, fmt.Errorf("tensor %q: shape %v of %s overflows", name, e.Shape, dt)
	}
	if want := elements * int64(dt.Size()); end-begin != want {
		return Tensor{}, fmt.Errorf("tensor %q: %d data bytes, but shape %v of %s needs %d", name, end-begin, e.Shape, dt, want)
	}
	shape := e.Shape
	if shape == nil {
		shape = []int64{} // a scalar
	}
	return Tensor{Name: name, DType: dt, Shape: shape, Data: data[begin:end:end]}, nil
}
