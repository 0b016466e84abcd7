package app

import (
	"fmt"

	"github.com/moenda/moenda/handlers/schema"
)

// payloadChecks hold the payloads of events to the schemas of the types
// their plugins declare, by event name: the enabled plugins' only, the
// ones the AsyncAPI document shows.
type payloadChecks map[string]*schema.Validator

// compilePayloads readies the checks of the enabled plugins' declared
// payload types.
func compilePayloads(plugins []enabledPlugin) (payloadChecks, error) {
	checks := payloadChecks{}
	for _, p := range plugins {
		for _, pl := range p.def.Payloads {
			if checks[pl.Event] != nil {
				continue // the registry saw that plugins agree on the type
			}
			s, err := pl.Schema()
			if err != nil {
				return nil, fmt.Errorf("plugin %s: %w", p.def.Name, err)
			}
			v, err := schema.Compile(pl.Event, s)
			if err != nil {
				return nil, fmt.Errorf("plugin %s: %w", p.def.Name, err)
			}
			checks[pl.Event] = v
		}
	}
	return checks, nil
}
