package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/moenda/moenda/app/bench"
)

// benchCommand parses `bench`'s own flags and returns the command.
func benchCommand(args []string) (func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error, bool) {
	fl := flag.NewFlagSet("bench", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	quick := fl.Bool("quick", false, "")
	asJSON := fl.Bool("json", false, "")
	markdown := fl.String("markdown", "", "")
	serveBin := fl.String("serve-bin", "", "")
	if err := fl.Parse(args); err != nil || fl.NArg() > 0 {
		return nil, false
	}
	return func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		if cfg.Broker.Kind != BrokerAMQP {
			return errors.New("bench: measures PostgreSQL and RabbitMQ; run it in an environment with broker.kind amqp (local, compose)")
		}
		bin := *serveBin
		if bin == "" {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("bench: find the moenda binary (set --serve-bin): %w", err)
			}
			bin = exe
		}
		res, runErr := bench.Run(ctx, bench.Options{
			Quick:       *quick,
			ServeBin:    bin,
			PostgresURL: cfg.Postgres.URL,
			AMQPURL:     cfg.AMQP.URL,
			Settings:    bench.Settings{AMQP: cfg.AMQP, Outbox: cfg.Outbox, Router: cfg.Router, Failure: cfg.Topology.Failure},
			Kafka:       cfg.Kafka,
			Logger:      cfg.Log.Logger(stderr),
		})
		if runErr != nil {
			if res != nil && len(res.Rows) > 0 {
				_ = res.WriteTable(stdout) // what was measured before the failure
			}
			return runErr
		}
		if *markdown != "" {
			f, err := os.Create(*markdown)
			if err != nil {
				return err
			}
			if err := res.WriteMarkdown(f, "go run . bench --markdown "+filepath.Base(*markdown)); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
		if *asJSON {
			return res.WriteJSON(stdout)
		}
		return res.WriteTable(stdout)
	}, true
}
