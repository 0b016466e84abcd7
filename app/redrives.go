package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/adapters/audit"
	"github.com/moenda/moenda/adapters/redrive"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/httpjson"
)

// redriveParams are the parameters of a re-drive beside its selection.
var redriveParams = []string{"to", "canary", "rate", "max"}

// redrivePoll is how often the runner looks for re-drives to run, and
// settles the items it sent.
const redrivePoll = time.Second

// plan plans a re-drive of the failures params select, with the
// re-drive settings params give: the selection frozen into ids.
func (b *workbench) plan(ctx context.Context, params map[string]string, maxRedrives int) (redrive.Plan, redrive.Options, error) {
	sel, o, err := readRedrive(params)
	if err != nil {
		return redrive.Plan{}, o, err
	}
	if len(sel) == 0 {
		return redrive.Plan{}, o, invalid("name the failures to re-drive: ids, group, queue, handler, reason, type, event_id, correlation_id, since, until or text")
	}
	f, err := readFilter(sel)
	if err != nil {
		return redrive.Plan{}, o, err
	}
	ids, err := b.ledger.Select(ctx, f)
	if err != nil {
		return redrive.Plan{}, o, err
	}
	o.MaxRedrives = maxRedrives
	plan, err := redrive.MakePlan(ctx, b.ledger, ids, o)
	return plan, o, err
}

// startRedrive plans and creates a re-drive, as caller, and records it in
// the audit; the process that runs re-drives sends it.
func (b *workbench) startRedrive(ctx context.Context, caller Caller, params map[string]string, maxRedrives int) (id int64, plan redrive.Plan, err error) {
	defer func() {
		outcome, detail := audit.Done, map[string]any{"redrive_id": id, "send": plan.Send, "skipped": plan.Skipped}
		if err != nil {
			outcome, detail = audit.Failed, map[string]any{"error": err.Error()}
		}
		b.record(ctx, audit.Entry{Actor: caller.Name, Role: caller.Role, Action: "redrive.start", Selection: params, Outcome: outcome, Detail: detail})
	}()
	plan, o, err := b.plan(ctx, params, maxRedrives)
	if err != nil {
		return 0, plan, err
	}
	if plan.Send == 0 {
		return 0, plan, handlers.NewError(handlers.ErrConflict, "the selection holds no failure to re-drive"+skippedWhy(plan.Skipped))
	}
	id, err = redrive.Start(ctx, b.redrives, plan, o, caller.Name, params)
	return id, plan, err
}

// skippedWhy says why a plan skipped what it did: ": 3 already resolved;
// 1 re-driven ...", or nothing when it skipped none.
func skippedWhy(skipped map[string]int) string {
	var why []string
	for _, reason := range slices.Sorted(maps.Keys(skipped)) {
		why = append(why, fmt.Sprintf("%d %s", skipped[reason], reason))
	}
	if len(why) == 0 {
		return ""
	}
	return ": " + strings.Join(why, "; ")
}

// redriveMoves are the state changes an operator may ask of a re-drive.
var redriveMoves = map[string]struct {
	from []redrive.State
	to   redrive.State
}{
	"pause":  {[]redrive.State{redrive.Canary, redrive.Running}, redrive.Paused},
	"resume": {[]redrive.State{redrive.Paused}, redrive.Running},
	"cancel": {[]redrive.State{redrive.Canary, redrive.Running, redrive.Paused}, redrive.Cancelled},
}

// moveRedrive pauses, resumes or cancels the re-drive id, as caller, and
// records it in the audit.
func (b *workbench) moveRedrive(ctx context.Context, caller Caller, id int64, verb string) (rd redrive.Redrive, err error) {
	defer func() {
		outcome, detail := audit.Done, map[string]any{"state": string(rd.State)}
		if err != nil {
			outcome, detail = audit.Failed, map[string]any{"error": err.Error()}
		}
		b.record(ctx, audit.Entry{Actor: caller.Name, Role: caller.Role, Action: "redrive." + verb,
			Selection: map[string]string{"redrive_id": strconv.FormatInt(id, 10)}, Outcome: outcome, Detail: detail})
	}()
	m := redriveMoves[verb]
	moved, err := b.redrives.Move(ctx, id, m.from, m.to, "by "+caller.Name)
	if err == nil {
		rd, err = b.getRedrive(ctx, id)
	}
	if err == nil && !moved {
		err = handlers.NewError(handlers.ErrConflict, fmt.Sprintf("re-drive %d is %s: it cannot %s", id, rd.State, verb))
	}
	return rd, err
}

// getRedrive is the re-drive id, or an error of kind not found.
func (b *workbench) getRedrive(ctx context.Context, id int64) (redrive.Redrive, error) {
	rd, err := b.redrives.Get(ctx, id)
	if errors.Is(err, redrive.ErrNotFound) {
		return rd, handlers.NewError(handlers.ErrNotFound, fmt.Sprintf("no re-drive %d", id))
	}
	return rd, err
}

