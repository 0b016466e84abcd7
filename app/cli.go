// Package app is moenda's composition root: it loads and validates the
// configuration, wires adapters, router and plugins together, serves HTTP
// and runs the command line.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/migrations"
)

const usage = `usage: moenda [--env ENV] [--config-dir DIR] [--config FILE]... COMMAND

Commands:
  serve [--role all|api|worker|relay]
                   run the HTTP API, the consumers and the outbox relay
                   (all, the default), or one of them: api serves the
                   HTTP API, worker runs the plugins' handlers, relay
                   moves the outbox to the broker
  migrate up       apply pending database migrations
  topology print   print the exchanges, queues and bindings serve declares
  config print     print the resolved configuration
  health           exit 0 when the local serve answers /readyz with 200
                   (for container healthchecks)
  outbox parked    list the outbox rows the relays set aside: rows that
                   name no event, or whose routing key no exchange carries
  outbox republish publish the parked rows this configuration now routes;
                   list the others, which stay parked
  outbox slots [--drop NAME]
                   list the logical relays' replication slots, with the
                   WAL each keeps; --drop drops a retired one
  replay PLUGIN --from earliest|TIME
                   rebuild what a replayable plugin derived from events,
                   reading them again from Kafka (TIME in RFC 3339)
  bench [--quick] [--json] [--markdown FILE]
                   measure moenda against the raw clients on the servers
                   of the configuration; --markdown writes BENCHMARKS.md
  bench scale [--markdown FILE] [--json FILE] [--dir DIR]
                   measure api, relay and 1 then 3 worker processes, and
                   their exits on SIGTERM under load; --markdown rewrites
                   BENCHMARKS.md's Scale-out section
  faults [--quick] [--only T03,T11] [--seed N] [--markdown FILE] [--json FILE] [--dir DIR]
                   inject faults into the local PostgreSQL and RabbitMQ
                   (it restarts and kills them) and check that nothing
                   is lost or applied twice; --markdown writes
                   RELIABILITY.md

The environment is --env, else MOENDA_ENV, else "local"; its settings are
the built-in defaults, then configs/base.yaml, then configs/ENV.yaml, then
--config files, in order, then MOENDA_* variables (MOENDA_POSTGRES__URL
sets postgres.url). The environments' files are built into the binary;
--config-dir reads them from a directory instead.
`

// Main runs the command line and returns the exit code: 0 on success, 1 on
// failure, 2 on a usage error. Errors go to stderr, one problem a line.
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("moenda", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	envName := fl.String("env", lookup(environ, "MOENDA_ENV"), "environment")
	configDir := fl.String("config-dir", "", "read configs from this directory")
	var extra []string
	fl.Func("config", "a YAML file layered after the environment's", func(path string) error {
		extra = append(extra, path)
		return nil
	})
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "moenda: %v\n%s", err, usage)
		return 2
	}
	if *envName == "" {
		*envName = "local"
	}
	cmd := strings.Join(fl.Args(), " ")
	run, ok := commands[cmd]
	switch fl.Arg(0) {
	case "serve":
		run, ok = serveCommand(fl.Args()[1:])
		if !ok && strings.Contains(cmd, "-role") {
			fmt.Fprintf(stderr, "moenda: usage: moenda serve [--role all|api|worker|relay]\n")
			return 2
		}
	case "bench":
		if fl.Arg(1) == "scale" {
			run, ok = scaleCommand(fl.Args()[2:])
			if !ok {
				fmt.Fprintf(stderr, "moenda: usage: moenda bench scale [--markdown FILE] [--json FILE] [--dir DIR]\n")
				return 2
			}
			break
		}
		run, ok = benchCommand(fl.Args()[1:])
	case "outbox":
		if fl.Arg(1) == "slots" {
			run, ok = slotsCommand(fl.Args()[2:])
			if !ok {
				fmt.Fprintf(stderr, "moenda: usage: moenda outbox slots [--drop NAME]\n")
				return 2
			}
		}
	case "faults":
		run, ok = faultsCommand(fl.Args()[1:])
		if !ok {
			fmt.Fprintf(stderr, "moenda: usage: moenda faults [--quick] [--only T03,T11] [--seed N] [--markdown FILE] [--json FILE] [--dir DIR]\n")
			return 2
		}
	case "replay":
		run, ok = replayCommand(fl.Args()[1:])
		if !ok {
			fmt.Fprintf(stderr, "moenda: usage: moenda replay PLUGIN --from earliest|TIME (TIME in RFC 3339, like 2026-11-30T00:00:00Z)\n")
			return 2
		}
	}
	if !ok && strings.Contains(" "+cmd, " -") {
		fmt.Fprintf(stderr, "moenda: flags go before the command: moenda --env ENV %s\n", strings.Fields(cmd)[0])
		return 2
	}
	if !ok {
		if cmd == "" {
			fmt.Fprintf(stderr, "moenda: no command given\n%s", usage)
		} else {
			fmt.Fprintf(stderr, "moenda: unknown command %q\n%s", cmd, usage)
		}
		return 2
	}

	var files fs.FS = configs.FS
	if *configDir != "" {
		files = os.DirFS(*configDir)
	}
	reg, err := Plugins()
	if err == nil {
		var cfg *Resolved
		cfg, err = Load(Source{Env: *envName, Files: files, Extra: extra, Environ: environ}, reg)
		if err == nil {
			if lookup(environ, "GOGC") == "" {
				debug.SetGCPercent(cfg.Runtime.GCPercent)
			}
			err = run(ctx, cfg, stdout, stderr)
		}
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "moenda: %s\n", line)
		}
		return 1
	}
	return 0
}

var commands = map[string]func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error{
	"migrate up":       migrateUp,
	"topology print":   topologyPrint,
	"config print":     func(_ context.Context, cfg *Resolved, stdout, _ io.Writer) error { return cfg.Print(stdout) },
	"health":           health,
	"outbox parked":    outboxParked,
	"outbox republish": outboxRepublish,
}

// health asks the serve process configured by cfg whether it is ready.
func health(ctx context.Context, cfg *Resolved, stdout, _ io.Writer) error {
	host, port, _ := net.SplitHostPort(cfg.HTTP.Addr) // validated by Load
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(host, port) + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = stdout.Write(body)
	return err
}

// serveCommand parses serve's own flags and returns the command.
func serveCommand(args []string) (func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error, bool) {
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	name := fl.String("role", string(ServeAll), "")
	if err := fl.Parse(args); err != nil || fl.NArg() > 0 {
		return nil, false
	}
	role, err := ParseServeRole(*name)
	if err != nil {
		return nil, false
	}
	return func(ctx context.Context, cfg *Resolved, _, stderr io.Writer) error {
		p, err := New(ctx, cfg, cfg.Log.Logger(stderr), WithRole(role))
		if err != nil {
			return err
		}
		return p.Run(ctx)
	}, true
}

func migrateUp(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
	if cfg.Broker.Kind == BrokerMemory {
		return errors.New("migrate: this environment keeps its data in memory (broker.kind memory); there is no database to migrate")
	}
	if err := postgres.EnsureDatabase(ctx, cfg.Postgres, cfg.Log.Logger(stderr)); err != nil {
		return err
	}
	pool, err := postgres.Connect(ctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := migrations.Up(ctx, pool, cfg.Log.Logger(stderr), cfg.migrations()...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrations: %d applied, schema up to date\n", n)
	return nil
}

func topologyPrint(_ context.Context, cfg *Resolved, stdout, _ io.Writer) error {
	top, err := cfg.RabbitTopology()
	if err != nil {
		return err
	}
	return top.Print(stdout)
}

func lookup(environ []string, key string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
