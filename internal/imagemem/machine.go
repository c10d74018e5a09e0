package imagemem

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Bounds of DefaultSize.
const (
	// MinDefaultSize holds one 40-megapixel 16-bit image being prepared (12 bytes a pixel).
	MinDefaultSize = 512 << 20
	// FallbackSize is DefaultSize where the machine's memory cannot be read.
	FallbackSize = 2 << 30
)

// DefaultSize is a budget derived from the machine: a quarter of the memory this process
// may use (the cgroup's limit where one is set, else the machine's), at least
// MinDefaultSize, FallbackSize where neither can be read. The rest is left to the model,
// the encoded images held, Go's collector headroom and everything else.
func DefaultSize() int64 {
	limit := machineMemory()
	if limit <= 0 {
		return FallbackSize
	}
	return max(limit/4, MinDefaultSize)
}

// machineMemory is the smallest of the cgroup v2 and v1 memory limits and MemTotal, or 0
// when none can be read.
func machineMemory() int64 {
	var least int64
	for _, n := range []int64{
		readLimit("/sys/fs/cgroup/memory.max"),
		readLimit("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
		memTotal("/proc/meminfo"),
	} {
		if n > 0 && (least == 0 || n < least) {
			least = n
		}
	}
	return least
}

// readLimit reads a cgroup memory limit; "max" or anything unreadable is 0 (no limit).
func readLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 { // cgroup v1 says "no limit" with a huge number
		return 0
	}
	return n
}

// memTotal reads MemTotal from a /proc/meminfo, in bytes; 0 when it cannot.
func memTotal(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest) // "16318284 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0
		}
		return kb << 10
	}
	return 0
}
