package app

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/adapters/audit"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/handlers/httpjson"
)

// adminRoutes mounts the administration endpoints under /v1/admin.
func (p *Platform) adminRoutes(r chi.Router) {
	r.Get("/me", p.me)
	r.Get("/status", p.adminStatus)
	r.Get("/outbox/parked", p.listParked)
	r.Post(adminActions["outbox.republish"], p.republishParked)
}

// adminActions are the administration endpoints that change something,
// by the name GET /v1/admin/me gives them: an admin's alone.
var adminActions = map[string]string{
	"outbox.republish": "/outbox/republish",
}

// me answers who the caller is, and what it may do: a console shows only
// those actions (the server refuses the others all the same).
func (p *Platform) me(w http.ResponseWriter, r *http.Request) {
	c := CallerOf(r.Context())
	actions := []string{}
	if may(c.Role, RoleAdmin) {
		actions = allActions(p.cfg.Failures.AllowEdit)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"name": c.Name, "role": c.Role, "auth": p.cfg.Auth.Enabled, "actions": actions})
}

// maxParkedListed bounds one answer of GET /v1/admin/outbox/parked: a
// misconfiguration can park every event for hours.
const maxParkedListed = 10000

// listParked answers {"parked": [...], "count": N}: the rows the relays
// parked, oldest first, at most ?limit= of them (1000 unless set), and how
// many there are in all.
func (p *Platform) listParked(w http.ResponseWriter, r *http.Request) {
	limit := 1000
	if text := r.URL.Query().Get("limit"); text != "" {
		n, err := strconv.Atoi(text)
		if err != nil || n < 1 || n > maxParkedListed {
			httpjson.Error(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 1 to %d, got %q", maxParkedListed, text))
			return
		}
		limit = n
	}
	parked, count := []outbox.Parked{}, 0
	if p.pool != nil { // the memory broker has no outbox, and parks nothing
		var err error
		if parked, count, err = outbox.ListParked(r.Context(), p.pool, limit); err != nil {
			httpjson.ServerError(w, r, p.logger, err)
			return
		}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"parked": parked, "count": count})
}

// republishParked answers {"republished": N, "still_parked": M,
// "still_unroutable": [...]}: the parked rows the configuration now routes
// are published through the relays' own destinations, and the others are
// counted, the first outbox.StillShown listed with the reason.
func (p *Platform) republishParked(w http.ResponseWriter, r *http.Request) {
	if p.pool != nil && len(p.relays) == 0 {
		httpjson.Error(w, http.StatusConflict, "this process runs no relay (serve --role "+string(p.role)+"): send the request to a relay process, or run `moenda outbox republish`")
		return
	}
	res := outbox.Republished{StillUnroutable: []outbox.Parked{}}
	if p.pool != nil {
		var err error
		if res, err = outbox.Republish(r.Context(), p.pool, p.relayDestinations(), p.top.Routable); err != nil {
			httpjson.ServerError(w, r, p.logger, err)
			return
		}
	}
	if res.Republished > 0 {
		p.logger.Info("outbox: republished parked rows", "republished", res.Republished, "still_parked", res.StillParked)
	}
	c := CallerOf(r.Context())
	p.workbench.record(r.Context(), audit.Entry{Actor: c.Name, Role: c.Role, Action: "outbox.republish", Outcome: audit.Done,
		Detail: map[string]any{"republished": res.Republished, "still_parked": res.StillParked}})
	httpjson.Write(w, http.StatusOK, res)
}

// relayDestinations maps each relay's consumer group to its destination:
// a parked row goes out the way its relay would have sent it.
func (p *Platform) relayDestinations() map[string]outbox.Destination {
	dests := map[string]outbox.Destination{}
	for _, r := range p.relays {
		dests[r.Group()] = r.Destination()
	}
	return dests
}
