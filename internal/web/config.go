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
	// SessionTTL is how long a sign-in lasts.
	SessionTTL time.Duration
	// MaxBodyBytes caps a request body; larger ones get 413.
	MaxBodyBytes int64
	// LoginFailures failed sign-ins per name and IP within LoginWindow lock that pair until
	// the window has passed.
	LoginFailures int
	LoginWindow   time.Duration
	// MessagesPerMinute and MessageBurst bound each user's messages (page and API): a token
	// bucket refilled at the rate, holding at most the burst.
	MessagesPerMinute float64
	MessageBurst      int
	// APIPerMinute and APIBurst bound each user's JSON API requests.
	APIPerMinute float64
	APIBurst     int
	// SSEHeartbeat is how often an idle event stream gets a comment, so proxies keep it open.
	SSEHeartbeat time.Duration
}

func (c Config) withDefaults() Config {
	if c.SessionTTL <= 0 {
		c.SessionTTL = 14 * 24 * time.Hour
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
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
	if c.SSEHeartbeat <= 0 {
		c.SSEHeartbeat = 20 * time.Second
	}
	return c
}
