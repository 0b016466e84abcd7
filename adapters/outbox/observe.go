package outbox

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/moenda/moenda/adapters/tracing"
)

// relayStats count what a relay published, for its metrics.
type relayStats struct {
	rows, batches atomic.Int64
	duration      prometheus.Histogram
}

func newRelayStats(group string) *relayStats {
	return &relayStats{duration: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "moenda_relay_publish_duration_seconds",
		Help:        "From a batch's first publish to the broker's last confirm.",
		Buckets:     []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		ConstLabels: prometheus.Labels{"consumer_group": group},
	})}
}

var (
	descRows    = prometheus.NewDesc("moenda_relay_rows_published_total", "Outbox rows the relay published and the broker confirmed.", []string{"consumer_group"}, nil)
	descBatches = prometheus.NewDesc("moenda_relay_batches_total", "Batches the relay published.", []string{"consumer_group"}, nil)
	descLeader  = prometheus.NewDesc("moenda_relay_leader", "1 while this relay leads its consumer group (holds the group's lock or slot), 0 while it stands by.", []string{"consumer_group"}, nil)
)

// Describe implements prometheus.Collector. It describes nothing, as an
// unchecked collector: every relay of a process reports the same metrics,
// told apart by their consumer_group.
func (r *Relay) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (r *Relay) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descRows, prometheus.CounterValue, float64(r.stats.rows.Load()), r.cfg.ConsumerGroup)
	ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(r.stats.batches.Load()), r.cfg.ConsumerGroup)
	// Every replica reports its group, so a group whose replicas all say
	// 0 has no leader: nothing publishes its rows.
	leader := 0.0
	if r.Active() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader, r.cfg.ConsumerGroup)
	r.stats.duration.Collect(ch)
}

// Trace makes the relay continue the trace of each row written under one
// (its traceparent metadata) with a publish span, whose context the
// message then carries to its handler. Call it before Run.
func (r *Relay) Trace(tracer trace.Tracer) { r.tracer = tracer }

// outgoing is a batch of messages on its way to the destination: their
// publish spans started, and the destination's build of them where it
// builds apart from sending (PreparingDestination).
type outgoing struct {
	keys  []string
	msgs  []*message.Message
	spans []trace.Span
	built Prepared
	err   error // the build failed
}

// build starts a publish span for each message that carries a trace,
// before the destination builds what it sends from the message. Built
// while the batch before it is sent, a span also covers that wait.
func (r *Relay) build(ctx context.Context, keys []string, msgs []*message.Message) *outgoing {
	o := &outgoing{keys: keys, msgs: msgs}
	if r.tracer != nil {
		for i, msg := range msgs {
			parent := tracing.Extract(ctx, msg.Metadata)
			if !trace.SpanContextFromContext(parent).IsValid() {
				continue
			}
			sctx, span := r.tracer.Start(parent, "publish "+keys[i], trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
				attribute.String("messaging.system", "moenda"),
				attribute.String("messaging.message.id", msg.UUID),
				attribute.String("messaging.destination.name", keys[i]),
				attribute.String("moenda.consumer_group", r.cfg.ConsumerGroup),
			))
			tracing.Inject(sctx, msg.Metadata)
			o.spans = append(o.spans, span)
		}
	}
	if r.preparer != nil && len(msgs) > 0 {
		o.built, o.err = r.preparer.Prepare(keys, msgs)
	}
	return o
}

// drop ends the spans of a batch built but never sent: the relay's
// session ended first, and the next one publishes its rows.
func (o *outgoing) drop() {
	for _, span := range o.spans {
		span.SetStatus(codes.Error, "not sent: the relay's session ended first")
		span.End()
	}
}

// send publishes a batch through the destination, counting and timing
// it, and ends its spans.
func (r *Relay) send(ctx context.Context, o *outgoing) error {
	start := time.Now()
	err := o.err
	switch {
	case err != nil:
	case o.built != nil:
		err = o.built.Publish(ctx)
	default:
		err = r.dest.PublishBatch(ctx, o.keys, o.msgs)
	}
	r.stats.duration.Observe(time.Since(start).Seconds())
	for _, span := range o.spans {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	var partly *BatchError
	switch {
	case err == nil:
		r.stats.rows.Add(int64(len(o.msgs)))
		r.stats.batches.Add(1)
	case errors.As(err, &partly):
		r.stats.rows.Add(int64(len(o.msgs) - len(partly.Failed)))
	}
	return err
}
