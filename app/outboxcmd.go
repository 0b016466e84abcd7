package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/moenda/moenda/adapters/outbox"
)

// outboxParked runs `moenda outbox parked`: it lists the rows the relays
// parked, one a line, and says how many there are.
func outboxParked(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
	return withOutbox(ctx, cfg, stderr, func(p *resources) error {
		parked, n, err := outbox.ListParked(ctx, p.pool, 0)
		if err != nil {
			return err
		}
		if err := writeParked(stdout, parked, false); err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s parked\n", countRows(n))
		return err
	})
}

// outboxRepublish runs `moenda outbox republish`: it publishes the parked
// rows this configuration routes, through destinations made as serve
// makes its relays', and lists those still unroutable.
func outboxRepublish(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
	return withOutbox(ctx, cfg, stderr, func(p *resources) error {
		dests, err := p.republishDestinations(ctx)
		if err != nil {
			return err
		}
		res, err := outbox.Republish(ctx, p.pool, dests, p.top.Routable)
		if _, werr := fmt.Fprintf(stdout, "%s republished\n", countRows(res.Republished)); werr != nil && err == nil {
			err = werr
		}
		if err != nil {
			return err
		}
		if res.StillParked == 0 {
			return nil
		}
		if _, err := fmt.Fprintf(stdout, "%s still parked: this configuration cannot publish them\n", countRows(res.StillParked)); err != nil {
			return err
		}
		if err := writeParked(stdout, res.StillUnroutable, true); err != nil {
			return err
		}
		if shown := len(res.StillUnroutable); shown < res.StillParked {
			_, err = fmt.Fprintf(stdout, "(the first %d of %d: `moenda outbox parked` lists them all)\n", shown, res.StillParked)
		}
		return err
	})
}

// withOutbox connects to the outbox of cfg, as serve does (migrations
// applied), without a broker, and runs use on it; the connection closes
// when use returns.
func withOutbox(ctx context.Context, cfg *Resolved, stderr io.Writer, use func(*resources) error) (err error) {
	if cfg.inProcess() {
		return fmt.Errorf("outbox: this environment keeps its events in memory (broker.kind %s); there is no outbox, and nothing is parked", cfg.Broker.Kind)
	}
	p, err := openResources(ctx, cfg, cfg.Log.Logger(stderr))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, p.Close()) }()
	return use(p)
}

// republishDestinations makes a destination for each relay serve runs
// with cfg, keyed by its consumer group, with the broker's topology
// declared first (the configuration that now routes a parked row may add
// an exchange serve has not declared yet). Each connects on first use, so
// only a parked row of the Kafka relay needs Kafka reachable.
func (r *resources) republishDestinations(ctx context.Context) (map[string]outbox.Destination, error) {
	if err := r.connectTransports(); err != nil {
		return nil, err
	}
	if err := r.broker.Declare(ctx); err != nil {
		return nil, err
	}
	dests := map[string]outbox.Destination{}
	for _, t := range r.relayTargets() {
		dest, err := t.transport.Destination("moenda outbox republish")
		if err != nil {
			return nil, err
		}
		dests[t.group] = dest
	}
	return dests, nil
}

// writeParked writes parked rows as a table, one a line, with why each
// is still parked when detail is set.
func writeParked(w io.Writer, parked []outbox.Parked, detail bool) error {
	if len(parked) == 0 {
		return nil
	}
	rows := [][]string{{"EVENT ID", "EVENT NAME", "ROUTING KEY", "GROUP", "REASON", "PARKED AT"}}
	if detail {
		rows[0] = append(rows[0], "WHY")
	}
	for _, p := range parked {
		row := []string{p.EventID, orDash(p.EventName), orDash(p.RoutingKey), p.ConsumerGroup, p.Reason, p.ParkedAt.UTC().Format(time.RFC3339)}
		if detail {
			row = append(row, p.Detail)
		}
		rows = append(rows, row)
	}
	return writeTable(w, rows)
}

// countRows is "1 row" or "n rows".
func countRows(n int) string {
	if n == 1 {
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}

// slotsCommand is `outbox slots [--drop NAME]`.
func (c *cli) slotsCommand() *cobra.Command {
	var drop string
	cmd := c.command("slots", "list the logical relays' replication slots, with the WAL each keeps; --drop drops a retired one", func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		if drop != "" {
			return dropSlot(ctx, cfg, drop, stdout, stderr)
		}
		return outboxSlots(ctx, cfg, stdout, stderr)
	})
	cmd.Flags().StringVar(&drop, "drop", "", "drop the retired replication slot `NAME`")
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if cmd.Flags().Changed("drop") && drop == "" {
			return errors.New("outbox slots --drop needs a slot NAME")
		}
		return cobra.NoArgs(cmd, args)
	}
	return cmd
}

// outboxSlots runs `moenda outbox slots`: the logical relays' replication
// slots, one a line.
func outboxSlots(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
	return withOutbox(ctx, cfg, stderr, func(p *resources) error {
		slots, err := outbox.Slots(ctx, p.pool)
		if err != nil {
			return err
		}
		if len(slots) == 0 {
			_, err = fmt.Fprintln(stdout, "no replication slots: no relay of this database reads the outbox by logical replication")
			return err
		}
		rows := [][]string{{"SLOT", "GROUP", "ACTIVE", "RETAINED", "LAG", "WAL STATUS", "BACKFILLING"}}
		for _, s := range slots {
			rows = append(rows, []string{s.Name, orDash(s.ConsumerGroup), strconv.FormatBool(s.Active), outbox.ByteSize(s.RetainedBytes).String(),
				outbox.ByteSize(s.LagBytes).String(), s.WALStatus, strconv.FormatBool(s.Backfilling)})
		}
		return writeTable(stdout, rows)
	})
}

// dropSlot runs `moenda outbox slots --drop NAME`.
func dropSlot(ctx context.Context, cfg *Resolved, name string, stdout, stderr io.Writer) error {
	return withOutbox(ctx, cfg, stderr, func(p *resources) error {
		if err := outbox.DropSlot(ctx, p.pool, name); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "dropped %s: PostgreSQL keeps no WAL for it; a relay that streams its group again reads the outbox table from the group's position first\n", name)
		return err
	})
}
