package views

import "time"

// Every time a page shows goes through When (when.templ): a <time> element whose text is
// relative to the page's clock ("3 min ago", "in 12 min"), whose datetime is the instant in
// UTC, and whose title is the exact time — in UTC as the server writes it, in the viewer's
// zone once hooks.js (localTimes) rewrote it, which also keeps the relative text current.

// isoUTC is the datetime attribute's format.
const isoUTC = "2006-01-02T15:04:05Z"

// exactUTC is the exact time as the server writes it into the title.
const exactUTC = "Mon 2 Jan 2006, 15:04 UTC"

// whenText is When's text: relative to now, or — where the HTML must not change with the
// clock (the timeline's items, whose data-rev is a hash of their HTML; now is then zero) — the
// exact time, which hooks.js turns into the relative text.
func whenText(at, now time.Time) string {
	if now.IsZero() {
		return at.UTC().Format(exactUTC)
	}
	return relativeTime(at, now)
}

// relativeTime is at against now in words: "just now", "3 min ago", "in 12 min", "2 d ago".
func relativeTime(at, now time.Time) string {
	d := at.Sub(now)
	switch {
	case d >= time.Second:
		return "in " + shortDuration(d)
	case d > -10*time.Second:
		return "just now"
	}
	return shortDuration(-d) + " ago"
}
