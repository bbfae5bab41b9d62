package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"parley/internal/fault"
)

// This file is what the owner does to a conversation as a whole, on the page and in the JSON
// API: rename it, delete it, find it by title. The agent decides who may (agent.MayManage) and
// when (a conversation whose turn is open is not deleted: conflict, "stop it first").

// apiRenameConversation: PATCH /api/v1/conversations/{id} {"title"} → 200 {"ok", "id", "title"}
// (the title as stored: spaces and control characters folded); 422 for an empty or long title.
func (s *Server) apiRenameConversation(c echo.Context) error {
	var body renameRequest
	if err := decodeJSON(c, &body, false); err != nil {
		return err
	}
	if body.Title == nil {
		return fault.InvalidField("title", "title is required")
	}
	got, err := s.agent.Rename(c.Request().Context(), c.Param("id"), principal(c), *body.Title)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, renamedJSON{ID: got.ID, OK: true, Title: got.Title})
}

// apiDeleteConversation: DELETE /api/v1/conversations/{id} → 200 {"ok": true}; 409 conflict
// while a turn is open (stop it first: POST …/cancel); 404 for whoever may not see it.
func (s *Server) apiDeleteConversation(c echo.Context) error {
	if err := s.agent.Delete(c.Request().Context(), c.Param("id"), principal(c)); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, okJSON{OK: true})
}

// renamePage: POST /conversations/{id}/rename (title) → back to the conversation, renamed; an
// empty or long title comes back as a notice.
func (s *Server) renamePage(c echo.Context) error {
	id := c.Param("id")
	_, err := s.agent.Rename(c.Request().Context(), id, principal(c), c.FormValue("title"))
	switch fault.KindOf(err) {
	case "":
		return c.Redirect(http.StatusSeeOther, conversationPath(id)+"?notice=renamed")
	case fault.KindInvalidArgs:
		return c.Redirect(http.StatusSeeOther, conversationPath(id)+"?notice=badtitle")
	}
	return err
}

// deletePage: POST /conversations/{id}/delete → the conversations page saying it was deleted;
// while a turn is open, back to the conversation saying to stop it first.
func (s *Server) deletePage(c echo.Context) error {
	id := c.Param("id")
	err := s.agent.Delete(c.Request().Context(), id, principal(c))
	switch fault.KindOf(err) {
	case "":
		return c.Redirect(http.StatusSeeOther, "/conversations?notice=deleted")
	case fault.KindConflict:
		return c.Redirect(http.StatusSeeOther, conversationPath(id)+"?notice=busy")
	}
	return err
}
