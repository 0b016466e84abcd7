package app

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/providers/structs"
	"github.com/knadh/koanf/v2"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/redact"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/tracing"
	"github.com/moenda/moenda/app/console"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/migrations"
	"github.com/moenda/moenda/router"
)

// Config is the resolved configuration: the packages' defaults, then
// configs/base.yaml, then configs/<env>.yaml, then --config files, then
// MOENDA_* variables.
type Config struct {
	Log       LogConfig       `koanf:"log"`
	HTTP      HTTPConfig      `koanf:"http"`
	Auth      AuthConfig      `koanf:"auth"`
	Metrics   MetricsConfig   `koanf:"metrics"`
	Tracing   tracing.Config  `koanf:"tracing"`
	Broker    BrokerConfig    `koanf:"broker"`
	Postgres  postgres.Config `koanf:"postgres"`
	AMQP      amqp.Config     `koanf:"amqp"`
	Kafka     kafka.Config    `koanf:"kafka"`
	Outbox    outbox.Config   `koanf:"outbox"`
	Inbox     InboxConfig     `koanf:"inbox"`
	Failures  failures.Config `koanf:"failures"`
	Router    router.Config   `koanf:"router"`
	Topology  topology.Config `koanf:"topology"`
	Handlers  HandlersConfig  `koanf:"handlers"`
	Analytics AnalyticsConfig `koanf:"analytics"`
	Runtime   RuntimeConfig   `koanf:"runtime"`
	Console   console.Config  `koanf:"console"`

	// Env is the environment the config was loaded for.
	Env string `koanf:"-"`
}

// Resolved is a configuration that Load has decoded and validated, with
// the enabled plugins and their decoded sections: what the topology, the
// catalog and the platform are built from. Only Load makes one, so nothing
// can build from settings that were not checked.
type Resolved struct {
	*Config
	plugins []enabledPlugin
	// leftOut are the registered plugins the defaults leave out because
	// they need PostgreSQL, which this environment does not have.
	leftOut []string
	// queues are the queues of every registered plugin, enabled or not.
	queues map[string]bool
	// payloads check POST /v1/events' payloads of the events whose
	// payload type an enabled plugin declares.
	payloads payloadChecks
}

// LogConfig sets the one logger everything writes to.
type LogConfig struct {
	Level  string `koanf:"level"`
	Format string `koanf:"format"`
}

// HTTPConfig sets the HTTP server.
type HTTPConfig struct {
	Addr            string        `koanf:"addr"`
	MaxBodyBytes    int64         `koanf:"max_body_bytes"`
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout"`
	// ReadHeaderTimeout and ReadTimeout close a connection whose client
	// has not sent its headers, or its whole request, in time: without
	// them a client that dribbles bytes holds a connection, a goroutine
	// and a file for as long as it likes (slowloris). ReadTimeout runs
	// from the connection's first byte, so it must fit a body of
	// max_body_bytes at the pace of the slowest client served.
	ReadHeaderTimeout time.Duration `koanf:"read_header_timeout"`
	ReadTimeout       time.Duration `koanf:"read_timeout"`
	// WriteTimeout runs from the end of the request's headers to the end
	// of the answer, so it covers reading the body as well: at least
	// ReadTimeout.
	WriteTimeout time.Duration `koanf:"write_timeout"`
	// IdleTimeout closes a kept-alive connection that sends no new
	// request.
	IdleTimeout time.Duration `koanf:"idle_timeout"`
}

// InboxConfig sets how long the inbox remembers processed events.
type InboxConfig struct {
	// Retention is how long an event's claim is kept. A redelivery that
	// arrives later runs the handler again, so it must outlast the longest
	// redelivery path (the retry schedule, plus any time a message may wait
	// in a queue).
	Retention time.Duration `koanf:"retention"`
	// PruneInterval is how often older claims are deleted, in small batches.
	PruneInterval time.Duration `koanf:"prune_interval"`
}

func (c InboxConfig) validate() error {
	var errs []error
	if c.Retention < time.Minute {
		errs = append(errs, fmt.Errorf("inbox.retention must be at least 1m, got %s", c.Retention))
	}
	if c.PruneInterval < time.Second {
		errs = append(errs, fmt.Errorf("inbox.prune_interval must be at least 1s, got %s", c.PruneInterval))
	}
	return errors.Join(errs...)
}

