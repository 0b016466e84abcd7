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
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/httpjson"
)

// ingestLock names the advisory lock whose holder ingests dead letters:
// one process per database.
const ingestLock = "moenda failures ingest"

// ingestRetry is how often a standby asks for the ingest lock, and how
// often the leader checks that its session still holds it.
const ingestRetry = 5 * time.Second

// ingests says whether this process reads the dead-letter queues into the
// ledger: a relay's work (or the one process of the memory broker), once
// failures.enabled.
func (p *Platform) ingests() bool { return p.cfg.Failures.Enabled && p.role.relay() }

// ingestState is what /readyz says of the failure ingest.
type ingestState struct {
	leads atomic.Bool
	// lag is the seconds from the oldest failure of the last batch to its
	// commit.
	mu  sync.Mutex
	lag float64
	// counted are the series of moenda_failures_unresolved set so far.
	counted map[[2]string]bool
}

// deadLetterSources are the dead-letter queues to ingest, by the transport
// that holds them: a queue read from Kafka dead-letters there, every other
// on the broker, with failures.queues.
func (p *Platform) deadLetterSources() map[transport.Transport][]string {
	kafkaRead, _ := p.cfg.kafkaReaders()
	out := map[transport.Transport][]string{}
	add := func(t transport.Transport, q string) {
		if !slices.Contains(out[t], q) {
			out[t] = append(out[t], q)
		}
	}
	for _, q := range p.top.Queues {
		pol, ok := p.top.Policy(q.Name)
		if !ok || pol.DeadLetterQueue == "" {
			continue
		}
		t := p.broker
		if p.stream != nil && slices.Contains(kafkaRead, q.Name) {
			t = p.stream
		}
		add(t, pol.DeadLetterQueue)
	}
	if p.stream != nil { // a queue read from Kafka is not declared on RabbitMQ
		for _, q := range kafkaRead {
			if pol, ok := p.top.Policy(q); ok && pol.DeadLetterQueue != "" {
				add(p.stream, pol.DeadLetterQueue)
			}
		}
	}
	for _, q := range p.cfg.Failures.Queues {
		add(p.broker, q)
	}
	return out
}

// ingestFailures reads the dead-letter queues into the ledger until ctx
// ends: in this process alone with the memory broker, else in the one
// process that holds the ingest lock.
func (p *Platform) ingestFailures(ctx context.Context) {
	run := func(ctx context.Context) error {
		sources := p.deadLetterSources()
		g := make(chan error, len(sources))
		for t, queues := range sources {
			sub, err := t.DeadLetters()
			if err != nil {
				return err
			}
			in := &failures.Ingest{Subscriber: sub, Queues: queues, Ledger: p.workbench.ledger, Batch: p.cfg.Failures.BatchSize,
				Linger: p.cfg.Failures.Linger, Now: time.Now, Logger: p.logger, Recorded: p.recordedFailures}
			go func() { g <- in.Run(ctx) }()
		}
		p.logger.Info("failures: ingesting the dead-letter queues into the ledger", "queues", slices.Concat(slices.Collect(maps.Values(sources))...))
		// The process that ingests runs the re-drives too: it sees their
		// failures come back.
		rctx, stopRedrives := context.WithCancel(ctx)
		redrives := make(chan struct{})
		go func() { p.runRedrives(rctx); close(redrives) }()
		var errs []error
		for range sources {
			errs = append(errs, <-g)
		}
		stopRedrives()
		<-redrives
		return errors.Join(errs...)
	}
	if p.pool == nil {
		p.ingest.leads.Store(true)
		if err := run(ctx); err != nil {
			p.logger.Error("failures: ingest stopped", "error", err)
		}
		return
	}
	postgres.Lead(ctx, p.pool, ingestLock, ingestRetry, p.logger, p.ingest.leads.Store, run)
}

// recordedFailures notes a batch the ledger took, for the metrics.
func (p *Platform) recordedFailures(_ int, oldest time.Time) {
	p.ingest.mu.Lock()
	p.ingest.lag = time.Since(oldest).Seconds()
	p.ingest.mu.Unlock()
}

