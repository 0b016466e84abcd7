package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/app/replay"
	"github.com/moenda/moenda/handlers"
)

// replayCommand is `replay PLUGIN --from earliest|TIME`.
func (c *cli) replayCommand() *cobra.Command {
	var plugin, fromText string
	cmd := c.command("replay PLUGIN", "rebuild what a replayable plugin derived from events, reading them again from Kafka", func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		from, err := parseFrom(fromText)
		if err != nil {
			return err
		}
		return rebuild(ctx, cfg, plugin, from, stdout, stderr)
	})
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return fmt.Errorf("replay takes one PLUGIN, got %d arguments", len(args))
		}
		plugin = args[0]
		return nil
	}
	cmd.Flags().StringVar(&fromText, "from", "", "read the events from `earliest|TIME` (TIME in RFC 3339, like 2026-11-30T00:00:00Z)")
	_ = cmd.MarkFlagRequired("from") // the flag exists
	return cmd
}

// parseFrom reads --from: earliest (the zero time) or an RFC 3339 time.
func parseFrom(text string) (time.Time, error) {
	if text == "earliest" {
		return time.Time{}, nil
	}
	at, err := time.Parse(time.RFC3339, text)
	if err != nil {
		return time.Time{}, fmt.Errorf("replay: --from must be earliest or an RFC 3339 time like 2026-11-30T00:00:00Z, got %q", text)
	}
	return at, nil
}

// rebuild runs `moenda replay`: it connects what the plugin needs, fills an
// embedded cluster it had to start, and rebuilds the plugin's projection
// (see package replay) while it shows the progress.
func rebuild(ctx context.Context, cfg *Resolved, name string, from time.Time, stdout, stderr io.Writer) (err error) {
	if !cfg.usesKafka() {
		return errors.New("replay reads the event log in Kafka, which this environment does not use: set analytics.kafka.enabled: true (MOENDA_ANALYTICS__KAFKA__ENABLED=true) or broker.kind: kafka")
	}
	i := slices.IndexFunc(cfg.plugins, func(ep enabledPlugin) bool { return ep.def.Name == name && ep.def.Replayable })
	if i < 0 {
		var names []string
		for _, ep := range cfg.plugins {
			if ep.def.Replayable {
				names = append(names, ep.def.Name)
			}
		}
		return fmt.Errorf("replay: %q is not an enabled replayable plugin (these are: %s)", name, strings.Join(names, ", "))
	}
	ep := cfg.plugins[i]
	logger := cfg.Log.Logger(stderr)
	wlog := watermill.NewSlogLogger(logger)
	r, err := openResources(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.Close()) }()
	if err = r.connectTransports(); err != nil {
		return err
	}
	txr := postgres.NewTransactor(r.pool, outbox.New(r.top.Routable, wlog).Limit(cfg.maxEventBytes()))
	built, err := ep.def.Build(ep.cfg, handlers.Deps{Logger: logger, Tx: txr})
	if err != nil {
		return err
	}
	if built.Close != nil {
		r.onClose(built.Close)
	}
	if err = r.fillEmbedded(ctx); err != nil {
		return err
	}
	failures, err := r.kafka().Consumer()
	if err != nil {
		return err
	}

	run, err := replay.Start(ctx, replay.Deps{Kafka: cfg.Kafka, Topology: r.top, Store: txr, Sink: failures.Sink, Logger: logger}, ep.def, built, from)
	if err != nil {
		return err
	}
	began := time.Now()
	read, err := follow(ctx, name, run, stderr, logger)
	if err != nil {
		return fmt.Errorf("replay %s: %w", name, err)
	}
	took := time.Since(began)
	fromText := "earliest"
	if !from.IsZero() {
		fromText = from.Format(time.RFC3339)
	}
	_, err = fmt.Fprintf(stdout, "replay %s: %d events read from %s in %s (%.0f events/s); its projection is rebuilt\n",
		name, read, fromText, took.Round(time.Millisecond), float64(read)/max(took.Seconds(), 1e-3))
	return err
}

// fillEmbedded relays the outbox into an embedded cluster this process
// had to start (no serve process runs one), so the replay has a log to
// read; it returns once the relay has caught up, and leaves it running.
func (r *resources) fillEmbedded(ctx context.Context) error {
	if err := r.startEmbeddedKafka(ctx); err != nil || !r.embeddedStarted {
		return err
	}
	dest, err := r.kafka().Destination("moenda outbox relay")
	if err != nil {
		return err
	}
	cfg := r.cfg.Outbox
	cfg.ConsumerGroup = r.cfg.kafkaRelayGroup()
	relay, err := outbox.NewRelay(r.pool, dest, r.top.Routable, cfg, r.logger)
	if err != nil {
		return err
	}
	relayCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { _ = relay.Run(relayCtx); close(done) }()
	r.onClose(func() error { stop(); <-done; return nil })
	r.logger.Info("replay: filling the embedded cluster from the outbox")
	return await.Until(ctx, time.Hour, "the outbox to be relayed into the embedded cluster", func() (bool, error) {
		return outbox.CaughtUp(ctx, r.pool, cfg.ConsumerGroup)
	})
}

// follow reads the replay to its end, showing its progress: a bar on a
// terminal, a log line every two seconds otherwise. It returns how many
// events were read.
func follow(ctx context.Context, name string, run *replay.Replay, stderr io.Writer, logger *slog.Logger) (int64, error) {
	done := make(chan error, 1)
	go func() { done <- run.Read(ctx) }()
	_, total := run.Progress()
	var bar *progressbar.ProgressBar
	every := 2 * time.Second
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("replay "+name),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("events"),
			progressbar.OptionSetPredictTime(true), progressbar.OptionFullWidth(), progressbar.OptionClearOnFinish())
		every = 100 * time.Millisecond
	}
	began := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			read, _ := run.Progress()
			if bar != nil && err == nil {
				_ = bar.Finish()
			}
			return read, err
		case <-tick.C:
			read, _ := run.Progress()
			if bar != nil {
				_ = bar.Set64(read)
				continue
			}
			rate := float64(read) / time.Since(began).Seconds()
			args := []any{"plugin", name, "read", read, "of", total, "events_per_s", int(rate)}
			if rate > 0 {
				args = append(args, "eta", (time.Duration(float64(total-read)/rate) * time.Second).Round(time.Second))
			}
			logger.Info("replay: reading", args...)
		}
	}
}
