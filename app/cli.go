// Package app is moenda's composition root: it loads and validates the
// configuration, wires adapters, router and plugins together, serves HTTP
// and runs the command line.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/migrations"
)

// Main runs the command line and returns the exit code: 0 on success, 1 on
// failure, 2 on a usage error (an unknown command, a bad flag, a missing
// argument). Errors go to stderr, one problem a line. A team's own binary
// calls it from its main.go with its plugins (WithPlugins).
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer, opts ...MainOption) int {
	c := &cli{environ: environ, stdout: stdout, stderr: stderr, plugins: Shipped()}
	for _, o := range opts {
		o(c)
	}
	root := c.commands()
	if args == nil {
		args = []string{} // cobra reads os.Args for nil
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	for _, line := range strings.Split(strings.TrimRight(err.Error(), "\n"), "\n") {
		fmt.Fprintf(stderr, "moenda: %s\n", line)
	}
	var f failure
	if errors.As(err, &f) {
		return 1
	}
	fmt.Fprintf(stderr, "moenda: see %q\n", cmd.CommandPath()+" --help")
	return 2
}

// MainOption chooses what a binary that runs Main carries.
type MainOption func(*cli)

// WithPlugins makes the binary carry defs instead of the shipped plugins:
// a team's main.go lists its own, with Shipped()... to keep moenda's beside
// them. Whatever the list, the fault suite's probe is carried too, off
// unless `moenda faults` asks for it.
func WithPlugins(defs ...handlers.Definition) MainOption {
	return func(c *cli) { c.plugins = defs }
}

// failure marks an error a command met while it ran (exit 1); any other
// error is cobra's or the command line's (a usage error, exit 2).
type failure struct{ err error }

func (f failure) Error() string { return f.err.Error() }
func (f failure) Unwrap() error { return f.err }

// runFunc is a command that needs the resolved configuration.
type runFunc func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error

// cli holds what the command line was given: its global flags and the
// process's environment and output.
type cli struct {
	environ        []string
	stdout, stderr io.Writer
	plugins        []handlers.Definition
	env            string
	configDir      string
	extra          []string
}

// groupAnnotation marks a command that only holds subcommands.
const groupAnnotation = "moenda.group"

// commands builds the command tree.
func (c *cli) commands() *cobra.Command {
	root := &cobra.Command{
		Use:   "moenda",
		Short: "moenda runs events from a PostgreSQL outbox through a broker to plugins' handlers",
		Long: `moenda runs events from a PostgreSQL outbox through a broker to plugins' handlers.

The environment is --env, else MOENDA_ENV, else "local"; its settings are
the built-in defaults, then configs/base.yaml, then configs/ENV.yaml, then
--config files, in order, then MOENDA_* variables (MOENDA_POSTGRES__URL
sets postgres.url). The environments' files are built into the binary;
--config-dir reads them from a directory instead. Flags go anywhere on
the line.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q", strings.Join(args, " "))
			}
			return errors.New("no command given")
		},
		RunE:          func(*cobra.Command, []string) error { return nil }, // Args refuses every call
		SilenceErrors: true,
		SilenceUsage:  true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true, // completion below takes the shells moenda documents
		},
	}
	global := root.PersistentFlags()
	env := lookup(c.environ, "MOENDA_ENV")
	if env == "" {
		env = "local"
	}
	global.StringVar(&c.env, "env", env, "the environment `ENV`: configs/ENV.yaml over configs/base.yaml; unset, MOENDA_ENV, else local")
	global.StringArrayVar(&c.extra, "config", nil, "a YAML `FILE` layered after the environment's (repeatable)")
	global.StringVar(&c.configDir, "config-dir", "", "read base.yaml and the environments' files from `DIR` instead of the built-in ones")

	root.AddCommand(
		c.serveCommand(),
		group("migrate", "change the database schema",
			c.command("up", "apply pending database migrations", migrateUp)),
		group("topology", "the broker topology",
			c.command("print", "print the exchanges, queues and bindings serve declares", topologyPrint)),
		c.asyncAPICommand(),
		group("config", "the configuration",
			c.command("print", "print the resolved configuration (passwords hidden)", func(_ context.Context, cfg *Resolved, stdout, _ io.Writer) error {
				return cfg.Print(stdout)
			})),
		c.command("health", "exit 0 when the local serve answers /readyz with 200 (for container healthchecks)", health),
		group("outbox", "the outbox's parked rows and replication slots",
			c.command("parked", "list the outbox rows the relays set aside: rows that name no event, or whose routing key no exchange carries", outboxParked),
			c.command("republish", "publish the parked rows this configuration now routes; list the others, which stay parked", outboxRepublish),
			c.slotsCommand()),
		c.failuresCommand(),
		c.redriveCommand(),
		c.journeyCommand(),
		c.auditCommand(),
		c.replayCommand(),
		c.benchCommand(),
		c.faultsCommand(),
		completionCommand(root),
	)
	return root
}

// command makes a leaf command that takes no arguments and runs with the
// configuration.
func (c *cli) command(name, short string, run runFunc) *cobra.Command {
	return &cobra.Command{Use: name, Short: short, Args: cobra.NoArgs, RunE: c.withConfig(run)}
}

// withConfig loads the configuration, once the command line is parsed and
// only for the commands that need it, and runs run with it.
func (c *cli) withConfig(run runFunc) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		cfg, err := c.load()
		if err == nil {
			err = run(cmd.Context(), cfg, c.stdout, c.stderr)
		}
		if err != nil {
			return failure{err}
		}
		return nil
	}
}

// load resolves the configuration the global flags and the environment
// name.
func (c *cli) load() (*Resolved, error) {
	var files fs.FS = configs.FS
	if c.configDir != "" {
		files = os.DirFS(c.configDir)
	}
	reg, err := newRegistry(c.plugins)
	if err != nil {
		return nil, err
	}
	cfg, err := Load(Source{Env: c.env, Files: files, Extra: c.extra, Environ: c.environ}, reg)
	if err != nil {
		return nil, err
	}
	if lookup(c.environ, "GOGC") == "" {
		debug.SetGCPercent(cfg.Runtime.GCPercent)
	}
	return cfg, nil
}

// group makes a command that only holds subcommands: without one, it is
// a usage error.
func group(name, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use:         name + " COMMAND",
		Short:       short,
		Annotations: map[string]string{groupAnnotation: "true"},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			var names []string
			for _, s := range cmd.Commands() {
				names = append(names, s.Name())
			}
			return fmt.Errorf("%s needs a command: %s", cmd.CommandPath(), strings.Join(names, ", "))
		},
		RunE: func(*cobra.Command, []string) error { return nil }, // Args refuses every call
	}
	g.AddCommand(subs...)
	return g
}

// serveCommand is `serve [--role all|api|worker|relay]`.
func (c *cli) serveCommand() *cobra.Command {
	role := ServeAll
	cmd := c.command("serve", "run the HTTP API, the consumers and the outbox relay, or one of them", func(ctx context.Context, cfg *Resolved, _, stderr io.Writer) error {
		p, err := New(ctx, cfg, cfg.Log.Logger(stderr), WithRole(role))
		if err != nil {
			return err
		}
		return p.Run(ctx)
	})
	cmd.Long = `Run the HTTP API, the consumers and the outbox relay (--role all, the
default), or one of them: api serves the HTTP API, worker runs the
plugins' handlers, relay moves the outbox to the broker.`
	cmd.Flags().Var(&role, "role", "run `PART`: all (every part), api, worker or relay")
	return cmd
}

// completionCommand is `completion bash|zsh|fish`: a script that completes
// moenda's commands and flags in that shell.
func completionCommand(root *cobra.Command) *cobra.Command {
	shells := map[string]func(io.Writer) error{
		"bash": func(w io.Writer) error { return root.GenBashCompletionV2(w, true) },
		"zsh":  root.GenZshCompletion,
		"fish": func(w io.Writer) error { return root.GenFishCompletion(w, true) },
	}
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "print a script that completes moenda's commands and flags in that shell",
		Long: `Print a script that completes moenda's commands and flags in that shell:
  source <(moenda completion bash)
  moenda completion zsh > "${fpath[1]}/_moenda"
  moenda completion fish | source`,
		ValidArgs: []string{"bash", "zsh", "fish"},
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := shells[args[0]](cmd.OutOrStdout()); err != nil {
				return failure{err}
			}
			return nil
		},
	}
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

func migrateUp(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
	if cfg.inProcess() {
		return fmt.Errorf("migrate: this environment keeps its data in memory (broker.kind %s); there is no database to migrate", cfg.Broker.Kind)
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

// writeTable writes rows as aligned columns, the first row being the
// heads.
func writeTable(w io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// orDash is s, or - for an empty cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
