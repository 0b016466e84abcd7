// Command moenda runs the moenda event platform; see app.Main.
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
	code := app.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