// pruneFailures deletes settled failures older than failures.retention
// every failures.prune_interval, until ctx ends.
func (p *Platform) pruneFailures(ctx context.Context) {
	p.pruneEvery(ctx, "failures", "settled failures", p.cfg.Failures.PruneInterval, p.cfg.Failures.Retention, func(ctx context.Context, cutoff time.Time) (int, error) {
		return p.workbench.ledger.Prune(ctx, cutoff, 1000)
	})
}

// failureRoutes mounts the failure ledger's endpoints under /v1/admin.
func (p *Platform) failureRoutes(r chi.Router) {
	r.Get("/failures", httpjson.Param(p.logger, http.StatusOK, failureQuery, p.listFailures))
	r.Get("/failures/groups", httpjson.Param(p.logger, http.StatusOK, groupQuery, p.failureGroups))
	r.Put("/failures/groups/{fingerprint}/comment", httpjson.ParamCommand(p.logger, http.StatusOK, fingerprintParam, p.commentRoute))
	for name := range failureActions {
		r.Post("/"+strings.ReplaceAll(name, ".", "/"), p.failureActionRoute(name))
	}
	r.Get("/audit", p.listAudit)
	p.redriveRoutes(r)
	r.Get("/journeys", httpjson.Param(p.logger, http.StatusOK, journeyQuery, func(ctx context.Context, q [2]string) (map[string][]journey, error) {
		js, err := p.workbench.journeys(ctx, q[0], q[1])
		return map[string][]journey{"journeys": js}, err
	}))
	r.Post("/failures/{id}/edit", p.editRoute)
	r.Get("/failures/{id}", httpjson.Param(p.logger, http.StatusOK, httpjson.PathID("id", handlers.NewError(handlers.ErrInvalid, "the failure id in the path must be a positive whole number")), p.showFailure))
}

// failurePage is an answer of GET /v1/admin/failures: a page, and the
// cursor of the next one (0 on the last).
type failurePage struct {
	Failures []failures.Failure `json:"failures"`
	Next     int64              `json:"next"`
}

// failureSelection is a filter and a page, as a request gives them.
type failureSelection struct {
	filter failures.Filter
	page   failures.Page
}

func (p *Platform) listFailures(ctx context.Context, s failureSelection) (failurePage, error) {
	fs, err := p.workbench.ledger.List(ctx, s.filter, s.page)
	if err != nil {
		return failurePage{}, err
	}
	out := failurePage{Failures: fs}
	if len(fs) == s.page.Limit {
		out.Next = fs[len(fs)-1].ID
	}
	return out, nil
}

// groupSelection is a filter and the key of the groups, as a request
// gives them.
type groupSelection struct {
	filter failures.Filter
	by     failures.GroupBy
}

// groupList is an answer of GET /v1/admin/failures/groups.
type groupList struct {
	By     failures.GroupBy `json:"by"`
	Groups []failures.Group `json:"groups"`
}

func (p *Platform) failureGroups(ctx context.Context, s groupSelection) (groupList, error) {
	gs, err := p.workbench.ledger.Groups(ctx, s.filter, s.by)
	if gs == nil {
		gs = []failures.Group{}
	}
	return groupList{By: s.by, Groups: gs}, err
}

// groupQuery reads a filter and by (cause unless given).
func groupQuery(r *http.Request) (groupSelection, error) {
	q, err := httpjson.Query(r, append(slices.Clone(filterParams), "by")...)
	if err != nil {
		return groupSelection{}, err
	}
	return readGroupSelection(q)
}

// readGroupSelection reads the filter parameters of q and by.
func readGroupSelection(q map[string]string) (groupSelection, error) {
	f, err := readFilter(q)
	by, berr := failures.ParseGroupBy(q["by"])
	if berr != nil {
		err = errors.Join(err, invalid("%v", berr))
	}
	return groupSelection{filter: f, by: by}, err
}

// fingerprintParam reads a group's fingerprint from the path.
func fingerprintParam(r *http.Request) (string, error) {
	return chi.URLParam(r, "fingerprint"), nil
}

// commentCommand is the body of PUT .../groups/{fingerprint}/comment.
type commentCommand struct {
	// Comment is required: an empty one clears the group's.
	Comment *string `json:"comment"`
}

