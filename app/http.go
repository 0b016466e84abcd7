package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/httpjson"
	"github.com/moenda/moenda/handlers/schema"
)

// CorrelationHeader carries the correlation id of a request; events
// published while serving it inherit it.
const CorrelationHeader = "X-Correlation-ID"

// builtPlugin is a plugin as the platform mounts it.
type builtPlugin struct {
	handlers.Plugin
	spec handlers.Spec
}

// handler routes HTTP: reads are open; publishing needs a publisher token
// and administration an admin token, once auth.enabled; plugin routes as
// their Spec.RouteAuth says. Every role answers the health checks and
// /metrics; the API is an api process's, and the administration (with the
// console on it) is there and on relays.
func (p *Platform) handler(plugins []builtPlugin) (http.Handler, error) {
	auth := newTokens(p.cfg.Auth, p.logger)
	auth.refused = p.auditRefusal
	r := chi.NewRouter()
	if p.metrics != nil {
		r.Use(p.metrics.measure)
	}
	if p.tracer != nil {
		r.Use(p.traced)
	}
	r.Use(middleware.Recoverer, p.correlate, p.limitBody)
	if p.metrics != nil {
		r.Method(http.MethodGet, "/metrics", p.metrics.handler())
	}
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", p.readyz)
	if p.role.api() || p.role.relay() {
		admin := chi.NewRouter()
		admin.Use(auth.administer)
		p.adminRoutes(admin)
		p.failureRoutes(admin)
		r.Mount("/v1/admin", admin)
		c, err := p.console(admin)
		if err != nil {
			return nil, err
		}
		r.Mount("/console", c.Handler())
	}
	if !p.role.api() {
		return r, nil
	}
	r.With(auth.require(RolePublisher, false)).Post("/v1/events", p.postEvent)
	r.Get("/v1/catalog", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, p.cfg.catalog(p.top))
	})
	r.Get("/v1/asyncapi.json", p.asyncAPI)
	for _, pl := range plugins {
		if pl.Routes == nil {
			continue
		}
		r.Group(func(r chi.Router) {
			if pl.spec.RouteAuth == handlers.AuthPublisher {
				r.Use(auth.require(RolePublisher, true))
			}
			pl.Routes(r)
		})
	}
	return r, nil
}

// asyncAPI serves the AsyncAPI document, built from the same sources as
// the catalog.
func (p *Platform) asyncAPI(w http.ResponseWriter, r *http.Request) {
	doc, err := p.cfg.asyncAPI(p.top)
	if err == nil {
		var body []byte
		if body, err = doc.JSON(); err == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(body)
			return
		}
	}
	httpjson.ServerError(w, r, p.logger, fmt.Errorf("the AsyncAPI document: %w", err))
}

// correlate takes the request's correlation id, or makes one, and returns
// it. The id travels into logs, response headers and AMQP properties, so a
// client's id is kept only when it is a plain token (validID); another is
// replaced, and the rejected value is logged quoted, never raw.
func (p *Platform) correlate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(CorrelationHeader)
		if !validID(id) {
			made := uuid.NewString()
			if id != "" {
				p.logger.InfoContext(r.Context(), "correlation id replaced: "+idRule,
					"rejected", strconv.Quote(cutBytes(id, maxIDLen)), "correlation_id", made)
			}
			id = made
		}
		w.Header().Set(CorrelationHeader, id)
		next.ServeHTTP(w, r.WithContext(event.WithCorrelation(r.Context(), id)))
	})
}

// maxIDLen bounds correlation and causation ids: AMQP caps the
// correlation_id property at 255 bytes (and longer ones are cut silently).
const maxIDLen = 128

// idRule is what validID accepts, in the words of the messages.
const idRule = "it must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'"

// validID reports whether id is 1 to maxIDLen characters of
// [A-Za-z0-9._:-]: safe in a log line, a header and an AMQP property.
func validID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// cutBytes shortens s to at most n bytes.
func cutBytes(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// limitBody caps request bodies at http.max_body_bytes; decoding a larger
// one answers 413.
func (p *Platform) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, p.cfg.HTTP.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// readyz answers 200 when PostgreSQL and the broker answer, 503 naming what
// does not otherwise. The topology was declared before the server started.
// It lists the process's relays, each leading, on standby, or standing by
// with the reason, and, where relays may stream, the replication slots:
// the WAL each keeps, and how far its relay lags. The answer is the
// platform's readiness, probed at most once per readyInterval however
// many ask (see shared); a request that ends first gets no answer.
func (p *Platform) readyz(w http.ResponseWriter, r *http.Request) {
	a, err := p.ready.get(r.Context(), p.probeReadiness)
	if err != nil {
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "error": "the readiness probe did not finish before the request ended: " + err.Error()})
		return
	}
	httpjson.Write(w, a.code, a.body)
}

