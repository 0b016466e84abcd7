package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/moenda/moenda/adapters/audit"
)

// auditKeys are the audit's filters, as the API names them.
var auditKeys = []string{"actor", "action", "outcome", "since", "until"}

// auditPage shows who did what, newest first, with filters and keyset
// paging.
func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, api := url.Values{}, url.Values{}
	for _, k := range auditKeys {
		if v := strings.TrimSpace(q.Get(k)); v != "" {
			page.Set(k, v)
			api.Set(k, v)
		}
	}
	if after := q.Get("after"); after != "" {
		api.Set("after", after)
	}
	var out struct {
		Entries []audit.Entry `json:"entries"`
		Next    int64         `json:"next"`
	}
	if status, err := c.call(r.Context(), requestOf(r).session, http.MethodGet, "/v1/admin/audit", api, &out); err != nil {
		c.fail(w, r, status, err)
		return
	}
	next := ""
	if out.Next != 0 {
		nq := cloneValues(page)
		nq.Set("after", strconv.FormatInt(out.Next, 10))
		next = "audit?" + nq.Encode()
	}
	chips := chipsOf("audit", page, auditKeys, func(k string) string { return k })
	c.render(w, r, http.StatusOK, "audit", "Audit", map[string]any{"Entries": out.Entries, "Next": next, "Query": page, "Chips": chips,
		"Outcomes": []string{audit.Done, audit.Refused, audit.Failed}})
}
