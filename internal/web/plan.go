package web

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/views"
)

// This file is the approval card's plan refreshed as the person edits the arguments: the page's
// fragment (the card's own plan component) and the API's JSON, both from agent.Preview, which
// authorizes as a decision of the call would and writes nothing.

// limitPreviews spends one token of the user's previews budget on each plan preview: a 429 with
// Retry-After beyond it (the page's script keeps the plan it has, marked stale).
func (s *Server) limitPreviews(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := currentUser(c)
		if u == nil {
			return next(c)
		}
		if ok, wait := s.limits.previews.allow(u.ID); !ok {
			return rateLimitedError("plan previews", retryAfterSeconds(wait))
		}
		return next(c)
	}
}

// planPage: POST /conversations/{id}/calls/{call}/plan with the fields the approval card's form
// posts (the arguments as fields, views.ArgsFormField and views.ArgFieldPrefix, or as JSON in
// "args") → the plan of the call with those arguments, as the card shows it (views.PlanView), an
// HTML fragment. The fields are typed as a resolve types them (agent.ArgsFromFields). Errors are
// the API's: a field that cannot be typed or arguments the schema refuses are 422 invalid_args
// with details.problems (JSON when the request accepts it).
func (s *Server) planPage(c echo.Context) error {
	ctx := c.Request().Context()
	id, callID := c.Param("id"), c.Param("call")
	form, err := c.FormParams()
	if err != nil {
		return fault.New(fault.KindBadRequest, "the form could not be read", nil)
	}
	v, err := s.agent.View(ctx, id, principal(c))
	if err != nil {
		return err
	}
	call, ok := v.Call(callID)
	if !ok {
		return fault.New(fault.KindNotFound, "no such tool call", map[string]any{"tool_call_id": callID})
	}
	args := json.RawMessage(strings.TrimSpace(form.Get("args")))
	if form.Get(views.ArgsFormField) != "" {
		fields := map[string]string{}
		for k, vs := range form {
			if name, ok := strings.CutPrefix(k, views.ArgFieldPrefix); ok && len(vs) > 0 {
				fields[name] = vs[0]
			}
		}
		if args, err = agent.ArgsFromFields(call, fields); err != nil {
			return err
		}
	}
	plan, err := s.agent.Preview(ctx, id, callID, args, principal(c))
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, views.PlanView(agent.CallView{Plan: &plan, Schema: call.Schema}, ""))
}

// planRequest is the API's plan body: the edited arguments.
type planRequest struct {
	Arguments json.RawMessage `json:"arguments"`
}

// apiPlan: POST /api/v1/conversations/{id}/calls/{call}/plan {"arguments": {…}} → {"plan":
// {"summary", "details"}}, the plan of the awaiting approval with those arguments (the call's
// own when they are left out), for someone who may decide it (agent.Preview).
func (s *Server) apiPlan(c echo.Context) error {
	var r planRequest
	if err := decodeJSON(c, &r, true); err != nil {
		return err
	}
	if string(r.Arguments) == "null" {
		r.Arguments = nil
	}
	plan, err := s.agent.Preview(c.Request().Context(), c.Param("id"), c.Param("call"), r.Arguments, principal(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, planResponseJSON{Plan: planOf(&plan)})
}
