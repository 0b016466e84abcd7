package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/adapters/failures"
)

// filterKeys are the failure filters the pages pass on to the API, in
// the order their chips show; the API's names.
var filterKeys = []string{"group", "queue", "handler", "reason", "type", "status", "event_id", "correlation_id", "since", "until", "text"}

// filterLabels name each filter on its chip.
var filterLabels = map[string]string{"group": "group", "queue": "queue", "handler": "handler", "reason": "reason", "type": "type",
	"status": "status", "event_id": "event", "correlation_id": "correlation", "since": "since", "until": "until", "text": "text", "range": "last"}

// ranges are the time ranges the Failures page offers, by the value of
// its range parameter.
var ranges = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

// groupBys are the group-bys the API knows, as the page offers them.
var groupBys = func() []string {
	var out []string
	for _, by := range failures.GroupBys {
		out = append(out, string(by))
	}
	return out
}()

// chip is one active filter, and the page's address without it.
type chip struct {
	Key, Label, Value, Without string
}

// selection is the filter a page's query string asks for, as the page
// keeps it (range included) and as the API takes it (range made since).
type selection struct {
	page url.Values // the page's own parameters: what the chips show
	api  url.Values // what the API is asked for
}

// readSelection reads the filter parameters of q. A range (1h, 24h, ...)
// becomes since, unless since is given.
func (c *Console) readSelection(q url.Values) selection {
	s := selection{page: url.Values{}, api: url.Values{}}
	for _, k := range filterKeys {
		if v := strings.TrimSpace(q.Get(k)); v != "" {
			s.page.Set(k, v)
			s.api.Set(k, v)
		}
	}
	if d, ok := ranges[q.Get("range")]; ok {
		s.page.Set("range", q.Get("range"))
		if s.api.Get("since") == "" {
			s.api.Set("since", c.now().Add(-d).UTC().Format(time.RFC3339))
		}
	}
	if ids := idList(q["ids"]); ids != "" {
		s.page.Set("ids", ids)
		s.api.Set("ids", ids)
	}
	return s
}

