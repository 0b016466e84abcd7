package app

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

// failureBody is the body failure id holds, as GET /v1/admin/failures/{id}
// gives it, decoded into a JSON object.
func failureBody(t *testing.T, f map[string]any) map[string]any {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(fmt.Sprint(f["body"]))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("the failure's body is not a JSON object: %s", raw)
	}
	return body
}

// edited is e with its payload replaced by payload, as JSON.
func edited(t *testing.T, e map[string]any, payload any) string {
	t.Helper()
	out := map[string]any{}
	for k, v := range e {
		out[k] = v
	}
	out["payload"] = payload
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An edit that does not decode as its queue reads it, or that names
// another event, is refused with the decoder's words and changes nothing;
// a good one is kept beside its original, linked both ways, re-driven to
// the queue that failed, and handled there once. The audit holds each
// attempt; the command line edits over the same code.
func TestAnEditIsRedrivenAndKeptBesideItsOriginal(t *testing.T) {
	s := newProbeStack(t)
	s.extra = append(s.extra, "MOENDA_FAILURES__ENABLED=true", "MOENDA_FAILURES__LINGER=20ms", "MOENDA_FAILURES__ALLOW_EDIT=true")
	p := s.start(t)
	id := publish(t, p, "probe.slow.hit.v1", probeOrder{Fail: -1})
	fid := fmt.Sprint(ledgerHolds(t, p, 1, "")[0]["id"])
	path := p.base + "/v1/admin/failures/" + fid
	_, orig := call(t, "GET", path, "")
	envelope := failureBody(t, orig)

	other := edited(t, envelope, probeOrder{})
	other = strings.Replace(other, id, "00000000-0000-4000-8000-000000000001", 1)
	for _, c := range []struct{ name, body, want string }{
		{"not JSON", `{"event_id":`, "the edit does not decode as queue probe.slow reads it (envelope moenda): decode envelope: unexpected end of JSON input"},
		{"no event name", `{"event_id":"` + id + `","occurred_at":"2026-12-01T10:00:00Z","payload":{}}`, "invalid envelope: event_name is missing"},
		{"another event", other, "the edit's event id 00000000-0000-4000-8000-000000000001 is not the failure's, " + id},
	} {
		code, body := call(t, "POST", path+"/edit", c.body)
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["error"]), c.want) {
			t.Errorf("%s: POST %s/edit = %d %v, want 400 %q", c.name, path, code, body, c.want)
		}
	}
	if code, body := call(t, "POST", p.base+"/v1/admin/failures/999999/edit", edited(t, envelope, probeOrder{})); code != http.StatusNotFound {
		t.Errorf("an edit of no failure = %d %v, want 404", code, body)
	}
	if _, now := call(t, "GET", path, ""); now["status"] != "unresolved" || now["edited_by"] != 0.0 || now["body"] != orig["body"] {
		t.Errorf("the failure after refused edits = %v, want it unchanged", now)
	}
	if _, body := call(t, "GET", p.base+"/v1/admin/failures?status=edited", ""); len(body["failures"].([]any)) != 0 {
		t.Errorf("edited failures after refused edits: %v", body)
	}

	code, body := call(t, "POST", path+"/edit", edited(t, envelope, probeOrder{}))
	if code != http.StatusCreated || body["edit_of"] != orig["id"] || body["edit_id"] == 0.0 || body["redrive_id"] == 0.0 {
		t.Fatalf("POST %s/edit = %d %v, want 201 with the edit and its re-drive", path, code, body)
	}
	editPath := fmt.Sprintf("%s/v1/admin/failures/%v", p.base, body["edit_id"])
	rdPath := fmt.Sprintf("%s/v1/admin/redrives/%v", p.base, body["redrive_id"])
	var rd map[string]any
	testenv.Eventually(t, 60*time.Second, "the edit's re-drive done", func() bool {
		_, rd = call(t, "GET", rdPath, "")
		return rd["state"] == "done"
	})
	if c := rd["counters"].(map[string]any); c["handled"] != 1.0 || c["planned"] != 1.0 {
		t.Errorf("the edit's re-drive = %v, want its one failure handled", rd)
	}
	if n := s.effects(t, id); n != 1 {
		t.Errorf("event %s has %d effects after its edit was re-driven, want 1", id, n)
	}
	_, was := call(t, "GET", path, "")
	_, edit := call(t, "GET", editPath, "")
	if was["status"] != "edited" || was["edited_by"] != body["edit_id"] || was["body"] != orig["body"] {
		t.Errorf("the original after its edit = %v", was)
	}
	if edit["status"] != "resolved" || edit["edit_of"] != orig["id"] || edit["event_id"] != id || failureBody(t, edit)["payload"].(map[string]any)["fail"] != 0.0 {
		t.Errorf("the edit = %v", edit)
	}
	if code, body := call(t, "POST", path+"/edit", edited(t, envelope, probeOrder{})); code != http.StatusConflict ||
		!strings.Contains(fmt.Sprint(body["error"]), fmt.Sprintf("was edited already: its edit is failure %v", edit["id"])) {
		t.Errorf("a second edit of the original = %d %v, want 409 naming its edit", code, body)
	}
	_, audit := call(t, "GET", p.base+"/v1/admin/audit?action=failures.edit", "")
	var seen []string
	for _, e := range audit["entries"].([]any) {
		e := e.(map[string]any)
		seen = append(seen, fmt.Sprint(e["outcome"], " ", e["selection"].(map[string]any)["id"]))
	}
	want := []string{"failed " + fid, "done " + fid, "failed 999999", "failed " + fid, "failed " + fid, "failed " + fid}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Errorf("the audit of the edits: %v, want %v", seen, want)
	}
	if d := audit["entries"].([]any)[1].(map[string]any)["detail"].(map[string]any); d["edit_id"] != body["edit_id"] || d["redrive_id"] != body["redrive_id"] {
		t.Errorf("the audit of the edit holds %v, want its edit and re-drive", d)
	}

	// The command line, over the same code.
	second := publish(t, p, "probe.slow.hit.v1", probeOrder{Fail: -1})
	var fid2 string
	testenv.Eventually(t, 60*time.Second, "the second failure in the ledger", func() bool {
		_, body := call(t, "GET", p.base+"/v1/admin/failures?event_id="+second, "")
		fs, _ := body["failures"].([]any)
		if len(fs) == 1 {
			fid2 = fmt.Sprint(fs[0].(map[string]any)["id"])
		}
		return fid2 != ""
	})
	_, f2 := call(t, "GET", p.base+"/v1/admin/failures/"+fid2, "")
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(edited(t, failureBody(t, f2), probeOrder{})), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"event_id":"`+second+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := append(s.environ(), "USER=tester")
	if code, _, stderr := run(t, environ, "--env", "test", "failures", "edit", fid2, "--body", bad, "--yes"); code != 1 || !strings.Contains(stderr, "event_name is missing") {
		t.Errorf("failures edit of a bad body = %d %s", code, stderr)
	}
	if code, _, stderr := run(t, environ, "--env", "test", "failures", "edit", fid2, "--body", good); code != 1 || !strings.Contains(stderr, "add --yes") {
		t.Errorf("failures edit without --yes = %d %s", code, stderr)
	}
	code, out, stderr := run(t, environ, "--env", "test", "failures", "edit", fid2, "--body", good, "--yes")
	if code != 0 || !strings.Contains(out, "failure "+fid2+" edited as failure ") {
		t.Fatalf("failures edit --yes = %d %q %s", code, out, stderr)
	}
	testenv.Eventually(t, 60*time.Second, "the edit made on the command line handled", func() bool { return s.effects(t, second) == 1 })
	if code, out, stderr := run(t, environ, "--env", "test", "failures", "show", fid2); code != 0 || !strings.Contains(out, "edited by:") || !strings.Contains(out, "edited") {
		t.Errorf("failures show %s = %d %q %s", fid2, code, out, stderr)
	}
	if code, out, stderr := run(t, environ, "--env", "test", "audit", "--action", "failures.edit", "--actor", "cli:tester"); code != 0 || strings.Count(out, "cli:tester") != 2 {
		t.Errorf("audit of the command line's edits = %d %q %s, want the failed one and the done one", code, out, stderr)
	}
	if code, _, stderr := run(t, append(environ, "MOENDA_FAILURES__ALLOW_EDIT=false"), "--env", "test", "failures", "edit", fid2, "--body", good, "--yes"); code != 1 ||
		!strings.Contains(stderr, "editing failures is off: set failures.allow_edit: true") {
		t.Errorf("failures edit with editing off = %d %s", code, stderr)
	}
}

