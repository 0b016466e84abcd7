// These tests take RabbitMQ away under a running platform. Those that
// restart the node run only with TEST_BROKER_RESTART=1, alone: .ci/test
// runs them in a step of their own.

package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
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

// deadNode is base with the address of a local port nothing listens on:
// a node that refuses connections.
func deadNode(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = testenv.ClosedAddr(t)
	return u.String()
}

// startOnNodes starts the platform in the test environment on a fresh
// database, with amqp.urls naming a dead node first, then the fresh vhost;
// amqp.url names another dead node, which amqp.urls replaces.
func startOnNodes(t *testing.T) running {
	t.Helper()
	db := testenv.EmptyPostgres(t)
	vhost := testenv.RabbitMQ(t)
	return start(t, "test", "MOENDA_POSTGRES__URL="+db.URL, "MOENDA_AMQP__URL="+deadNode(t, vhost.URL),
		"MOENDA_AMQP__URLS="+deadNode(t, vhost.URL)+","+vhost.URL)
}

// With amqp.urls naming a dead node first, the platform starts, is ready,
// and delivers an event end to end through the second.
func TestNotificationsOnTheSecondNode(t *testing.T) {
	p := startOnNodes(t)
	if code, body := call(t, "GET", p.base+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("readyz = %d %v", code, body)
	}
	conclude(t, p.base, "segundo nó")
	waitNotified(t, p, "segundo nó")
}

// TestNotificationsSurviveBrokerRestartWithNodeList restarts the RabbitMQ
// node under a steady load while amqp.urls names a dead node before it:
// every connection cycles through both until the node is back, and every
// task concluded before, during and after the restart is notified. It
// runs alone with TEST_BROKER_RESTART=1, as the other restart tests.
func TestNotificationsSurviveBrokerRestartWithNodeList(t *testing.T) {
	if os.Getenv("TEST_BROKER_RESTART") != "1" {
		t.Skip("restarts the RabbitMQ node; set TEST_BROKER_RESTART=1 where no other test uses it (.ci/test does)")
	}
	p := startOnNodes(t)

	var mu sync.Mutex
	var titles []string
	var failures []error
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			titulo := fmt.Sprintf("carga %d", i)
			err := concludeErr(p.base, titulo)
			mu.Lock()
			if err != nil {
				failures = append(failures, err)
			} else {
				titles = append(titles, titulo)
			}
			mu.Unlock()
		}
	}()
	concluded := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(titles)
	}

	time.Sleep(2 * time.Second)
	before := concluded()
	testenv.Rabbitmqctl(t, "stop_app")
	t.Cleanup(func() { testenv.Rabbitmqctl(t, "start_app"); testenv.Rabbitmqctl(t, "await_startup") })
	time.Sleep(3 * time.Second)
	during := concluded() - before
	testenv.Rabbitmqctl(t, "start_app")
	testenv.Rabbitmqctl(t, "await_startup")
	time.Sleep(2 * time.Second)
	close(stop)
	<-done
	if len(failures) > 0 {
		t.Fatalf("%d requests failed, the first: %v", len(failures), failures[0])
	}
	if before == 0 || during == 0 {
		t.Fatalf("no load: %d tasks concluded before the stop, %d while the node was down", before, during)
	}

	missing := map[string]bool{}
	for _, titulo := range titles {
		missing[titulo] = true
	}
	testenv.Eventually(t, 90*time.Second, "every concluded task notified", func() bool {
		logs := p.logs.String()
		for titulo := range missing {
			if strings.Contains(logs, fmt.Sprintf("Tarefa '%s' foi concluída pelo usuário 3", titulo)) {
				delete(missing, titulo)
			}
		}
		return len(missing) == 0
	})
	t.Logf("%d tasks concluded (%d before the stop, %d while the node was down), all notified: 0 lost", len(titles), before, during)
}

// concludeErr is conclude for a goroutine: it reports what failed instead
// of failing the test.
func concludeErr(base, titulo string) error {
	send := func(method, url, body string) (map[string]any, error) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return nil, fmt.Errorf("%s %s: %d, body not JSON: %w", method, url, resp.StatusCode, err)
		}
		if resp.StatusCode >= 300 {
			return nil, fmt.Errorf("%s %s: %d %v", method, url, resp.StatusCode, out)
		}
		return out, nil
	}
	task, err := send("POST", base+"/tarefas", fmt.Sprintf(`{"usuario_id": 3, "titulo": %q}`, titulo))
	if err != nil {
		return err
	}
	id, _ := task["id"].(float64)
	_, err = send("PATCH", fmt.Sprintf("%s/tarefas/%d/concluir", base, int(id)), `{"usuario_id": 3}`)
	return err
}
