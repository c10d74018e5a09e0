package submit

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progressSnapshot is the state of a run at one moment.
type progressSnapshot struct {
	Total     int // jobs in the set (after merging duplicates found so far)
	Done      int // with a result, this run or before
	Failed    int // of Done, not succeeded
	Published int // published this run
	Collected int // results collected this run
	Elapsed   time.Duration
	Planning  bool // still reading and hashing inputs
	// NATSLost is how long the NATS connection has been lost; 0 while it is up.
	NATSLost time.Duration
}

// progress draws a bar on a terminal (rewritten in place) or prints a plain line when
// output goes to a file or a pipe, where a carriage return would make a mess of logs.
type progress struct {
	w        io.Writer
	terminal bool
	drawn    bool // a bar is on the current terminal line
}

func (p *progress) update(s progressSnapshot) {
	if p.w == nil {
		return
	}
	line := s.line()
	if p.terminal {
		fmt.Fprintf(p.w, "\r\x1b[K%s %s", bar(s.Done, s.Total, 24), line)
		p.drawn = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// say prints a message on a line of its own, below the bar when one is drawn (the next
// update draws it again).
func (p *progress) say(format string, args ...any) {
	if p.w == nil {
		return
	}
	p.finish()
	fmt.Fprintf(p.w, "submit: "+format+"\n", args...)
}

// finish ends the bar's line so that what follows starts on a fresh one.
func (p *progress) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

func (s progressSnapshot) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d done, %d failed", s.Done, s.Total, s.Failed)
	rate := 0.0
	if secs := s.Elapsed.Seconds(); secs > 0 {
		rate = float64(s.Collected) / secs
	}
	fmt.Fprintf(&b, ", %.1f/s", rate)
	if left := s.Total - s.Done; rate > 0 && left > 0 {
		fmt.Fprintf(&b, ", ETA %s", time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second))
	}
	if s.Planning {
		b.WriteString(" (still reading inputs)")
	}
	if s.NATSLost > 0 {
		fmt.Fprintf(&b, " (NATS connection lost %s ago: waiting for it)", s.NATSLost.Round(time.Second))
	}
	return b.String()
}

func bar(done, total, width int) string {
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	filled = min(filled, width)
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}
