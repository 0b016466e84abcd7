package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/moenda/moenda/adapters/redrive"
)

// redriveCommand is `redrive plan|start|status|pause|resume|cancel`: the
// API's re-drives over the same code. A serve process that ingests (a
// relay, with failures.enabled) sends them.
func (c *cli) redriveCommand() *cobra.Command {
	plan := &cobra.Command{Use: "plan", Short: "say what a re-drive of the failures the flags select would send, by group and queue, and what it would skip, and why", Args: cobra.NoArgs}
	psel, pset := addSelectionFlags(plan), addRedriveFlags(plan)
	plan.RunE = c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		return withWorkbench(ctx, cfg, stderr, func(b *workbench) error {
			p, _, err := b.plan(ctx, redriveParamsOf(psel, pset), cfg.Failures.MaxRedrives)
			if err != nil {
				return err
			}
			return writePlan(stdout, p)
		})
	})

	start := &cobra.Command{Use: "start", Short: "re-drive the failures the flags select: plan, confirm, then follow it (--detach: leave it running)", Args: cobra.NoArgs}
	ssel, sset := addSelectionFlags(start), addRedriveFlags(start)
	yes := start.Flags().Bool("yes", false, "start without asking (scripts: a terminal is asked)")
	detach := start.Flags().Bool("detach", false, "start it and return; `redrive status ID` follows it")
	start.RunE = c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		params := redriveParamsOf(ssel, sset)
		return withWorkbench(ctx, cfg, stderr, func(b *workbench) error {
			p, _, err := b.plan(ctx, params, cfg.Failures.MaxRedrives)
			if err != nil {
				return err
			}
			if err := writePlan(stdout, p); err != nil {
				return err
			}
			if err := confirm(stdout, *yes, fmt.Sprintf("re-drive %d failures?", p.Send)); err != nil {
				return err
			}
			id, _, err := b.startRedrive(ctx, c.caller(), params, cfg.Failures.MaxRedrives)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "re-drive %d started\n", id)
			if *detach {
				return nil
			}
			return followRedrive(ctx, b, id, stdout, stderr)
		})
	})

	status := &cobra.Command{Use: "status [ID]", Short: "list the re-drives, or show one", Args: cobra.MaximumNArgs(1)}
	asJSON := status.Flags().Bool("json", false, "print each re-drive as a line of JSON")
	status.RunE = func(cmd *cobra.Command, args []string) error {
		return c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
			return withWorkbench(ctx, cfg, stderr, func(b *workbench) error {
				var rds []redrive.Redrive
				if len(args) == 0 {
					all, err := b.redrives.List(ctx)
					if err != nil {
						return err
					}
					rds = all
				} else {
					id, err := redriveID(args[0])
					if err != nil {
						return err
					}
					rd, err := b.getRedrive(ctx, id)
					if err != nil {
						return err
					}
					rds = []redrive.Redrive{rd}
				}
				if *asJSON {
					return jsonLines(stdout, rds)
				}
				return writeRows(stdout, []string{"ID", "STATE", "BY", "CREATED", "SENT/PLANNED", "HANDLED", "FAILED AGAIN", "SKIPPED", "REASON"}, rds, redriveRow)
			})
		})(cmd, args)
	}

	cmds := []*cobra.Command{plan, start, status}
	for _, verb := range slices.Sorted(maps.Keys(redriveMoves)) {
		cmd := &cobra.Command{Use: verb + " ID", Short: verb + " a re-drive", Args: cobra.ExactArgs(1)}
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			id, err := redriveID(args[0])
			if err != nil {
				return err
			}
			return c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
				return withWorkbench(ctx, cfg, stderr, func(b *workbench) error {
					rd, err := b.moveRedrive(ctx, c.caller(), id, verb)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(stdout, "re-drive %d is %s\n", rd.ID, rd.State)
					return err
				})
			})(cmd, args)
		}
		cmds = append(cmds, cmd)
	}
	return group("redrive", "send failures of the ledger back to the queues that failed them, by plan", cmds...)
}

// caller is who the command line acts as, in the audit.
func (c *cli) caller() Caller {
	return Caller{Name: "cli:" + orDash(lookup(c.environ, "USER")), Role: RoleAdmin}
}

// addRedriveFlags adds --to, --canary, --rate and --max.
func addRedriveFlags(cmd *cobra.Command) map[string]*string {
	return map[string]*string{
		"to":     cmd.Flags().String("to", "", "send to `queue:NAME`, or to the original-exchange (every queue bound there), instead of the queue each failure failed in"),
		"canary": cmd.Flags().String("canary", "", "send the first `N` alone, and the rest only once each is handled"),
		"rate":   cmd.Flags().String("rate", "", "send `N` failures a second at most"),
		"max":    cmd.Flags().String("max", "", "send `N` failures at most"),
	}
}

// redriveParamsOf is the selection and re-drive flags given, as the API's
// parameters.
func redriveParamsOf(sel selectionFlags, set map[string]*string) map[string]string {
	params := map[string]string{}
	for _, flags := range []map[string]*string{sel, set} {
		for name, v := range flags {
			if *v != "" {
				params[name] = *v
			}
		}
	}
	return params
}

func redriveID(arg string) (int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("the re-drive id must be a positive whole number (see `moenda redrive status`), got %q", arg)
	}
	return id, nil
}

