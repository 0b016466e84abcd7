package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/app/bench/median"
)

// statusKeep is how long serve keeps a status read (app's statusInterval):
// the overview's renders are spaced beyond it, so each reads afresh.
const statusKeep = 2 * time.Second

// consolePages times the console's Overview and Failures pages as a
// serve process (api and relay, the ledger on) renders them over the
// ledger ledgerPages filled, from the request to the last byte, on
// loopback. The overview renders the status afresh each time (the first
// visitor after a quiet spell); the failures page reads the groups and
// the first page of the list.
func consolePages(ctx context.Context, e *env, r *Result, n int) error {
	_, addr, stop, err := e.startServe(ctx, "MOENDA_FAILURES__ENABLED=true")
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Timeout: 30 * time.Second}
	get := func(path string) (time.Duration, error) {
		began := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET %s = %d", path, resp.StatusCode)
		}
		return time.Since(began), nil
	}
	if err := await.Until(ctx, time.Minute, "serve ready", func() (bool, error) {
		_, err := get("/readyz")
		return err == nil, nil
	}); err != nil {
		return err
	}
	pages := []struct {
		name, path string
		spaced     bool
	}{
		{"Overview (status read afresh each time)", "/console/overview", true},
		{"Failures (groups by cause and the first page of the list)", "/console/failures", false},
	}
	for _, p := range pages {
		if _, err := get(p.path); err != nil { // the templates and pool warm
			return err
		}
		times := make([]float64, 0, e.sz.renders)
		for range e.sz.renders {
			if p.spaced && !await.Sleep(ctx, statusKeep+100*time.Millisecond) {
				return ctx.Err()
			}
			d, err := get(p.path)
			if err != nil {
				return err
			}
			times = append(times, float64(d.Microseconds())/1000)
		}
		r.add(Row{Name: fmt.Sprintf("moenda: console %s over a ledger of %d failures, served, median of %d", p.name, n, e.sz.renders),
			Value: median.Of(times), Unit: "ms", Target: "<= 200 ms"}, 0, 200)
	}
	return nil
}
