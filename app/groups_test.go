package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// An admin notes the cause on a group, which its groups then show; a
// viewer's note is refused; each is in the audit. The command line does
// the same as cli:$USER.
func TestAGroupTakesAComment(t *testing.T) {
	const publisher, viewer, admin = "pub-3a91c4", "view-0d52e8", "adm-77b1f0"
	p, _ := startAMQP(t, "MOENDA_FAILURES__ENABLED=true", "MOENDA_FAILURES__LINGER=20ms", "MOENDA_AUTH__ENABLED=true",
		"MOENDA_AUTH__TOKENS=publisher:"+hashOf(publisher)+",viewer:vera:"+hashOf(viewer)+",admin:ana:"+hashOf(admin))
	poison(t, p, 3, publisher)
	ledgerHolds(t, p, 3, viewer)
	groups := func(query string) []map[string]any {
		t.Helper()
		code, body := ask(t, "GET", p.base+"/v1/admin/failures/groups"+query, viewer)
		if code != http.StatusOK {
			t.Fatalf("GET groups%s = %d %v", query, code, body)
		}
		var out []map[string]any
		for _, g := range body["groups"].([]any) {
			out = append(out, g.(map[string]any))
		}
		return out
	}
	gs := groups("")
	if len(gs) != 1 || gs[0]["comment"] != nil || gs[0]["key"] != gs[0]["fingerprint"] {
		t.Fatalf("groups = %v, want one, its key its fingerprint, without a comment", gs)
	}
	fp := gs[0]["fingerprint"].(string)
	path := "/v1/admin/failures/groups/" + fp + "/comment"
	long := strings.Repeat("é", 2001)
	for _, c := range []struct {
		name, token, path, body string
		code                    int
		want                    string
	}{
		{"a viewer notes", viewer, path, `{"comment":"mine"}`, http.StatusForbidden, `"the token of vera lacks the admin role"`},
		{"an admin notes", admin, path, `{"comment":"  stock service down; INC-231 "}`, http.StatusOK, `"text":"stock service down; INC-231"`},
		{"too long", admin, path, `{"comment":"` + long + `"}`, http.StatusBadRequest, `"a comment is at most 2000 characters, this one is 2001`},
		{"no comment", admin, path, `{}`, http.StatusBadRequest, `"comment is required`},
		{"a misspelt field", admin, path, `{"coment":"x"}`, http.StatusBadRequest, `coment`},
		{"a group with no failures", admin, "/v1/admin/failures/groups/0000000000000000/comment", `{"comment":"x"}`, http.StatusNotFound, `"no failure of group 0000000000000000 in the ledger`},
		{"not a fingerprint", admin, "/v1/admin/failures/groups/%00x/comment", `{"comment":"x"}`, http.StatusBadRequest, `"group \"\\x00x\" is not a fingerprint: 16 hex digits`},
	} {
		resp, raw := send(t, "PUT", p.base+c.path, c.body, bearer(c.token))
		if resp.StatusCode != c.code || !strings.Contains(string(raw), c.want) {
			t.Errorf("%s: PUT %s = %d %s, want %d %s", c.name, c.path, resp.StatusCode, raw, c.code, c.want)
		}
	}
	if c, _ := groups("")[0]["comment"].(map[string]any); c["text"] != "stock service down; INC-231" || c["by"] != "ana" || c["at"] == "" {
		t.Errorf("the group's comment = %v", c)
	}

	const queue = "notificacoes.tarefas-concluidas"
	for by, key := range map[string]string{"queue": queue, "event_type": "tarefa.concluida.v1", "reason": "permanent", "cause": fp} {
		gs := groups("?by=" + by + "&queue=" + queue)
		if len(gs) != 1 || gs[0]["key"] != key || gs[0]["count"] != 3.0 || fmt.Sprint(gs[0]["queues"]) != "["+queue+"]" ||
			fmt.Sprint(gs[0]["event_names"]) != "[tarefa.concluida.v1]" || (gs[0]["comment"] == nil) != (by != "cause") {
			t.Errorf("groups by %s = %v, want one of 3 keyed %s, a comment on the cause's alone", by, gs, key)
		}
	}
	if code, body := ask(t, "GET", p.base+"/v1/admin/failures/groups?by=handler", viewer); code != http.StatusBadRequest ||
		body["error"] != `by must be cause, queue, event_type or reason, got "handler"` {
		t.Errorf("groups by handler = %d %v", code, body)
	}

	environ := []string{"MOENDA_POSTGRES__URL=" + p.cfg.Postgres.URL, "USER=tester"}
	if code, out, stderr := run(t, environ, "--env", "test", "failures", "comment", fp, "--text", "back at 10:40; re-drive"); code != 0 || out != "group "+fp+": comment set by cli:tester\n" {
		t.Errorf("failures comment = %d %q %s", code, out, stderr)
	}
	if code, out, stderr := run(t, environ, "--env", "test", "failures", "groups"); code != 0 || !strings.Contains(out, "COMMENT") || !strings.Contains(out, "back at 10:40; re-drive (cli:tester)") {
		t.Errorf("failures groups = %d %q %s", code, out, stderr)
	}
	for by, want := range map[string][]string{"queue": {"QUEUE", queue}, "event_type": {"TYPE", "tarefa.concluida.v1"}, "reason": {"REASON", "permanent"}} {
		code, out, stderr := run(t, environ, "--env", "test", "failures", "groups", "--by", by)
		if code != 0 || !strings.HasPrefix(out, want[0]+" ") || !strings.Contains(out, want[1]+" ") || strings.Contains(out, "COMMENT") {
			t.Errorf("failures groups --by %s = %d %q %s", by, code, out, stderr)
		}
	}
	if code, _, stderr := run(t, environ, "--env", "test", "failures", "groups", "--by", "handler"); code != 1 || !strings.Contains(stderr, "by must be cause, queue, event_type or reason") {
		t.Errorf("failures groups --by handler = %d %s", code, stderr)
	}
	if code, _, stderr := run(t, environ, "--env", "test", "failures", "comment", fp); code != 2 || !strings.Contains(stderr, "--text TEXT is required") {
		t.Errorf("failures comment without --text = %d %s", code, stderr)
	}
	if code, out, stderr := run(t, environ, "--env", "test", "failures", "comment", fp, "--text", ""); code != 0 || out != "group "+fp+": comment cleared\n" {
		t.Errorf("failures comment --text '' = %d %q %s", code, out, stderr)
	}
	code, out, stderr := run(t, environ, "--env", "test", "failures", "groups", "--json")
	var g struct {
		Key     string          `json:"key"`
		Comment json.RawMessage `json:"comment"`
	}
	if err := json.Unmarshal([]byte(out), &g); code != 0 || err != nil || g.Key != fp || string(g.Comment) != "null" {
		t.Errorf("failures groups --json after clearing = %d %q %s (%v)", code, out, stderr, err)
	}

	code, body := ask(t, "GET", p.base+"/v1/admin/audit", viewer)
	var seen []string
	for _, e := range body["entries"].([]any) {
		e := e.(map[string]any)
		if sel, _ := e["selection"].(map[string]any); e["action"] == "failures.comment" && sel["group"] == nil {
			t.Errorf("an entry without its group: %v", e)
		}
		detail, _ := e["detail"].(map[string]any)
		seen = append(seen, fmt.Sprint(e["actor"], " ", e["action"], " ", e["outcome"], " ", detail["comment"]))
	}
	want := []string{
		"cli:tester failures.comment done ",
		"cli:tester failures.comment done back at 10:40; re-drive",
		"ana failures.comment failed <nil>",
		"ana failures.comment failed <nil>",
		"ana failures.comment failed <nil>",
		"ana failures.comment done stock service down; INC-231",
		"vera PUT " + path + " refused <nil>",
	}
	if code != http.StatusOK || strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("GET /v1/admin/audit = %d:\n%s\nwant (a body with no comment, or a misspelt field, is refused before it is an action):\n%s", code, strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
