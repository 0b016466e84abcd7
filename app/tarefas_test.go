package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

// tarefasFlow runs the Tarefas walk-through against a running platform,
// reading the tasks back at the end, and returns the title whose
// conclusion must be notified.
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

	// Read back, scoped to the user as the writes are.
	reads := []struct {
		name, path string
		want       int
		ok         func(body map[string]any) bool
	}{
		{"the parent, concluded", fmt.Sprintf("/tarefas/%d?usuario_id=1", paiID), http.StatusOK, func(b map[string]any) bool {
			return b["id"] == float64(paiID) && b["titulo"] == "Escrever relatório" && b["concluida"] == true && b["concluida_em"] != nil
		}},
		{"the subtask", fmt.Sprintf("/tarefas/%d?usuario_id=1", subID), http.StatusOK, func(b map[string]any) bool {
			return b["id"] == float64(subID) && b["tarefa_pai_id"] == float64(paiID) && b["concluida"] == true
		}},
		{"another user's task", fmt.Sprintf("/tarefas/%d?usuario_id=2", paiID), http.StatusNotFound, func(b map[string]any) bool {
			return b["error"] == "tarefa não encontrada"
		}},
		{"no usuario_id", fmt.Sprintf("/tarefas/%d", paiID), http.StatusBadRequest, func(b map[string]any) bool {
			return b["error"] == "requisição inválida: parâmetro usuario_id é obrigatório"
		}},
		{"the user's tasks, newest first", "/tarefas?usuario_id=1", http.StatusOK, func(b map[string]any) bool {
			return slices.Equal(listed(b), []int{subID, paiID}) && b["proximo_antes_de"] == nil
		}},
		{"a page of one", "/tarefas?usuario_id=1&limite=1", http.StatusOK, func(b map[string]any) bool {
			return slices.Equal(listed(b), []int{subID}) && b["proximo_antes_de"] == float64(subID)
		}},
		{"the next page", fmt.Sprintf("/tarefas?usuario_id=1&limite=1&antes_de=%d", subID), http.StatusOK, func(b map[string]any) bool {
			return slices.Equal(listed(b), []int{paiID}) && b["proximo_antes_de"] == nil
		}},
		{"another user's list", "/tarefas?usuario_id=2", http.StatusOK, func(b map[string]any) bool {
			return slices.Equal(listed(b), []int{})
		}},
		{"a list without usuario_id", "/tarefas", http.StatusBadRequest, func(b map[string]any) bool {
			return b["error"] == "requisição inválida: parâmetro usuario_id é obrigatório"
		}},
	}
	for _, r := range reads {
		code, body := call(t, "GET", base+r.path, "")
		if code != r.want || !r.ok(body) {
			t.Fatalf("%s: GET %s = %d %v, want %d", r.name, r.path, code, body, r.want)
		}
	}
	return "Escrever relatório"
}

// listed returns the ids of a page of GET /tarefas, in order.
func listed(page map[string]any) []int {
	ts, ok := page["tarefas"].([]any)
	if !ok {
		return nil
	}
	ids := []int{}
	for _, t := range ts {
		m, _ := t.(map[string]any)
		id, _ := m["id"].(float64)
		ids = append(ids, int(id))
	}
	return ids
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
