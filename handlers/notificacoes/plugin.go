// Package notificacoes notifies people of what happened, out of the request
// path: it consumes tarefa.concluida on queue
// notificacoes.tarefas-concluidas (seed 002) and sends one message through
// its Notificador, the log or a Slack-compatible webhook.
package notificacoes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/notify"
)

// Notificador sends a human-readable message to a channel.
type Notificador interface {
	Notify(ctx context.Context, channel, text string) error
}

// Config is the plugin's section, handlers.notificacoes.
type Config struct {
	// Notifier is "log" (default) or "webhook".
	Notifier string `koanf:"notifier"`
	// Channel is where messages go, e.g. a Slack channel.
	Channel string               `koanf:"channel"`
	Webhook notify.WebhookConfig `koanf:"webhook"`
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	switch c.Notifier {
	case "log":
		return nil
	case "webhook":
		return c.Webhook.Validate("handlers.notificacoes.webhook")
	default:
		return fmt.Errorf("handlers.notificacoes.notifier %q must be log or webhook", c.Notifier)
	}
}

// Defaults: the log notifier, a webhook timeout well above a slow
// endpoint's answer, and the seed's channel.
var defaults = Config{
	Notifier: "log",
	Channel:  "#tarefas-concluidas",
	Webhook:  notify.WebhookConfig{Timeout: notify.DefaultWebhookTimeout},
}

// Plugin returns the plugin's definition.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name: "notificacoes",
		Subscriptions: []handlers.Subscription{
			{Name: "tarefas-concluidas", Events: []string{"tarefa.concluida"}},
		},
	}, defaults, build)
}

func build(cfg Config, deps handlers.Deps) (handlers.Plugin, error) {
	var n Notificador = notify.Log{Logger: deps.Logger}
	if cfg.Notifier == "webhook" {
		n = notify.NewWebhook(cfg.Webhook)
	}
	return handlers.Plugin{Handlers: map[string]handlers.HandlerFunc{
		"tarefas-concluidas": tarefaConcluida(n, cfg.Channel),
	}}, nil
}

// tarefaConcluida sends the seed's message for each concluded task.
func tarefaConcluida(n Notificador, channel string) handlers.HandlerFunc {
	return func(ctx context.Context, e event.Event) error {
		var p struct {
			UsuarioID *int64 `json:"usuario_id"`
			Titulo    string `json:"titulo"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return event.Permanent(fmt.Errorf("payload of %s: %w", e.Name, err))
		}
		if p.UsuarioID == nil || p.Titulo == "" {
			return event.Permanent(errors.New("payload of " + e.Name + " lacks usuario_id or titulo"))
		}
		return n.Notify(ctx, channel, fmt.Sprintf("Tarefa '%s' foi concluída pelo usuário %d", p.Titulo, *p.UsuarioID))
	}
}
