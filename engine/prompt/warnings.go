package prompt

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/locateanything/detect/engine"
)

// listSeparators are the characters people separate a list with when they forget </c>.
const listSeparators = ",;"

// A query's warnings are bounded, whatever the query: at most MaxWarnings of them, the
// last saying how many more there were, and each quotes at most quoteRunes characters of
// the query (or of a category, or of a suggested rewrite). A 1000-character query of
// empty categories gives a few hundred bytes of warnings, not one per category, each
// quoting it all.
const (
	MaxWarnings = 5
	quoteRunes  = 60
)

// QueryWarnings says what looks like a mistake in a query that is still run as given
// (docs/http.md, "Warnings"): for the detect task, categories separated by commas or
// semicolons instead of </c> (the model would look for one category named after the whole
// list), an empty category, and a separator with nothing after it (the model is asked for
// an empty category and may invent a label for it); for the phrase tasks, a </c>, which
// only the detect task reads as a separator. The query is never changed: the answer is the
// one the model gives the query as written, and a warning says why it may not be what was
// meant. It returns nil when nothing looks wrong. An empty task means TaskDetect. The
// warnings are bounded in number (MaxWarnings) and in size (each quotes an excerpt).
func QueryWarnings(task engine.Task, query string) []string {
	return bounded(queryWarnings(task, query))
}

// bounded keeps the first MaxWarnings-1 of warns and says how many more there were.
func bounded(warns []string) []string {
	if len(warns) <= MaxWarnings {
		return warns
	}
	more := len(warns) - (MaxWarnings - 1)
	return append(warns[:MaxWarnings-1:MaxWarnings-1], fmt.Sprintf("and %d more warnings like these about the same query", more))
}

// excerpt quotes s for a warning: all of it when short, else its start and its length.
func excerpt(s string) string {
	if utf8.RuneCountInString(s) <= quoteRunes {
		return strconv.Quote(s)
	}
	runes := []rune(s)
	return fmt.Sprintf("%s... (%d characters)", strconv.Quote(string(runes[:quoteRunes-10])), len(runes))
}

func queryWarnings(task engine.Task, query string) []string {
	if strings.TrimSpace(query) == "" {
		return nil // an empty query is an error (or, for the text task, all the text)
	}
	if task == "" {
		task = engine.TaskDetect
	}
	if task != engine.TaskDetect {
		if strings.Contains(query, CategorySep) {
			return []string{fmt.Sprintf("query %s holds %s, which separates categories only for the detect task: task %s reads the query as one phrase", excerpt(query), CategorySep, task)}
		}
		return nil
	}

	cats := strings.Split(query, CategorySep)
	if len(cats) == 1 {
		return listWithoutSeparator(query)
	}
	var warns []string
	for i, c := range cats {
		n := i + 1
		switch {
		case strings.TrimSpace(c) == "" && i == len(cats)-1:
			warns = append(warns, fmt.Sprintf("query %s ends with %s: the model is asked for an empty last category and may invent a label for it; drop the trailing %s", excerpt(query), CategorySep, CategorySep))
		case strings.TrimSpace(c) == "" && i == 0:
			warns = append(warns, fmt.Sprintf("query %s starts with %s: the first category is empty and the model may invent a label for it", excerpt(query), CategorySep))
		case strings.TrimSpace(c) == "":
			warns = append(warns, fmt.Sprintf("query %s: category %d of %d is empty (two %s in a row) and the model may invent a label for it", excerpt(query), n, len(cats), CategorySep))
		case strings.ContainsAny(c, listSeparators):
			warns = append(warns, fmt.Sprintf("query %s: category %d (%s) holds a %q and runs as one category; separate categories with %s only", excerpt(query), n, excerpt(strings.TrimSpace(c)), separatorIn(c), CategorySep))
		}
	}
	return warns
}

// listWithoutSeparator warns about a one-category detect query that has a comma or
// semicolon: a list written without </c>, or a stray separator at either end.
func listWithoutSeparator(query string) []string {
	if !strings.ContainsAny(query, listSeparators) {
		return nil
	}
	sep := separatorIn(query)
	var parts []string
	for _, p := range strings.FieldsFunc(query, func(r rune) bool { return strings.ContainsRune(listSeparators, r) }) {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) > 1 {
		return []string{fmt.Sprintf("query %s separates categories with %q, not %s: it runs as one category named after the whole list; to ask for each, write %s",
			excerpt(query), sep, CategorySep, excerpt(strings.Join(parts, CategorySep)))}
	}
	return []string{fmt.Sprintf("query %s has a stray %q: it runs as one category with the %q in its name; categories are separated by %s", excerpt(query), sep, sep, CategorySep)}
}

// separatorIn is the first list separator in s, as a string.
func separatorIn(s string) string {
	if i := strings.IndexAny(s, listSeparators); i >= 0 {
		return s[i : i+1]
	}
	return ""
}
