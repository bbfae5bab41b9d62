package agent

import (
	"context"
	"errors"
	"time"

	"parley/internal/fault"
	"parley/internal/store"
)

// Inbox claims: a reviewer says "I am looking at this" on a pending approval, and the other
// reviewers' inboxes show it live. A claim informs, it does not lock: anyone the policy lets
// decide the call still may (two reviewers who both decide get ok and stale, as always). It ends
// after ClaimTTL (default DefaultClaimTTL) unless its holder claims again, when its holder
// releases it, or when the call is decided (the call leaves the inbox, and its claim with it).
// Claims live in the store, so every process serving the inbox sees the same ones; a change is
// announced with EventInbox, which the cluster carries to the other processes' inbox feeds.

// DefaultClaimTTL is how long a claim lasts by default: long enough to read a request and its
// conversation, short enough that a claim somebody walked away from does not linger.
const DefaultClaimTTL = 10 * time.Minute

// Claim is a live inbox claim.
type Claim struct {
	ConversationID string
	ToolCallID     string
	UserID         string
	ExpiresAt      time.Time
	// Left is how long the claim still lived when it was listed (on the agent's clock): a
	// follower that re-lists when it runs out needs no clock of its own to agree with ours.
	Left time.Duration
}

// Claim marks the pending approval toolCallID of convID as looked at by by, for ClaimTTL
// (renewing by's own claim). Only a call in by's inbox may be claimed (InInboxCall, through
// PendingApprovals): else not_found. When someone else holds a live claim it is conflict, with
// details {"claimed_by": id, "expires_at"}.
func (m *Manager) Claim(ctx context.Context, convID, toolCallID string, by Principal) (Claim, error) {
	if err := m.inInbox(ctx, convID, toolCallID, by); err != nil {
		return Claim{}, err
	}
	now := m.cfg.Clock.Now()
	got, err := m.cfg.Store.ClaimCall(ctx, store.Claim{ConversationID: convID, ToolCallID: toolCallID, UserID: by.UserID,
		ClaimedAt: now, ExpiresAt: now.Add(m.cfg.ClaimTTL)})
	if errors.Is(err, store.ErrConflict) {
		return Claim{}, fault.New(fault.KindConflict, "someone else is looking at this call",
			map[string]any{"claimed_by": got.UserID, "expires_at": got.ExpiresAt})
	}
	if err != nil {
		return Claim{}, m.internalError("claim a call", err)
	}
	m.events.Publish(Event{Type: EventInbox, ToolCallID: toolCallID})
	return Claim{ConversationID: got.ConversationID, ToolCallID: got.ToolCallID, UserID: got.UserID, ExpiresAt: got.ExpiresAt,
		Left: got.ExpiresAt.Sub(now)}, nil
}

// Unclaim releases by's claim of the call, if by holds one. Like Claim, only for a call in by's
// inbox.
func (m *Manager) Unclaim(ctx context.Context, convID, toolCallID string, by Principal) error {
	if err := m.inInbox(ctx, convID, toolCallID, by); err != nil {
		return err
	}
	if err := m.cfg.Store.ReleaseClaim(ctx, convID, toolCallID, by.UserID); err != nil {
		return m.internalError("release a claim", err)
	}
	m.events.Publish(Event{Type: EventInbox, ToolCallID: toolCallID})
	return nil
}

// Claims lists the live claims of the approvals in by's inbox (the system: of every pending
// approval; the inbox feed reads them once for every socket).
func (m *Manager) Claims(ctx context.Context, by Principal) ([]Claim, error) {
	if !MayFollowAll(by) {
		return nil, errNoInbox()
	}
	now := m.cfg.Clock.Now()
	list, err := m.cfg.Store.ListClaims(ctx, now)
	if err != nil {
		return nil, m.internalError("list claims", err)
	}
	out := make([]Claim, len(list))
	for i, c := range list {
		out[i] = Claim{ConversationID: c.ConversationID, ToolCallID: c.ToolCallID, UserID: c.UserID, ExpiresAt: c.ExpiresAt, Left: c.ExpiresAt.Sub(now)}
	}
	if by.system() {
		return out, nil
	}
	mine, err := m.PendingApprovals(ctx, by)
	if err != nil {
		return nil, err
	}
	return ClaimsIn(mine, out), nil
}

// ClaimsIn keeps the claims of the approvals listed.
func ClaimsIn(list []PendingApproval, claims []Claim) []Claim {
	listed := make(map[[2]string]bool, len(list))
	for _, p := range list {
		listed[[2]string{p.ConversationID, p.Call.ID}] = true
	}
	out := make([]Claim, 0, len(claims))
	for _, c := range claims {
		if listed[[2]string{c.ConversationID, c.ToolCallID}] {
			out = append(out, c)
		}
	}
	return out
}

// inInbox checks that the call is a pending approval in by's inbox: not_found otherwise (a
// call by may not decide is, to by, a call that does not exist).
func (m *Manager) inInbox(ctx context.Context, convID, toolCallID string, by Principal) error {
	if by.system() || !MayFollowAll(by) {
		return errNoInbox()
	}
	list, err := m.PendingApprovals(ctx, by)
	if err != nil {
		return err
	}
	for _, p := range list {
		if p.ConversationID == convID && p.Call.ID == toolCallID {
			return nil
		}
	}
	return fault.New(fault.KindNotFound, "no such approval waits in your inbox", map[string]any{"tool_call_id": toolCallID})
}

// Now is the time on the agent's clock, which stamps the calls, their deadlines and the claims:
// the inbox measures ages and time left against it.
func (m *Manager) Now() time.Time { return m.cfg.Clock.Now() }