// probeReadiness asks PostgreSQL and the broker, within ctx.
func (p *Platform) probeReadiness(ctx context.Context) readyAnswer {
	checks := map[string]string{}
	ok := true
	check := func(name string, err error) {
		checks[name] = "ok"
		if err != nil {
			checks[name] = err.Error()
			ok = false
		}
	}
	if p.pool != nil {
		check("postgres", p.pool.Ping(ctx))
	}
	if p.broker != nil { // an api process talks to no broker
		check("broker", p.broker.Ready(ctx))
	}
	status, code := "ready", http.StatusOK
	// A broker alarm stalls the relay, not the API: commits go on into
	// the outbox, so the process stays ready, and says it is degraded.
	if p.publishing != nil {
		if reason := p.publishing(); reason != "" {
			checks["broker_publishing"] = "blocked by RabbitMQ (" + reason + "): the relay waits, the outbox keeps the events"
			status = "degraded"
		}
	}
	// A relay standing by because its group reads another way leaves the
	// group to the relays that do: the process stays ready, degraded,
	// and says why.
	var relays []RelayState
	for _, r := range p.relays {
		s := relayStateOf(r)
		if s.State == "standing_by" {
			status = "degraded"
		}
		relays = append(relays, s)
	}
	// A queue the broker cannot serve (its node is down) stops its
	// handlers, not the process: the others go on.
	var unavailable map[string]string
	if p.role.worker() && p.broker != nil && checks["broker"] == "ok" {
		states, err := p.broker.Queues(ctx, p.consumedQueues())
		if err != nil && !errors.Is(err, transport.ErrNoDepths) {
			checks["broker_queues"] = err.Error()
			status = "degraded"
		}
		for name, st := range states {
			if st.Unavailable != "" {
				if unavailable == nil {
					unavailable = map[string]string{}
				}
				unavailable[name] = st.Unavailable
				status = "degraded"
			}
		}
	}
	if !ok {
		status, code = "unavailable", http.StatusServiceUnavailable
	}
	body := Readiness{Status: status, Checks: checks, Relays: relays, UnavailableQueues: unavailable}
	if p.ingests() {
		body.FailureIngest = map[bool]string{true: "leading", false: "standby"}[p.ingest.leads.Load()]
	}
	// A slot that holds back WAL does not make this process unready, but
	// the operator looking here should see it.
	if p.reader != "" && p.reader != outbox.ReaderPoll && p.pool != nil {
		slots, err := outbox.Slots(ctx, p.pool)
		if err != nil {
			body.Slots = err.Error()
		} else {
			body.Slots = slots
		}
	}
	return readyAnswer{code: code, body: body}
}

// RelayState is a relay of this process as /readyz shows it: leading,
// standby (another replica of its group leads), or standing_by with the
// reason (its group reads another way than this relay would).
type RelayState struct {
	ConsumerGroup string `json:"consumer_group"`
	Reader        string `json:"reader,omitempty"`
	State         string `json:"state"`
	Reason        string `json:"reason,omitempty"`
}

// relayStateOf is r as /readyz and the status page show it.
func relayStateOf(r *outbox.Relay) RelayState {
	s := RelayState{ConsumerGroup: r.ConsumerGroup(), Reader: r.Reader(), State: "standby"}
	switch s.Reason = r.Standby(); {
	case s.Reason != "":
		s.State = "standing_by"
	case r.Active():
		s.State = "leading"
	}
	return s
}

// eventsConsumer names POST /v1/events in the inbox, where its answers are
// remembered by event_id.
const eventsConsumer = "POST /v1/events"

// accepted is the answer to POST /v1/events; it is remembered with the
// event, so a repeated request gets it again.
type accepted struct {
	EventID       string `json:"event_id"`
	EventName     string `json:"event_name"`
	CorrelationID string `json:"correlation_id"`
	Exchange      string `json:"exchange"`
	RoutingKey    string `json:"routing_key"`
}

