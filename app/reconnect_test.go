// These tests take RabbitMQ away under a running platform. Those that
// restart the node run only with TEST_BROKER_RESTART=1, alone: .ci/test
// runs them in a step of their own.

package app

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

func TestReadinessReportsBrokerDown(t *testing.T) {
	p, vhost := startAMQP(t)
	if code, body := call(t, "GET", p.base+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("readyz = %d %v", code, body)
	}
	// With its vhost gone, RabbitMQ refuses moenda's connections.
	testenv.Rabbitmqctl(t, "delete_vhost", vhost.Name)
	t.Cleanup(func() { testenv.Rabbitmqctl(t, "add_vhost", vhost.Name) }) // for the deferred delete
	var code int
	var body map[string]any
	testenv.Eventually(t, 10*time.Second, "readyz to report the broker", func() bool {
		code, body = call(t, "GET", p.base+"/readyz", "")
		return code == http.StatusServiceUnavailable
	})
	checks, _ := body["checks"].(map[string]any)
	if checks["broker"] == "ok" || checks["postgres"] != "ok" {
		t.Fatalf("readyz with the broker gone = %d %v", code, body)
	}
}

// conclude creates and concludes a task titled titulo.
func conclude(t *testing.T, base, titulo string) {
	t.Helper()
	code, task := call(t, "POST", base+"/tarefas", fmt.Sprintf(`{"usuario_id": 3, "titulo": %q}`, titulo))
	if code != http.StatusCreated {
		t.Fatalf("POST /tarefas = %d %v", code, task)
	}
	if code, body := call(t, "PATCH", fmt.Sprintf("%s/tarefas/%d/concluir", base, int(task["id"].(float64))), `{"usuario_id": 3}`); code != http.StatusOK {
		t.Fatalf("PATCH = %d %v", code, body)
	}
}

func waitNotified(t *testing.T, p running, titles ...string) {
	t.Helper()
	for _, titulo := range titles {
		want := fmt.Sprintf("Tarefa '%s' foi concluída pelo usuário 3", titulo)
		testenv.Eventually(t, 60*time.Second, want, func() bool { return strings.Contains(p.logs.String(), want) })
	}
}

func TestNotificationsSurviveDroppedConnections(t *testing.T) {
	p, vhost := startAMQP(t)
	conclude(t, p.base, "antes")
	waitNotified(t, p, "antes")
	testenv.Rabbitmqctl(t, "close_all_connections", "--vhost", vhost.Name, "test: the broker drops every connection")
	conclude(t, p.base, "depois")
	waitNotified(t, p, "depois")
}

// TestNotificationsSurviveBrokerRestart stops and starts the RabbitMQ node,
// so it runs only where nothing else uses the broker meanwhile: .ci/test
// runs it alone with TEST_BROKER_RESTART=1.
func TestNotificationsSurviveBrokerRestart(t *testing.T) {
	if os.Getenv("TEST_BROKER_RESTART") != "1" {
		t.Skip("restarts the RabbitMQ node; set TEST_BROKER_RESTART=1 where no other test uses it (.ci/test does)")
	}
	p, _ := startAMQP(t)
	conclude(t, p.base, "antes")
	waitNotified(t, p, "antes")
	testenv.Rabbitmqctl(t, "stop_app")
	t.Cleanup(func() { testenv.Rabbitmqctl(t, "start_app"); testenv.Rabbitmqctl(t, "await_startup") })
	conclude(t, p.base, "durante") // answered while the broker is down: the outbox holds the event
	testenv.Rabbitmqctl(t, "start_app")
	testenv.Rabbitmqctl(t, "await_startup")
	conclude(t, p.base, "depois")
	waitNotified(t, p, "durante", "depois")
}

// While a memory alarm blocks publishing, the API still commits, the
// relay waits, and /readyz says degraded with the broker's reason while
// staying ready; once the alarm ends the event arrives. It sets the node's
// memory watermark, so it runs alone with TEST_BROKER_RESTART=1.
func TestReadinessSaysDegradedWhileAnAlarmBlocksTheRelay(t *testing.T) {
	if os.Getenv("TEST_BROKER_RESTART") != "1" {
		t.Skip("sets the RabbitMQ node's memory alarm; set TEST_BROKER_RESTART=1 where no other test uses it (.ci/test does)")
	}
	p, _ := startAMQP(t)
	was := strings.TrimSpace(testenv.Rabbitmqctl(t, "eval", "vm_memory_monitor:get_vm_memory_high_watermark()."))
	testenv.Rabbitmqctl(t, "set_vm_memory_high_watermark", "0.0001")
	restored := false
	restore := func() {
		if !restored {
			restored = true
			testenv.Rabbitmqctl(t, "set_vm_memory_high_watermark", was)
		}
	}
	t.Cleanup(restore)
	conclude(t, p.base, "durante")
	testenv.Eventually(t, 20*time.Second, "/readyz to say degraded", func() bool {
		code, body := call(t, "GET", p.base+"/readyz", "")
		checks, _ := body["checks"].(map[string]any)
		blocked, _ := checks["broker_publishing"].(string)
		return code == http.StatusOK && body["status"] == "degraded" && strings.Contains(blocked, "blocked by RabbitMQ")
	})
	restore()
	waitNotified(t, p, "durante")
	testenv.Eventually(t, 20*time.Second, "/readyz ready again", func() bool {
		code, body := call(t, "GET", p.base+"/readyz", "")
		return code == http.StatusOK && body["status"] == "ready"
	})
}
