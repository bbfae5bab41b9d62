package agent

import (
	"cmp"
	"context"
	"errors"
	"sort"

	"parley/internal/fault"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is the agent's door: every way the web layer (or any other caller) reaches
// conversation data. Each method takes the principal asking and applies the policy
// (policy.go); none trusts its caller to have checked first.

// maxTitleRunes bounds a conversation's title.
const maxTitleRunes = 200

// Create starts an empty conversation owned by by. Its title is checked and cleaned as a
// rename's is (checkTitle); it may be empty (the first message names the conversation then).
func (m *Manager) Create(ctx context.Context, by Principal, title string) (Summary, error) {
	if by.UserID == "" || by.system() {
		return Summary{}, fault.New(fault.KindPermissionDenied, "only a signed-in person owns conversations", nil)
	}
	title, err := checkTitle(title)
	if err != nil {
		return Summary{}, err
	}
	now := m.cfg.Clock.Now()
	conv, err := m.cfg.Store.CreateConversation(ctx, store.Conversation{
		OwnerID: by.UserID, Title: title, Status: store.StatusIdle, CreatedAt: now, UpdatedAt: now,
	})
	if err != nil {
		return Summary{}, m.internalError("create conversation", err)
	}
	return summaryOf(conv), nil
}

// List returns the conversations by owns, newest first.
func (m *Manager) List(ctx context.Context, by Principal) ([]Summary, error) {
	if by.UserID == "" {
		return nil, nil
	}
	list, err := m.cfg.Store.ListConversations(ctx, by.UserID)
	if err != nil {
		return nil, m.internalError("list conversations", err)
	}
	out := make([]Summary, len(list))
	for i, c := range list {
		out[i] = summaryOf(c)
	}
	return out, nil
}

func summaryOf(c store.Conversation) Summary {
	return Summary{ID: c.ID, Title: c.Title, Status: c.Status, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
}

// View returns the conversation as by may see it (not_found when by may not): from the live
// actor, or from the store when the conversation is hibernated (without reviving it).
//
// With a cluster, a conversation another live process owns is viewed there (its actor holds
// what the log does not yet: the text streaming now); one nobody owns is read from the store.
func (m *Manager) View(ctx context.Context, convID string, by Principal) (View, error) {
	if m.live(convID) != nil {
		r, err := m.call(ctx, convID, &request{kind: reqView, by: by})
		return r.view, err
	}
	if m.cluster != nil {
		if v, ok, err := m.viewAtOwner(ctx, convID, by); ok {
			return v, err
		}
	}
	return m.viewFromStore(ctx, convID, by)
}

// viewFromStore is View of a conversation without a live actor: read from the store, without
// reviving it.
func (m *Manager) viewFromStore(ctx context.Context, convID string, by Principal) (View, error) {
	st, err := loadState(ctx, m.cfg.Store, m.cfg.Tools, convID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return View{}, errNotFound()
		}
		return View{}, m.internalError("load conversation", err)
	}
	if !st.maySee(by) {
		return View{}, errNotFound()
	}
	return viewOf(st, ""), nil
}

// Send posts the owner's message and starts a turn. It returns once the message is in the log;
// the turn runs in the conversation's actor. Errors: not_found (no such conversation, or by may
// not see it), permission_denied (by may see it but is not its owner), invalid_args,
// rate_limited (too many messages wait for a running turn; Post says what became of one).
func (m *Manager) Send(ctx context.Context, convID string, by Principal, text string) error {
	_, err := m.Post(ctx, convID, by, text)
	return err
}

// Resolve answers one suspended call: an approval decision, an elicitation answer or a client
// result. It returns once the answer is durable, before the loop continues, with the call as it
// stands then (also with a stale or invalid answer, when by may see the call). Errors:
// not_found (no such conversation or call, or by may not see it), invalid_args (a resolution of
// the wrong shape or kind, or one its schema refuses: details.problems), stale (not pending any
// more), permission_denied (policy.go), internal.
func (m *Manager) Resolve(ctx context.Context, convID, toolCallID string, r Resolution, by Principal) (Resolved, error) {
	began := m.cfg.Clock.Now()
	resp, err := m.call(ctx, convID, &request{kind: reqResolve, by: by, callID: toolCallID, res: r})
	outcome := "ok"
	if err != nil {
		outcome = string(fault.KindInternal)
		if k := fault.KindOf(err); k != "" {
			outcome = string(k)
		} else if ctx.Err() != nil {
			outcome = "cancelled"
		}
	}
	metrics.ResolveSeconds.WithLabelValues(outcome).Observe(m.cfg.Clock.Now().Sub(began).Seconds())
	if err == nil {
		m.cfg.Logger.Info("call resolved", "conversation_id", convID, "tool_call_id", toolCallID, "by", by.UserID, "via", by.Via)
	}
	var out Resolved
	if resp.resolved != nil {
		out = *resp.resolved
	}
	return out, err
}

// ReviewedTools names, sorted, the registered tools some of whose calls wait for a reviewer:
// declared with approvers "reviewer", or with a rule that asks a reviewer. An empty inbox names
// them, so a reviewer knows what will arrive there.
func (m *Manager) ReviewedTools() []string {
	var names []string
	for _, t := range m.cfg.Tools.All() {
		reviewed := t.Gated() && t.Approvers() == tools.ByReviewer
		for _, r := range t.Rules() {
			who := cmp.Or(r.Approvers, t.Approvers())
			reviewed = reviewed || r.Action == tools.RuleAsk && who == tools.ByReviewer
		}
		if reviewed {
			names = append(names, t.Name())
		}
	}
	sort.Strings(names)
	return names
}

// PendingApprovals lists the approvals in by's inbox, newest first: those that wait for by's
// decision as the owner or as a reviewer (InInbox). A principal without an inbox (a member:
// MayFollowAll) is refused with permission_denied. The system gets every pending approval: the
// web layer's inbox feed reads them once per change and filters them per viewer (InboxOf).
func (m *Manager) PendingApprovals(ctx context.Context, by Principal) ([]PendingApproval, error) {
	if !MayFollowAll(by) {
		return nil, errNoInbox()
	}
	var list []store.PendingCall
	if by.system() || by.Role == RoleAdmin { // an admin's inbox holds escalated approvals of anyone's
		all, err := m.cfg.Store.ListPending(ctx, store.PendingFilter{Kind: string(tools.PendingApproval)})
		if err != nil {
			return nil, m.internalError("list pending approvals", err)
		}
		list = all
	} else {
		own, err := m.cfg.Store.ListPending(ctx, store.PendingFilter{Kind: string(tools.PendingApproval), OwnerID: by.UserID})
		if err != nil {
			return nil, m.internalError("list own pending approvals", err)
		}
		rev, err := m.cfg.Store.ListPending(ctx, store.PendingFilter{Kind: string(tools.PendingApproval), Approvers: string(tools.ByReviewer)})
		if err != nil {
			return nil, m.internalError("list reviewer approvals", err)
		}
		list = append(own, rev...)
	}
	seen := map[[2]string]bool{}
	out := make([]PendingApproval, 0, len(list))
	for _, p := range list {
		key := [2]string{p.ConversationID, p.ToolCallID}
		if seen[key] {
			continue
		}
		seen[key] = true
		cv := callFromRow(p.ToolCall)
		if t, ok := m.toolNamed(p.Name); ok {
			cv.Schema = t.Parameters()
		}
		out = append(out, PendingApproval{ConversationID: p.ConversationID, Title: p.Title, OwnerID: p.OwnerID, Call: cv})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call.CreatedAt.After(out[j].Call.CreatedAt) })
	if by.system() {
		return out, nil
	}
	return InboxOf(by, out), nil
}

