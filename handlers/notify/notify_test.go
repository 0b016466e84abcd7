package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/handlers/event"
)

func TestWebhook(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		wantErr   bool
		permanent bool
	}{
		{"ok", http.StatusOK, false, false},
		{"rate limited is retried", http.StatusTooManyRequests, true, false},
		{"server error is retried", http.StatusBadGateway, true, false},
		{"bad request is permanent", http.StatusBadRequest, true, true},
		{"gone is permanent", http.StatusNotFound, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got map[string]string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Content-Type") != "application/json" {
					t.Errorf("Content-Type = %q", r.Header.Get("Content-Type"))
				}
				_ = json.NewDecoder(r.Body).Decode(&got)
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			err := NewWebhook(WebhookConfig{URL: srv.URL, Timeout: time.Second}).Notify(context.Background(), "#tarefas-concluidas", "Tarefa 'x' foi concluída pelo usuário 1")
			if (err != nil) != tt.wantErr || event.IsPermanent(err) != tt.permanent {
				t.Fatalf("Notify error = %v (permanent %v), want error %v permanent %v", err, event.IsPermanent(err), tt.wantErr, tt.permanent)
			}
			if got["text"] != "Tarefa 'x' foi concluída pelo usuário 1" || got["channel"] != "#tarefas-concluidas" {
				t.Fatalf("body = %v", got)
			}
		})
	}
}

func TestWebhookTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	err := NewWebhook(WebhookConfig{URL: srv.URL, Timeout: 50 * time.Millisecond}).Notify(context.Background(), "", "x")
	if err == nil || event.IsPermanent(err) {
		t.Fatalf("a timed-out call must be a retryable error, got %v", err)
	}
}

// A webhook's secret is its path: the error of a call that got no answer
// names the host, not the path, since it is logged and travels in the
// event's failure headers.
func TestWebhookErrorHidesThePath(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/services/T0/B0/s3cr3t-path?token=s3cr3t-query"
	srv.Close() // nothing answers at its address any more
	err := NewWebhook(WebhookConfig{URL: url, Timeout: time.Second}).Notify(context.Background(), "", "x")
	if err == nil || event.IsPermanent(err) {
		t.Fatalf("err = %v, want a transient error", err)
	}
	if msg := err.Error(); strings.Contains(msg, "s3cr3t") || !strings.Contains(msg, strings.TrimPrefix(srv.URL, "http://")+"/xxxxx") {
		t.Fatalf("error %q shows the path, or not the host", msg)
	}
}
