package plugintest

import (
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// CheckDefinition checks what the platform needs of a plugin's definition
// before it runs it: its migrations hold migration (a file name), it
// registers beside others (the plugins whose events it reads), and its
// default configuration builds over a unit of work in memory. It returns
// the plugin built.
func CheckDefinition(t testing.TB, def handlers.Definition, migration string, others ...handlers.Definition) handlers.Plugin {
	t.Helper()
	if _, err := fs.Stat(def.Migrations, migration); err != nil {
		t.Fatal(err)
	}
	if _, err := handlers.NewRegistry(append([]handlers.Definition{def}, others...)...); err != nil {
		t.Fatal(err)
	}
	p, err := def.Build(def.NewConfig(), handlers.Deps{Logger: testenv.Logger(), Tx: Memory()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ConfigCase is a configuration of a plugin that CheckConfigs checks.
type ConfigCase struct {
	Name   string
	Config any    // what the definition's NewConfig gives, set
	Want   string // a part of its Validate error; "" when it is valid
}

// CheckConfigs checks each case, as a subtest by its name: the
// configuration's Validate fails with an error holding Want, or passes
// when Want is "", and def's Build agrees, building it only when valid.
func CheckConfigs(t *testing.T, def handlers.Definition, cases []ConfigCase) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			err := def.ValidateConfig(c.Config)
			if c.Want == "" && err != nil || c.Want != "" && (err == nil || !strings.Contains(err.Error(), c.Want)) {
				t.Fatalf("Validate = %v, want %q", err, c.Want)
			}
			if _, err := def.Build(c.Config, handlers.Deps{Logger: testenv.Logger(), Tx: Memory()}); (err == nil) != (c.Want == "") {
				t.Fatalf("Build = %v", err)
			}
		})
	}
}

// CheckReach checks, for each event name in want, whether a published
// event of that name reaches the subscription s and its handler (see
// Reaches): want says whether it should.
func CheckReach(t testing.TB, s handlers.Subscription, want map[string]bool) {
	t.Helper()
	for name, w := range want {
		if got := Reaches(s, event.Event{Name: name}); got != w {
			t.Errorf("%s reaches the handler of %s: %v, want %v", name, s.Name, got, w)
		}
	}
}

// Reaches tells whether a published e reaches the subscription and its
// handler handles it: one of the bindings' topic patterns matches, then
// Handles lists e (an empty Handles takes every event).
func Reaches(s handlers.Subscription, e event.Event) bool {
	return slices.ContainsFunc(s.Events, func(p string) bool { return topology.Match(p, e.RoutingKey()) }) &&
		(len(s.Handles) == 0 || slices.Contains(s.Handles, e.Name))
}