func redriveRow(rd redrive.Redrive) []string {
	c := rd.Counters
	done := c.Sent + c.Handled + c.FailedAgain + c.Unsettled
	return []string{strconv.FormatInt(rd.ID, 10), string(rd.State), rd.Actor, rd.CreatedAt.Format(time.RFC3339),
		fmt.Sprintf("%d/%d", done, c.Planned-c.Skipped), strconv.Itoa(c.Handled), strconv.Itoa(c.FailedAgain), strconv.Itoa(c.Skipped), orDash(rd.Reason)}
}

// writePlan prints a plan.
func writePlan(w io.Writer, p redrive.Plan) error {
	fmt.Fprintf(w, "%d selected, %d to send\n", p.Selected, p.Send)
	for _, part := range []struct {
		what   string
		counts map[string]int
	}{{"queue", p.ByQueue}, {"group", p.ByGroup}, {"skipped", p.Skipped}} {
		for _, k := range slices.Sorted(maps.Keys(part.counts)) {
			fmt.Fprintf(w, "  %s %s: %d\n", part.what, k, part.counts[k])
		}
	}
	return nil
}

// confirm asks question on a terminal unless yes; off a terminal it
// needs yes.
func confirm(w io.Writer, yes bool, question string) error {
	if yes {
		return nil
	}
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return errors.New("not on a terminal, nothing can ask: add --yes to start it")
	}
	fmt.Fprintf(w, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("not started")
	}
	return nil
}

// followRedrive shows the re-drive's progress until it is done (nil),
// paused or cancelled (an error saying why), or ctx ends.
func followRedrive(ctx context.Context, b *workbench, id int64, stdout, stderr io.Writer) error {
	var bar *progressbar.ProgressBar
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	for {
		rd, err := b.getRedrive(ctx, id)
		if err != nil {
			return err
		}
		c := rd.Counters
		settled := c.Handled + c.FailedAgain + c.Unsettled
		if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			if bar == nil {
				bar = progressbar.NewOptions(c.Planned-c.Skipped, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription(fmt.Sprintf("re-drive %d", id)),
					progressbar.OptionShowCount(), progressbar.OptionFullWidth(), progressbar.OptionClearOnFinish())
			}
			_ = bar.Set(settled)
		} else if line := fmt.Sprintf("%s: %d handled, %d failed again, %d sent, %d pending", rd.State, c.Handled, c.FailedAgain, c.Sent, c.Pending); line != last {
			fmt.Fprintln(stdout, line)
			last = line
		}
		switch rd.State {
		case redrive.Done:
			if bar != nil {
				_ = bar.Finish()
			}
			_, err := fmt.Fprintf(stdout, "re-drive %d done: %d handled, %d failed again, %d unsettled, %d skipped\n", id, c.Handled, c.FailedAgain, c.Unsettled, c.Skipped)
			return err
		case redrive.Paused, redrive.Cancelled:
			return fmt.Errorf("re-drive %d is %s: %s (moenda redrive resume %d)", id, rd.State, orDash(rd.Reason), id)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// journeyCommand is `journey EVENT_ID` (or --correlation-id ID): an
// event's life, from its outbox row to each queue's handling, with its
// failures and re-drives.
func (c *cli) journeyCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "journey [EVENT_ID]", Short: "an event's life: its outbox row and relays, each queue's handling, its failures and re-drives", Args: cobra.MaximumNArgs(1)}
	corr := cmd.Flags().String("correlation-id", "", "the journeys of every event of correlation `ID`")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id := ""
		if len(args) == 1 {
			id = args[0]
		}
		if (id == "") == (*corr == "") {
			return errors.New("give an EVENT_ID or --correlation-id, one of them")
		}
		return c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
			return withWorkbench(ctx, cfg, stderr, func(b *workbench) error {
				js, err := b.journeys(ctx, id, *corr)
				if err != nil {
					return err
				}
				for _, j := range js {
					writeJourney(stdout, j)
				}
				if len(js) == 0 {
					_, err = fmt.Fprintln(stdout, "no such event in the outbox, the inbox or the ledger")
				}
				return err
			})
		})(cmd, args)
	}
	return cmd
}

// writeJourney prints a journey, a line a step.
func writeJourney(w io.Writer, j journey) {
	fmt.Fprintf(w, "event %s %s\n", j.EventID, orDash(j.EventName))
	if o := j.Outbox; o != nil {
		fmt.Fprintf(w, "  committed to the outbox at %s\n", o.CommittedAt.Format(time.RFC3339Nano))
		for _, g := range o.Groups {
			switch {
			case g.Parked != "":
				fmt.Fprintf(w, "  relay %s: parked (%s)\n", g.Group, g.Parked)
			case g.Passed:
				fmt.Fprintf(w, "  relay %s: published\n", g.Group)
			default:
				fmt.Fprintf(w, "  relay %s: not yet\n", g.Group)
			}
		}
	} else {
		fmt.Fprintln(w, "  not in the outbox (a foreign publisher's, or pruned)")
	}
	for _, q := range j.Queues {
		if q.Handled {
			fmt.Fprintf(w, "  queue %s: handled at %s\n", q.Queue, q.HandledAt.Format(time.RFC3339Nano))
		} else {
			fmt.Fprintf(w, "  queue %s: not handled\n", q.Queue)
		}
	}
	for _, f := range j.Failures {
		fmt.Fprintf(w, "  failure %d on %s: %s, %s (%d occurrences), last at %s: %s\n", f.ID, f.FailedQueue, f.Status, f.Reason, f.Occurrences,
			f.LastFailureAt.Format(time.RFC3339Nano), oneLine(f.Error, 120))
	}
	for _, r := range j.Redrives {
		fmt.Fprintf(w, "  re-drive %d to %s: %s %s\n", r.RedriveID, r.Queue, r.State, r.Reason)
	}
}