// RuntimeConfig tunes the Go runtime.
type RuntimeConfig struct {
	// GCPercent is the garbage collector's target (GOGC), applied unless
	// the GOGC variable is set. Each event allocates its envelope a few
	// times over; at the default 100 the collector ran often enough to cost
	// a visible share of the outbox write rate, which a higher target buys
	// back for a little more heap (see BENCHMARKS.md, "Go runtime: the
	// collector's target").
	GCPercent int `koanf:"gc_percent"`
}

// BrokerConfig chooses the transport.
type BrokerConfig struct {
	// Kind is amqp (RabbitMQ) or kafka (Kafka consumer groups, group =
	// queue name), both fed by the PostgreSQL outbox, or memory.
	Kind string `koanf:"kind"`
}

// AnalyticsConfig is the event log beside RabbitMQ.
type AnalyticsConfig struct {
	Kafka AnalyticsKafkaConfig `koanf:"kafka"`
}

// AnalyticsKafkaConfig sets the second relay, to Kafka.
type AnalyticsKafkaConfig struct {
	// Enabled starts a relay that publishes every event to Kafka too, with
	// its own position in the outbox, and moves the replayable plugins'
	// subscriptions there (one consumer group per plugin, named after it),
	// where `moenda replay` can read them again.
	Enabled bool `koanf:"enabled"`
	// RelayGroup names the Kafka relay's position in the outbox.
	RelayGroup string `koanf:"relay_group"`
}

// usesKafka reports whether anything in this configuration talks to Kafka.
func (c *Config) usesKafka() bool {
	return c.Broker.Kind == BrokerKafka || c.Analytics.Kafka.Enabled
}

// kafkaRelayGroup is the outbox position of the relay that feeds Kafka.
func (c *Config) kafkaRelayGroup() string {
	if c.Broker.Kind == BrokerKafka {
		return c.Outbox.ConsumerGroup
	}
	return c.Analytics.Kafka.RelayGroup
}

// relayGroups are the outbox positions this configuration's relays
// keep, each once: the broker's, and Kafka's beside it.
func (c *Config) relayGroups() []string {
	groups := []string{c.Outbox.ConsumerGroup}
	if c.usesKafka() && c.kafkaRelayGroup() != c.Outbox.ConsumerGroup {
		groups = append(groups, c.kafkaRelayGroup())
	}
	return groups
}

// HandlersConfig picks the plugins; every other key is a plugin's section.
type HandlersConfig struct {
	// Enabled names the plugins that run; unset, every registered plugin
	// runs but the opt-in ones and, without PostgreSQL, those that need it.
	Enabled  []string       `koanf:"enabled"`
	Sections map[string]any `koanf:",remain"`
}

type enabledPlugin struct {
	def handlers.Definition
	cfg any
}

// migrations are the enabled plugins' own migrations, in the order the
// plugins are enabled.
func (c *Resolved) migrations() []migrations.Set {
	var sets []migrations.Set
	for _, p := range c.plugins {
		if p.def.Migrations != nil {
			sets = append(sets, migrations.Set{Name: p.def.Name, Files: p.def.Migrations})
		}
	}
	return sets
}

// defaults is the configuration before any file or variable: each package
// gives its own, so configs/ holds only what an environment changes.
func defaults() *Config {
	return &Config{
		Log: LogConfig{Level: "info", Format: "text"},
		HTTP: HTTPConfig{Addr: "127.0.0.1:8080", MaxBodyBytes: 1 << 20, ShutdownTimeout: 10 * time.Second,
			// 1 MiB in 30 s is 35 KB/s, a poor mobile link.
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 45 * time.Second, IdleTimeout: 2 * time.Minute},
		Auth:      AuthConfig{Tokens: []string{}},
		Metrics:   MetricsConfig{Enabled: true, PollInterval: 5 * time.Second},
		Tracing:   tracing.DefaultConfig(),
		Broker:    BrokerConfig{Kind: BrokerAMQP},
		Postgres:  postgres.DefaultConfig(),
		AMQP:      amqp.DefaultConfig(),
		Kafka:     kafka.DefaultConfig(),
		Outbox:    outbox.DefaultConfig(),
		Inbox:     InboxConfig{Retention: 7 * 24 * time.Hour, PruneInterval: time.Hour},
		Failures:  failures.DefaultConfig(),
		Router:    router.DefaultConfig(),
		Topology:  topology.DefaultConfig(),
		Runtime:   RuntimeConfig{GCPercent: 400},
		Console:   console.DefaultConfig(),
		Analytics: AnalyticsConfig{Kafka: AnalyticsKafkaConfig{RelayGroup: "moenda-relay-kafka"}},
	}
}