// commentRoute answers PUT /v1/admin/failures/groups/{fingerprint}/comment
// with the group and its comment (null once cleared).
func (p *Platform) commentRoute(ctx context.Context, fingerprint string, c commentCommand) (groupComment, error) {
	if c.Comment == nil {
		return groupComment{}, invalid(`comment is required: {"comment": "..."}; an empty one clears the group's`)
	}
	return p.workbench.comment(ctx, CallerOf(ctx), fingerprint, *c.Comment)
}

func (p *Platform) showFailure(ctx context.Context, id int64) (failures.Failure, error) {
	f, err := p.workbench.ledger.Get(ctx, id)
	if errors.Is(err, failures.ErrNotFound) {
		return f, handlers.NewError(handlers.ErrNotFound, fmt.Sprintf("no failure %d in the ledger", id))
	}
	return f, err
}

// filterParams are the query parameters that select failures, as the
// CLI's flags name them.
var filterParams = []string{"ids", "queue", "handler", "reason", "type", "event_id", "correlation_id", "group", "status", "since", "until", "text"}

// failureQuery reads a selection: the filter, then after (a cursor) and
// limit (1 to failures.MaxPage, 50 unless given).
func failureQuery(r *http.Request) (failureSelection, error) {
	q, err := httpjson.Query(r, append(slices.Clone(filterParams), "after", "limit")...)
	if err != nil {
		return failureSelection{}, err
	}
	f, err := readFilter(q)
	page, errs := readPage(q)
	return failureSelection{filter: f, page: page}, errors.Join(append([]error{err}, errs...)...)
}

// readPage reads after and limit.
func readPage(q map[string]string) (failures.Page, []error) {
	page := failures.Page{Limit: 50}
	var errs []error
	var err error
	if v, ok := q["after"]; ok {
		if page.After, err = strconv.ParseInt(v, 10, 64); err != nil || page.After < 0 {
			errs = append(errs, invalid("after must be an id (a whole number) from the last page, got %q", v))
		}
	}
	if v, ok := q["limit"]; ok {
		if page.Limit, err = strconv.Atoi(v); err != nil || page.Limit < 1 || page.Limit > failures.MaxPage {
			errs = append(errs, invalid("limit must be 1 to %d, got %q", failures.MaxPage, v))
		}
	}
	return page, errs
}

// readTimes reads since and until, RFC 3339 times.
func readTimes(q map[string]string, since, until *time.Time) []error {
	var errs []error
	for name, to := range map[string]*time.Time{"since": since, "until": until} {
		if v, ok := q[name]; ok {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				errs = append(errs, invalid("%s must be an RFC 3339 time like 2026-12-01T10:00:00Z, got %q", name, v))
			}
			*to = t
		}
	}
	return errs
}

// readFilter reads the filter parameters of q; a status or a time that
// cannot be read is an error naming the parameter.
func readFilter(q map[string]string) (failures.Filter, error) {
	f := failures.Filter{FailedQueue: q["queue"], Handler: q["handler"], Reason: q["reason"], EventName: q["type"],
		EventID: q["event_id"], CorrelationID: q["correlation_id"], Fingerprint: q["group"], Status: failures.Status(q["status"]), Text: q["text"]}
	var errs []error
	if v, ok := q["ids"]; ok {
		for _, s := range strings.Split(v, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil || id < 1 {
				errs = append(errs, invalid("ids must be failure ids separated by commas, like 12,15; got %q", v))
				break
			}
			f.IDs = append(f.IDs, id)
		}
	}
	switch f.Status {
	case "", failures.Unresolved, failures.Redriving, failures.Resolved, failures.Archived, failures.Edited:
	default:
		errs = append(errs, invalid("status must be unresolved, redriving, resolved, archived or edited, got %q", f.Status))
	}
	errs = append(errs, readTimes(q, &f.Since, &f.Until)...)
	return f, errors.Join(errs...)
}

// invalid is an error of the request's, answered 400.
func invalid(format string, args ...any) error {
	return handlers.NewError(handlers.ErrInvalid, fmt.Sprintf(format, args...))
}
