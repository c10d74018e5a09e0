package prompt

import (
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
)

func TestQueryWarnings(t *testing.T) {
	for _, c := range []struct {
		task  engine.Task
		query string
		n     int      // warnings
		want  []string // what they say, together
	}{
		// Well-formed queries: nothing to say.
		{engine.TaskDetect, "red circle", 0, nil},
		{engine.TaskDetect, "red circle</c>blue square", 0, nil},
		{"", "person</c>car</c>dog", 0, nil},
		{engine.TaskGround, "the man, left of the car", 0, nil}, // a phrase may have commas
		{engine.TaskText, "", 0, nil},
		// Lists written without </c>.
		{engine.TaskDetect, "red circle, blue square", 1, []string{`separates categories with ",", not </c>`, `write "red circle</c>blue square"`}},
		{"", "person; car;dog", 1, []string{`";"`, `"person</c>car</c>dog"`}},
		{engine.TaskDetect, "red circle,", 1, []string{`stray ","`}},
		{engine.TaskDetect, ";car", 1, []string{`stray ";"`}},
		// Empty categories and separators with nothing after them.
		{engine.TaskDetect, "red circle</c>", 1, []string{"ends with </c>", "invent a label"}},
		{engine.TaskDetect, "red circle</c>  ", 1, []string{"ends with </c>"}},
		{engine.TaskDetect, "</c>car", 1, []string{"starts with </c>"}},
		{engine.TaskDetect, "a</c></c>b", 1, []string{"category 2 of 3 is empty"}},
		{engine.TaskDetect, "a</c>b, c</c>", 2, []string{`category 2 ("b, c") holds a ","`, "ends with </c>"}},
		// </c> in a phrase task.
		{engine.TaskPoint, "nose</c>ear", 1, []string{"only for the detect task: task point reads the query as one phrase"}},
	} {
		got := QueryWarnings(c.task, c.query)
		if len(got) != c.n {
			t.Errorf("%s %q: warnings %q, want %d", c.task, c.query, got, c.n)
			continue
		}
		all := strings.Join(got, "\n")
		for _, w := range c.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s %q: warnings %q, want one that says %q", c.task, c.query, got, w)
			}
		}
	}
}

// TestQueryWarningsAreBounded: a query of 250 </c> gave 251 warnings, each quoting the
// whole query: a 1 KB job made a 279 KB result (#23, defect 10). Warnings are now few and
// short whatever the query.
func TestQueryWarningsAreBounded(t *testing.T) {
	long := strings.Repeat("x", engine.MaxQueryChars-10)
	for _, c := range []struct {
		task  engine.Task
		query string
		more  string // the last warning, when some were left out
	}{
		{engine.TaskDetect, strings.Repeat("</c>", 250), "and 247 more warnings"},
		{engine.TaskDetect, strings.Repeat("a,</c>", 166), "and 163 more warnings"},
		{engine.TaskDetect, strings.Repeat("a, ", 333), ""},
		{engine.TaskDetect, long + "</c>", ""},
		{engine.TaskDetect, "</c>" + long + ",b</c></c>", ""},
		{engine.TaskPoint, long + "</c>", ""},
	} {
		got := QueryWarnings(c.task, c.query)
		size := 0
		for _, w := range got {
			size += len(w)
			if len(w) > 400 {
				t.Errorf("%.40q: a warning of %d bytes: %.100q", c.query, len(w), w)
			}
		}
		if len(got) == 0 || len(got) > MaxWarnings || size > MaxWarnings*400 {
			t.Errorf("%.40q: %d warnings of %d bytes in all, want 1..%d", c.query, len(got), size, MaxWarnings)
		}
		if c.more != "" && !strings.HasPrefix(got[len(got)-1], c.more) {
			t.Errorf("%.40q: last warning %q, want it to say %q", c.query, got[len(got)-1], c.more)
		}
	}
}