// idList joins the ids of checkboxes (ids=1&ids=2) or of a list
// (ids=1,2) into the API's form: 1,2.
func idList(vs []string) string {
	var ids []string
	for _, v := range vs {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	return strings.Join(ids, ",")
}

// chips are the active filters of s, each with the page's address
// without it.
func (s selection) chips(page string) []chip {
	return chipsOf(page, s.page, append(slices.Clone(filterKeys), "range", "ids"), func(k string) string {
		if label, ok := filterLabels[k]; ok {
			return label
		}
		return k
	})
}

// chipsOf are the filters of query among keys, in keys' order, each
// named by label and with page's address without it.
func chipsOf(page string, query url.Values, keys []string, label func(key string) string) []chip {
	var out []chip
	for _, k := range keys {
		v := query.Get(k)
		if v == "" {
			continue
		}
		without := cloneValues(query)
		without.Del(k)
		out = append(out, chip{Key: k, Label: label(k), Value: v, Without: page + "?" + without.Encode()})
	}
	return out
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

// groupRow is a group as the Failures page lists it, with the address of
// its failures.
type groupRow struct {
	failures.Group
	Filter string // the address of the page of the group's failures
	Plan   string // the address of the plan of their re-drive
}

// failuresPage shows the groups of the selected failures, with their
// count and when each started, the active filters as chips, and a page of
// the failures, newest first.
func (c *Console) failuresPage(w http.ResponseWriter, r *http.Request) {
	rq, q := requestOf(r), r.URL.Query()
	sel := c.readSelection(q)
	by := q.Get("by")
	if !slices.Contains(groupBys, by) {
		by = "cause"
	}
	gq := cloneValues(sel.api)
	gq.Set("by", by)
	var groups struct {
		Groups []failures.Group `json:"groups"`
	}
	if status, err := c.call(r.Context(), rq.session, http.MethodGet, "/v1/admin/failures/groups", gq, &groups); err != nil {
		c.fail(w, r, status, err)
		return
	}
	total := 0
	rows := make([]groupRow, 0, len(groups.Groups))
	for _, g := range groups.Groups {
		total += g.Count
		f := cloneValues(sel.page)
		switch by {
		case string(failures.ByCause):
			f.Set("group", g.Key)
		case string(failures.ByQueue):
			f.Set("queue", g.Key)
		case string(failures.ByEventType):
			f.Set("type", g.Key)
		case string(failures.ByReason):
			f.Set("reason", g.Key)
		}
		rows = append(rows, groupRow{Group: g, Filter: "failures?" + f.Encode(), Plan: "redrives/plan?" + f.Encode()})
	}
	lq := cloneValues(sel.api)
	if after := q.Get("after"); after != "" {
		lq.Set("after", after)
	}
	var list struct {
		Failures []failures.Failure `json:"failures"`
		Next     int64              `json:"next"`
	}
	if status, err := c.call(r.Context(), rq.session, http.MethodGet, "/v1/admin/failures", lq, &list); err != nil {
		c.fail(w, r, status, err)
		return
	}
	next := ""
	if list.Next != 0 {
		nq := cloneValues(sel.page)
		nq.Set("by", by)
		nq.Set("after", strconv.FormatInt(list.Next, 10))
		next = "failures?" + nq.Encode()
	}
	newest := ""
	if q.Get("after") != "" {
		nq := cloneValues(sel.page)
		nq.Set("by", by)
		newest = "failures?" + nq.Encode()
	}
	hidden := [][2]string{}
	for _, k := range append(slices.Clone(filterKeys), "range") {
		if v := sel.page.Get(k); v != "" {
			hidden = append(hidden, [2]string{k, v})
		}
	}
	// with is the page's address with one more filter: a value in the
	// list adds its chip to those there are.
	with := func(k, v string) string {
		q := cloneValues(sel.page)
		q.Set(k, v)
		q.Set("by", by)
		return "failures?" + q.Encode()
	}
	c.render(w, r, http.StatusOK, "failures", "Failures", map[string]any{
		"With":   with,
		"Groups": rows, "By": by, "GroupBys": groupBys, "Total": total, "Chips": sel.chips("failures"),
		"Failures": list.Failures, "Next": next, "Newest": newest, "Query": sel.page,
		"Hidden": hidden, "Ranges": []string{"1h", "24h", "7d", "30d"}, "Filtered": len(sel.page) > 0,
		"Statuses": []string{"unresolved", "redriving", "resolved", "archived", "edited"},
	})
}

// failurePage shows one failure whole: its fields, headers, body
// (pretty-printed JSON where it is JSON; hidden from viewers when
// console.show_bodies is off) and its attempts as a timeline.
func (c *Console) failurePage(w http.ResponseWriter, r *http.Request) {
	rq := requestOf(r)
	var f failures.Failure
	if status, err := c.call(r.Context(), rq.session, http.MethodGet, "/v1/admin/failures/"+url.PathEscape(chi.URLParam(r, "id")), nil, &f); err != nil {
		c.fail(w, r, status, err)
		return
	}
	showBody := c.cfg.ShowBodies || rq.me.Role == "admin"
	body := ""
	if showBody {
		body = prettyBody(f.Body)
	}
	headers := make([][2]string, 0, len(f.Headers))
	for _, k := range sortedKeys(f.Headers) {
		headers = append(headers, [2]string{k, f.Headers[k]})
	}
	c.render(w, r, http.StatusOK, "failure", fmt.Sprintf("Failure %d", f.ID), map[string]any{
		"F": f, "Body": body, "ShowBody": showBody, "Headers": headers, "Timeline": attempts(f),
		"Archived": f.Status == failures.Archived, "Archivable": f.Status == failures.Unresolved,
	})
}

// prettyBody is body indented when it is JSON, as it came otherwise.
func prettyBody(body []byte) string {
	var v any
	if json.Unmarshal(body, &v) == nil {
		if b, err := json.MarshalIndent(v, "", "  "); err == nil {
			return string(b)
		}
	}
	return strings.ToValidUTF8(string(body), "\uFFFD")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// step is one moment of a failure's timeline.
type step struct {
	At   time.Time
	What string
}

// attempts is the story of a failure as the ledger keeps it: the first
// failed delivery, the retries up to the last, the dead letter's
// recording, and the times it came back after a re-drive.
func attempts(f failures.Failure) []step {
	out := []step{{At: f.FirstFailureAt, What: "first delivery failed"}}
	if f.Attempts > 1 {
		out = append(out, step{At: f.LastFailureAt, What: fmt.Sprintf("attempt %d of %d failed: dead-lettered to %s", f.Attempts, f.Attempts, f.Queue)})
	} else {
		out = append(out, step{At: f.LastFailureAt, What: "dead-lettered to " + f.Queue})
	}
	out = append(out, step{At: f.RecordedAt, What: "recorded in the ledger"})
	if f.Redrives > 0 {
		out = append(out, step{What: fmt.Sprintf("re-driven %d time(s), the last by re-drive %d; reached the dead-letter queue %d time(s) in all", f.Redrives, f.RedriveID, f.Occurrences)})
	}
	out = append(out, step{What: "now " + string(f.Status)})
	return out
}

// failureMoves are the console's actions on failures, by the form's
// value: the API's action, and whether it takes the selected rows or all
// the failures the filter matches.
var failureMoves = map[string]struct {
	action string
	all    bool
}{
	"archive-selected":   {"archive", false},
	"archive-all":        {"archive", true},
	"unarchive-selected": {"unarchive", false},
}

// failuresAct archives or unarchives the selected failures, or all those
// the filter matches, through POST /v1/admin/failures/<action>: the API
// freezes the selection into ids, checks the role, and audits it.
func (c *Console) failuresAct(w http.ResponseWriter, r *http.Request) {
	rq := requestOf(r)
	move, ok := failureMoves[r.PostFormValue("do")]
	if !ok {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown action %q", r.PostFormValue("do")))
		return
	}
	sel := c.readSelection(r.PostForm)
	q := cloneValues(sel.api)
	if !move.all {
		q = url.Values{}
		if ids := idList(r.PostForm["ids"]); ids != "" {
			q.Set("ids", ids)
		}
	}
	if len(q) == 0 {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("select failures first: tick their boxes, or use the buttons for all that match"))
		return
	}
	var out struct {
		Selected int `json:"selected"`
		Changed  int `json:"changed"`
	}
	if status, err := c.call(r.Context(), rq.session, http.MethodPost, "/v1/admin/failures/"+move.action, q, &out); err != nil {
		c.fail(w, r, status, err)
		return
	}
	c.render(w, r, http.StatusOK, "done", "Done", map[string]any{
		"Message": fmt.Sprintf("%s: %d selected, %d changed.", move.action, out.Selected, out.Changed),
		"Back":    "failures?" + sel.page.Encode(),
	})
}
