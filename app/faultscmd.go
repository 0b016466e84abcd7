package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moenda/moenda/app/faults"
)

// faultsCommand parses `faults`'s own flags and returns the command.
func faultsCommand(args []string) (func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error, bool) {
	fl := flag.NewFlagSet("faults", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	quick := fl.Bool("quick", false, "")
	only := fl.String("only", "", "")
	seed := fl.Uint64("seed", 0, "")
	markdown := fl.String("markdown", "", "")
	asJSON := fl.String("json", "", "")
	dir := fl.String("dir", "", "")
	serveBin := fl.String("serve-bin", "", "")
	if err := fl.Parse(args); err != nil || fl.NArg() > 0 {
		return nil, false
	}
	return func(ctx context.Context, cfg *Resolved, stdout, _ io.Writer) error {
		if cfg.Broker.Kind != BrokerAMQP {
			return errors.New("faults: injects faults into PostgreSQL and RabbitMQ; run it in an environment with broker.kind amqp (local, compose)")
		}
		bin, err := serveBinary("faults", *serveBin)
		if err != nil {
			return err
		}
		s := *seed
		if s == 0 {
			s = uint64(time.Now().UnixNano())
		}
		var ids []string
		if *only != "" {
			ids = strings.Split(*only, ",")
		}
		if _, err := faults.Selected(*quick, ids); err != nil {
			return err
		}
		keep := *dir
		if keep == "" {
			keep = filepath.Join(os.TempDir(), fmt.Sprintf("moenda-faults-%d", s))
		}
		results, err := faults.Run(ctx, faults.Options{Quick: *quick, Only: ids, Seed: s, ServeBin: bin,
			PostgresURL: cfg.Postgres.URL, AMQPURL: cfg.AMQP.Nodes()[0], Dir: keep, Progress: stdout})
		if *asJSON != "" {
			if werr := writeFile(*asJSON, func(w io.Writer) error { return faults.WriteJSON(w, results) }); werr != nil {
				return werr
			}
		}
		if *markdown != "" && err == nil {
			cmd := "go run . faults --seed " + fmt.Sprint(s) + " --markdown " + filepath.Base(*markdown)
			if werr := writeFile(*markdown, func(w io.Writer) error { return faults.WriteMarkdown(w, results, s, cmd) }); werr != nil {
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
	}, true
}
