package strictjson

import (
	"errors"
	"math"
	"strconv"
)

// Number is the value of a JSON number literal as JSON Schema validators read it: an IEEE
// 754 double, the nearest to the literal (as JavaScript reads it). A literal too large for
// a double is an infinity; a literal that is not a JSON number is an error.
func Number(lit []byte) (float64, error) {
	if len(lit) == 0 || !(lit[0] == '-' || lit[0] >= '0' && lit[0] <= '9') {
		return 0, errors.New("want a number")
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, errors.New("want a number")
	}
	return f, nil // ±Inf on overflow, the nearest double (0 at worst) on underflow
}

// IsInteger reports whether f is an integer in JSON Schema's sense: a finite number with
// no fraction, however it is written (48, 48.0 and 4.8e1 all are).
func IsInteger(f float64) bool {
	return !math.IsInf(f, 0) && !math.IsNaN(f) && f == math.Trunc(f)
}

// Integer reads a JSON number literal that must be an integer in JSON Schema's sense and
// returns its value; the caller checks its range (a float64 holds every integer of a
// sensible range exactly). A string, null or a fraction is ErrNotInteger.
func Integer(lit []byte) (float64, error) {
	f, err := Number(lit)
	if err != nil || !IsInteger(f) {
		return 0, ErrNotInteger
	}
	return f, nil
}
