package notificacoes

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/moenda/moenda/handlers/event"
)

type recorder struct {
	channel, text string
	err           error
}

func (r *recorder) Notify(_ context.Context, channel, text string) error {
	r.channel, r.text = channel, text
	return r.err
}

func TestTarefaConcluida(t *testing.T) {
	down := errors.New("slack is down")
	tests := []struct {
		name      string
		payload   string
		notifyErr error
		want      string
		permanent bool
		wantErr   bool
	}{
		{"the seed's message", `{"tarefa_id": 4, "usuario_id": 1, "titulo": "Escrever relatório"}`, nil, "Tarefa 'Escrever relatório' foi concluída pelo usuário 1", false, false},
		{"extra fields are ignored", `{"usuario_id": 9, "titulo": "x", "prioridade": "alta"}`, nil, "Tarefa 'x' foi concluída pelo usuário 9", false, false},
		{"no titulo: permanent", `{"usuario_id": 1}`, nil, "", true, true},
		{"no usuario_id: permanent", `{"titulo": "x"}`, nil, "", true, true},
		{"wrong type: permanent", `{"usuario_id": "um", "titulo": "x"}`, nil, "", true, true},
		{"notifier down: retried", `{"usuario_id": 1, "titulo": "x"}`, down, "Tarefa 'x' foi concluída pelo usuário 1", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{err: tt.notifyErr}
			err := tarefaConcluida(r, "#tarefas-concluidas")(context.Background(), event.Event{Name: "tarefa.concluida.v1", Payload: json.RawMessage(tt.payload)})
			if (err != nil) != tt.wantErr || event.IsPermanent(err) != tt.permanent {
				t.Fatalf("error = %v (permanent %v), want error %v permanent %v", err, event.IsPermanent(err), tt.wantErr, tt.permanent)
			}
			if r.text != tt.want || (tt.want != "" && r.channel != "#tarefas-concluidas") {
				t.Fatalf("notified %q on %q, want %q", r.text, r.channel, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	c := defaults
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c.Notifier = "webhook"
	if err := c.Validate(); err == nil {
		t.Fatal("webhook without a URL accepted")
	}
	c.Webhook.URL = "https://hooks.example.test/T000"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Notifier = "smtp"
	if err := c.Validate(); err == nil {
		t.Fatal("unknown notifier accepted")
	}
}
