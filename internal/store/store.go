// Package store is Parley's persistence: users, sessions and tokens, conversations and their
// append-only logs, the tool_calls index, durable expiry timers, retry steps, the outbox and the
// audit trail. Two implementations satisfy Store: PostgreSQL (package pgstore) and the embedded
// single-file store (package sqlitestore); package storetest holds the conformance suite both pass.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// Sentinel errors. Implementations wrap them (fmt.Errorf("…: %w", ErrNotFound)) so callers can
// branch with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	// ErrConflict is an optimistic-concurrency loss (the expected sequence was taken) or a unique
	// key already in use (a user name, a token hash).
	ErrConflict = errors.New("conflict")
	// ErrNotOwner is an append refused because another process claimed the conversation since
	// the writer did (PostgreSQL, several processes): the writer's state is not the truth any
	// more, and nothing was written.
	ErrNotOwner = errors.New("another process owns the conversation")
	// ErrSchemaTooNew means the database was migrated by a newer binary.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
	// ErrSchemaBehind means the database lacks migrations this binary needs (it was restored
	// from an older backup or its migrations were removed after this process started).
	ErrSchemaBehind = errors.New("database schema is older than this binary")
	// ErrSearchTimeout is a search that ran past SearchTimeout and was stopped.
	ErrSearchTimeout = errors.New("the search took too long")
)

// TokenTouchEvery is how stale an API token's LastUsedAt may get: TouchAPIToken writes only
// when the recorded use is older than this, so a busy token costs one write a minute, not one
// per request.
const TokenTouchEvery = time.Minute

// Role of a user.
type Role string

// Roles.
const (
	RoleMember   Role = "member"
	RoleReviewer Role = "reviewer"
	RoleAdmin    Role = "admin"
)

// User is an account. PasswordHash is a bcrypt hash; the store never sees a password.
type User struct {
	ID           string
	Name         string
	Role         Role
	PasswordHash []byte
	CreatedAt    time.Time
	// Disabled is set by an admin: the user cannot sign in, and their sessions and tokens are
	// refused.
	Disabled bool
}

// Session is a signed-in browser. Only a hash of the cookie's token is stored.
type Session struct {
	TokenHash []byte
	UserID    string
	CSRF      string
	ExpiresAt time.Time
	CreatedAt time.Time
}

// Token scopes: what an API token may do. A full token acts as its user on the JSON API and
// the sockets; a resolve token may only resolve calls and read what it needs to find them (the
// web layer's scope rule says which routes).
const (
	ScopeFull    = "full"
	ScopeResolve = "resolve"
)

