// Package notify holds the notifiers plugins can send human-readable
// messages through: the log (default) and a Slack-compatible webhook.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/moenda/moenda/handlers/event"
)

// Log writes each notification as one log line whose message is the text.
type Log struct {
	Logger *slog.Logger
}

// Notify logs text, with channel and the ids of the event being handled.
func (l Log) Notify(ctx context.Context, channel, text string) error {
	l.Logger.InfoContext(ctx, text, "notifier", "log", "channel", channel,
		"event_id", event.CausationID(ctx), "correlation_id", event.CorrelationID(ctx))
	return nil
}

// WebhookConfig is what YAML sets for a webhook notifier.
type WebhookConfig struct {
	// URL receives a JSON POST {"channel": ..., "text": ...}, the body of a
	// Slack incoming webhook. Keep secret URLs in the environment.
	URL string `koanf:"url"`
	// Timeout bounds one call, connection included.
	Timeout time.Duration `koanf:"timeout"`
}

// Validate reports every problem at once; path prefixes the key names.
func (c WebhookConfig) Validate(path string) error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("%s.url %q must be an http(s) URL", path, hidePath(c.URL)))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("%s.timeout must be positive, got %s", path, c.Timeout))
	}
	return errors.Join(errs...)
}

// DefaultWebhookTimeout bounds a webhook call when the config sets none.
const DefaultWebhookTimeout = 10 * time.Second

// Webhook posts notifications to a Slack-compatible incoming webhook.
type Webhook struct {
	url    string
	client *http.Client
}

// NewWebhook returns a webhook notifier with its own timeout.
func NewWebhook(cfg WebhookConfig) *Webhook {
	return &Webhook{url: cfg.URL, client: &http.Client{Timeout: cfg.Timeout}}
}

// Notify posts the message. A 429 or 5xx answer, or no answer, is an error
// worth retrying; any other non-2xx answer is permanent.
func (w *Webhook) Notify(ctx context.Context, channel, text string) error {
	body, err := json.Marshal(struct {
		Channel string `json:"channel,omitempty"`
		Text    string `json:"text"`
	}{channel, text})
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return event.Permanent(fmt.Errorf("webhook: %w", hideURL(err)))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", hideURL(err))
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("webhook: %s answered %s: %s", req.URL.Host, resp.Status, snippet)
	default:
		return event.Permanent(fmt.Errorf("webhook: %s answered %s: %s", req.URL.Host, resp.Status, snippet))
	}
}

// hideURL hides the path and query of the URL that err, an HTTP client's
// error, quotes: a webhook's secret is its path, and the error ends up in
// logs and in the failure headers of the event's copies.
func hideURL(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return &url.Error{Op: ue.Op, URL: hidePath(ue.URL), Err: ue.Err}
}

// hidePath shows a webhook URL's scheme and host only: a webhook's secret
// is its path (and any user info), and a URL that does not parse cannot be
// told apart from its secret, so none of it is shown.
func hidePath(raw string) string {
	const hidden = "xxxxx"
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" && raw != "":
		return hidden
	case u.User == nil && u.Path == "" && u.RawQuery == "" && u.Fragment == "":
		return raw
	}
	return u.Scheme + "://" + u.Host + "/" + hidden
}