// Source says where configuration comes from.
type Source struct {
	Env   string // environment name: configs/<Env>.yaml
	Files fs.FS  // holds base.yaml and the overlays
	// Extra are files on disk (--config) layered after the environment's
	// overlay, in order: what one deployment adds, such as queues for its
	// own adapters.
	Extra   []string
	Environ []string // KEY=value pairs; those starting MOENDA_ override keys
}

const envPrefix = "MOENDA_"

// Load reads, decodes and validates the configuration. It opens no
// connection; every problem found is reported at once.
func Load(src Source, reg *handlers.Registry) (*Resolved, error) {
	k := koanf.New(".")
	for _, name := range []string{"base.yaml", src.Env + ".yaml"} {
		b, err := fs.ReadFile(src.Files, name)
		if errors.Is(err, fs.ErrNotExist) && name != "base.yaml" {
			return nil, fmt.Errorf("config: no environment %q: %s does not exist (environments: %s)", src.Env, name, strings.Join(environments(src.Files), ", "))
		}
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := k.Load(rawbytes.Provider(b), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("config: %s: %w", name, err)
		}
	}
	for _, path := range src.Extra {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: --config: %w", err)
		}
		if err := k.Load(rawbytes.Provider(b), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
	}
	if err := k.Load(env.Provider(".", env.Opt{
		Prefix:        envPrefix,
		EnvironFunc:   func() []string { return src.Environ },
		TransformFunc: envKey,
	}), nil); err != nil {
		return nil, fmt.Errorf("config: environment: %w", err)
	}

	cfg := defaults()
	cfg.Env = src.Env
	if err := decode(k.Raw(), cfg, ""); err != nil {
		return nil, err
	}
	var leftOut []string
	if cfg.Handlers.Enabled == nil {
		run, out := reg.Defaults(!cfg.inProcess())
		cfg.Handlers.Enabled = []string{}
		for _, d := range run {
			cfg.Handlers.Enabled = append(cfg.Handlers.Enabled, d.Name)
		}
		for _, d := range out {
			leftOut = append(leftOut, d.Name)
		}
	}
	plugins, err := cfg.validate(reg)
	if err != nil {
		return nil, err
	}
	queues := map[string]bool{}
	for _, name := range reg.Names() {
		d, _ := reg.Lookup(name)
		for _, s := range d.Subscriptions {
			queues[d.Queue(s)] = true
		}
	}
	payloads, err := compilePayloads(plugins)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &Resolved{Config: cfg, plugins: plugins, leftOut: leftOut, queues: queues, payloads: payloads}, nil
}

// envKey maps MOENDA_POSTGRES__URL to postgres.url. MOENDA_ENV chooses the
// environment and is not a key.
func envKey(key, value string) (string, any) {
	if key == envPrefix+"ENV" {
		return "", nil
	}
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(key, envPrefix), "__", ".")), value
}

// decode decodes raw into out strictly: an unknown key is an error naming
// its full path. prefix is out's own path.
func decode(raw any, out any, prefix string) error {
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		TagName:          "koanf",
		Result:           out,
		ErrorUnused:      true,
		ZeroFields:       true, // a list replaces the default's, never writes into its array
		WeaklyTypedInput: true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
			mapstructure.TextUnmarshallerHookFunc(),
		),
	})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := dec.Decode(raw); err != nil {
		return describeDecode(err, prefix, reflect.TypeOf(out).Elem().String())
	}
	return nil
}

// describeDecode rewrites mapstructure's errors to name each key by its
// full path and say how to fix it. mapstructure names the root by its
// type (root, like app.Config); here it is prefix.
func describeDecode(err error, prefix, root string) error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var de *mapstructure.DecodeError
		if errors.As(err, &de) {
			name := de.Name()
			if name == root {
				name = ""
			}
			path := joinPath(prefix, name)
			if keys, ok := strings.CutPrefix(de.Unwrap().Error(), "has invalid keys: "); ok {
				for _, key := range strings.Split(keys, ", ") {
					out = append(out, fmt.Errorf("config: unknown key %s; check its spelling in configs/*.yaml or the MOENDA_* variables", joinPath(path, key)))
				}
				return
			}
			out = append(out, fmt.Errorf("config: %s: %w", path, de.Unwrap()))
			return
		}
		out = append(out, fmt.Errorf("config: %w", err))
	}
	walk(err)
	return errors.Join(out...)
}

func joinPath(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "." + b
}

