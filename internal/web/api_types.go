package web

import (
	"time"

	"parley/internal/agent"
	"parley/internal/tools"
)

// The JSON API's request and response bodies that have no type elsewhere (agent.Resolution is
// the resolve body, viewJSON a conversation, errorBody the error envelope …). docs/api.md shows
// an example of each, and TestAPIDocExamples decodes every example into its type.

// createConversationRequest is POST /api/v1/conversations' optional body.
type createConversationRequest struct {
	Title string `json:"title"`
}

// sendMessageRequest is POST /api/v1/conversations/{id}/messages' body.
type sendMessageRequest struct {
	Text *string `json:"text"`
}

// renameRequest is PATCH /api/v1/conversations/{id}'s body.
type renameRequest struct {
	Title *string `json:"title"`
}

// bulkResolveRequest is POST /api/v1/approvals/resolve's body.
type bulkResolveRequest struct {
	Decision string     `json:"decision"`
	Reason   string     `json:"reason"`
	Items    []bulkItem `json:"items"`
}

// okJSON is the answer of a request that has nothing more to say than that it was done.
type okJSON struct {
	OK bool `json:"ok"`
}

// sentJSON is the answer to a message: queued when a running turn makes it wait.
type sentJSON struct {
	OK     bool `json:"ok"`
	Queued bool `json:"queued,omitempty"`
}

// createdJSON is the answer to a new conversation.
type createdJSON struct {
	ID string `json:"id"`
}

// renamedJSON is the answer to a rename: the title as stored. (Fields in the order the map it
// replaced wrote them.)
type renamedJSON struct {
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Title string `json:"title"`
}

// conversationListJSON is the caller's conversations.
type conversationListJSON struct {
	Conversations []conversationJSON `json:"conversations"`
}

// approvalListJSON is the approvals that wait for the caller.
type approvalListJSON struct {
	Approvals []approvalJSON `json:"approvals"`
}

// planJSON is an awaiting approval's dry-run plan.
type planJSON struct {
	Plan tools.Plan `json:"plan"`
}

// bulkResponseJSON is a bulk decision's outcome, one result per item in order.
type bulkResponseJSON struct {
	Results []bulkResultJSON `json:"results"`
}

// claimJSON is an inbox claim taken.
type claimJSON struct {
	ClaimedBy string    `json:"claimed_by"`
	ExpiresAt time.Time `json:"expires_at"`
}

// grantListJSON is the caller's active grants.
type grantListJSON struct {
	Grants []agent.Grant `json:"grants"`
}

// auditPageJSON is a page of the audit chain; Next is the place to ask after for the next one.
type auditPageJSON struct {
	Next    int64       `json:"next"`
	Records []auditJSON `json:"records"`
}

// readyJSON is /readyz's answer when the process can take writes.
type readyJSON struct {
	Details map[string]any `json:"details,omitempty"`
	OK      bool           `json:"ok"`
}
