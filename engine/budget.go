package engine

// MaxNewTokensLimit is the largest max_new_tokens any request may name, whatever the cap
// (LA_MAX_NEW_TOKENS_CAP): the job schema's maximum, so that a schema-valid budget is a
// number every worker can hold. A budget over the cap is refused all the same.
const MaxNewTokensLimit = 1 << 20

// BudgetError refuses a max_new_tokens outside 1..limit, in the words both paths use (the
// queue's job decoder and /predict), so that a producer sees one message for one mistake.
// got is the value as the request wrote it; limit is the cap (or MaxNewTokensLimit where
// the cap is not known yet). It returns nil for a budget in range.
func BudgetError(got float64, limit int) error {
	switch {
	case got < 1:
		return InputErrorf(CodeBadBudget, "max_new_tokens must be at least 1, got %v (leave it out for the default)", got)
	case got > float64(limit):
		return InputErrorf(CodeBadBudget, "max_new_tokens must be at most %d, got %v", limit, got)
	}
	return nil
}
