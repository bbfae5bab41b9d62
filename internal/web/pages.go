package web

import "github.com/labstack/echo/v4"

// pageRoutes registers the pages (conversations, the conversation page and its socket, the
// inbox). It runs last in the route table, after authentication and CSRF middleware are in place.
func (s *Server) pageRoutes(e *echo.Echo) {}
