package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// bearer is the header carrying token, or none.
func bearer(token string) map[string]string {
	if token == "" {
		return nil
	}
	return map[string]string{"Authorization": "Bearer " + token}
}

// With auth on: publishing needs a publisher token, administration an
// admin token; a refused request writes nothing; reads stay open, and a
// plugin with its own authentication is left to it.
func TestTokensGuardWritesAndAdministration(t *testing.T) {
	const publisher, admin = "pub-7c1e0f", "adm-93b2aa"
	p, _ := startAMQP(t, "MOENDA_AUTH__ENABLED=true", "MOENDA_AUTH__TOKENS=publisher:"+hashOf(publisher)+",admin:"+hashOf(admin))
	outboxRows := func() int {
		var n int
		if err := p.pool.QueryRow(context.Background(), "SELECT count(*) FROM watermill_outbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	event := `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":1,"usuario_id":1,"titulo":""}}`
	for _, tt := range []struct {
		name, method, path, token, body string
		code                            int
	}{
		{"publish without a token", "POST", "/v1/events", "", event, 401},
		{"publish with an unknown token", "POST", "/v1/events", "guess", event, 401},
		{"publish with an admin token", "POST", "/v1/events", admin, event, 403},
		{"administer without a token", "GET", "/v1/admin/outbox/parked", "", "", 401},
		{"administer as a publisher", "GET", "/v1/admin/outbox/parked", publisher, "", 403},
		{"a plugin's write without a token", "POST", "/tarefas", "", `{"usuario_id":1,"titulo":"x"}`, 401},
	} {
		if resp, _ := send(t, tt.method, p.base+tt.path, tt.body, bearer(tt.token)); resp.StatusCode != tt.code {
			t.Errorf("%s: %d, want %d", tt.name, resp.StatusCode, tt.code)
		} else if tt.code == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: a 401 without WWW-Authenticate", tt.name)
		}
	}
	if n := outboxRows(); n != 0 {
		t.Fatalf("%d outbox rows written by refused requests", n)
	}
	for _, tt := range []struct {
		name, method, path, token, body string
		code                            int
	}{
		{"publish as a publisher", "POST", "/v1/events", publisher, event, 202},
		{"a plugin's write as a publisher", "POST", "/tarefas", publisher, `{"usuario_id":1,"titulo":"x"}`, 201},
		{"a plugin's read", "GET", "/tarefas?usuario_id=1", "", "", 200},
		{"the catalog", "GET", "/v1/catalog", "", "", 200},
		{"readiness", "GET", "/readyz", "", "", 200},
		{"administer as an admin", "GET", "/v1/admin/outbox/parked", admin, "", 200},
		{"a plugin with its own users", "POST", "/auth/register", "", `{"nome":"Ana","email":"ana@example.com","cpf":"52998224725","senha":"segredo123"}`, 201},
	} {
		if resp, raw := send(t, tt.method, p.base+tt.path, tt.body, bearer(tt.token)); resp.StatusCode != tt.code {
			t.Errorf("%s: %d %s, want %d", tt.name, resp.StatusCode, raw, tt.code)
		}
	}
	if n := outboxRows(); n != 1 { // creating a tarefa raises nothing
		t.Errorf("%d outbox rows after the accepted writes, want 1", n)
	}
}

func TestAuthConfig(t *testing.T) {
	good := "publisher:" + hashOf("x")
	for _, tt := range []struct {
		name string
		auth AuthConfig
		addr string
		want string
	}{
		{"off on loopback", AuthConfig{}, "127.0.0.1:8080", ""},
		{"off on localhost", AuthConfig{}, "localhost:8080", ""},
		{"off on every address", AuthConfig{}, "0.0.0.0:8080", "listens beyond this machine while auth.enabled is false"},
		{"off on every address, said so", AuthConfig{AllowPublicWithoutAuth: true}, "0.0.0.0:8080", ""},
		{"on", AuthConfig{Enabled: true, Tokens: []string{good}}, ":8080", ""},
		{"an unknown role", AuthConfig{Enabled: true, Tokens: []string{good, "root:" + hashOf("x")}}, ":8080", "auth.tokens[1] must be ROLE:SHA256"},
		{"a token in clear", AuthConfig{Enabled: true, Tokens: []string{"publisher:hunter2"}}, ":8080", "auth.tokens[0]: the value after publisher: is not a SHA-256 in hex (64 hex digits, not 7 characters)"},
		{"named", AuthConfig{Enabled: true, Tokens: []string{"admin:ana.souza:" + hashOf("x"), "viewer:" + hashOf("y")}}, ":8080", ""},
		{"a name that is not plain", AuthConfig{Enabled: true, Tokens: []string{"admin:ana souza:" + hashOf("x")}}, ":8080", "auth.tokens[0]: the name must be 1 to 128 characters"},
		{"too many parts", AuthConfig{Enabled: true, Tokens: []string{"admin:a:b:" + hashOf("x")}}, ":8080", "auth.tokens[0] must be ROLE:SHA256 or ROLE:NAME:SHA256"},
	} {
		err := tt.auth.validate(tt.addr)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// A viewer reads the administration endpoints and changes nothing; an
// admin does both; /v1/admin/me says who each is and what it may do.
func TestViewersReadAndAdminsAct(t *testing.T) {
	const viewer, admin = "view-41aa09", "adm-5d17c2"
	p, _ := startAMQP(t, "MOENDA_AUTH__ENABLED=true", "MOENDA_AUTH__TOKENS=viewer:"+hashOf(viewer)+",admin:ana:"+hashOf(admin))
	for _, tt := range []struct {
		name, method, path, token string
		code                      int
	}{
		{"a viewer reads", "GET", "/v1/admin/outbox/parked", viewer, 200},
		{"a viewer acts", "POST", "/v1/admin/outbox/republish", viewer, 403},
		{"a viewer edits a failure", "POST", "/v1/admin/failures/1/edit", viewer, 403},
		{"an admin reads", "GET", "/v1/admin/outbox/parked", admin, 200},
		{"an admin acts", "POST", "/v1/admin/outbox/republish", admin, 200},
		{"a viewer publishes", "POST", "/v1/events", viewer, 403},
	} {
		if resp, raw := send(t, tt.method, p.base+tt.path, "", bearer(tt.token)); resp.StatusCode != tt.code {
			t.Errorf("%s: %d %s, want %d", tt.name, resp.StatusCode, raw, tt.code)
		}
	}
	for token, want := range map[string]string{
		viewer: `{"actions":[],"auth":true,"name":"viewer-` + hashOf(viewer)[:8] + `","role":"viewer"}`,
		admin:  `{"actions":["failures.archive","failures.comment","failures.delete","failures.unarchive","outbox.republish","redrive.cancel","redrive.pause","redrive.resume","redrive.start"],"auth":true,"name":"ana","role":"admin"}`,
	} {
		if resp, raw := send(t, "GET", p.base+"/v1/admin/me", "", bearer(token)); resp.StatusCode != 200 || strings.TrimSpace(string(raw)) != want {
			t.Errorf("GET /v1/admin/me = %d %s, want %s", resp.StatusCode, raw, want)
		}
	}
	if !strings.Contains(p.logs.String(), "the token of viewer-"+hashOf(viewer)[:8]+" lacks the admin role") {
		t.Errorf("the refusal is not logged with the caller's name:\n%s", p.logs.String())
	}
}
