package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// workerSeries are the la_* series docs/worker.md's metrics table lists, with their types.
// worker.TestObservabilityAfterAPredictAndAJob holds the table to what a running worker
// serves, so a name found here exists on /metrics.
func workerSeries(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile("../docs/worker.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Metrics")
	if !ok {
		t.Fatal(`docs/worker.md has no "## Metrics" section`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	series := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(la_[a-z_]+)[^`]*` \\| ([a-z]+) \\|").FindAllStringSubmatch(table, -1) {
		series[m[1]] = m[2]
	}
	if len(series) < 10 {
		t.Fatalf("read %d series from docs/worker.md's metrics table: %v", len(series), series)
	}
	return series
}

// promqlFunctions are the PromQL functions and aggregations the files may use.
var promqlFunctions = map[string]bool{
	"sum": true, "max": true, "min": true, "avg": true, "count": true, "topk": true, "bottomk": true, "quantile": true,
	"rate": true, "irate": true, "increase": true, "delta": true, "deriv": true, "histogram_quantile": true,
	"clamp_min": true, "clamp_max": true, "abs": true, "absent": true, "vector": true, "scalar": true,
	"max_over_time": true, "min_over_time": true, "avg_over_time": true, "label_values": true,
}

// promqlWords are PromQL's keywords: neither functions nor series.
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true,
}

// grouping and matching are the clauses whose parentheses hold label names, not
// expressions: an aggregation's by/without (dropped whole, so that `sum by (x) (...)`
// reads as the call it is) and a binary operator's on/ignoring/group_left/group_right.
var (
	grouping = regexp.MustCompile(`\b(by|without)\s*\([^()]*\)`)
	matching = regexp.MustCompile(`\b(on|ignoring|group_left|group_right)\s*\([^()]*\)`)
)

// promqlSeries checks expr's brackets, quotes and function names, and returns the series
// it selects. It reads the subset of PromQL that dashboards and alert rules use: strings
// and label matchers ({...}), ranges and subqueries ([...]) and label lists (by (...))
// hold no series; a name followed by "(" is a function; any other name is a series.
func promqlSeries(expr string) ([]string, error) {
	var depth []rune
	inString := rune(0)
	var stripped strings.Builder
	for _, r := range expr {
		switch {
		case inString != 0:
			if r == inString {
				inString = 0
			}
			continue
		case r == '"' || r == '\'' || r == '`':
			inString = r
			continue
		case r == '(' || r == '{' || r == '[':
			depth = append(depth, r)
		case r == ')' || r == '}' || r == ']':
			open := map[rune]rune{')': '(', '}': '{', ']': '['}[r]
			if len(depth) == 0 || depth[len(depth)-1] != open {
				return nil, fmt.Errorf("unbalanced %q", r)
			}
			depth = depth[:len(depth)-1]
			if open != '(' {
				continue
			}
		}
		if len(depth) > 0 && (depth[len(depth)-1] == '{' || depth[len(depth)-1] == '[') || r == '{' || r == '[' {
			continue // inside a matcher or a range
		}
		stripped.WriteRune(r)
	}
	if len(depth) > 0 || inString != 0 {
		return nil, fmt.Errorf("unclosed %q", append(depth, inString))
	}
	text := matching.ReplaceAllString(grouping.ReplaceAllString(stripped.String(), ""), "$1")
	var series []string
	token := regexp.MustCompile(`[0-9][0-9a-zA-Z.]*|[a-zA-Z_:][a-zA-Z0-9_:]*`)
	for _, loc := range token.FindAllStringIndex(text, -1) {
		word := text[loc[0]:loc[1]]
		if word[0] >= '0' && word[0] <= '9' || promqlWords[word] {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(text[loc[1]:]), "(") {
			if !promqlFunctions[word] {
				return nil, fmt.Errorf("unknown function %s", word)
			}
			continue
		}
		series = append(series, word)
	}
	if len(series) == 0 {
		return nil, fmt.Errorf("selects no series")
	}
	return series, nil
}

// checkSeries reports each series expr names that the worker does not serve; a
// histogram's _bucket, _sum and _count are its own.
func checkSeries(t *testing.T, where, expr string, known map[string]string) []string {
	t.Helper()
	names, err := promqlSeries(expr)
	if err != nil {
		t.Errorf("%s: %v: %s", where, err, expr)
		return nil
	}
	for _, name := range names {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && known[b] == "histogram" {
				base = b
			}
		}
		if _, ok := known[base]; !ok {
			t.Errorf("%s names %s, which the worker does not serve (docs/worker.md, Metrics): %s", where, name, expr)
		}
		if strings.HasSuffix(name, "_bucket") && known[base] != "histogram" {
			t.Errorf("%s takes buckets of %s, a %s", where, base, known[base])
		}
	}
	return names
}

