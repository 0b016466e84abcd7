package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/testenv"
)

// The secrets a configuration can hold, each one distinctive, so that any
// output quoting one is caught.
const (
	pgSecret      = "pg-Secret-5f1c"
	amqpSecret    = "amqp-Secret-0b7e"
	nodeSecret    = "node-Secret-9d42"
	webhookSecret = "hook-Secret-77aa"
	smtpSecret    = "smtp-Secret-3c19"
	traceSecret   = "trace-Secret-18e6"
	jwtSecret     = "jwt-Secret-e2f0-long-enough-for-hs256!"
	adminToken    = "admin-Token-6a5d"
	wrongToken    = "wrong-Token-41b8"
	// pastedToken is a token written in auth.tokens where its hash belongs.
	pastedToken = "pasted-Token-c03f"
)

var secrets = []string{pgSecret, amqpSecret, nodeSecret, webhookSecret, smtpSecret, traceSecret, jwtSecret, adminToken, wrongToken, pastedToken}

// leaks fails t for each secret that out quotes, naming where out came
// from.
func leaks(t *testing.T, where, out string) {
	t.Helper()
	for _, s := range secrets {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, s) {
				t.Errorf("%s shows the secret %q: %s", where, s, line)
				break
			}
		}
	}
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// withPassword puts password into url's user information.
func withPassword(url, user, password string) string {
	return strings.Replace(url, "://"+user+"@", "://"+user+":"+password+"@", 1)
}

// secretSettings sets every secret a configuration holds: the broker and
// database URLs, the webhook's, the SMTP password, the JWT secret, and
// the admin token's hash, and the tracing collector's URL, which may
// carry credentials too.
func secretSettings(pgURL, amqpURL string) []string {
	return []string{
		"MOENDA_POSTGRES__URL=" + pgURL,
		"MOENDA_AMQP__URL=" + amqpURL,
		"MOENDA_HANDLERS__NOTIFICACOES__NOTIFIER=webhook",
		"MOENDA_HANDLERS__NOTIFICACOES__WEBHOOK__URL=http://127.0.0.1:" + strconv.Itoa(closedPort) + "/services/T0/B0/" + webhookSecret,
		"MOENDA_HANDLERS__EMAILS__SMTP__USERNAME=moenda",
		"MOENDA_HANDLERS__EMAILS__SMTP__PASSWORD=" + smtpSecret,
		"MOENDA_HANDLERS__LOCACOES__JWT_SECRET=" + jwtSecret,
		"MOENDA_TRACING__ENDPOINT=http://moenda:" + traceSecret + "@127.0.0.1:4318",
		"MOENDA_AUTH__ENABLED=true",
		"MOENDA_AUTH__TOKENS=admin:" + sha(adminToken) + ",publisher:" + sha(adminToken),
	}
}

// closedPort is a port nothing listens on: port 1 needs privileges to
// listen on.
const closedPort = 1

