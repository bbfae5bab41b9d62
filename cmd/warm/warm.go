package main

import (
	_ "code.dny.dev/ssrf"
	_ "github.com/a-h/templ"
	_ "github.com/anthropics/anthropic-sdk-go"
	_ "github.com/chromedp/chromedp"
	_ "github.com/coder/websocket"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/labstack/echo/v4"
	_ "github.com/labstack/echo/v4/middleware"
	_ "github.com/microcosm-cc/bluemonday"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/santhosh-tekuri/jsonschema/v5"
	_ "github.com/standard-webhooks/standard-webhooks/libraries/go"
	_ "github.com/yuin/goldmark"
	_ "go.uber.org/goleak"
	_ "golang.org/x/crypto/bcrypt"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/time/rate"
	_ "modernc.org/sqlite"
)

func main() {}
