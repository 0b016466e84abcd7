package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/audit"
	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/redrive"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/httpjson"
)

// workbench is what the operators' actions on failures work on: the
// ledger, and the audit every action writes to. The API and the command
// line run the same actions through it.
type workbench struct {
	ledger   failures.Ledger
	audit    audit.Log
	redrives redrive.Store
	// What a journey reads besides: the outbox (nil with the memory
	// broker), the topology, and the inbox's claims of an event.
	pool   *pgxpool.Pool
	top    *topology.Topology
	claims func(ctx context.Context, key string) (map[string]time.Time, error)
	logger *slog.Logger
}

// newWorkbench is the environment's workbench: the tables, or in memory
// with the memory broker (one process's alone).
func (r *resources) newWorkbench() *workbench {
	if r.pool == nil {
		return &workbench{ledger: failures.NewMemory(time.Now), audit: audit.NewMemory(time.Now), redrives: redrive.NewMemory(time.Now),
			top: r.top, logger: r.logger}
	}
	pool := r.pool
	return &workbench{ledger: failures.NewPostgres(pool), audit: audit.NewPostgres(pool), redrives: redrive.NewPostgres(pool),
		pool: pool, top: r.top, logger: r.logger,
		claims: func(ctx context.Context, key string) (map[string]time.Time, error) {
			return postgres.Claims(ctx, pool, key)
		}}
}

// failureAction is an action on a selection of failures: it takes those
// in status from (any but archived, when from is empty) and sets them to
// to, or deletes them when to is empty.
type failureAction struct {
	from, to failures.Status
}

// failureActions are the actions on failures, by the name the audit and
// GET /v1/admin/me give them.
var failureActions = map[string]failureAction{
	"failures.archive":   {from: failures.Unresolved, to: failures.Archived},
	"failures.unarchive": {from: failures.Archived, to: failures.Unresolved},
	"failures.delete":    {},
}

// act runs the action name on the failures params select (a query string's
// parameters, or the command line's flags, by the same names), as caller,
// and records it in the audit. The selection is frozen into ids before
// anything changes. It returns how many failures were selected and how
// many changed.
func (b *workbench) act(ctx context.Context, caller Caller, name string, params map[string]string) (selected, changed int, err error) {
	a := failureActions[name]
	defer func() {
		outcome, detail := audit.Done, map[string]any{"selected": selected, "changed": changed}
		if err != nil {
			outcome, detail = audit.Failed, map[string]any{"error": err.Error()}
		}
		b.record(ctx, audit.Entry{Actor: caller.Name, Role: caller.Role, Action: name, Selection: params, Outcome: outcome, Detail: detail})
	}()
	if len(params) == 0 {
		return 0, 0, invalid("name the failures to take: ids, group, queue, handler, reason, type, event_id, correlation_id, since, until or text")
	}
	f, err := readFilter(params)
	if err != nil {
		return 0, 0, err
	}
	if a.from != "" {
		if f.Status != "" && f.Status != a.from {
			return 0, 0, invalid("%s takes %s failures; status %s selects none", name, a.from, f.Status)
		}
		f.Status = a.from
	}
	ids, err := b.ledger.Select(ctx, f)
	if err != nil {
		return 0, 0, err
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	if a.to == "" {
		changed, err = b.ledger.Delete(ctx, ids)
	} else {
		changed, err = b.ledger.Mark(ctx, ids, a.from, a.to)
	}
	return len(ids), changed, err
}

// groupComment is a cause group's comment after a change: nil once
// cleared.
type groupComment struct {
	Group   string            `json:"group"`
	Comment *failures.Comment `json:"comment"`
}

// comment sets the comment on the cause group fingerprint as caller, or
// clears it when text is empty (or blank), and records it in the audit,
// with the text, refused or not.
func (b *workbench) comment(ctx context.Context, caller Caller, fingerprint, text string) (out groupComment, err error) {
	out.Group = fingerprint
	text = strings.TrimSpace(text)
	named := fingerprint
	if !failures.IsFingerprint(fingerprint) { // as the audit can keep it, whatever came in the path
		named = handlers.Cut(strconv.QuoteToASCII(fingerprint), 64)
	}
	defer func() {
		outcome, detail := audit.Done, map[string]any{"comment": text, "cleared": text == ""}
		if err != nil {
			outcome, detail = audit.Failed, map[string]any{"error": err.Error()}
		}
		b.record(ctx, audit.Entry{Actor: caller.Name, Role: caller.Role, Action: "failures.comment",
			Selection: map[string]string{"group": named}, Outcome: outcome, Detail: detail})
	}()
	switch n := utf8.RuneCountInString(text); {
	case !failures.IsFingerprint(fingerprint):
		return out, invalid("group %s is not a fingerprint: 16 hex digits, as moenda failures groups prints them", named)
	case n > failures.MaxComment:
		return out, invalid("a comment is at most %d characters, this one is %d: say what the cause is and link the rest", failures.MaxComment, n)
	case !utf8.ValidString(text) || strings.ContainsRune(text, 0):
		return out, invalid("a comment must be UTF-8 text without NUL characters")
	}
	out.Comment, err = b.ledger.SetComment(ctx, fingerprint, text, caller.Name)
	if errors.Is(err, failures.ErrNotFound) {
		return out, handlers.NewError(handlers.ErrNotFound, fmt.Sprintf("no failure of group %s in the ledger: a comment notes a group it holds (see moenda failures groups)", fingerprint))
	}
	return out, err
}

// record adds e to the audit, with the correlation id of ctx. An entry
// the audit does not take is logged whole instead, so the action is
// never lost from view.
func (b *workbench) record(ctx context.Context, e audit.Entry) {
	e.CorrelationID = event.CorrelationID(ctx)
	if err := b.audit.Add(context.WithoutCancel(ctx), e); err != nil {
		b.logger.ErrorContext(ctx, "audit: an action could not be recorded; here it is", "actor", e.Actor, "role", e.Role, "action", e.Action,
			"selection", e.Selection, "outcome", e.Outcome, "detail", e.Detail, "error", err)
	}
}

// failureActionRoute answers POST /v1/admin/failures/<action>?<selection>
// with {"selected": N, "changed": M}.
func (p *Platform) failureActionRoute(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		params, err := httpjson.Query(r, filterParams...)
		if err != nil {
			httpjson.Fail(w, r, p.logger, err)
			return
		}
		selected, changed, err := p.workbench.act(r.Context(), CallerOf(r.Context()), name, params)
		httpjson.Respond(w, r, p.logger, http.StatusOK, map[string]int{"selected": selected, "changed": changed}, err)
	}
}