// postEvent publishes an envelope through the outbox. event_id and
// occurred_at are filled in when absent, correlation_id from the request.
// The answer is remembered under event_id in the same unit of work, so a
// client that repeats the request (after a cut connection) gets 200 with
// the first answer and publishes nothing twice; another event under a used
// event_id gets 409.
func (p *Platform) postEvent(w http.ResponseWriter, r *http.Request) {
	var e event.Event
	if !httpjson.DecodeTolerant(w, r, &e) {
		return
	}
	if err := checkSent(e); err != nil {
		httpjson.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	occurredSent := !e.OccurredAt.IsZero()
	if e.ID == "" {
		e.ID = uuid.NewString()
	}
	if !occurredSent {
		e.OccurredAt = time.Now().UTC()
	}
	e = event.Stamp(r.Context(), e)
	if err := e.Validate(); err != nil {
		httpjson.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	exchange, err := p.top.ExchangeFor(e.RoutingKey())
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, "event_name "+e.Name+": "+err.Error())
		return
	}
	if check := p.cfg.payloads[e.Name]; check != nil {
		var mismatch *schema.Mismatch
		switch err := check.Check(e.Payload); {
		case errors.As(err, &mismatch):
			httpjson.Error(w, http.StatusUnprocessableEntity, fmt.Sprintf("payload does not match the type of %s: %s (GET /v1/asyncapi.json has its schema)", e.Name, mismatch))
			return
		case err != nil:
			httpjson.ServerError(w, r, p.logger, fmt.Errorf("publish event %s: %w", e.ID, err))
			return
		}
	}
	fp, err := fingerprint(e, occurredSent)
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	answer := accepted{EventID: e.ID, EventName: e.Name, CorrelationID: e.CorrelationID, Exchange: exchange, RoutingKey: e.RoutingKey()}
	body, err := json.Marshal(answer)
	if err != nil {
		httpjson.ServerError(w, r, p.logger, fmt.Errorf("publish event %s: encode the answer: %w", e.ID, err))
		return
	}
	var earlier *handlers.Receipt
	err = p.tx.InTx(r.Context(), func(ctx context.Context, tx handlers.Tx) error {
		var err error
		earlier, err = tx.Remember(ctx, handlers.Receipt{Consumer: eventsConsumer, Key: e.ID, Fingerprint: fp, Answer: body})
		if err != nil || earlier != nil {
			return err
		}
		return tx.Publish(ctx, e)
	})
	if err != nil {
		httpjson.ServerError(w, r, p.logger, fmt.Errorf("publish event %s: %w", e.ID, err))
		return
	}
	switch {
	case earlier == nil:
		httpjson.Write(w, http.StatusAccepted, answer)
	case !bytes.Equal(earlier.Fingerprint, fp):
		httpjson.Error(w, http.StatusConflict, fmt.Sprintf("event_id %s was already used for another event; send this one with a new event_id", e.ID))
	default:
		var first accepted
		if err := json.Unmarshal(earlier.Answer, &first); err != nil {
			httpjson.ServerError(w, r, p.logger, fmt.Errorf("event %s: read the remembered answer: %w", e.ID, err))
			return
		}
		httpjson.Write(w, http.StatusOK, first)
	}
}

// maxNameLen bounds event_name: AMQP caps the type property and the routing
// key at 255 bytes, and the client library cuts longer ones without a word,
// which would route the event by a key nobody chose.
const maxNameLen = 255

// checkSent checks what the client set in the envelope that Validate
// does not, or not strictly enough for the stores and the broker: an
// event_id that is a UUID in its 36-character form (the outbox key),
// an event_name AMQP can carry, ids that are safe to log and to send.
func checkSent(e event.Event) error {
	var errs []error
	if e.ID != "" {
		if _, err := uuid.Parse(e.ID); err != nil || len(e.ID) != 36 {
			errs = append(errs, fmt.Errorf("event_id %q is not a UUID like 550e8400-e29b-41d4-a716-446655440000", cutBytes(e.ID, 64)))
		}
	}
	if len(e.Name) > maxNameLen {
		errs = append(errs, fmt.Errorf("event_name is longer than %d bytes", maxNameLen))
	}
	if e.CorrelationID != "" && !validID(e.CorrelationID) {
		errs = append(errs, errors.New("correlation_id is not a valid id: "+idRule))
	}
	if e.CausationID != "" && !validID(e.CausationID) {
		errs = append(errs, errors.New("causation_id is not a valid id: "+idRule))
	}
	return errors.Join(errs...)
}

// fingerprint identifies the event a client asked to publish, to tell a
// repeat of the request from another event under a used event_id: the
// name, the payload without blanks, the source, the causation id, and
// occurred_at when the client sent it (else each request makes its own).
// The correlation id is left out: a retry may carry another.
func fingerprint(e event.Event, occurredSent bool) ([]byte, error) {
	var payload bytes.Buffer
	if err := json.Compact(&payload, e.Payload); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	occurred := ""
	if occurredSent {
		occurred = e.OccurredAt.UTC().Format(time.RFC3339Nano)
	}
	h := sha256.New()
	for _, f := range []string{e.Name, payload.String(), e.Source, e.CausationID, occurred} {
		fmt.Fprintf(h, "%d:%s;", len(f), f) // length-prefixed: no two field lists hash alike
	}
	return h.Sum(nil), nil
}