// APIToken is a bearer token. Only its hash is stored; the token is shown once.
type APIToken struct {
	ID         string
	UserID     string
	Name       string
	Hash       []byte
	Scope      string // ScopeFull ("" is stored as full) or ScopeResolve
	CreatedAt  time.Time
	ExpiresAt  *time.Time // nil: never
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// Invitation is a one-time link an admin made for someone to create an account with a role.
// Only a hash of its token is stored; the link is shown once.
type Invitation struct {
	ID        string
	Hash      []byte
	Role      Role
	CreatedBy string // the admin's user id
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    *time.Time
	UsedBy    string // the account it created; "" until used
	RevokedAt *time.Time
}

// Conversation status, visible to the API.
const (
	StatusIdle        = "idle"
	StatusGenerating  = "generating"
	StatusDispatching = "dispatching"
	StatusAwaiting    = "awaiting"
)

// Conversation is a chat owned by one user.
type Conversation struct {
	ID        string
	OwnerID   string
	Title     string
	Status    string
	LastSeq   int64 // the sequence of the newest log entry, 0 when empty
	CreatedAt time.Time
	UpdatedAt time.Time
}

// EntryType names what a log entry records.
type EntryType string

// Entry types. Data holds the type's JSON payload; its shape belongs to package agent.
const (
	EntryUserMessage      EntryType = "user_message"
	EntryAssistantMessage EntryType = "assistant_message" // text and the tool calls of one LLM response
	EntryToolCall         EntryType = "tool_call"         // one call: name, executor, approval, args
	EntryDecision         EntryType = "decision"          // an approval decision: who, when, reason, edited args
	EntryToolResult       EntryType = "tool_result"
	EntryToolError        EntryType = "tool_error"
	EntryExpiry           EntryType = "expiry"
	EntryAttemptStarted   EntryType = "attempt_started"
	EntryAttemptFailed    EntryType = "attempt_failed"
	EntryTurnError        EntryType = "turn_error"     // a turn ended by an error (iteration cap, model failure)
	EntryTurnCancelled    EntryType = "turn_cancelled" // the owner stopped the turn, or moved on with a message
	EntryQueuedMessage    EntryType = "queued_message" // the owner's message, waiting for the running turn to end
)

// Entry is one record of a conversation's log. Seq is gap-free per conversation, from 1.
type Entry struct {
	Seq        int64
	Type       EntryType
	ToolCallID string // empty when the entry is not about one call
	Actor      string // who caused it: a user id, "model", "system", "webhook:<token id>" …
	Data       json.RawMessage
	CreatedAt  time.Time
}

// Tool-call statuses.
const (
	CallRunning  = "running"
	CallAwaiting = "awaiting"
	CallResolved = "resolved"
	CallErrored  = "errored"
	CallDenied   = "denied"
	CallExpired  = "expired"
	// CallCancelled is a call the owner stopped (or moved on from) before it had a result.
	CallCancelled = "cancelled"
)

// ToolCall is the index row of one call, kept in step with the log by Append.
type ToolCall struct {
	ConversationID string
	ToolCallID     string
	Name           string
	Executor       string
	Approval       string
	Approvers      string
	Status         string // running, awaiting, resolved, errored, denied, expired, cancelled
	PendingKind    string // approval, elicitation, client_exec when awaiting; else empty
	Args           json.RawMessage
	Result         json.RawMessage // the model-facing envelope once finished
	Prompt         json.RawMessage // while awaiting: the rest of the call's read model (package agent: callRecord, versioned)
	ExpiresAt      *time.Time
	Seq            int64 // the log sequence of the tool_call entry
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Expiry is a durable timer for one suspended call.
type Expiry struct {
	ConversationID string
	ToolCallID     string
	At             time.Time
}

// Step is the retry state of one LLM call or tool call: attempts so far and when the next may run.
type Step struct {
	ConversationID string
	Key            string // "llm:<n>" or "tool:<tool_call_id>"
	Attempts       int
	NextAttemptAt  *time.Time
	LastError      string
	UpdatedAt      time.Time
}

// OutboxMessage is an email that send_email wrote. (ConversationID, ToolCallID) is unique: a
// call re-dispatched after a crash writes nothing twice.
type OutboxMessage struct {
	ID             int64
	ConversationID string
	ToolCallID     string
	To             string
	Subject        string
	Body           string
	CreatedAt      time.Time
}

// AuditRecord is one decision: who decided what, when, with a hash of the arguments that ran.
type AuditRecord struct {
	ID             int64
	ConversationID string
	ToolCallID     string
	Tool           string
	ActorID        string
	Action         string // approve, deny, accept, decline, cancel, client_result, client_error, expire
	Reason         string
	ArgsHash       string // hex SHA-256 of the canonical arguments that ran (or were refused)
	// Detail is the action's particulars as JSON (the rule that matched, the grant used or made,
	// the approvals so far); empty when there are none. Stored as written.
	Detail json.RawMessage
	At     time.Time
	// The hash chain (auditkey.go, governance.go), set by the store when the record is appended:
	// Seq is the record's place in the chain (from 1), Hash = AuditKey.Link(PrevHash, the record)
	// under the key KeyID names — or, for a record from before the chain was keyed (KeyID empty),
	// AuditHash(PrevHash, the record).
	Seq      int64
	PrevHash string
	Hash     string
	KeyID    string
}

// AuditFilter selects audit records; zero fields match everything.
type AuditFilter struct {
	ConversationID string
	ActorID        string
	Action         string
	Tool           string
	// BeforeSeq lists only records before this place in the chain (paging back); 0: from the newest.
	BeforeSeq int64
	Limit     int
}

// PendingFilter selects awaiting calls across conversations.
type PendingFilter struct {
	Kind      string // approval, elicitation, client_exec; empty for all
	Approvers string // owner or reviewer; empty for both
	OwnerID   string // only conversations of this owner; empty for all
	Limit     int
}

// PendingCall is an awaiting call with its conversation's owner and title, newest first.
type PendingCall struct {
	ToolCall
	OwnerID string
	Title   string
}

// Batch is everything one log append writes, atomically: all of it or nothing.
type Batch struct {
	Entries []Entry // Seq and CreatedAt are assigned by Append
	Calls   []ToolCall
	// Status, when not empty, sets the conversation's status.
	Status    string
	Schedule  []Expiry
	Cancel    []string // tool_call_ids whose expiry is removed
	Steps     []Step   // upserted by (conversation, key)
	DoneSteps []string // step keys removed
	Audit     []AuditRecord
	// Grants are remembered approvals the batch makes (governance.go).
	Grants []Grant
	// Notify are the notifications announcing what the batch does, queued in the notification
	// outbox in the same transaction (governance.go: NotifyMessage).
	Notify []NotifyMessage
	// Urgent marks an append a person is waiting on: their message or their decision, whose
	// request answers once it is durable. A store that queues appends (pgstore's group commit)
	// commits urgent ones first; nothing else changes.
	Urgent bool
}

// Store is what the rest of Parley persists through. Every method is safe for concurrent use.
type Store interface {
	// Users, sessions and tokens.
	CreateUser(ctx context.Context, u User) (User, error) // ErrConflict on a taken name
	// CreateFirstAdmin creates the bootstrap admin of an empty store: ErrConflict when there is
	// already a user or a bootstrap admin, so at most one is ever made, whatever the races.
	CreateFirstAdmin(ctx context.Context, u User) (User, error)
	UserByID(ctx context.Context, id string) (User, error)
	UserByName(ctx context.Context, name string) (User, error)
	ListUsers(ctx context.Context) ([]User, error)
	CountUsers(ctx context.Context) (int, error)
	SetUserRole(ctx context.Context, id string, role Role) error
	// SetUserDisabled disables or enables an account (ErrNotFound when missing). Disabling the
	// last enabled admin is refused with ErrConflict: the system always keeps one.
	SetUserDisabled(ctx context.Context, id string, disabled bool) error
	CreateSession(ctx context.Context, s Session) error
	SessionByHash(ctx context.Context, hash []byte) (Session, error) // ErrNotFound when missing or expired
	DeleteSession(ctx context.Context, hash []byte) error
	// ExtendSession moves a session's expiry (a sliding idle timeout); a missing session is left
	// alone and is not an error.
	ExtendSession(ctx context.Context, hash []byte, expiresAt time.Time) error
	// EndUserSessions deletes every session of userID but keep (nil: all of them) and says how
	// many it ended: "sign out everywhere", a password change.
	EndUserSessions(ctx context.Context, userID string, keep []byte) (int, error)
	// PurgeSessions deletes the sessions expired at now and says how many.
	PurgeSessions(ctx context.Context, now time.Time) (int, error)
	// UpdateSignInAttempts reads the failed sign-in tries counted against each of keys (the
	// zero SignInAttempts for a key with none), hands them to update in the order of keys, and
	// stores what it returns in their place (a zero Failures deletes the key), atomically: every
	// process on the database sees one count per key, and sign-ins at the same moment are each
	// counted. update must be pure (it may be called again); keys are distinct.
	UpdateSignInAttempts(ctx context.Context, keys []string, update func([]SignInAttempts) []SignInAttempts) error
	// SweepSignInAttempts deletes the keys whose first counted try is before since and says how
	// many: their window is over.
	SweepSignInAttempts(ctx context.Context, since time.Time) (int, error)
	SetPassword(ctx context.Context, userID string, hash []byte) error
	CreateAPIToken(ctx context.Context, t APIToken) (APIToken, error)
	APITokenByHash(ctx context.Context, hash []byte) (APIToken, error)    // ErrNotFound when missing, revoked or expired
	ListAPITokens(ctx context.Context, userID string) ([]APIToken, error) // newest first, revoked and expired ones included
	RevokeAPIToken(ctx context.Context, userID, id string) error
	// TouchAPIToken records that the token id was used now, when its LastUsedAt is unset or at
	// least TokenTouchEvery old. A missing or revoked token is left alone and is not an error.
	TouchAPIToken(ctx context.Context, id string) error
	GetSetting(ctx context.Context, key string) (string, error) // ErrNotFound when unset
	SetSetting(ctx context.Context, key, value string) error

	// Invitations. CreateInvitation returns ErrConflict on a taken hash. InvitationByHash
	// returns the invitation whatever its state (used, revoked, expired: the caller says which);
	// ErrNotFound when there is none. ListInvitations is newest first. RevokeInvitation is
	// ErrNotFound when the invitation is missing or already used; revoking twice keeps the first
	// time.
	CreateInvitation(ctx context.Context, inv Invitation) (Invitation, error)
	InvitationByHash(ctx context.Context, hash []byte) (Invitation, error)
	ListInvitations(ctx context.Context) ([]Invitation, error)
	RevokeInvitation(ctx context.Context, id string) error
	// RedeemInvitation creates u with the role of the invitation whose hash is hash and marks
	// the invitation used by it, in one transaction: an invitation makes at most one account,
	// whatever the races. ErrNotFound when there is no invitation usable at now (missing, used,
	// revoked or expired); ErrConflict when u's name is taken (the invitation stays usable).
	RedeemInvitation(ctx context.Context, hash []byte, u User, now time.Time) (User, error)

	// Conversations and their logs.
	CreateConversation(ctx context.Context, c Conversation) (Conversation, error)
	GetConversation(ctx context.Context, id string) (Conversation, error)
	ListConversations(ctx context.Context, ownerID string) ([]Conversation, error) // newest first
	// SetConversationTitle sets a conversation's title; with onlyIfUntitled only when it has none
	// (a title from its first message never overwrites a rename). It reports whether the title
	// changed; ErrNotFound when the conversation is missing.
	SetConversationTitle(ctx context.Context, id, title string, onlyIfUntitled bool) (bool, error)
	// DeleteConversation removes a conversation with its log, calls, timers and steps, and adds
	// audit (its ConversationID is id) to the audit trail, which keeps every earlier record too.
	// ErrNotFound when it is missing.
	DeleteConversation(ctx context.Context, id string, audit AuditRecord) error
	// SearchConversations returns ownerID's conversations whose title contains query, ignoring
	// case, most recently updated first, at most limit (0: all).
	SearchConversations(ctx context.Context, ownerID, query string, limit int) ([]Conversation, error)
	// FindConversations returns ownerID's conversations whose title contains query (as
	// SearchConversations) or one of whose messages (user and assistant) holds every word of
	// query (SearchWords: full-text, each word also as a prefix, ignoring case), most recently
	// updated first, at most limit (0: all). A hit by message names the most recent such message
	// and an excerpt of it (Snippet), made for the hits returned only, from a window of the
	// message (SnippetWindow). Only the first MaxIndexedText bytes of a message are searched.
	// A search that runs past SearchTimeout is stopped: ErrSearchTimeout. Messages are indexed in the transaction that appends them and leave the index
	// with their conversation.
	FindConversations(ctx context.Context, ownerID, query string, limit int) ([]SearchHit, error)
	// ListActive returns conversations whose status is not idle, for revival at start-up.
	ListActive(ctx context.Context) ([]Conversation, error)
	// Append writes b after the entry numbered afterSeq and returns the new last sequence. If the
	// conversation's last sequence is not afterSeq it writes nothing and returns ErrConflict.
	Append(ctx context.Context, conversationID string, afterSeq int64, b Batch) (int64, error)
	// Log returns the entries with Seq > afterSeq in order.
	Log(ctx context.Context, conversationID string, afterSeq int64) ([]Entry, error)
	// LogPage returns a page of the log: the entries with Seq > afterSeq, in order, at most limit
	// (> 0) of them and none after the one whose data brings the page to maxBytes (> 0; a page
	// holds at least one entry). A reader that writes each page before it reads the next (an event
	// stream catching up) holds one page in memory, not the log. A page of fewer than limit
	// entries whose data come to less than maxBytes ends the log (as of the read). A
	// conversation that does not exist is ErrNotFound.
	LogPage(ctx context.Context, conversationID string, afterSeq int64, limit, maxBytes int) ([]Entry, error)
	ToolCalls(ctx context.Context, conversationID string) ([]ToolCall, error) // in log order
	GetToolCall(ctx context.Context, conversationID, toolCallID string) (ToolCall, error)
	ListPending(ctx context.Context, f PendingFilter) ([]PendingCall, error)

	// Durable timers. Schedule replaces an existing timer of the same call.
	ScheduleExpiry(ctx context.Context, e Expiry) error
	CancelExpiry(ctx context.Context, conversationID, toolCallID string) error
	// ClaimDueExpiries claims up to limit timers due at or before now, each for lease: a claimed
	// timer is not returned again until the lease runs out, so with several processes on one
	// database each due timer is handed to one claimer at a time. Firing is idempotent (the
	// call is already resolved → stale), and a fired timer is removed by Append's Cancel.
	ClaimDueExpiries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Expiry, error)

	// Retry steps.
	Steps(ctx context.Context, conversationID string) ([]Step, error)

	// Outbox. AddOutbox is idempotent on (ConversationID, ToolCallID): a second write for a call
	// changes nothing and returns the first message. A tool_call_id is unique only in its
	// conversation: the same id in another conversation is another message.
	AddOutbox(ctx context.Context, m OutboxMessage) (OutboxMessage, error)
	ListOutbox(ctx context.Context, conversationID string) ([]OutboxMessage, error) // all when empty

	// Usage: the tokens the model reported for a user's conversations, per UTC day. AddUsage
	// adds to the day's count; UsageOn is 0 for a day with none.
	AddUsage(ctx context.Context, userID string, day time.Time, tokens int64) error
	UsageOn(ctx context.Context, userID string, day time.Time) (int64, error)

	// Audit. Every record written (through Append, AppendAudit, RevokeGrant or
	// DeleteConversation) joins the keyed hash chain in the same transaction, appends serialized
	// across processes (auditkey.go); after the commit the new head goes to the store's anchor,
	// if it has one. The database refuses to change or delete a record.
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditRecord, error) // newest first
	// AuditChain returns up to limit chained records after the place afterSeq, in chain order.
	AuditChain(ctx context.Context, afterSeq int64, limit int) ([]AuditRecord, error)
	// AppendAudit writes records that belong to no conversation's append.
	AppendAudit(ctx context.Context, recs ...AuditRecord) error

	// Grants (remembered approvals). ActiveGrant finds userID's grant for tool that covers
	// conversationID and the arguments whose canonical hash is argsHash at now (scope user, or
	// scope conversation of that conversation; arguments any, or exact with that hash; not
	// revoked, not expired), the newest; ErrNotFound when none. ListGrants lists userID's grants
	// active at now, newest first; AllGrants every user's (up to limit, 0 for all), for admins.
	// GrantByID reads one grant whatever its state; ErrNotFound when there is none.
	// RevokeGrant revokes userID's grant id at now and writes audit in the same transaction;
	// ErrNotFound when userID has no such active grant.
	ActiveGrant(ctx context.Context, userID, conversationID, tool, argsHash string, now time.Time) (Grant, error)
	ListGrants(ctx context.Context, userID string, now time.Time) ([]Grant, error)
	AllGrants(ctx context.Context, now time.Time, limit int) ([]Grant, error)
	GrantByID(ctx context.Context, id string) (Grant, error)
	RevokeGrant(ctx context.Context, userID, id string, now time.Time, audit AuditRecord) error

	// Inbox claims (governance.go). ClaimCall takes c for its call unless another user holds a
	// live claim of it: then it returns that claim and ErrConflict. Claiming again one's own
	// claim renews it. ReleaseClaim ends userID's claim of the call (a missing one is not an
	// error). ListClaims lists the claims live at now.
	ClaimCall(ctx context.Context, c Claim) (Claim, error)
	ReleaseClaim(ctx context.Context, conversationID, toolCallID, userID string) error
	ListClaims(ctx context.Context, now time.Time) ([]Claim, error)

	// The notification outbox (governance.go: NotifyMessage). Messages are queued by Append
	// (Batch.Notify) or EnqueueNotify. ClaimNotify claims up to limit messages due at now (their
	// next attempt has come and no live lease holds them), each for lease, oldest first; with
	// several processes each message is claimed by one at a time. CompleteNotify removes a
	// message (delivered, or given up); RetryNotify counts a failed attempt, releases the lease
	// and makes the message due again at next; ReleaseNotify gives a claim up without counting
	// an attempt (a sender stopping), so the message is due again at once.
	EnqueueNotify(ctx context.Context, msgs ...NotifyMessage) error
	ClaimNotify(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]NotifyMessage, error)
	CompleteNotify(ctx context.Context, id string) error
	RetryNotify(ctx context.Context, id string, next time.Time, lastError string) error
	ReleaseNotify(ctx context.Context, id string) error

	// Ping answers when the store is reachable.
	Ping(ctx context.Context) error
	// SchemaVersion reports the schema version the database is at (have) and the one this
	// binary was built for (want); a readiness check wants them equal (see Ready).
	SchemaVersion(ctx context.Context) (have, want int, err error)
	Close() error
}

