package views

import (
	"strings"
	"testing"
	"time"

	"parley/views/viewstest"
)

// TestWhenIsRelativeWithTheExactTimeOnHover: one way to show a time (issue 27, item 10) —
// relative text against the page's clock, the exact time in the title, the instant in
// datetime; with no clock (the timeline, whose HTML must not change with it) the exact time
// is the text too, for hooks.js to make relative.
func TestWhenIsRelativeWithTheExactTimeOnHover(t *testing.T) {
	now := time.Date(2026, 11, 27, 9, 20, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{now, "just now"},
		{now.Add(-5 * time.Second), "just now"},
		{now.Add(-3 * time.Minute), "3 min ago"},
		{now.Add(12*time.Minute + 30*time.Second), "in 12 min"},
		{now.Add(40 * time.Second), "in 40 s"},
		{now.Add(-5 * time.Hour), "5 h ago"},
		{now.Add(-72 * time.Hour), "3 d ago"},
	} {
		if got := relativeTime(tc.at, now); got != tc.want {
			t.Errorf("relativeTime(%s) = %q, want %q", tc.at.Sub(now), got, tc.want)
		}
	}
	at := now.Add(-3 * time.Minute).In(time.FixedZone("CET", 3600))
	_, doc := render(t, When(at, now))
	tm, n := doc.One(`time[data-parley="time"]`)
	if n != 1 {
		t.Fatal("no <time>")
	}
	if dt, _ := viewstest.Attr(tm, "datetime"); dt != "2026-11-27T09:17:00Z" {
		t.Errorf("datetime = %q", dt)
	}
	if title, _ := viewstest.Attr(tm, "title"); title != "Fri 27 Nov 2026, 09:17 UTC" {
		t.Errorf("title = %q", title)
	}
	if out, _ := render(t, When(at, time.Time{})); !strings.Contains(out, ">Fri 27 Nov 2026, 09:17 UTC</time>") {
		t.Errorf("without a clock: %s, want the exact time as the text", out)
	}
	// A card's deadline is shown once, by When.
	_, doc = render(t, Deadline("Expires", now.Add(time.Hour)))
	if n := len(doc.All(`time`)); n != 1 {
		t.Errorf("a deadline shows %d times, want 1", n)
	}
}