// readRedrive splits params into the selection and the re-drive's
// settings: to (queue:NAME or original-exchange), canary, rate (per second) and max.
func readRedrive(params map[string]string) (map[string]string, redrive.Options, error) {
	sel := maps.Clone(params)
	var o redrive.Options
	var errs []error
	for _, name := range redriveParams {
		v, ok := sel[name]
		if !ok {
			continue
		}
		delete(sel, name)
		switch name {
		case "to":
			o.To = v
		case "rate":
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || r < 0 || r > 100000 {
				errs = append(errs, invalid("rate must be failures per second, 0 to 100000 (0: as fast as the broker takes them), got %q", v))
			}
			o.Rate = r
		default:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				errs = append(errs, invalid("%s must be a whole number, 0 or more, got %q", name, v))
			}
			if name == "canary" {
				o.Canary = n
			} else {
				o.Max = n
			}
		}
	}
	return sel, o, errors.Join(errs...)
}

// runRedrives sends the re-drives in canary or running, each in a
// goroutine of its own, until ctx ends: in the process that ingests.
func (p *Platform) runRedrives(ctx context.Context) {
	r := &redrive.Runner{Store: p.workbench.redrives, Ledger: p.workbench.ledger, Sink: redriveSink{p}, Handled: p.inbox.Claimed,
		Clock: redrive.WallClock{}, Poll: redrivePoll, SettleTimeout: p.cfg.Failures.SettleTimeout, Logger: p.logger}
	var mu sync.Mutex
	var wg sync.WaitGroup
	active := map[int64]bool{}
	defer wg.Wait()
	every(ctx, redrivePoll, func() {
		ids, err := p.workbench.redrives.Running(ctx)
		if err != nil {
			if ctx.Err() == nil {
				p.logger.Warn("re-drives: could not read which to run; will try again", "error", err)
			}
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if active[id] {
				continue
			}
			active[id] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.logger.Info("re-drive running", "redrive_id", id)
				if err := r.Run(ctx, id); err != nil && ctx.Err() == nil {
					p.logger.Error("re-drive stopped; it runs again in a moment", "redrive_id", id, "error", err)
				}
				mu.Lock()
				delete(active, id)
				mu.Unlock()
			}()
		}
	})
}

// redeliver sends msg back to queue alone, through the transport that
// carries it.
func (p *Platform) redeliver(ctx context.Context, queue string, msg *message.Message) error {
	t := p.broker
	if kafkaRead, _ := p.cfg.kafkaReaders(); p.stream != nil && slices.Contains(kafkaRead, queue) {
		t = p.stream
	}
	c, err := t.Consumer()
	if err != nil {
		return err
	}
	return c.Sink.Redeliver(ctx, queue, msg)
}

// redriveSink sends re-drives' copies through the transport that carries
// each queue, or each exchange.
type redriveSink struct{ p *Platform }

func (s redriveSink) Redeliver(ctx context.Context, queue string, msg *message.Message) error {
	return s.p.redeliver(ctx, queue, msg)
}

func (s redriveSink) Republish(ctx context.Context, exchange, key string, msg *message.Message) error {
	c, err := s.p.broker.Consumer()
	if err != nil {
		return err
	}
	return c.Sink.Republish(ctx, exchange, key, msg)
}

// redriveRoutes mounts the re-drives' endpoints under /v1/admin.
func (p *Platform) redriveRoutes(r chi.Router) {
	params := append(slices.Clone(filterParams), redriveParams...)
	r.Get("/redrives/plan", func(w http.ResponseWriter, r *http.Request) {
		q, err := httpjson.Query(r, params...)
		if err == nil {
			var plan redrive.Plan
			plan, _, err = p.workbench.plan(r.Context(), q, p.cfg.Failures.MaxRedrives)
			httpjson.Respond(w, r, p.logger, http.StatusOK, plan, err)
			return
		}
		httpjson.Fail(w, r, p.logger, err)
	})
	r.Post("/redrives", func(w http.ResponseWriter, r *http.Request) {
		q, err := httpjson.Query(r, params...)
		if err != nil {
			httpjson.Fail(w, r, p.logger, err)
			return
		}
		id, plan, err := p.workbench.startRedrive(r.Context(), CallerOf(r.Context()), q, p.cfg.Failures.MaxRedrives)
		httpjson.Respond(w, r, p.logger, http.StatusCreated, map[string]any{"id": id, "plan": plan}, err)
	})
	r.Get("/redrives", httpjson.Run(p.logger, http.StatusOK, func(ctx context.Context) (map[string][]redrive.Redrive, error) {
		rds, err := p.workbench.redrives.List(ctx)
		return map[string][]redrive.Redrive{"redrives": rds}, err
	}))
	id := httpjson.PathID("id", invalid("the re-drive id in the path must be a positive whole number"))
	r.Get("/redrives/{id}", httpjson.Param(p.logger, http.StatusOK, id, p.workbench.getRedrive))
	for verb := range redriveMoves {
		r.Post("/redrives/{id}/"+verb, httpjson.Param(p.logger, http.StatusOK, id, func(ctx context.Context, id int64) (redrive.Redrive, error) {
			return p.workbench.moveRedrive(ctx, CallerOf(ctx), id, verb)
		}))
	}
}
