package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/moenda/moenda/app/bench/clustered"
)

// clusterHeading opens the section `bench cluster` writes in
// BENCHMARKS.md; `bench --markdown` keeps it.
const clusterHeading = "## RabbitMQ cluster"

// clusterCommand is `bench cluster [--messages N] [--markdown FILE]`.
func (c *cli) clusterCommand() *cobra.Command {
	var messages int
	var markdown string
	cmd := c.command("cluster", "measure moenda's RabbitMQ clients on a quorum queue on three nodes and on one, beside the raw client, and a leader's death", func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		if messages < 1 {
			return errors.New("bench cluster: --messages must be at least 1")
		}
		dir, err := os.MkdirTemp("", "moenda-bench-cluster-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		rows, runErr := clustered.Run(ctx, clustered.Options{Messages: messages, Dir: dir, Logger: cfg.Log.Logger(stderr)})
		var section bytes.Buffer
		if err := clustered.Markdown(&section, clusterHeading, rows, "go run . bench cluster --markdown BENCHMARKS.md"); err != nil {
			return err
		}
		if _, err := stdout.Write(section.Bytes()); err != nil {
			return err
		}
		if runErr != nil {
			return runErr
		}
		if markdown == "" {
			return nil
		}
		old, err := os.ReadFile(markdown)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return os.WriteFile(markdown, []byte(replaceSection(string(old), clusterHeading, section.String())), 0o644)
	})
	cmd.Flags().IntVar(&messages, "messages", 10000, "how many messages each publish and consume measure of a round moves")
	cmd.Flags().StringVar(&markdown, "markdown", "", "rewrite the "+clusterHeading[3:]+" section of `FILE` (BENCHMARKS.md)")
	return cmd
}
