package app

import (
	"fmt"
	"log/slog"

	"parley/internal/clock"
	"parley/internal/notify"
	"parley/internal/tools/webhook"
)

// newNotifier starts the approval notifications' webhook when PARLEY_NOTIFY_URL is set (nil
// when it is not). The operator sets the URL, so loopback and private addresses are allowed;
// production wants https. The secret is read like a webhook tool's: whsec_<base64> or raw.
// Delivery is durable: the notifications are rows of st's outbox, queued by the agent with the
// change they announce (agent.Config.NotifyOutbox).
func newNotifier(cfg Config, st notify.Outbox, clk clock.Clock, log *slog.Logger) (*notify.Webhook, error) {
	if cfg.NotifyURL == "" {
		return nil, nil
	}
	secret, err := webhook.DecodeSecret(cfg.NotifySecret)
	if err != nil {
		return nil, fmt.Errorf("PARLEY_NOTIFY_SECRET: %w", err)
	}
	w, err := notify.New(notify.Config{URL: cfg.NotifyURL, Secret: secret, Production: cfg.Production, Clock: clk, Logger: log, Store: st})
	if err != nil {
		return nil, fmt.Errorf("notifications: %w", err)
	}
	return w, nil
}
