package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/moenda/moenda/app/bench"
)

// tool holds the flags the commands that run serve processes share
// (bench, bench scale, faults), and the checks they make before they run.
type tool struct {
	name     string // the command, for its errors
	markdown string
	jsonFile string
	dir      string
	serveBin string
}

// flags adds --markdown and --serve-bin, and, with files, --json FILE and
// --dir DIR.
func (t *tool) flags(cmd *cobra.Command, markdown string, files bool) {
	f := cmd.Flags()
	f.StringVar(&t.markdown, "markdown", "", markdown)
	f.StringVar(&t.serveBin, "serve-bin", "", "the moenda `BINARY` whose serve processes run (default: this one)")
	if files {
		f.StringVar(&t.jsonFile, "json", "", "write the results as JSON to `FILE`")
		f.StringVar(&t.dir, "dir", "", "keep the serve processes' logs and files in `DIR` (default: a new directory under the system's temporary one)")
	}
}

// binary checks that cfg runs on PostgreSQL and RabbitMQ (what the tool
// measures or injects faults into; why says so) and returns the moenda
// binary to run serve processes of: --serve-bin's, else this one.
func (t *tool) binary(cfg *Resolved, why string) (string, error) {
	if cfg.Broker.Kind != BrokerAMQP {
		return "", fmt.Errorf("%s: %s; run it in an environment with broker.kind amqp (local, compose)", t.name, why)
	}
	if t.serveBin != "" {
		return t.serveBin, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%s: find the moenda binary (set --serve-bin): %w", t.name, err)
	}
	return exe, nil
}

// keep is --dir, else a new directory named after the tool and id under
// the system's temporary one.
func (t *tool) keep(id any) string {
	if t.dir != "" {
		return t.dir
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("moenda-%s-%v", strings.ReplaceAll(t.name, " ", "-"), id))
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

// keptHeadings open the sections of BENCHMARKS.md that `bench --markdown`
// keeps: `bench scale`'s and `bench cluster`'s, and the design
// measurements written by hand.
var keptHeadings = []string{scaleHeading, clusterHeading, "## Design measurements"}

// keptSections is what `bench --markdown` writes after the results: the
// kept sections of doc, each after one blank line, whatever blank lines
// ended it, so that a file rewritten again and again stays the same.
func keptSections(doc string) string {
	var b strings.Builder
	for _, heading := range keptHeadings {
		if kept := sectionOf(doc, heading); kept != "" {
			b.WriteString("\n" + strings.TrimRight(kept, "\n") + "\n")
		}
	}
	return b.String()
}

// benchCommand is `bench [--quick] [--json] [--markdown FILE]`, with
// `bench scale` under it.
func (c *cli) benchCommand() *cobra.Command {
	t := &tool{name: "bench"}
	var quick, asJSON bool
	var only []string
	cmd := c.command("bench", "measure moenda against the raw clients on the servers of the configuration", func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		bin, err := t.binary(cfg, "measures PostgreSQL and RabbitMQ")
		if err != nil {
			return err
		}
		if len(only) > 0 && t.markdown != "" {
			return fmt.Errorf("bench: --markdown writes the whole table, and --step runs part of it; use --json or the table, and copy the rows")
		}
		res, runErr := bench.Run(ctx, bench.Options{
			Quick:       quick,
			ServeBin:    bin,
			PostgresURL: cfg.Postgres.URL,
			AMQPURL:     cfg.AMQP.Nodes()[0],
			Settings:    bench.Settings{AMQP: cfg.AMQP, Outbox: cfg.Outbox, Router: cfg.Router, Failure: cfg.Topology.Failure, Failures: cfg.Failures},
			Kafka:       cfg.Kafka,
			Steps:       only,
			Logger:      cfg.Log.Logger(stderr),
		})
		if runErr != nil {
			if res != nil && len(res.Rows) > 0 {
				_ = res.WriteTable(stdout) // what was measured before the failure
			}
			return runErr
		}
		if t.markdown != "" {
			// The scale-out section comes from its own command, and the
			// design measurements are written by hand: keep them.
			old, _ := os.ReadFile(t.markdown)
			rerun := "go run . bench --markdown " + filepath.Base(t.markdown)
			if err := writeFile(t.markdown, func(w io.Writer) error {
				if err := res.WriteMarkdown(w, rerun); err != nil {
					return err
				}
				_, err := io.WriteString(w, keptSections(string(old)))
				return err
			}); err != nil {
				return err
			}
		}
		if asJSON {
			return res.WriteJSON(stdout)
		}
		return res.WriteTable(stdout)
	})
	t.flags(cmd, "write the results to `FILE` (BENCHMARKS.md), keeping its Scale-out and Design measurements sections", false)
	cmd.Flags().BoolVar(&quick, "quick", false, "a shorter run, with fewer rows")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON instead of a table")
	cmd.Flags().StringArrayVar(&only, "step", nil, "run only the step named `NAME` (as in app/bench's steps, such as \"failure workbench\"); repeatable")
	cmd.AddCommand(c.scaleCommand(), c.clusterCommand(), rawPublishCommand(), kafkaClusterCommand())
	return cmd
}

// rawPublishCommand is the raw client of the bench's publish ceiling, run
// by the bench as a process of its own so that its CPU is measured apart
// (bench.RawPublish). It reads its job, JSON, from standard input.
func rawPublishCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "raw-publish",
		Short:  "publish as the bench's raw client, the job read as JSON from standard input",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE:   func(cmd *cobra.Command, _ []string) error { return bench.RawPublish(cmd.Context(), cmd.InOrStdin()) },
	}
}

// kafkaClusterCommand is the embedded Kafka cluster of the bench's Kafka
// step, run by the bench as a process of its own (bench.KafkaCluster). It
// reads its settings, JSON, from standard input, and ends with it.
func kafkaClusterCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "kafka-cluster",
		Short:  "run the bench's embedded Kafka cluster, its settings read as JSON from standard input, until that input ends",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.KafkaCluster(cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}
