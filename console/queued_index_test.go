package console

import "testing"

// TestQueuedIndexScanKeepsNewerLookups: a scan's map replaces the index up to the sequence
// it read through; what lookups read past it stays (and is read again by the next lookup,
// as the scan's through replaces the index's: the stream may have been made again).
func TestQueuedIndexScanKeepsNewerLookups(t *testing.T) {
	x := newQueuedIndex()
	x.seqs[x.key("old")], x.seqs[x.key("late")] = 3, 12
	x.through = 12
	x.scanned(map[uint64]uint64{x.key("a"): 5, x.key("b"): 9}, 10)
	want := map[string]uint64{"a": 5, "b": 9, "late": 12}
	if len(x.seqs) != len(want) || x.through != 10 {
		t.Fatalf("after the scan: %d ids through %d, want %d through 10", len(x.seqs), x.through, len(want))
	}
	for id, seq := range want {
		if x.seqs[x.key(id)] != seq {
			t.Errorf("%s at %d, want %d", id, x.seqs[x.key(id)], seq)
		}
	}
}

// TestQueuedIndexRoomIsBounded: near maxScan ids the index drops those below the
// stream's first sequence, and takes no more than maxScan.
func TestQueuedIndexRoomIsBounded(t *testing.T) {
	x := newQueuedIndex()
	for i := range uint64(maxScan) {
		x.seqs[i] = i + 1
	}
	if n := x.room(1); n != 0 {
		t.Errorf("full, nothing acknowledged: room %d, want 0", n)
	}
	if n := x.room(maxScan/2 + 1); n != catchUpMax || len(x.seqs) != maxScan/2 {
		t.Errorf("half acknowledged: room %d with %d ids, want %d with %d", n, len(x.seqs), catchUpMax, maxScan/2)
	}
}

// TestQueuedIndexForgetsAPurgedStream: a stream that now ends before what the index read
// through was purged or made again; its sequences name other messages, so the index
// starts over instead of answering "not queued" for every job until a restart.
func TestQueuedIndexForgetsAPurgedStream(t *testing.T) {
	x := newQueuedIndex()
	x.seqs[x.key("gone")], x.through = 40, 50
	if got := x.readThrough(60); got != 50 || len(x.seqs) != 1 {
		t.Fatalf("stream grown to 60: through %d with %d ids, want 50 with 1", got, len(x.seqs))
	}
	if got := x.readThrough(20); got != 0 || len(x.seqs) != 0 {
		t.Fatalf("stream now ends at 20: through %d with %d ids, want 0 with none", got, len(x.seqs))
	}
}
