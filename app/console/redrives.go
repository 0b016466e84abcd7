package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/adapters/redrive"
)

// settingKeys are a re-drive's settings beside its selection, as the API
// names them.
var settingKeys = []string{"to", "canary", "rate", "max"}

// planQuery is the selection and settings of a plan or start form:
// the failures (ids, or a filter) and the settings given.
func (c *Console) planQuery(form url.Values) (page, api url.Values) {
	sel := c.readSelection(form)
	page, api = sel.page, sel.api
	for _, k := range settingKeys {
		if v := form.Get(k); v != "" {
			page.Set(k, v)
			api.Set(k, v)
		}
	}
	return page, api
}

// planPage shows what a re-drive of the selection would do, before
// anything is sent: how many failures go, by group and by target queue,
// which are skipped and why, and the canary and rate; a form changes the
// settings and plans again, and the start button starts it. It answers a
// GET (a group's link) and a POST (the rows ticked on the Failures page).
func (c *Console) planPage(w http.ResponseWriter, r *http.Request) {
	rq := requestOf(r)
	form := r.URL.Query()
	if r.Method == http.MethodPost {
		form = r.PostForm
	}
	if do := form.Get("do"); do == "plan-selected" {
		ids := idList(form["ids"])
		form = url.Values{}
		if ids != "" {
			form.Set("ids", ids)
		}
	}
	page, api := c.planQuery(form)
	if len(c.readSelection(form).api) == 0 {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("select failures first: tick their boxes on the Failures page, or open a group"))
		return
	}
	var plan redrive.Plan
	if status, err := c.call(r.Context(), rq.session, http.MethodGet, "/v1/admin/redrives/plan", api, &plan); err != nil {
		c.fail(w, r, status, err)
		return
	}
	hidden := [][2]string{}
	for _, k := range sortedKeys(page) {
		if !slices.Contains(settingKeys, k) {
			hidden = append(hidden, [2]string{k, page.Get(k)})
		}
	}
	c.render(w, r, http.StatusOK, "plan", "Plan a re-drive", map[string]any{
		"Plan": plan, "Hidden": hidden, "To": page.Get("to"), "Canary": orDefault(page.Get("canary"), "0"),
		"Rate": orDefault(page.Get("rate"), "0"), "Max": orDefault(page.Get("max"), "0"),
		"ByGroup": counts(plan.ByGroup), "ByQueue": counts(plan.ByQueue), "Skipped": counts(plan.Skipped),
	})
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// count is one line of a plan's counts.
type count struct {
	Key string
	N   int
}

func counts(m map[string]int) []count {
	out := make([]count, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, count{k, m[k]})
	}
	return out
}

// startRedrive starts the planned re-drive through POST
// /v1/admin/redrives, which freezes the selection into ids at that
// moment, and goes to its page.
func (c *Console) startRedrive(w http.ResponseWriter, r *http.Request) {
	rq := requestOf(r)
	_, api := c.planQuery(r.PostForm)
	var out struct {
		ID int64 `json:"id"`
	}
	if status, err := c.call(r.Context(), rq.session, http.MethodPost, "/v1/admin/redrives", api, &out); err != nil {
		c.fail(w, r, status, err)
		return
	}
	redirect(w, r, root(r)+"redrives/"+strconv.FormatInt(out.ID, 10))
}

// redrivesPage lists the re-drives, newest first.
func (c *Console) redrivesPage(w http.ResponseWriter, r *http.Request) {
	rq := requestOf(r)
	var out struct {
		Redrives []redrive.Redrive `json:"redrives"`
	}
	if status, err := c.call(r.Context(), rq.session, http.MethodGet, "/v1/admin/redrives", nil, &out); err != nil {
		c.fail(w, r, status, err)
		return
	}
	slices.SortFunc(out.Redrives, func(a, b redrive.Redrive) int { return int(b.ID - a.ID) })
	c.render(w, r, http.StatusOK, "redrives", "Re-drives", map[string]any{"Redrives": out.Redrives})
}

// redriveView is a re-drive as its page shows it.
type redriveView struct {
	redrive.Redrive
	// Settled counts the items past sending: handled, failed again,
	// skipped or unsettled.
	Settled int
	Active  bool
	Moves   []string
}

// getRedrive reads the re-drive the path names.
func (c *Console) getRedrive(r *http.Request) (redriveView, int, error) {
	var rd redrive.Redrive
	status, err := c.call(r.Context(), requestOf(r).session, http.MethodGet, "/v1/admin/redrives/"+url.PathEscape(chi.URLParam(r, "id")), nil, &rd)
	if err != nil {
		return redriveView{}, status, err
	}
	n := rd.Counters
	v := redriveView{Redrive: rd, Settled: n.Handled + n.FailedAgain + n.Skipped + n.Unsettled}
	switch rd.State {
	case redrive.Canary, redrive.Running:
		v.Active, v.Moves = true, []string{"pause", "cancel"}
	case redrive.Paused:
		v.Active, v.Moves = true, []string{"resume", "cancel"}
	}
	return v, status, nil
}

// redrivePage shows one re-drive: its selection and settings, and its
// progress, which refreshes itself (htmx) while it runs.
func (c *Console) redrivePage(w http.ResponseWriter, r *http.Request) {
	v, status, err := c.getRedrive(r)
	if err != nil {
		c.fail(w, r, status, err)
		return
	}
	c.render(w, r, http.StatusOK, "redrive", fmt.Sprintf("Re-drive %d", v.ID), v)
}

// redriveProgress is the progress part of a re-drive's page, which the
// page asks for every few seconds while the re-drive runs.
func (c *Console) redriveProgress(w http.ResponseWriter, r *http.Request) {
	v, status, err := c.getRedrive(r)
	if err != nil {
		c.fail(w, r, status, err)
		return
	}
	// The part is swapped into the re-drive's page, so its links are
	// written from that page's address, not from this one's.
	page := r.Clone(r.Context())
	page.URL.Path = strings.TrimSuffix(r.URL.Path, "/progress")
	page.Header.Set("HX-Request", "true") // the part, asked for by htmx or not
	c.render(w, page, http.StatusOK, "redrive", "", v)
}

// moveRedrive pauses, resumes or cancels a re-drive through the API.
func (c *Console) moveRedrive(w http.ResponseWriter, r *http.Request) {
	verb, id := chi.URLParam(r, "verb"), chi.URLParam(r, "id")
	if !slices.Contains([]string{"pause", "resume", "cancel"}, verb) {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("a re-drive can pause, resume or cancel, not %q", verb))
		return
	}
	if status, err := c.call(r.Context(), requestOf(r).session, http.MethodPost, "/v1/admin/redrives/"+url.PathEscape(id)+"/"+verb, nil, nil); err != nil {
		c.fail(w, r, status, err)
		return
	}
	redirect(w, r, root(r)+"redrives/"+url.PathEscape(id))
}
