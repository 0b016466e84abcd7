// Command moenda runs the moenda event platform with the plugins it
// ships; see app.Main. A team's own binary makes the same call with its
// plugins (README, "Your own plugins").
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/moenda/moenda/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}()
	code := app.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, app.WithPlugins(app.Shipped()...))
	stop()
	os.Exit(code)
}