// validate checks everything and returns the enabled plugins with their
// decoded sections.
func (c *Config) validate(reg *handlers.Registry) ([]enabledPlugin, error) {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(c.Log.validate())
	add(c.HTTP.validate())
	add(c.Auth.validate(c.HTTP.Addr))
	add(c.Metrics.validate())
	add(c.Tracing.Validate())
	if !slices.Contains(brokerKinds, c.Broker.Kind) {
		add(fmt.Errorf("broker.kind %q must be one of %s", c.Broker.Kind, strings.Join(brokerKinds, ", ")))
	}
	if !c.inProcess() {
		add(c.Postgres.Validate())
	}
	if c.Broker.Kind == BrokerAMQP {
		add(c.AMQP.Validate())
	}
	if c.usesKafka() {
		add(c.Kafka.Validate())
	}
	if a := c.Analytics.Kafka; a.Enabled {
		switch {
		case c.inProcess():
			add(fmt.Errorf("analytics.kafka.enabled: the Kafka relay reads the PostgreSQL outbox, which broker.kind %s does not keep; use an environment with broker.kind amqp (local, compose)", c.Broker.Kind))
		case a.RelayGroup == "":
			add(errors.New("analytics.kafka.relay_group is empty"))
		case c.Broker.Kind == BrokerAMQP && a.RelayGroup == c.Outbox.ConsumerGroup:
			add(fmt.Errorf("analytics.kafka.relay_group %q must differ from outbox.consumer_group: each relay keeps its own position", a.RelayGroup))
		case c.Broker.Kind == BrokerAMQP && outbox.GroupsAlike(a.RelayGroup, c.Outbox.ConsumerGroup):
			add(fmt.Errorf("analytics.kafka.relay_group %q and outbox.consumer_group %q differ only in case or punctuation, and their replication slots would read alike: make them differ in a letter or a digit",
				a.RelayGroup, c.Outbox.ConsumerGroup))
		}
	}
	add(c.Outbox.Validate())
	if c.usesKafka() && c.Outbox.MaxEventBytes > c.Kafka.MaxEventBytes() {
		add(fmt.Errorf("outbox.max_event_bytes %d is more than a Kafka record of kafka.max_record_bytes %d holds (%d, less its framing): the Kafka relay would park such events; lower it, or raise kafka.max_record_bytes with the brokers' limit",
			c.Outbox.MaxEventBytes, c.Kafka.MaxRecordBytes, c.Kafka.MaxEventBytes()))
	}
	add(c.Inbox.validate())
	add(c.Failures.Validate())
	if len(c.Failures.Queues) > 0 && c.Broker.Kind != BrokerAMQP {
		add(fmt.Errorf("failures.queues names RabbitMQ queues, and broker.kind is %s; leave it empty here", c.Broker.Kind))
	}
	add(c.Router.Validate())
	add(c.Topology.Validate())
	add(c.Console.Validate())
	if c.Runtime.GCPercent < 25 {
		add(fmt.Errorf("runtime.gc_percent must be at least 25, got %d", c.Runtime.GCPercent))
	}

	// Every section is decoded strictly, enabled or not, so a typo never
	// waits for the day its plugin is switched on; only enabled plugins'
	// configs are validated.
	decoded := map[string]any{}
	for name, raw := range c.Handlers.Sections {
		d, ok := reg.Lookup(name)
		if !ok {
			add(fmt.Errorf("config: unknown key handlers.%s: no plugin is named %q (known: %s)", name, name, strings.Join(reg.Names(), ", ")))
			continue
		}
		pc := d.NewConfig()
		if err := decode(raw, pc, "handlers."+name); err != nil {
			add(err)
			continue
		}
		decoded[name] = pc
	}
	defs, err := reg.Select(c.Handlers.Enabled)
	add(err)
	var plugins []enabledPlugin
	for _, d := range defs {
		pc, ok := decoded[d.Name]
		if !ok {
			pc = d.NewConfig()
		}
		add(d.ValidateConfig(pc))
		if d.NeedsPostgres && c.inProcess() {
			add(fmt.Errorf("handlers.enabled: plugin %s keeps its state in PostgreSQL, which broker.kind %s does not have; leave it out of handlers.enabled in this environment", d.Name, c.Broker.Kind))
		}
		plugins = append(plugins, enabledPlugin{def: d, cfg: pc})
	}
	return plugins, errors.Join(errs...)
}

func (l LogConfig) validate() error {
	var errs []error
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, l.Level) {
		errs = append(errs, fmt.Errorf("log.level %q must be debug, info, warn or error", l.Level))
	}
	if l.Format != "text" && l.Format != "json" {
		errs = append(errs, fmt.Errorf("log.format %q must be text or json", l.Format))
	}
	return errors.Join(errs...)
}

