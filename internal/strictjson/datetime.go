package strictjson

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The date-time format of JSON Schema is RFC 3339's date-time. ParseDateTime accepts
// exactly what ajv-formats (version 3, its default "full" formats), the validator most
// producers check the schema with, accepts, so that a deadline the schema allows is one
// the worker reads:
//
//   - YYYY-MM-DD, a real day of a real month (29 February in leap years only);
//   - the separator T or t, or one white-space character (RFC 3339 allows a space);
//   - hh:mm:ss with any number of fraction digits; hours 00-23, minutes 00-59, seconds
//     00-59, and 60 (a leap second) where the time is 23:59 in UTC (by ajv-formats'
//     arithmetic, see ParseDateTime);
//   - a time zone, which is required: Z or z, or +hh, +hhmm or +hh:mm (hh at most 23,
//     mm at most 59), or the same with -.
var (
	datePart = regexp.MustCompile(`^(\d\d\d\d)-(\d\d)-(\d\d)$`)
	timePart = regexp.MustCompile(`^(?i)(\d\d):(\d\d):(\d\d)(\.\d+)?(z|([+-])(\d\d)(?::?(\d\d))?)$`)
)

// ParseDateTime reads s as the schema's date-time format (see above). A leap second is
// read as the last instant before the next minute (Go's time has no second 60).
func ParseDateTime(s string) (time.Time, error) {
	bad := func(why string) (time.Time, error) {
		return time.Time{}, fmt.Errorf("%s is not an RFC 3339 date-time: %s", shortQuote(s), why)
	}
	sep := strings.IndexFunc(s, isDateTimeSeparator)
	if sep < 0 || strings.IndexFunc(s[sep+1:], isDateTimeSeparator) >= 0 {
		return bad("want one T (or a space) between the date and the time")
	}
	_, sepSize := firstRune(s[sep:])
	d := datePart.FindStringSubmatch(s[:sep])
	if d == nil {
		return bad("the date must be YYYY-MM-DD")
	}
	year, month, day := atoi(d[1]), atoi(d[2]), atoi(d[3])
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) {
		return bad("no such day")
	}
	t := timePart.FindStringSubmatch(s[sep+sepSize:])
	if t == nil {
		return bad("the time must be hh:mm:ss[.fraction] and a zone (Z, +hh:mm or -hh:mm)")
	}
	hour, minute, sec := atoi(t[1]), atoi(t[2]), atoi(t[3])
	var offset int // seconds east of UTC
	if !strings.EqualFold(t[5], "z") {
		tzH, tzM := atoi(t[7]), 0
		if t[8] != "" {
			tzM = atoi(t[8])
		}
		if tzH > 23 || tzM > 59 {
			return bad("no such time zone offset")
		}
		offset = (tzH*60 + tzM) * 60
		if t[6] == "-" {
			offset = -offset
		}
	}
	// ajv-formats' rule, kept to the letter: a time past 23:59:59 is allowed only as a
	// leap second, and a leap second only where the time is 23:59 in UTC (which its
	// arithmetic also finds in some hours and minutes out of range, such as 24:59:60+01:00;
	// time.Date below reads those as the instant they add up to).
	if !(hour <= 23 && minute <= 59 && sec <= 59) && !(sec <= 60 && leapSecondMinute(hour, minute, offset)) {
		return bad("no such time of day")
	}
	var nanos int
	if frac := t[4]; frac != "" {
		digits := (frac[1:] + "000000000")[:9]
		nanos = atoi(digits)
	}
	if sec == 60 {
		sec, nanos = 59, int(time.Second-1) // the last instant before the next minute
	}
	zone := time.UTC
	if offset != 0 || !strings.EqualFold(t[5], "z") {
		zone = time.FixedZone("", offset)
	}
	// time.Date carries an hour of 24 or more, or a minute of 60, that ajv's leap-second
	// arithmetic lets by into the next day or hour. Such a time is 23:59 in UTC, so UTC
	// keeps it within the years JSON can write (9999-12-31T24:59:60+01:00).
	at := time.Date(year, time.Month(month), day, hour, minute, sec, nanos, zone)
	if at.Year() > 9999 {
		at = at.UTC()
	}
	return at, nil
}

// leapSecondMinute reports whether hh:mm at the given offset is 23:59 in UTC, the only
// minute a leap second can end (ajv-formats' rule, which also allows the minute to wrap
// to the day before).
func leapSecondMinute(hour, minute, offset int) bool {
	sign := 1
	if offset < 0 {
		sign, offset = -1, -offset
	}
	tzH, tzM := offset/3600, offset/60%60
	utcMin := minute - tzM*sign
	utcHr := hour - tzH*sign
	if utcMin < 0 {
		utcHr--
	}
	return (utcHr == 23 || utcHr == -1) && (utcMin == 59 || utcMin == -1)
}

// isDateTimeSeparator is JavaScript's /t|\s/i: T, t, or a white-space character as
// ECMAScript defines it.
func isDateTimeSeparator(r rune) bool {
	switch r {
	case 't', 'T', '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

func firstRune(s string) (rune, int) {
	for _, r := range s {
		return r, len(string(r))
	}
	return 0, 0
}

func daysIn(year, month int) int {
	if month == 2 && year%4 == 0 && (year%100 != 0 || year%400 == 0) {
		return 29
	}
	return [...]int{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[month]
}

// atoi reads digits that a pattern has already matched.
func atoi(digits string) int {
	n, _ := strconv.Atoi(digits)
	return n
}

// shortQuote quotes s for a message, shortened when long.
func shortQuote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:61]) + "..."
	}
	return strconv.Quote(s)
}
