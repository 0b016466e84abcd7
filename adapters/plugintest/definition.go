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

// CheckConfig checks def's configuration cfg (what its NewConfig gives,
// set): its Validate fails with an error holding want, or passes when
// want is "", and Build agrees, building cfg only when it is valid.
func CheckConfig(t testing.TB, def handlers.Definition, cfg any, want string) {
	t.Helper()
	err := def.ValidateConfig(cfg)
	if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
		t.Fatalf("Validate = %v, want %q", err, want)
	}
	if _, err := def.Build(cfg, handlers.Deps{Logger: testenv.Logger(), Tx: Memory()}); (err == nil) != (want == "") {
		t.Fatalf("Build = %v", err)
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