// InboxOf is what by's inbox lists of all (pending approvals, newest first, as the system's
// PendingApprovals returns them): the approvals InInbox says wait for by, in the same order.
func InboxOf(by Principal, all []PendingApproval) []PendingApproval {
	out := make([]PendingApproval, 0, len(all))
	for _, p := range all {
		if InInboxCall(by, p.OwnerID, p.Call.Approvers, p.Call.Escalated) && !approvedBy(p.Call, by) {
			out = append(out, p)
		}
	}
	return out
}

// errNoInbox refuses the inbox to someone who has none.
func errNoInbox() *fault.Error {
	return fault.New(fault.KindPermissionDenied, "the inbox is for reviewers and admins: your own calls wait for you on their conversation's page", nil)
}

// Subscribe follows one conversation's events as by may (not_found when by may not see it), or
// every conversation's when convID is empty (the inbox: MayFollowAll). The subscription is
// taken before the check reads the conversation, so an event for any entry past the returned
// LastSeq comes on C. The caller must Close it.
func (m *Manager) Subscribe(ctx context.Context, convID string, by Principal) (*Subscription, error) {
	if convID == "" {
		if !MayFollowAll(by) {
			return nil, errNoInbox()
		}
		return m.events.Subscribe(""), nil
	}
	sub := m.events.Subscribe(convID)
	conv, err := m.access(ctx, convID, by)
	if err != nil {
		sub.Close()
		return nil, err
	}
	sub.convID, sub.m, sub.OwnerID, sub.LastSeq = convID, m, conv.OwnerID, conv.LastSeq
	return sub, nil
}

// Log returns a page of the subscribed conversation's log after the sequence after, in order:
// at most limit entries, up to maxBytes of data (store.LogPage; an event stream catches up page
// by page). The subscription is the permission: Subscribe checked it.
func (s *Subscription) Log(ctx context.Context, after int64, limit, maxBytes int) ([]store.Entry, error) {
	if s.m == nil {
		return nil, fault.New(fault.KindNotFound, "this subscription follows no single conversation", nil)
	}
	entries, err := s.m.cfg.Store.LogPage(ctx, s.convID, after, limit, maxBytes)
	if err != nil {
		return nil, s.m.internalError("read log", err)
	}
	return entries, nil
}

// access reads what the policy needs to let by see convID, without reviving it: the
// conversation row, and its calls' gates (and which await an approval) only when by is not its
// owner.
func (m *Manager) access(ctx context.Context, convID string, by Principal) (store.Conversation, error) {
	conv, err := m.cfg.Store.GetConversation(ctx, convID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Conversation{}, errNotFound()
	}
	if err != nil {
		return store.Conversation{}, m.internalError("load conversation", err)
	}
	if MaySee(by, conv.OwnerID, nil) {
		return conv, nil
	}
	calls, err := m.cfg.Store.ToolCalls(ctx, convID)
	if err != nil {
		return store.Conversation{}, m.internalError("load tool calls", err)
	}
	gates := make([]Gate, len(calls))
	for i, c := range calls {
		gates[i] = Gate{Approval: tools.Approval(c.Approval), Approvers: tools.Approvers(c.Approvers),
			Pending: c.Status == store.CallAwaiting && c.PendingKind == string(tools.PendingApproval)}
	}
	if !MaySee(by, conv.OwnerID, gates) {
		return store.Conversation{}, errNotFound()
	}
	return conv, nil
}

// approvedBy reports whether by already gave one of an M-of-N call's approvals: it waits for
// someone else now.
func approvedBy(c CallView, by Principal) bool {
	for _, ap := range c.Approvals {
		if ap.By == by.UserID {
			return true
		}
	}
	return false
}