// Editing is off unless failures.allow_edit, and an admin's: with it off
// an admin is refused, and GET /v1/admin/me leaves it out; with it on a
// viewer is refused. Each refusal is in the audit. In the memory
// environment the edit goes the same way, through the memory ledger.
func TestEditingIsOffByDefaultAndAnAdmins(t *testing.T) {
	const publisher, viewer, admin = "pub-7a21c0", "view-3e90b4", "adm-c55d18"
	environ := []string{"MOENDA_FAILURES__ENABLED=true", "MOENDA_FAILURES__LINGER=20ms", "MOENDA_HANDLERS__ENABLED=tarefas,notificacoes", "MOENDA_AUTH__ENABLED=true",
		"MOENDA_AUTH__TOKENS=publisher:" + hashOf(publisher) + ",viewer:vera:" + hashOf(viewer) + ",admin:ana:" + hashOf(admin)}
	fixed := map[string]any{"tarefa_id": 1, "usuario_id": 1, "titulo": "revisar"}
	edit := func(p running, token string) (int, map[string]any, string) {
		t.Helper()
		f := ledgerHolds(t, p, 1, token)[0]
		_, whole := ask(t, "GET", fmt.Sprintf("%s/v1/admin/failures/%v", p.base, f["id"]), viewer)
		path := fmt.Sprintf("/v1/admin/failures/%v/edit", f["id"])
		resp, raw := send(t, "POST", p.base+path, edited(t, failureBody(t, whole), fixed), bearer(token))
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		return resp.StatusCode, body, path
	}
	audited := func(p running) string {
		t.Helper()
		_, body := ask(t, "GET", p.base+"/v1/admin/audit", viewer)
		var seen []string
		for _, e := range body["entries"].([]any) {
			e := e.(map[string]any)
			seen = append(seen, fmt.Sprint(e["actor"], " ", e["action"], " ", e["outcome"]))
		}
		return strings.Join(seen, "\n")
	}

	off := start(t, "memory", environ...)
	poison(t, off, 1, publisher)
	code, body, _ := edit(off, admin)
	if code != http.StatusConflict || body["error"] != "editing failures is off: set failures.allow_edit: true" {
		t.Errorf("an edit with editing off = %d %v, want 409 saying how to turn it on", code, body)
	}
	if _, me := ask(t, "GET", off.base+"/v1/admin/me", admin); strings.Contains(fmt.Sprint(me["actions"]), "failures.edit") {
		t.Errorf("GET /v1/admin/me with editing off = %v, want no failures.edit", me)
	}
	if got := audited(off); got != "ana failures.edit refused" {
		t.Errorf("the audit with editing off:\n%s\nwant the refusal", got)
	}

	on := start(t, "memory", append(environ, "MOENDA_FAILURES__ALLOW_EDIT=true")...)
	poison(t, on, 1, publisher)
	if _, me := ask(t, "GET", on.base+"/v1/admin/me", admin); !strings.Contains(fmt.Sprint(me["actions"]), "failures.edit") {
		t.Errorf("GET /v1/admin/me with editing on = %v, want failures.edit", me)
	}
	code, body, path := edit(on, viewer)
	if code != http.StatusForbidden || body["error"] != "the token of vera lacks the admin role" {
		t.Errorf("a viewer's edit = %d %v, want 403", code, body)
	}
	if _, body := ask(t, "GET", on.base+"/v1/admin/failures?status=edited", viewer); len(body["failures"].([]any)) != 0 {
		t.Errorf("a viewer's edit changed the ledger: %v", body)
	}
	code, body, _ = edit(on, admin)
	if code != http.StatusCreated {
		t.Fatalf("an admin's edit = %d %v", code, body)
	}
	testenv.Eventually(t, 30*time.Second, "the edit handled", func() bool {
		_, f := ask(t, "GET", fmt.Sprintf("%s/v1/admin/failures/%v", on.base, body["edit_id"]), viewer)
		return f["status"] == "resolved"
	})
	if _, f := ask(t, "GET", fmt.Sprintf("%s/v1/admin/failures/%v", on.base, body["edit_of"]), viewer); f["status"] != "edited" || f["edited_by"] != body["edit_id"] {
		t.Errorf("the original in memory after its edit = %v", f)
	}
	if got, want := audited(on), "ana failures.edit done\nvera POST "+path+" refused"; got != want {
		t.Errorf("the audit with editing on:\n%s\nwant the edit and the viewer's refusal", got)
	}
}

// The command line reads the new body from a file or, with -, from the
// standard input, a byte beyond the bound at most, so that a body too
// large is refused for its size rather than cut.
func TestReadBody(t *testing.T) {
	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte(`{"a":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, stdin string
		max         int
		want        string
	}{
		{file, "", 0, `{"a":1}`},
		{file, "", 3, `{"a"`},
		{"-", `{"b":2}`, 100, `{"b":2}`},
	} {
		got, err := readBody(strings.NewReader(c.stdin), c.name, c.max)
		if err != nil || string(got) != c.want {
			t.Errorf("readBody(%s, max %d) = %q, %v; want %q", c.name, c.max, got, err, c.want)
		}
	}
	if _, err := readBody(strings.NewReader(""), filepath.Join(t.TempDir(), "none.json"), 0); err == nil || !strings.Contains(err.Error(), "--body") {
		t.Errorf("readBody of a missing file = %v, want an error naming --body", err)
	}
}
