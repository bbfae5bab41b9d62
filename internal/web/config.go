package web

import "time"

// Config is the web layer's settings. The zero value is usable: withDefaults fills the rest.
type Config struct {
	// Production sets Secure cookies and JSON logs (the app decides the logger).
	Production bool
	// DemoModel says the model is the built-in demo, which the page must say.
	DemoModel bool
	// PasswordCost is bcrypt's cost; 0 uses bcrypt.DefaultCost (tests lower it).
	PasswordCost int
	// SessionTTL is the longest a sign-in lasts, however active (the absolute lifetime).
	SessionTTL time.Duration
	// SessionIdle ends a sign-in that made no request for that long; each request slides it
	// (written at most once per half of it). Default 12h.
	SessionIdle time.Duration
	// MaxBodyBytes caps a request body; larger ones get 413.
	MaxBodyBytes int64
	// LoginFailures failed sign-ins on one account within LoginWindow go by; each further one
	// doubles the wait before the next try on that account (1s, 2s … at most LoginMaxDelay),
	// whoever makes it: guessing slows down, but nobody can lock an account out for long.
	LoginFailures int
	LoginWindow   time.Duration
	LoginMaxDelay time.Duration
	// LoginFailuresPerIP and LoginFailuresPerNet lock a client address, and its subnet (/24,
	// IPv6 /64), after that many failed sign-ins within LoginWindow, whatever names they tried
	// (password spraying).
	LoginFailuresPerIP, LoginFailuresPerNet int
	// TrustedProxies are the proxies (CIDRs) whose X-Forwarded-For names the client address;
	// without any, the address is the connection's.
	TrustedProxies []string
	// MessagesPerMinute and MessageBurst bound each user's messages (page and API): a token
	// bucket refilled at the rate, holding at most the burst.
	MessagesPerMinute float64
	MessageBurst      int
	// APIPerMinute and APIBurst bound each user's JSON API requests.
	APIPerMinute float64
	APIBurst     int
	// SSEHeartbeat is how often an idle event stream gets a comment, so proxies keep it open.
	SSEHeartbeat time.Duration
	// PagesPerMinute and PageBurst bound each user's page POSTs and socket upgrades.
	PagesPerMinute float64
	PageBurst      int
	// PreviewsPerMinute and PreviewBurst bound each user's plan previews (an approval card's
	// plan refreshed as its arguments are edited, page and API: each runs a dry run), apart
	// from the page budget so typing never spends the Approve click's. Default 120 and 30.
	PreviewsPerMinute float64
	PreviewBurst      int
	// SearchesPerMinute and SearchBurst bound each user's searches (a conversation list with a
	// query, page and API), apart from the other budgets: a search costs the database far more
	// than any other read (up to store.SearchTimeout of its CPU). Default 12 and 6.
	SearchesPerMinute float64
	SearchBurst       int
	// MaxConnsPerUser and MaxConns bound the live connections (sockets and event streams) of
	// one user and of the whole process; one past them is refused (429, or 503 for the process).
	MaxConnsPerUser, MaxConns int
	// BodyTimeout bounds the time to read a request's body on every route but sockets and event
	// streams: a slowly sent body is cut off. Default 10s.
	BodyTimeout time.Duration
	// RequestTimeout bounds every request but sockets and event streams, whatever the database
	// does: past it the request is answered 503 unavailable with Retry-After. Default 9s, so the
	// answer is back within 10 s.
	RequestTimeout time.Duration
	// LiveRecheck is how often a live connection (socket, event stream) re-reads its session or
	// token and its user's role; one that no longer holds ends. It bounds how long a sign-out,
	// revocation or demotion made by another process takes to reach this one. Default 5s.
	LiveRecheck time.Duration
}

func (c Config) withDefaults() Config {
	if c.SessionIdle <= 0 {
		c.SessionIdle = 12 * time.Hour
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 14 * 24 * time.Hour
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.LoginMaxDelay <= 0 {
		c.LoginMaxDelay = 30 * time.Second
	}
	if c.LoginFailuresPerIP <= 0 {
		c.LoginFailuresPerIP = 30
	}
	if c.LoginFailuresPerNet <= 0 {
		c.LoginFailuresPerNet = 100
	}
	if c.LoginFailures <= 0 {
		c.LoginFailures = 5
	}
	if c.LoginWindow <= 0 {
		c.LoginWindow = 15 * time.Minute
	}
	if c.MessagesPerMinute <= 0 {
		c.MessagesPerMinute = 20
	}
	if c.MessageBurst <= 0 {
		c.MessageBurst = 10
	}
	if c.APIPerMinute <= 0 {
		c.APIPerMinute = 300
	}
	if c.APIBurst <= 0 {
		c.APIBurst = 60
	}
	if c.PagesPerMinute <= 0 {
		c.PagesPerMinute = 120
	}
	if c.PageBurst <= 0 {
		c.PageBurst = 40
	}
	if c.PreviewsPerMinute <= 0 {
		c.PreviewsPerMinute = 120
	}
	if c.PreviewBurst <= 0 {
		c.PreviewBurst = 30
	}
	if c.SearchesPerMinute <= 0 {
		c.SearchesPerMinute = 12
	}
	if c.SearchBurst <= 0 {
		c.SearchBurst = 6
	}
	if c.MaxConnsPerUser <= 0 {
		c.MaxConnsPerUser = 32
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 10_000
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 10 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 9 * time.Second
	}
	if c.LiveRecheck <= 0 {
		c.LiveRecheck = 5 * time.Second
	}
	if c.SSEHeartbeat <= 0 {
		c.SSEHeartbeat = 20 * time.Second
	}
	return c
}
