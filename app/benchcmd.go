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

// serveBinary is the moenda binary a command runs serve processes of: the
// --serve-bin flag's, else this one.
func serveBinary(command, flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%s: find the moenda binary (set --serve-bin): %w", command, err)
	}
	return exe, nil
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

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
		bin, err := serveBinary("bench", *serveBin)
		if err != nil {
			return err
		}
		res, runErr := bench.Run(ctx, bench.Options{
			Quick:       *quick,
			ServeBin:    bin,
			PostgresURL: cfg.Postgres.URL,
			AMQPURL:     cfg.AMQP.Nodes()[0],
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
			// The scale-out section comes from its own command: keep it.
			old, _ := os.ReadFile(*markdown)
			scale := sectionOf(string(old), scaleHeading)
			cmd := "go run . bench --markdown " + filepath.Base(*markdown)
			if err := writeFile(*markdown, func(w io.Writer) error {
				if err := res.WriteMarkdown(w, cmd); err != nil {
					return err
				}
				if scale != "" {
					_, err := io.WriteString(w, "\n"+scale)
					return err
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if *asJSON {
			return res.WriteJSON(stdout)
		}
		return res.WriteTable(stdout)
	}, true
}