// No output of moenda shows a configured secret: config print, the
// validation errors of bad values set beside them, the errors of a start
// whose services do not answer, and a serving process's log lines, its
// readiness and admin answers, and the error of a webhook that does not
// answer, as logged and as carried by the dead letter.
func TestSecretsNeverReachOutput(t *testing.T) {
	pgURL := withPassword("postgres://postgres@127.0.0.1:5432/moenda?sslmode=disable", "postgres", pgSecret)
	amqpURL := "amqp://moenda:" + amqpSecret + "@127.0.0.1:5672/"

	t.Run("config print", func(t *testing.T) {
		code, stdout, stderr := run(t, secretSettings(pgURL, amqpURL), "--env", "test", "config", "print")
		if code != 0 {
			t.Fatalf("config print: %s", stderr)
		}
		for _, key := range []string{"postgres.url", "amqp.url", "handlers.notificacoes.webhook.url", "handlers.emails.smtp.password", "handlers.locacoes.jwt_secret", "tracing.endpoint"} {
			if !strings.Contains(stdout, key+" = ") {
				t.Errorf("config print does not show %s", key)
			}
		}
		leaks(t, "config print", stdout+stderr)
	})

	t.Run("validation errors", func(t *testing.T) {
		bad := [][]string{
			append(secretSettings(pgURL, amqpURL), "MOENDA_POSTGRES__MAX_CONNS=0", "MOENDA_AMQP__PREFETCH=0",
				"MOENDA_HANDLERS__EMAILS__SMTP__ADDR=nowhere", "MOENDA_HANDLERS__EMAILS__SMTP__USERNAME=",
				"MOENDA_HANDLERS__LOCACOES__JWT_SECRET="+jwtSecret[:20]),
			append(secretSettings("postgres://postgres:"+pgSecret+"@127.0.0.1:5432:5433/moenda", "amqp://moenda:"+amqpSecret+"@/"),
				"MOENDA_HANDLERS__NOTIFICACOES__WEBHOOK__URL=ftp://hooks.example/services/"+webhookSecret),
			append(secretSettings(pgURL, amqpURL),
				"MOENDA_AMQP__URLS=http://moenda:"+nodeSecret+"@mq1/,amqp://moenda:"+nodeSecret+"@mq2:5672/,amqp://moenda:"+nodeSecret+"@mq2:5672/"),
			append(secretSettings(pgURL, amqpURL), "MOENDA_AUTH__TOKENS=admin:"+pastedToken),
			append(secretSettings(pgURL, amqpURL), "MOENDA_TRACING__EXPORTER=otlp", "MOENDA_TRACING__ENDPOINT=otlp://moenda:"+traceSecret+"@collector"),
		}
		for i, environ := range bad {
			code, stdout, stderr := run(t, environ, "--env", "test", "config", "print")
			if code != 1 || stderr == "" {
				t.Fatalf("settings %d: config print exited %d: %s", i, code, stderr)
			}
			leaks(t, fmt.Sprintf("the validation errors of settings %d", i), stdout+stderr)
		}
	})

	t.Run("services that do not answer", func(t *testing.T) {
		db := testenv.EmptyPostgres(t)
		closedPG := withPassword(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/moenda?connect_timeout=2", closedPort), "postgres", pgSecret)
		closedMQ := fmt.Sprintf("amqp://moenda:%s@127.0.0.1:%d/", amqpSecret, closedPort)
		for name, environ := range map[string][]string{
			"postgres": secretSettings(closedPG, amqpURL),
			"rabbitmq": secretSettings(withPassword(db.URL, "postgres", pgSecret), closedMQ),
			"rabbitmq nodes": append(secretSettings(withPassword(db.URL, "postgres", pgSecret), amqpURL),
				fmt.Sprintf("MOENDA_AMQP__URLS=amqp://moenda:%s@127.0.0.1:%d/,amqp://moenda:%s@127.0.0.1:%d/", nodeSecret, closedPort, amqpSecret, closedPort)),
		} {
			for _, cmd := range [][]string{{"serve"}, {"migrate", "up"}} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var stdout, stderr strings.Builder
				code := Main(ctx, append([]string{"--env", "test"}, cmd...), environ, &stdout, &stderr)
				cancel()
				if code == 0 && cmd[0] == "serve" {
					t.Fatalf("%s: serve started without its %s", name, name)
				}
				leaks(t, fmt.Sprintf("%s with %s away", strings.Join(cmd, " "), name), stdout.String()+stderr.String())
			}
		}
	})

	t.Run("serve", func(t *testing.T) {
		db := testenv.EmptyPostgres(t)
		vhost := testenv.RabbitMQ(t)
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		// The first node does not answer; the second is the test's vhost.
		environ := append(secretSettings(withPassword(db.URL, "postgres", pgSecret), amqpURL),
			"MOENDA_AMQP__URLS=amqp://moenda:"+nodeSecret+"@127.0.0.1:"+strconv.Itoa(closedPort)+"/,"+vhost.URL,
			"MOENDA_HTTP__ADDR="+addr, "MOENDA_LOG__LEVEL=debug")
		ctx, cancel := context.WithCancel(context.Background())
		stdout, stderr := &testenv.Buffer{}, &testenv.Buffer{}
		done := make(chan int, 1)
		go func() { done <- Main(ctx, []string{"--env", "test", "serve"}, environ, stdout, stderr) }()
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				cancel()
				<-done
			}
		}
		defer stop()
		base := "http://" + addr
		request := func(method, path, token, body string) (int, string) {
			t.Helper()
			req, err := http.NewRequest(method, base+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(raw)
		}
		testenv.Eventually(t, 30*time.Second, "the process ready", func() bool {
			code, _ := request("GET", "/readyz", "", "")
			return code == http.StatusOK
		})
		dead := testenv.Consume(t, vhost.URL, "notificacoes.tarefas-concluidas.dlq")
		var answers strings.Builder
		for _, c := range []struct{ method, path, token, body string }{
			{"GET", "/readyz", "", ""},
			{"GET", "/v1/catalog", "", ""},
			{"GET", "/metrics", "", ""},
			{"GET", "/v1/admin/outbox/parked", adminToken, ""},
			{"GET", "/v1/admin/outbox/parked", wrongToken, ""},
			{"POST", "/v1/admin/outbox/republish", wrongToken, "{}"},
		} {
			code, body := request(c.method, c.path, c.token, c.body)
			fmt.Fprintf(&answers, "%s %s: %d %s\n", c.method, c.path, code, body)
		}
		// A concluded task notifies through the webhook, which does not
		// answer: the failure is logged, retried, then dead-lettered
		// with its error.
		code, body := request("POST", "/tarefas", adminToken, `{"usuario_id": 7, "titulo": "Segredo"}`)
		if code != http.StatusCreated {
			t.Fatalf("POST /tarefas = %d %s", code, body)
		}
		var id int
		if _, err := fmt.Sscanf(body[strings.Index(body, `"id":`):], `"id":%d`, &id); err != nil {
			t.Fatalf("POST /tarefas: %s: %v", body, err)
		}
		if code, body := request("PATCH", fmt.Sprintf("/tarefas/%d/concluir", id), adminToken, `{"usuario_id": 7}`); code != http.StatusOK {
			t.Fatalf("PATCH = %d %s", code, body)
		}
		testenv.Eventually(t, 30*time.Second, "the notification's dead letter", func() bool { return len(dead()) == 1 })
		// /readyz names what does not answer: RabbitMQ refusing this
		// vhost on every node, then PostgreSQL refusing the database.
		unready := func(what, want string, restore func()) {
			t.Helper()
			testenv.Eventually(t, 30*time.Second, "/readyz telling that "+what, func() bool {
				code, body := request("GET", "/readyz", "", "")
				if code == http.StatusServiceUnavailable && strings.Contains(body, want) {
					fmt.Fprintf(&answers, "GET /readyz while %s: %d %s\n", what, code, body)
					return true
				}
				return false
			})
			restore()
			testenv.Eventually(t, 30*time.Second, "the process ready again", func() bool {
				code, _ := request("GET", "/readyz", "", "")
				return code == http.StatusOK
			})
		}
		testenv.Rabbitmqctl(t, "clear_permissions", "-p", vhost.Name, "guest")
		testenv.Rabbitmqctl(t, "close_all_connections", "--vhost", vhost.Name, "--limit", "1000", "the test takes the vhost away")
		unready("RabbitMQ refuses the vhost", "no access to this vhost", func() {
			testenv.Rabbitmqctl(t, "set_permissions", "-p", vhost.Name, "guest", ".*", ".*", ".*")
		})
		bg := context.Background()
		var name string
		if err := db.Pool.QueryRow(bg, `SELECT current_database()`).Scan(&name); err != nil {
			t.Fatal(err)
		}
		// A database's connections are turned away from another one.
		other, err := neturl.Parse(db.URL)
		if err != nil {
			t.Fatal(err)
		}
		other.Path = "/postgres"
		conn, err := pgx.Connect(bg, other.String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(bg)
		allow := func(on bool) {
			if _, err := conn.Exec(bg, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, pgx.Identifier{name}.Sanitize(), on)); err != nil {
				t.Fatal(err)
			}
		}
		allow(false)
		if _, err := conn.Exec(bg, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
			t.Fatal(err)
		}
		unready("PostgreSQL refuses the database", "not currently accepting connections", func() { allow(true) })
		stop()
		if !strings.Contains(stderr.String(), "webhook") {
			t.Fatalf("no log line tells of the webhook's failure:\n%s", stderr.String())
		}
		leaks(t, "serve's log", stdout.String()+stderr.String())
		leaks(t, "the HTTP answers", answers.String())
		d := dead()[0]
		leaks(t, "the dead letter's headers", fmt.Sprint(d.Headers))
	})
}