func (h HTTPConfig) validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(h.Addr); err != nil || port == "" {
		errs = append(errs, fmt.Errorf("http.addr %q must be host:port, like 127.0.0.1:8080", h.Addr))
	}
	if h.MaxBodyBytes < 1 {
		errs = append(errs, fmt.Errorf("http.max_body_bytes must be at least 1, got %d", h.MaxBodyBytes))
	}
	if h.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("http.shutdown_timeout must be positive, got %s", h.ShutdownTimeout))
	}
	// Zero means no limit to net/http; here it would let slow clients
	// hold connections for ever, so every timeout must be set.
	for _, t := range []struct {
		key string
		d   time.Duration
	}{{"read_header_timeout", h.ReadHeaderTimeout}, {"read_timeout", h.ReadTimeout}, {"write_timeout", h.WriteTimeout}, {"idle_timeout", h.IdleTimeout}} {
		if t.d <= 0 {
			errs = append(errs, fmt.Errorf("http.%s must be positive, got %s", t.key, t.d))
		}
	}
	if h.ReadHeaderTimeout > h.ReadTimeout {
		errs = append(errs, fmt.Errorf("http.read_header_timeout (%s) must not exceed http.read_timeout (%s): the request's headers are part of it", h.ReadHeaderTimeout, h.ReadTimeout))
	}
	if h.WriteTimeout < h.ReadTimeout {
		errs = append(errs, fmt.Errorf("http.write_timeout (%s) must be at least http.read_timeout (%s): it runs from the end of the headers, so it covers reading the body too", h.WriteTimeout, h.ReadTimeout))
	}
	return errors.Join(errs...)
}

// Logger returns the logger the configuration asks for, writing to w.
func (l LogConfig) Logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Print writes the resolved configuration, one key = value a line in key
// order, with the passwords of URLs (tracing.endpoint's too), the
// secrets and webhook paths hidden.
func (c *Resolved) Print(w io.Writer) error {
	k := koanf.New(".")
	if err := k.Load(structs.Provider(c.Config, "koanf"), nil); err != nil {
		return err
	}
	for _, p := range c.plugins {
		if err := k.Load(structs.Provider(p.cfg, "koanf"), nil, koanf.WithMergeFunc(func(src, dest map[string]any) error {
			dest["handlers."+p.def.Name] = src
			return nil
		})); err != nil {
			return err
		}
	}
	flat := k.All()
	keys := make([]string, 0, len(flat))
	for key := range flat {
		if key != "handlers.Sections" && !strings.HasPrefix(key, "handlers.Sections.") { // raw sections, printed decoded above
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, key := range keys {
		v := flat[key]
		switch {
		case strings.HasSuffix(key, "webhook.url"):
			v = redact.Path(fmt.Sprint(v))
		case strings.HasSuffix(key, ".url"), strings.HasSuffix(key, ".endpoint"):
			v = redact.URL(fmt.Sprint(v))
		case strings.HasSuffix(key, ".urls"):
			v = redactEach(v)
		case (strings.HasSuffix(key, "password") || strings.HasSuffix(key, "secret")) && fmt.Sprint(v) != "":
			v = "[redacted]"
		}
		fmt.Fprintf(&b, "%s = %v\n", key, plain(v))
	}
	_, err := w.Write([]byte(b.String()))
	return err
}

// redactEach hides the password of each URL in a list of them.
func redactEach(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		return redact.URL(fmt.Sprint(v))
	}
	out := make([]string, rv.Len())
	for i := range out {
		out[i] = redact.URL(fmt.Sprint(rv.Index(i).Interface()))
	}
	return out
}

// plain returns v with pointers replaced by what they point at (nil by
// "inherit", the meaning of an unset override), in maps and slices too,
// so printing shows values rather than addresses.
func plain(v any) any {
	if v == nil {
		return "inherit"
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			return "inherit"
		}
		return plain(rv.Elem().Interface())
	case reflect.Map:
		out := map[string]any{}
		for _, k := range rv.MapKeys() {
			out[fmt.Sprint(k.Interface())] = plain(rv.MapIndex(k).Interface())
		}
		return out
	case reflect.Slice:
		if rv.IsNil() {
			return "inherit"
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = plain(rv.Index(i).Interface())
		}
		return out
	default:
		return v
	}
}

// environments lists the overlays in files.
func environments(files fs.FS) []string {
	matches, _ := fs.Glob(files, "*.yaml")
	var out []string
	for _, m := range matches {
		if m != "base.yaml" {
			out = append(out, strings.TrimSuffix(m, ".yaml"))
		}
	}
	return out
}
