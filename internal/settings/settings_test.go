package settings

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type color string

// TestSetParsesAndListsItsMembers: a closed set takes its members, refuses anything else
// naming every member, and lists them in its own order.
func TestSetParsesAndListsItsMembers(t *testing.T) {
	colors := Set[color]{"red", "green", "blue"}
	if got := colors.List(); got != "red, green, blue" {
		t.Errorf("List = %q", got)
	}
	if c, err := colors.Parse("green"); err != nil || c != "green" {
		t.Errorf("Parse(green) = %q, %v", c, err)
	}
	for _, bad := range []string{"", "Green", "purple"} {
		if _, err := colors.Parse(bad); err == nil || !strings.Contains(err.Error(), `is not one of red, green, blue`) {
			t.Errorf("Parse(%q): %v, want a refusal naming the members", bad, err)
		}
		if colors.Has(color(bad)) {
			t.Errorf("Has(%q) = true", bad)
		}
	}
}

// TestCheckReportsEveryComplaint: a Check keeps every complaint, each naming its
// variable, and Split recovers them one by one.
func TestCheckReportsEveryComplaint(t *testing.T) {
	var c Check
	c.Positive("LA_A", 0)
	c.PositiveDuration("LA_B", -time.Second)
	c.NotNegative("LA_C", -1, "derived")
	c.OneOf("LA_D", "x", "y", "z")
	c.Positive("LA_OK", 3)
	c.Join(errors.Join(errors.New("LA_E one"), errors.New("LA_F two")))
	errs := Split(c.Err())
	want := []string{"LA_A is 0, want at least 1", "LA_B is -1s, want a positive duration",
		"LA_C is -1, want 0 (derived) or more", `LA_D is "x", want one of y, z`, "LA_E one", "LA_F two"}
	if len(errs) != len(want) {
		t.Fatalf("complaints %v, want %d", errs, len(want))
	}
	for i, w := range want {
		if errs[i].Error() != w {
			t.Errorf("complaint %d: %q, want %q", i, errs[i], w)
		}
	}
	var none Check
	none.Positive("LA_OK", 1)
	if err := none.Err(); err != nil {
		t.Errorf("no complaint gave %v", err)
	}
}