// auditRefusal records in the audit a request to the administration that
// the tokens refused.
func (p *Platform) auditRefusal(r *http.Request, caller Caller, code int, reason string) {
	p.workbench.record(r.Context(), audit.Entry{Actor: caller.Name, Role: caller.Role, Action: r.Method + " " + r.URL.Path,
		Selection: map[string]string{}, Outcome: audit.Refused, Detail: map[string]any{"status": code, "reason": reason}})
}

// listAudit answers GET /v1/admin/audit?actor=&action=&outcome=&since=&until=&after=&limit=
// with {"entries": [...], "next": ID}, newest first.
func (p *Platform) listAudit(w http.ResponseWriter, r *http.Request) {
	f, after, limit, err := auditQuery(r)
	if err != nil {
		httpjson.Fail(w, r, p.logger, err)
		return
	}
	entries, err := p.workbench.audit.List(r.Context(), f, after, limit)
	next := int64(0)
	if len(entries) == limit {
		next = entries[len(entries)-1].ID
	}
	httpjson.Respond(w, r, p.logger, http.StatusOK, map[string]any{"entries": entries, "next": next}, err)
}

// auditQuery reads the audit's filter and page from r's query string.
func auditQuery(r *http.Request) (audit.Filter, int64, int, error) {
	q, err := httpjson.Query(r, "actor", "action", "outcome", "since", "until", "after", "limit")
	if err != nil {
		return audit.Filter{}, 0, 0, err
	}
	f := audit.Filter{Actor: q["actor"], Action: q["action"], Outcome: q["outcome"]}
	errs := readTimes(q, &f.Since, &f.Until)
	page, perrs := readPage(q)
	return f, page.After, page.Limit, errors.Join(append(errs, perrs...)...)
}

// allActions are the names of every action, which GET /v1/admin/me lists
// for an admin: failures.edit only while edit is on
// (failures.allow_edit).
func allActions(edit bool) []string {
	names := append(slices.Collect(maps.Keys(adminActions)), slices.Collect(maps.Keys(failureActions))...)
	names = append(names, "redrive.start", "failures.comment")
	if edit {
		names = append(names, "failures.edit")
	}
	for verb := range redriveMoves {
		names = append(names, "redrive."+verb)
	}
	slices.Sort(names)
	return names
}
