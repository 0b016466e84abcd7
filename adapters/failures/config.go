package failures

import (
	"errors"
	"fmt"
	"time"
)

// Config is what YAML sets for the failure ledger (failures.*).
type Config struct {
	// Enabled reads every dead-letter queue of the topology, and Queues,
	// into the ledger, which then holds the dead letters instead of the
	// broker: a relay process does it, one at a time per database.
	Enabled bool `koanf:"enabled"`
	// Queues are further queues of dead letters to read: a foreign
	// service's dead-letter queue (seed 004's rental.dlq), declared by
	// topology.queues or by its owner.
	Queues []string `koanf:"queues"`
	// BatchSize is the most dead letters recorded in one transaction, and
	// Linger how long a batch waits to fill.
	BatchSize int           `koanf:"batch_size"`
	Linger    time.Duration `koanf:"linger"`
	// Retention is how long resolved and archived failures are kept after
	// their last failure; unresolved ones are never pruned. PruneInterval
	// is how often older ones are deleted.
	Retention     time.Duration `koanf:"retention"`
	PruneInterval time.Duration `koanf:"prune_interval"`
	// MaxRedrives refuses to re-drive a failure sent back that many times
	// already: it fails for a reason a re-drive does not fix.
	MaxRedrives int `koanf:"max_redrives"`
	// SettleTimeout is how long a re-driven failure may be neither
	// handled nor failed again before it is called unsettled (and
	// unresolved again), so none stays re-driving for ever.
	SettleTimeout time.Duration `koanf:"settle_timeout"`
	// AllowEdit lets an admin edit a failure's body and re-drive the
	// edit. Off by default: an edit sends a body no publisher wrote.
	AllowEdit bool `koanf:"allow_edit"`
}

// DefaultConfig leaves the ledger off, and sizes its batches for a small
// machine.
func DefaultConfig() Config {
	return Config{Queues: []string{}, BatchSize: 100, Linger: 200 * time.Millisecond,
		Retention: 30 * 24 * time.Hour, PruneInterval: time.Hour, MaxRedrives: 3, SettleTimeout: time.Hour}
}

// Validate reports every bad key at once.
func (c Config) Validate() error {
	var errs []error
	if c.BatchSize < 1 || c.BatchSize > MaxPage {
		errs = append(errs, fmt.Errorf("failures.batch_size must be 1 to %d, got %d", MaxPage, c.BatchSize))
	}
	if c.Linger < 0 || c.Linger > time.Minute {
		errs = append(errs, fmt.Errorf("failures.linger must be 0 to 1m, got %s", c.Linger))
	}
	if c.Retention < time.Hour {
		errs = append(errs, fmt.Errorf("failures.retention must be at least 1h, got %s", c.Retention))
	}
	if c.PruneInterval < time.Second {
		errs = append(errs, fmt.Errorf("failures.prune_interval must be at least 1s, got %s", c.PruneInterval))
	}
	if c.MaxRedrives < 1 {
		errs = append(errs, fmt.Errorf("failures.max_redrives must be at least 1, got %d", c.MaxRedrives))
	}
	if c.SettleTimeout < time.Second {
		errs = append(errs, fmt.Errorf("failures.settle_timeout must be at least 1s, got %s", c.SettleTimeout))
	}
	if c.AllowEdit && !c.Enabled {
		// The process that ingests sends re-drives: without it, an edit
		// would wait for ever.
		errs = append(errs, errors.New("failures.allow_edit needs failures.enabled: the re-drive an edit starts is sent by the process that ingests the dead letters"))
	}
	for i, q := range c.Queues {
		if q == "" {
			errs = append(errs, fmt.Errorf("failures.queues[%d] is empty", i))
		}
	}
	return errors.Join(errs...)
}
