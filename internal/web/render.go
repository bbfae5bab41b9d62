package web

import (
	"context"
	"io"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/views"
)

// renderPage renders body inside the layout.
func (s *Server) renderPage(c echo.Context, status int, title string, body templ.Component) error {
	ld := s.layoutData(c, title)
	return s.render(c, status, templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		return views.Layout(ld).Render(templ.WithChildren(ctx, body), w)
	}))
}

// isFetch reports whether hooks.js sent the form over fetch and wants the JSON answer.
func isFetch(c echo.Context) bool { return c.Request().Header.Get("X-Parley-Fetch") == "1" }

// fetchAnswer is what an enhanced form gets back: whether it worked, an HTML fragment to put in
// place of the element with id Target ("" html removes it), and a notice to show.
type fetchAnswer struct {
	OK     bool    `json:"ok"`
	Target string  `json:"target,omitempty"`
	HTML   *string `json:"html,omitempty"`
	Notice string  `json:"notice,omitempty"`
}

func (s *Server) answerFetch(c echo.Context, status int, a fetchAnswer) error {
	return c.JSON(status, a)
}

// pageFor is the rendering context of a conversation's components for the current user, with
// the names of those who decided calls.
func (s *Server) pageFor(c echo.Context, convID, ownerID string, calls []agent.CallView) views.Page {
	u := currentUser(c)
	p := views.Page{
		ConversationID: convID,
		CSRF:           s.csrfToken(c),
		Viewer:         views.Viewer{Principal: principal(c), Name: u.Name},
		OwnerID:        ownerID,
		Demo:           s.cfg.DemoModel,
		Names:          map[string]string{u.ID: u.Name},
	}
	s.addNames(c.Request().Context(), p.Names, calls)
	return p
}

// addNames adds the names of the people who decided calls (and approved M-of-N calls) to names. A user that cannot be
// loaded keeps no name (the card then says "another user"); the page still renders.
func (s *Server) addNames(ctx context.Context, names map[string]string, calls []agent.CallView) {
	for _, c := range calls {
		ids := []string{c.DecidedBy}
		for _, a := range c.Approvals { // an M-of-N call's approvers so far
			ids = append(ids, a.By)
		}
		for _, id := range ids {
			if id == "" || id == "system" || names[id] != "" {
				continue
			}
			u, err := s.store.UserByID(ctx, id)
			if err != nil {
				s.log.DebugContext(ctx, "name of a decider", "user", id, "err", err)
				continue
			}
			names[id] = u.Name
		}
	}
}

// callItem renders the timeline item of one call of v, or "" when v has no such call.
func callItem(ctx context.Context, p views.Page, v agent.View, callID string) (string, error) {
	for i := range v.Calls {
		if v.Calls[i].ID == callID {
			html, _, err := views.ItemHTML(ctx, p, views.Item{Seq: v.Calls[i].Seq, Call: &v.Calls[i]})
			return string(html), err
		}
	}
	return "", nil
}

// notices are the page-level messages a redirect may ask for by code; a code, never free text,
// so a link cannot make the page say anything.
var notices = map[string]string{
	"stale":   "That call was already decided (or it expired); this is where it stands now.",
	"full":    "Several messages already wait for the assistant; wait until it finishes, or stop it.",
	"queued":  "Sent: it goes to the assistant when the current answer ends.",
	"nothing": "Nothing was running any more.",
	"empty":   "Write a message first.",
	"long":    "That message is too long.",
	// Renaming and deleting (conversations.go).
	"renamed":  "Renamed.",
	"badtitle": "A title needs some text, at most 200 characters.",
	"deleted":  "The conversation was deleted.",
	"busy":     "The assistant is still working here: stop it first, then delete the conversation.",
	// The inbox's claims (inbox_actions.go).
	"claimed": "Someone else is looking at that call now; you may still decide it.",
	// The account page's.
	"password": "Your password was changed, and every other browser signed in as you was signed out.",
}

func noticeFor(code string) string { return notices[code] }
