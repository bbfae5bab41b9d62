package agent

import (
	"strings"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
)

func TestMayManage(t *testing.T) {
	const owner = "owner"
	cases := []struct {
		name string
		by   Principal
		want bool
	}{
		{"the owner", Principal{UserID: owner, Role: RoleMember, Via: "session"}, true},
		{"the owner through a token", Principal{UserID: owner, Role: RoleMember, Via: "token"}, true},
		{"a stranger", Principal{UserID: "other", Role: RoleMember, Via: "session"}, false},
		{"a reviewer who may decide its calls", Principal{UserID: "rev", Role: RoleReviewer, Via: "session"}, false},
		{"an admin", Principal{UserID: "adm", Role: RoleAdmin, Via: "session"}, false},
		{"the system", System, false},
		{"nobody", Principal{}, false},
	}
	for _, c := range cases {
		if got := MayManage(c.by, owner); got != c.want {
			t.Errorf("%s: MayManage = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTitleFromMessage(t *testing.T) {
	cases := []struct{ in, want string }{
		{"email bob@example.com about lunch", "email bob@example.com about lunch"},
		{"\n\n  hello   there \nsecond line", "hello there"},
		{"tab\tand\x00nul", "tab and\uFFFDnul"},
		{"evil \u202egnp.exe name", "evil gnp.exe name"},           // a bidi override is dropped, its gap a space
		{"<script>alert(1)</script>", "<script>alert(1)</script>"}, // text: the views escape it
		{strings.Repeat("word ", 30), strings.TrimSpace(strings.Repeat("word ", 11)) + "…"},
		{strings.Repeat("x", 100), strings.Repeat("x", 59) + "…"},
		{"   \n\t", ""},
	}
	for _, c := range cases {
		got := TitleFromMessage(c.in)
		if got != c.want {
			t.Errorf("TitleFromMessage(%q) = %q, want %q", c.in, got, c.want)
		}
		if n := len([]rune(got)); n > autoTitleRunes {
			t.Errorf("TitleFromMessage(%q) has %d characters", c.in, n)
		}
	}
}

func TestTitleRenameDeleteSearch(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(say("Hello."), say("Again."))
		e := newEnv(t, open, prov, emailTools, nil)
		conv, err := e.m.Create(e.ctx, e.owner, "")
		if err != nil {
			t.Fatal(err)
		}
		e.conv = conv.ID
		e.sub.Close()
		e.sub = e.m.events.Subscribe(e.conv)

		// The first message names the conversation; the second does not rename it.
		e.send("Plan the team offsite\nwith details")
		e.waitStatus(store.StatusIdle)
		if v := e.view(); v.Title != "Plan the team offsite" {
			t.Fatalf("title after the first message = %q", v.Title)
		}
		// Read from the store too (a hibernated conversation's list shows it).
		if c, _ := e.st.GetConversation(e.ctx, e.conv); c.Title != "Plan the team offsite" {
			t.Fatalf("stored title %q", c.Title)
		}

		// Rename: the owner alone.
		if _, err := e.m.Rename(e.ctx, e.conv, e.other, "mine now"); kindOf(err) != fault.KindNotFound {
			t.Fatalf("a stranger's rename: %v, want not_found", err)
		}
		if _, err := e.m.Rename(e.ctx, e.conv, e.admin, "admin's"); kindOf(err) != fault.KindNotFound {
			t.Fatalf("an admin's rename: %v, want not_found (admins see only what they may decide)", err)
		}
		if _, err := e.m.Rename(e.ctx, e.conv, e.owner, " \n\t "); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("an empty rename: %v, want invalid_args", err)
		}
		if _, err := e.m.Rename(e.ctx, e.conv, e.owner, strings.Repeat("y", 201)); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("a long rename: %v, want invalid_args", err)
		}
		got, err := e.m.Rename(e.ctx, e.conv, e.owner, "  Offsite\nplanning ")
		if err != nil || got.Title != "Offsite planning" {
			t.Fatalf("rename = %+v, %v", got, err)
		}
		e.send("more")
		e.waitStatus(store.StatusIdle)
		if v := e.view(); v.Title != "Offsite planning" {
			t.Fatalf("title after rename and a message = %q", v.Title)
		}

		// Search by title.
		list, err := e.m.Search(e.ctx, e.owner, "OFFSITE")
		if err != nil || len(list) != 1 || list[0].ID != e.conv {
			t.Fatalf("search = %+v, %v", list, err)
		}
		if list, _ := e.m.Search(e.ctx, e.other, "offsite"); len(list) != 0 {
			t.Fatalf("a stranger's search finds %+v", list)
		}
		if all, _ := e.m.Search(e.ctx, e.owner, "  "); len(all) != 2 {
			t.Fatalf("an empty search lists %d conversations, want both of the owner's", len(all))
		}
		// Search by message: the assistant's "Again." and the first message's second line, with
		// the message that matched and an excerpt; only the owner's conversations.
		list, err = e.m.Search(e.ctx, e.owner, "agai")
		if err != nil || len(list) != 1 || list[0].ID != e.conv || list[0].Match == nil ||
			!strings.Contains(list[0].Match.Snippet, store.SnippetMark+"Again"+store.SnippetEnd) {
			t.Fatalf("search by the assistant's text = %+v, %v", list, err)
		}
		if list, err := e.m.Search(e.ctx, e.owner, "DETAILS with"); err != nil || len(list) != 1 || list[0].Match == nil || list[0].Match.Seq != 1 {
			t.Fatalf("search by the first message = %+v, %v", list, err)
		}
		for _, who := range []Principal{e.other, e.admin} {
			if list, err := e.m.Search(e.ctx, who, "again"); err != nil || len(list) != 0 {
				t.Fatalf("%s's search by message finds %+v, %v", who.UserID, list, err)
			}
		}
		// Hostile searches are invalid_args on q; operators are text.
		for _, q := range []string{"again\x00", "a\x1bb", strings.Repeat("x", 201), strings.Repeat("w ", 17), "\xff\xfe"} {
			if _, err := e.m.Search(e.ctx, e.owner, q); kindOf(err) != fault.KindInvalidArgs {
				t.Errorf("Search(%q) = %v, want invalid_args", q, err)
			}
		}
		for _, q := range []string{`again" OR "x`, "again & !x:*", "NEAR(again)", "*", "'); DROP TABLE entries; --"} {
			if _, err := e.m.Search(e.ctx, e.owner, q); err != nil {
				t.Errorf("Search(%q) = %v, want an answer", q, err)
			}
		}

		// Delete: the owner alone; then it is gone, and the audit trail says who deleted it.
		if err := e.m.Delete(e.ctx, e.conv, e.other); kindOf(err) != fault.KindNotFound {
			t.Fatalf("a stranger's delete: %v, want not_found", err)
		}
		if err := e.m.Delete(e.ctx, e.conv, e.owner); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := e.m.View(e.ctx, e.conv, e.owner); kindOf(err) != fault.KindNotFound {
			t.Fatalf("view after delete: %v, want not_found", err)
		}
		if err := e.m.Send(e.ctx, e.conv, e.owner, "hello?"); kindOf(err) != fault.KindNotFound {
			t.Fatalf("send after delete: %v, want not_found", err)
		}
		if err := e.m.Delete(e.ctx, e.conv, e.owner); kindOf(err) != fault.KindNotFound {
			t.Fatalf("a second delete: %v, want not_found", err)
		}
		if list, err := e.m.Search(e.ctx, e.owner, "again"); err != nil || len(list) != 0 {
			t.Fatalf("a deleted conversation is still found: %+v, %v", list, err)
		}
		audit, err := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv})
		if err != nil || len(audit) != 1 || audit[0].Action != "delete_conversation" || audit[0].ActorID != e.owner.UserID || audit[0].Reason != "Offsite planning" {
			t.Fatalf("audit after delete: %+v, %v", audit, err)
		}
	})
}

