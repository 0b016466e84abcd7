package credito

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/plugintest"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

func TestAnalysis(t *testing.T) {
	ctx := context.Background()
	store := plugintest.Stores(t, Plugin())["postgres"]()
	if err := store.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		_, err := tx.Postgres().Exec(ctx, `INSERT INTO credito_cpfs_bloqueados (cpf, motivo) VALUES ('11144477735', 'pendência financeira')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	p, err := Plugin().Build(&Config{Latencia: 20 * time.Millisecond}, handlers.Deps{Logger: testenv.Logger(), Tx: store.Tx})
	if err != nil {
		t.Fatal(err)
	}
	esperar, handle := p.Prepares[SubSolicitacoes], p.Handlers[SubSolicitacoes]
	if esperar == nil {
		t.Fatal("no prepare step: the analysis would wait inside its unit of work, holding a database connection")
	}
	// analisar runs the two steps as the chain does: the wait, then the
	// unit of work.
	analisar := func(ctx context.Context, e event.Event) error {
		ctx, err := esperar(ctx, e)
		if err != nil {
			return err
		}
		return handle(ctx, e)
	}
	requested := func(body string) event.Event {
		return plugintest.Event(EventRentalRequested, "locacoes", json.RawMessage(body))
	}
	const approved, rejected = "6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b10", "6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b11"
	start := time.Now()
	for _, e := range []event.Event{
		requested(`{"rentalId":"` + approved + `","userCpf":"52998224725","userEmail":"ana@example.com"}`),
		requested(`{"rentalId":"` + rejected + `","userCpf":"11144477735"}`),
		requested(`{"rentalId":"` + rejected + `","userCpf":"11144477735"}`), // the same rental again
	} {
		if err := analisar(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 60*time.Millisecond {
		t.Errorf("three analyses took %s: the latency was not waited", took)
	}
	var got []AnalysisCompleted
	for _, b := range store.Committed() {
		e, err := event.Decode(b)
		if err != nil || e.Name != EventAnalysisCompleted || e.AggregateID == "" {
			t.Fatalf("committed %s: %v", b, err)
		}
		var a AnalysisCompleted
		if err := json.Unmarshal(e.Payload, &a); err != nil {
			t.Fatal(err)
		}
		got = append(got, a)
	}
	if len(got) != 2 || got[0].RentalID != approved || got[0].Resultado != Approved || got[0].Motivo != nil ||
		got[1].RentalID != rejected || got[1].Resultado != Rejected || got[1].Motivo == nil || *got[1].Motivo != "CPF com restrição: pendência financeira" {
		t.Fatalf("analyses %+v", got)
	}
	for _, bad := range []string{`[]`, `{"rentalId":"x","userCpf":"52998224725"}`, `{"rentalId":"` + approved + `","userCpf":"529.982.247-25"}`} {
		if err := analisar(ctx, requested(bad)); !event.IsPermanent(err) {
			t.Errorf("%s: %v, want a permanent error", bad, err)
		}
		if err := handle(ctx, requested(bad)); !event.IsPermanent(err) {
			t.Errorf("%s, given to the handler: %v, want a permanent error", bad, err)
		}
	}
	if err := (Config{Latencia: time.Hour}).Validate(); err == nil {
		t.Error("an hour of latency was accepted")
	}
}
