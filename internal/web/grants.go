package web

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"parley/internal/fault"
	"parley/internal/store"
)

// The governance API (docs/api.md, "Grants" and "Audit trail"): the caller's grants, and the
// audit trail for admins. Who may do what is the agent's (Manager.Grants, RevokeGrant, AuditChain).

// apiGrants: GET /api/v1/grants → the caller's active grants, newest first.
func (s *Server) apiGrants(c echo.Context) error {
	list, err := s.agent.Grants(c.Request().Context(), principal(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, grantListJSON{Grants: grantsOf(list)})
}

// apiAllGrants: GET /api/v1/admin/grants (admins) → every person's active grants, newest first,
// each naming its user_id. Anyone else: 403.
func (s *Server) apiAllGrants(c echo.Context) error {
	list, err := s.agent.AllGrants(c.Request().Context(), principal(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, grantListJSON{Grants: grantsOf(list)})
}

// apiRevokeGrant: DELETE /api/v1/grants/{id} → 200; later calls suspend again. The grant's
// owner may revoke it, and an admin anyone's; to anyone else it is a 404 (the agent decides).
func (s *Server) apiRevokeGrant(c echo.Context) error {
	if err := s.agent.RevokeGrant(c.Request().Context(), principal(c), c.Param("grant")); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, okJSON{OK: true})
}

// auditJSON is one audit record as the API shows it.
type auditJSON struct {
	ID             int64           `json:"id"`
	Seq            int64           `json:"seq"`
	ConversationID string          `json:"conversation_id"`
	ToolCallID     string          `json:"tool_call_id"`
	Tool           string          `json:"tool"`
	ActorID        string          `json:"actor_id"`
	Action         string          `json:"action"`
	Reason         string          `json:"reason"`
	ArgsHash       string          `json:"args_hash"`
	Detail         json.RawMessage `json:"detail,omitempty"`
	At             time.Time       `json:"at"`
	PrevHash       string          `json:"prev_hash"`
	Hash           string          `json:"hash"`
	// KeyID names the key Hash is an HMAC under ("": an unkeyed record from before the chain was
	// keyed); the key itself never leaves the server.
	KeyID string `json:"key_id"`
}

// AuditJSON is the API's (and web audit export's) shape of a record.
func AuditJSON(r store.AuditRecord) any { return auditJSONOf(r) }

func auditJSONOf(r store.AuditRecord) auditJSON {
	a := auditJSON{ID: r.ID, Seq: r.Seq, ConversationID: r.ConversationID, ToolCallID: r.ToolCallID, Tool: r.Tool, ActorID: r.ActorID,
		Action: r.Action, Reason: r.Reason, ArgsHash: r.ArgsHash, At: r.At.UTC(), PrevHash: r.PrevHash, Hash: r.Hash, KeyID: r.KeyID}
	if json.Valid(r.Detail) {
		a.Detail = r.Detail
	}
	return a
}

// apiAudit: GET /api/v1/audit?after=<seq>&limit=<n> (admins) → the chain's records after that
// place, in chain order; "next" is the place to ask after for the following page.
func (s *Server) apiAudit(c echo.Context) error {
	after, err := queryInt(c, "after")
	if err != nil {
		return err
	}
	limit, err := queryInt(c, "limit")
	if err != nil {
		return err
	}
	recs, err := s.agent.AuditChain(c.Request().Context(), principal(c), after, int(limit))
	if err != nil {
		return err
	}
	out := auditPageJSON{Records: make([]auditJSON, len(recs)), Next: after}
	for i, r := range recs {
		out.Records[i] = auditJSONOf(r)
		out.Next = r.Seq
	}
	return c.JSON(http.StatusOK, out)
}

// queryInt reads a non-negative integer query parameter; absent is 0.
func queryInt(c echo.Context, name string) (int64, error) {
	v := c.QueryParam(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fault.InvalidField(name, name+" must be a non-negative integer")
	}
	return n, nil
}