// Ready reports whether s can serve requests: it answers and its schema is the one this binary
// was built for. The error wraps ErrSchemaTooNew or ErrSchemaBehind when the versions differ,
// and the store's own error when it does not answer.
func Ready(ctx context.Context, s Store) error {
	have, want, err := s.SchemaVersion(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("store not ready: %w", err)
	case have > want:
		return fmt.Errorf("store not ready: schema version %d, this binary knows up to %d: %w", have, want, ErrSchemaTooNew)
	case have < want:
		return fmt.Errorf("store not ready: schema version %d, this binary needs %d: %w", have, want, ErrSchemaBehind)
	}
	return nil
}

// SignInAttempts are the failed sign-in tries counted against one key since First, the latest
// at Last.
type SignInAttempts struct {
	First, Last time.Time
	Failures    int
}

// SearchHit is one conversation FindConversations found. Seq is the message that matched (0 when
// only the title did); Snippet is a short excerpt of it in plain text, each matched word between
// SnippetMark and SnippetEnd (control characters the message itself cannot hold: they are
// removed from the text first). Render it escaped.
type SearchHit struct {
	Conversation
	Seq     int64
	Snippet string
}

// Snippet markers and bounds.
const (
	SnippetMark = "\x02"
	SnippetEnd  = "\x03"
	// SnippetWords is about how many words an excerpt holds.
	SnippetWords = 24
	// MaxIndexedText bounds the text of one message that is indexed (and excerpted): a long
	// answer is found by its first 100 000 bytes.
	MaxIndexedText = 100_000
	// MaxSearchWords bounds the words of one search.
	MaxSearchWords = 16
	// SnippetWindow bounds the text an excerpt is made from: SnippetWindow characters of the
	// message, starting SnippetLead characters before the first place its longest search word
	// appears (or at its start). Highlighting a whole 100 000-byte message cost PostgreSQL
	// ~12 ms a hit; a window costs a fraction of that, whatever the message's length.
	SnippetWindow = 4000
	SnippetLead   = 1000
	// SearchTimeout bounds one search in the database: one stopped is ErrSearchTimeout.
	SearchTimeout = 2 * time.Second
)

// SearchWords splits a search into the words the full-text index matches: runs of letters and
// digits, lowercased; everything else (punctuation, quotes, operators of any query syntax)
// separates words and is never interpreted. FindConversations uses the first MaxSearchWords.
func SearchWords(query string) []string {
	return strings.FieldsFunc(strings.ToLower(query), func(r rune) bool { return !IsWordRune(r) })
}

// IsWordRune reports whether r belongs to a search word (SearchWords): a letter, a decimal digit
// or a mark.
func IsWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}
