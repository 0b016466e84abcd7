package app

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/moenda/moenda/app/faults"
)

// faultsCommand is `faults [--quick] [--only T03,T11] [--list] [--seed N]
// [--markdown FILE] [--json FILE] [--dir DIR]`.
func (c *cli) faultsCommand() *cobra.Command {
	t := &tool{name: "faults"}
	var quick, list bool
	var only string
	var seed uint64
	cmd := c.command("faults", "inject faults into the local PostgreSQL and RabbitMQ and check that nothing is lost or applied twice", func(ctx context.Context, cfg *Resolved, stdout, _ io.Writer) error {
		var ids []string
		if only != "" {
			ids = strings.Split(only, ",")
		}
		selected, err := faults.Selected(quick, ids)
		if err != nil {
			return err
		}
		if list {
			titles := map[string]string{}
			for _, fc := range faults.Cases() {
				titles[fc.ID] = fc.Title
			}
			for _, id := range selected {
				fmt.Fprintf(stdout, "%s\t%s\n", id, titles[id])
			}
			return nil
		}
		bin, err := t.binary(cfg, "injects faults into PostgreSQL and RabbitMQ")
		if err != nil {
			return err
		}
		s := seed
		if s == 0 {
			s = uint64(time.Now().UnixNano())
		}
		results, err := faults.Run(ctx, faults.Options{Quick: quick, Only: ids, Seed: s, ServeBin: bin,
			PostgresURL: cfg.Postgres.URL, AMQPURL: cfg.AMQP.Nodes()[0], Dir: t.keep(s), Progress: stdout})
		if t.jsonFile != "" {
			if werr := writeFile(t.jsonFile, func(w io.Writer) error { return faults.WriteJSON(w, results) }); werr != nil {
				return werr
			}
		}
		if t.markdown != "" && err == nil {
			cmd := "go run . faults --seed " + fmt.Sprint(s) + " --markdown " + filepath.Base(t.markdown)
			if only != "" {
				cmd += " --only " + only
			}
			if werr := writeFile(t.markdown, func(w io.Writer) error { return faults.WriteMarkdown(w, results, s, cmd) }); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
		sum := faults.Summarize(results)
		fmt.Fprintf(stdout, "faults: %d passed, %d failed, %d not run here; attempted %d, confirmed %d, lost %d, duplicate effects %d\n",
			sum.Passed, sum.Failed, sum.NotRun, sum.Attempted, sum.Confirmed, sum.Lost, sum.DuplicateEffects)
		if sum.Failed > 0 {
			var failed []string
			for _, r := range results {
				if !r.Pass && r.NotRun == "" {
					failed = append(failed, r.ID)
				}
			}
			return fmt.Errorf("faults: %d case(s) failed; re-run them with --seed %d --only %s", sum.Failed, s, strings.Join(failed, ","))
		}
		return nil
	})
	cmd.Long = `Inject faults into the local PostgreSQL and RabbitMQ (it restarts and
kills them) and check that nothing is lost or applied twice; --markdown
writes RELIABILITY.md.`
	t.flags(cmd, "write the report to `FILE` (RELIABILITY.md) when every case ran", true)
	cmd.Flags().BoolVar(&quick, "quick", false, "run the quick set of cases only")
	cmd.Flags().BoolVar(&list, "list", false, "list the cases the other flags select (ID, a tab, the title), and run none")
	cmd.Flags().StringVar(&only, "only", "", "run only the cases `T03,T11` (comma-separated)")
	cmd.Flags().Uint64Var(&seed, "seed", 0, "the random seed `N`, to repeat a run (default: the time)")
	return cmd
}
