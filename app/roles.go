package app

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// ServeRole is the part of moenda a serve process runs (serve --role):
// processes of different roles share the database and the broker, so each
// part scales on its own.
type ServeRole string

// Serve roles.
const (
	// ServeAll runs the three parts below in one process.
	ServeAll ServeRole = "all"
	// ServeAPI serves the HTTP API: requests commit business rows and
	// events to the outbox. Any number may run.
	ServeAPI ServeRole = "api"
	// ServeWorker runs the plugins' handlers on the queues they consume.
	// Any number may run; they share each queue.
	ServeWorker ServeRole = "worker"
	// ServeRelay runs the outbox relays. Several may run: one relays, the
	// others stand by and take over when it goes.
	ServeRelay ServeRole = "relay"
)

var serveRoles = []ServeRole{ServeAll, ServeAPI, ServeWorker, ServeRelay}

// ParseServeRole reads a role as serve --role names it.
func ParseServeRole(s string) (ServeRole, error) {
	r := ServeRole(s)
	if !slices.Contains(serveRoles, r) {
		names := make([]string, len(serveRoles))
		for i, r := range serveRoles {
			names[i] = string(r)
		}
		return "", fmt.Errorf("serve --role %q: choose one of %s", s, strings.Join(names, ", "))
	}
	return r, nil
}

func (r ServeRole) api() bool    { return r == ServeAll || r == ServeAPI }
func (r ServeRole) worker() bool { return r == ServeAll || r == ServeWorker }
func (r ServeRole) relay() bool  { return r == ServeAll || r == ServeRelay }

// WithRole runs only role's part of moenda; New runs all of it otherwise.
func WithRole(role ServeRole) Option {
	return func(p *Platform) { p.role = role }
}

var _ pflag.Value = (*ServeRole)(nil)

// Set reads the role from serve's --role flag.
func (r *ServeRole) Set(s string) error {
	role, err := ParseServeRole(s)
	if err != nil {
		return err
	}
	*r = role
	return nil
}

func (r *ServeRole) String() string { return string(*r) }

// Type names the flag's value in serve's help.
func (r *ServeRole) Type() string { return "role" }