func TestPromQLSeriesReader(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (le, stage) (rate(la_job_stage_seconds_bucket{stage=~"fetch|decode"}[$__rate_interval]))`: "la_job_stage_seconds_bucket",
		`la_device_busy_ratio < 0.05 and on() (max(la_queue_pending) > 0)`:                                "la_device_busy_ratio la_queue_pending",
		`max(delta(la_dlq_messages[15m] offset 5m)) > 1e3`:                                                "la_dlq_messages",
	} {
		got, err := promqlSeries(expr)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("%s: %v %v, want %s", expr, got, err, want)
		}
	}
	for _, bad := range []string{`sum(rate(la_jobs_total[5m])`, `la_jobs_total{outcome="x"`, `summ(la_jobs_total)`, `sum(rate(x[5m)])`, `0.5 > 1`} {
		if got, err := promqlSeries(bad); err == nil {
			t.Errorf("%s read as %v; want an error", bad, got)
		}
	}
}

// TestDashboardImportsAndNamesServedSeries: the Grafana dashboard is one importable JSON
// model (title, uid, a Prometheus data-source variable every panel and query uses,
// unique panel ids laid out on the 24-column grid), and every query names only series
// the worker serves.
func TestDashboardImportsAndNamesServedSeries(t *testing.T) {
	known := workerSeries(t)
	raw, err := os.ReadFile("grafana/la-workers.json")
	if err != nil {
		t.Fatal(err)
	}
	type datasource struct{ Type, UID string }
	var dash struct {
		Title         string
		UID           string
		SchemaVersion int
		Templating    struct {
			List []struct{ Name, Type, Query string }
		}
		Panels []struct {
			ID         int
			Type       string
			Title      string
			Datasource *datasource
			GridPos    struct{ H, W, X, Y int }
			Targets    []struct {
				RefID      string
				Expr       string
				Datasource *datasource
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana/la-workers.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || dash.SchemaVersion < 30 {
		t.Errorf("title %q uid %q schemaVersion %d", dash.Title, dash.UID, dash.SchemaVersion)
	}
	if len(dash.Templating.List) == 0 || dash.Templating.List[0].Type != "datasource" || dash.Templating.List[0].Query != "prometheus" {
		t.Fatalf("the first template variable is not a Prometheus data source: %+v", dash.Templating.List)
	}
	dsVar := "${" + dash.Templating.List[0].Name + "}"
	ids, used := map[int]bool{}, map[string]bool{}
	for _, p := range dash.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if ids[p.ID] {
			t.Errorf("%s: id used twice", where)
		}
		ids[p.ID] = true
		if p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
			t.Errorf("%s: off the grid %+v", where, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != dsVar || len(p.Targets) == 0 {
			t.Errorf("%s: data source %+v, %d queries; want %s and at least one", where, p.Datasource, len(p.Targets), dsVar)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.RefID == "" || refs[q.RefID] || q.Datasource == nil || q.Datasource.UID != dsVar {
				t.Errorf("%s: query %q has refId %q (unique?) and data source %+v", where, q.Expr, q.RefID, q.Datasource)
			}
			refs[q.RefID] = true
			for _, s := range checkSeries(t, where, q.Expr, known) {
				used[strings.TrimSuffix(s, "_bucket")] = true
			}
		}
	}
	// The dashboard shows what the issue asks an operator to see.
	for _, s := range []string{"la_queue_pending", "la_queue_ack_pending", "la_dlq_messages", "la_device_busy_ratio",
		"la_device_busy_seconds_total", "la_tokens_generated_total", "la_predict_requests_total", "la_predict_request_seconds",
		"la_jobs_total", "la_build_info"} {
		if !used[s] {
			t.Errorf("no panel shows %s", s)
		}
	}
}

// TestAlertRulesLoadAndNameServedSeries: the rule file has the shape Prometheus loads
// (groups of rules with a unique alert name, an expression, a valid `for`, a severity
// and a summary), it alerts on the four conditions the deployment needs, and every
// expression names only series the worker serves.
func TestAlertRulesLoadAndNameServedSeries(t *testing.T) {
	known := workerSeries(t)
	docs := readYAML(t, "prometheus/la-alerts.yaml")
	if len(docs) != 1 {
		t.Fatalf("%d YAML documents, want one", len(docs))
	}
	groups := list(t, docs[0], "groups")
	alerts := map[string]string{}
	for _, g := range groups {
		if str(t, g, "name") == "" {
			t.Error("a group without a name")
		}
		for _, r := range list(t, g, "rules") {
			name, expr := str(t, r, "alert"), str(t, r, "expr")
			if _, dup := alerts[name]; dup || name == "" {
				t.Errorf("alert %q: empty or twice", name)
			}
			alerts[name] = expr
			rule, _ := r.(map[string]any)
			for key := range rule {
				if !slices.Contains([]string{"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, key) {
					t.Errorf("%s: unknown key %q (Prometheus refuses the file)", name, key)
				}
			}
			if has(r, "for") {
				if _, err := time.ParseDuration(str(t, r, "for")); err != nil {
					t.Errorf("%s: for: %v", name, err)
				}
			}
			if sev := str(t, r, "labels", "severity"); sev != "warning" && sev != "critical" {
				t.Errorf("%s: severity %q", name, sev)
			}
			if str(t, r, "annotations", "summary") == "" || str(t, r, "annotations", "description") == "" {
				t.Errorf("%s: no summary or description", name)
			}
			checkSeries(t, name, expr, known)
		}
	}
	for name, needs := range map[string][]string{
		"LAQueueGrowingWhileDevicesIdle": {"la_queue_pending", "la_device_busy"},
		"LADevicesIdleUnderBacklog":      {"la_device_busy", "la_queue_pending"},
		"LADeadLetterQueueGrowing":       {"la_dlq_messages"},
		"LAJobErrorRatioHigh":            {"la_jobs_total"},
		"LAPredictErrorRatioHigh":        {"la_predict_requests_total"},
	} {
		expr, ok := alerts[name]
		if !ok {
			t.Errorf("no alert %s", name)
			continue
		}
		for _, s := range needs {
			if !strings.Contains(expr, s) {
				t.Errorf("%s does not look at %s: %s", name, s, expr)
			}
		}
	}
}