func TestDeleteRefusedWhileATurnIsOpen(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Fine."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)
		err := e.m.Delete(e.ctx, e.conv, e.owner)
		if kindOf(err) != fault.KindConflict || !strings.Contains(err.Error(), "stop it first") {
			t.Fatalf("delete while awaiting: %v, want conflict saying to stop first", err)
		}
		if v := e.view(); v.Status != store.StatusAwaiting || e.call("c1").Status != store.CallAwaiting {
			t.Fatalf("a refused delete changed the conversation: %+v", v)
		}
		if err := e.m.Cancel(e.ctx, e.conv, e.owner); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(store.StatusIdle)
		if err := e.m.Delete(e.ctx, e.conv, e.owner); err != nil {
			t.Fatalf("delete after stop: %v", err)
		}
		if due, err := e.st.ClaimDueExpiries(e.ctx, t0.Add(24*time.Hour), time.Minute, 10); err != nil || len(due) != 0 {
			t.Fatalf("timers left behind: %+v, %v", due, err)
		}
	})
}

// A title given at creation is cleaned as a rename's is (checkTitle, one rule): control and
// formatting characters (a bidirectional override) and runs of spaces fold to one space, and
// the title is stored so; a NUL or more than 200 characters are refused either way.
func TestCreateCleansTheTitle(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		e := newEnv(t, open, newScripted(), emailTools, nil)
		got, err := e.m.Create(e.ctx, e.owner, "  Quarterly\x1b[31m\tplan\u202e\r\nnotes\x7f ")
		if err != nil {
			t.Fatal(err)
		}
		const want = "Quarterly [31m plan notes"
		if got.Title != want {
			t.Fatalf("created title %q, want %q", got.Title, want)
		}
		if c, err := e.st.GetConversation(e.ctx, got.ID); err != nil || c.Title != want {
			t.Fatalf("stored title %q (%v), want %q", c.Title, err, want)
		}
		if r, err := e.m.Rename(e.ctx, got.ID, e.owner, "  Quarterly\x1b[31m\tplan\u202e\r\nnotes\x7f "); err != nil || r.Title != want {
			t.Fatalf("the same title renamed: %q, %v", r.Title, err)
		}
		for _, bad := range []string{"a\x00b", strings.Repeat("y", 201)} {
			if _, err := e.m.Create(e.ctx, e.owner, bad); kindOf(err) != fault.KindInvalidArgs {
				t.Errorf("Create(%.20q): %v, want invalid_args", bad, err)
			}
			if _, err := e.m.Rename(e.ctx, got.ID, e.owner, bad); kindOf(err) != fault.KindInvalidArgs {
				t.Errorf("Rename(%.20q): %v, want invalid_args", bad, err)
			}
		}
		if c, err := e.m.Create(e.ctx, e.owner, " \t\n"); err != nil || c.Title != "" {
			t.Fatalf("a blank title at creation: %+v, %v (the first message names it)", c, err)
		}
	})
}
