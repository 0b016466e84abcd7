package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

// tarefasFlow runs the Tarefas walk-through against a running platform and
// returns the title whose conclusion must be notified.
func tarefasFlow(t *testing.T, base string) string {
	t.Helper()
	code, pai := call(t, "POST", base+"/tarefas", `{"usuario_id": 1, "titulo": "Escrever relatório", "tarefa_pai_id": null}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /tarefas = %d %v", code, pai)
	}
	paiID := int(pai["id"].(float64))
	code, sub := call(t, "POST", base+"/tarefas", fmt.Sprintf(`{"usuario_id": 1, "titulo": "Revisar", "tarefa_pai_id": %d}`, paiID))
	if code != http.StatusCreated {
		t.Fatalf("POST /tarefas (subtask) = %d %v", code, sub)
	}
	subID := int(sub["id"].(float64))

	steps := []struct {
		name string
		id   int
		body string
		want int
	}{
		{"another user's task", paiID, `{"usuario_id": 2}`, http.StatusNotFound},
		{"no such task", 999999, `{"usuario_id": 1}`, http.StatusNotFound},
		{"pending subtask", paiID, `{"usuario_id": 1}`, http.StatusConflict},
		{"the subtask", subID, `{"usuario_id": 1}`, http.StatusOK},
		{"the parent, now free", paiID, `{"usuario_id": 1}`, http.StatusOK},
		{"again: nothing changes", paiID, `{"usuario_id": 1}`, http.StatusOK},
	}
	for _, s := range steps {
		code, body := call(t, "PATCH", fmt.Sprintf("%s/tarefas/%d/concluir", base, s.id), s.body)
		if code != s.want {
			t.Fatalf("%s: PATCH = %d %v, want %d", s.name, code, body, s.want)
		}
		if code >= 400 && body["error"] == "" {
			t.Fatalf("%s: error answer without a message: %v", s.name, body)
		}
	}
	return "Escrever relatório"
}

func TestTarefasInMemoryNeedsNoService(t *testing.T) {
	p := start(t, "memory")
	if p.pool != nil {
		t.Fatal("the memory environment opened a PostgreSQL pool")
	}
	tarefasFlow(t, p.base)
	for _, want := range []string{"Tarefa 'Revisar' foi concluída pelo usuário 1", "Tarefa 'Escrever relatório' foi concluída pelo usuário 1"} {
		testenv.Eventually(t, 5*time.Second, "notification "+want, func() bool { return strings.Contains(p.logs.String(), want) })
	}
	if n := strings.Count(p.logs.String(), "foi concluída"); n != 2 {
		t.Fatalf("%d notifications for two conclusions (concluding twice must not notify twice):\n%s", n, p.logs.String())
	}
}

func TestTarefasOverRabbitMQ(t *testing.T) {
	p, _ := startAMQP(t)
	tarefasFlow(t, p.base)
	want := "Tarefa 'Escrever relatório' foi concluída pelo usuário 1"
	testenv.Eventually(t, 10*time.Second, "the notification", func() bool { return strings.Contains(p.logs.String(), want) })
}

// A webhook that takes 5 s must not slow the request: the conclusion
// answers at once and the notification arrives afterwards.
func TestConcludeDoesNotWaitForSlowWebhook(t *testing.T) {
	var mu sync.Mutex
	var received []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		time.Sleep(5 * time.Second)
		mu.Lock()
		received = append(received, string(body))
		mu.Unlock()
	}))
	defer hook.Close()
	p, _ := startAMQP(t, "MOENDA_HANDLERS__NOTIFICACOES__NOTIFIER=webhook", "MOENDA_HANDLERS__NOTIFICACOES__WEBHOOK__URL="+hook.URL)

	code, task := call(t, "POST", p.base+"/tarefas", `{"usuario_id": 7, "titulo": "Lenta"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /tarefas = %d %v", code, task)
	}
	began := time.Now()
	code, body := call(t, "PATCH", fmt.Sprintf("%s/tarefas/%d/concluir", p.base, int(task["id"].(float64))), `{"usuario_id": 7}`)
	took := time.Since(began)
	if code != http.StatusOK {
		t.Fatalf("PATCH = %d %v", code, body)
	}
	if took > time.Second {
		t.Fatalf("the conclusion took %s: the request waited for the webhook", took)
	}
	testenv.Eventually(t, 20*time.Second, "the webhook call", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(received) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(received[0], `Tarefa 'Lenta' foi concluída pelo usuário 7`) || !strings.Contains(received[0], `"channel":"#tarefas-concluidas"`) {
		t.Fatalf("webhook body = %s", received[0])
	}
	t.Logf("PATCH answered in %s; the webhook answered 5 s later", took)
}
