package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is what the owner does to a conversation as a whole: its title (set from the first
// message, or renamed), deleting it, and finding it by title. Renames and deletes go through
// the conversation's actor, which owns the conversation (its cached title, whether a turn
// runs); search reads the store.

// autoTitleRunes bounds a title made from the first message: a list line, not a paragraph.
const autoTitleRunes = 60

// maxSearchResults bounds one search's answer: the page it shows, and the hits whose excerpts
// the store makes (each costs the database a highlight of a window of the message).
const maxSearchResults = 50

// Rename sets the conversation's title. Only the owner may (MayManage): not_found for whoever
// may not see the conversation, permission_denied for whoever may; invalid_args for an empty
// title, one over 200 characters or one holding a NUL. The title is cleaned as Create's is
// (checkTitle); the answer holds the id and the title as stored.
func (m *Manager) Rename(ctx context.Context, convID string, by Principal, title string) (Summary, error) {
	title, err := checkTitle(title)
	if err != nil {
		return Summary{}, err
	}
	if title == "" {
		return Summary{}, fault.InvalidField("title", "a title cannot be empty")
	}
	if _, err := m.call(ctx, convID, &request{kind: reqRename, by: by, text: title}); err != nil {
		return Summary{}, err
	}
	return Summary{ID: convID, Title: title}, nil
}

// Delete removes the conversation with its log, calls and timers; the audit trail keeps its
// records and one for the deletion (action delete_conversation, by its owner). Only the owner
// may (MayManage). A conversation whose turn is still open (the model writes, tools run, or a
// call waits for a person, or messages wait behind it) is not deleted: conflict, saying to stop
// it first, so nothing that was started is dropped half-done without the owner's Stop (which
// ends the turn's calls as cancelled, in the log, before anything else happens).
func (m *Manager) Delete(ctx context.Context, convID string, by Principal) error {
	_, err := m.call(ctx, convID, &request{kind: reqDelete, by: by})
	return err
}

// Search lists by's conversations whose title contains query (ignoring case) or one of whose
// messages holds every word of query (full-text, each word also as a prefix:
// store.FindConversations), newest first, at most 50, a message match with its excerpt. Only
// by's own conversations are searched (a reviewer's read-only view of someone else's is not a
// conversation of theirs). An empty query lists them all, as List does. A query over 200
// characters, with more than 16 words, or holding a control character (NUL included) is
// invalid_args on "q"; punctuation and query operators are text. A search the database stopped
// at store.SearchTimeout is timeout, saying to narrow it.
func (m *Manager) Search(ctx context.Context, by Principal, query string) ([]Summary, error) {
	query = strings.TrimSpace(query)
	if query == "" {
		return m.List(ctx, by)
	}
	if by.UserID == "" {
		return nil, nil
	}
	if !utf8.ValidString(query) || strings.ContainsFunc(query, unicode.IsControl) {
		return nil, fault.InvalidField("q", "a search cannot hold control characters")
	}
	if utf8.RuneCountInString(query) > maxTitleRunes {
		return nil, fault.InvalidField("q", "a search has at most 200 characters")
	}
	if len(store.SearchWords(query)) > store.MaxSearchWords {
		return nil, fault.InvalidField("q", "a search has at most 16 words")
	}
	hits, err := m.cfg.Store.FindConversations(ctx, by.UserID, query, maxSearchResults)
	if errors.Is(err, store.ErrSearchTimeout) {
		return nil, errSearchTimeout()
	}
	if err != nil {
		return nil, m.internalError("search conversations", err)
	}
	out := make([]Summary, len(hits))
	for i, h := range hits {
		out[i] = summaryOf(h.Conversation)
		if h.Seq != 0 {
			out[i].Match = &SearchMatch{Seq: h.Seq, Snippet: boundedSnippet(h.Snippet)}
		}
	}
	return out, nil
}

// errSearchTimeout answers a search the database stopped at store.SearchTimeout.
func errSearchTimeout() *fault.Error {
	return fault.New(fault.KindTimeout, fmt.Sprintf("the search took longer than %s and was stopped: use more words, or longer ones", store.SearchTimeout),
		map[string]any{"timeout_seconds": int(store.SearchTimeout.Seconds())})
}

// maxSnippetBytes bounds an excerpt, whatever the store made of it.
const maxSnippetBytes = 600

// boundedSnippet cuts an excerpt to maxSnippetBytes on a rune boundary, closing a mark it cut.
func boundedSnippet(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxSnippetBytes {
		return s
	}
	s = tools.CutRunes(s, maxSnippetBytes)
	if strings.LastIndex(s, store.SnippetMark) > strings.LastIndex(s, store.SnippetEnd) {
		s += store.SnippetEnd
	}
	return s + " …"
}

// checkTitle is the one rule for a title a person gives (Create, Rename): a NUL is refused
// (invalid_args on "title"), the rest cleaned (CleanTitle: invalid UTF-8 repaired, runs of
// spaces, control and formatting characters one space, trimmed), and the result at most 200
// characters. It may be empty: Rename refuses that, Create takes it.
func checkTitle(text string) (string, error) {
	if strings.IndexByte(text, 0) >= 0 {
		return "", fault.InvalidField("title", "a title cannot hold a NUL character")
	}
	title := CleanTitle(text)
	if utf8.RuneCountInString(title) > maxTitleRunes {
		return "", fault.InvalidField("title", "a title has at most 200 characters")
	}
	return title, nil
}

// CleanTitle makes text a title: storable, every run of spaces, line breaks, control and
// formatting characters (bidirectional overrides included) one space, trimmed.
func CleanTitle(text string) string {
	var b strings.Builder
	space := false
	for _, r := range storable(text) {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.In(r, unicode.Cf) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TitleFromMessage is the title a conversation takes from its first message: the first line
// with text, cleaned (CleanTitle), cut at a word boundary to at most 60 characters with "…"
// when cut.
func TitleFromMessage(text string) string {
	var line string
	for l := range strings.Lines(text) {
		if line = CleanTitle(l); line != "" {
			break
		}
	}
	if utf8.RuneCountInString(line) <= autoTitleRunes {
		return line
	}
	runes := []rune(line)[:autoTitleRunes-1]
	cut := string(runes)
	if i := strings.LastIndexByte(cut, ' '); i >= autoTitleRunes/2 {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,.;:-") + "…"
}

// handleRename is Rename inside the actor.
func (a *actor) handleRename(req *request) error {
	if err := a.st.mayManage(req.by, "rename it"); err != nil {
		return err
	}
	if _, err := a.m.cfg.Store.SetConversationTitle(a.m.base, a.id, req.text, false); err != nil {
		return a.internalError("rename conversation", err)
	}
	a.st.conv.Title = req.text
	return nil
}

// handleDelete is Delete inside the actor: refused while a turn is open, else the store
// deletes the conversation and the actor stops after replying (a later request finds nothing:
// not_found).
func (a *actor) handleDelete(req *request) error {
	if err := a.st.mayManage(req.by, "delete it"); err != nil {
		return err
	}
	if a.st.turnOpen || len(a.st.queue) > 0 || a.llmBusy || a.drafting != nil || len(a.running) > 0 {
		return fault.New(fault.KindConflict, "the assistant is still working in this conversation: stop it first, then delete it",
			map[string]any{"status": a.st.status})
	}
	err := a.m.cfg.Store.DeleteConversation(a.m.base, a.id, store.AuditRecord{
		ConversationID: a.id, ActorID: req.by.UserID, Action: "delete_conversation", Reason: a.st.conv.Title, At: a.now(),
	})
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound()
	}
	if err != nil {
		return a.internalError("delete conversation", err)
	}
	a.log.Info("conversation deleted by its owner")
	// Done closes once the reply is sent (run): a caller that saw it stop first would retry on
	// a fresh actor and be told the conversation does not exist.
	a.transition(phaseDraining, reasonDeleted)
	return nil
}

// mayManage answers a rename or a delete: the owner alone (MayManage); not_found for whoever
// may not see the conversation, permission_denied for whoever may.
func (s *convState) mayManage(by Principal, what string) error {
	if MayManage(by, s.conv.OwnerID) {
		return nil
	}
	if s.maySee(by) {
		return fault.New(fault.KindPermissionDenied, "only the conversation's owner may "+what, nil)
	}
	return errNotFound()
}

// titleFromFirstMessage names an untitled conversation after the message that was just sent
// (TitleFromMessage), once: a rename, or a title given at creation, is never overwritten. A
// failed write leaves it untitled (the next message tries again) and is only logged.
func (a *actor) titleFromFirstMessage(text string) {
	if a.st.conv.Title != "" {
		return
	}
	title := TitleFromMessage(text)
	if title == "" {
		return
	}
	changed, err := a.m.cfg.Store.SetConversationTitle(a.m.base, a.id, title, true)
	if err != nil {
		a.log.Warn("agent: title from the first message", "err", err)
		return
	}
	if changed {
		a.st.conv.Title = title
		return
	}
	if conv, err := a.m.cfg.Store.GetConversation(a.m.base, a.id); err == nil {
		a.st.conv.Title = conv.Title // renamed meanwhile (through another process)
	}
}

// toolNamed is the registered tool called name, if any.
func (m *Manager) toolNamed(name string) (*tools.Tool, bool) {
	if m.cfg.Tools == nil {
		return nil, false
	}
	return m.cfg.Tools.Get(name)
}
