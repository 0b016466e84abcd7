package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

func transactor(t *testing.T) (*postgres.Transactor, testenv.Database) {
	t.Helper()
	db := testenv.Postgres(t)
	return transactorOn(db.Pool), db
}

// transactorOn is a Transactor over pool whose events go nowhere.
func transactorOn(pool *pgxpool.Pool) *postgres.Transactor {
	return postgres.NewTransactor(pool, outbox.New(func(string) error { return nil }, watermill.NewSlogLogger(testenv.Logger())))
}

// Five deliveries of one event at once: the handler runs once, the others
// wait for its commit and then skip; a failed run leaves no claim.
func TestOnceRunsOncePerConsumerAndEvent(t *testing.T) {
	txr, db := transactor(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE effects (event_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if ran, err := txr.Once(ctx, "q", "e-1", func(context.Context) error { return errors.New("boom") }); ran || err == nil {
		t.Fatalf("failed run: ran %v, err %v", ran, err)
	}
	var runs atomic.Int32
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			_, err := txr.Once(ctx, "q", "e-1", func(ctx context.Context) error {
				runs.Add(1)
				time.Sleep(50 * time.Millisecond) // the others arrive meanwhile
				return txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
					_, err := tx.Postgres().Exec(ctx, `INSERT INTO effects VALUES ('e-1')`)
					return err
				})
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var effects int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || effects != 1 {
		t.Fatalf("%d runs, %d effects", runs.Load(), effects)
	}
	if ran, err := txr.Once(ctx, "other", "e-1", func(context.Context) error { return nil }); !ran || err != nil {
		t.Fatalf("another consumer: ran %v, err %v", ran, err)
	}
}

// A delivery that waits on the claim of another one of the same event
// runs once that one rolls back.
func TestAWaitingDeliveryRunsWhenTheFirstRollsBack(t *testing.T) {
	txr, _ := transactor(t)
	ctx := context.Background()
	claimed, failed := make(chan struct{}), errors.New("boom")
	first := make(chan error, 1)
	go func() {
		_, err := txr.Once(ctx, "q", "e-3", func(context.Context) error {
			close(claimed)
			time.Sleep(100 * time.Millisecond) // the second arrives meanwhile
			return failed
		})
		first <- err
	}()
	<-claimed
	ran, err := txr.Once(ctx, "q", "e-3", func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Fatalf("the second delivery: ran %v, err %v", ran, err)
	}
	if err := <-first; !errors.Is(err, failed) {
		t.Fatalf("the first delivery: %v", err)
	}
}

// roundTrips counts the statements and batches a pool sends, each a
// round trip to the server.
type roundTrips struct{ n atomic.Int32 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A delivery whose handler writes one row costs four round trips (begin,
// claim, the row, commit), as a consumer writing its own claim does; a
// redelivery costs three and runs nothing.
func TestOnceCostsWhatAHandWrittenClaimCosts(t *testing.T) {
	db := testenv.Postgres(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	txr := transactorOn(pool)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (event_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	deliver := func() (bool, int32) {
		t.Helper()
		trips.n.Store(0)
		ran, err := txr.Once(ctx, "q", "e-4", func(ctx context.Context) error {
			return txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
				_, err := tx.Postgres().Exec(ctx, `INSERT INTO effects VALUES ('e-4')`)
				return err
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return ran, trips.n.Load()
	}
	if ran, n := deliver(); !ran || n != 4 {
		t.Fatalf("the delivery ran %v in %d round trips, want 4", ran, n)
	}
	if ran, n := deliver(); ran || n != 3 {
		t.Fatalf("the redelivery ran %v in %d round trips, want it skipped in 3", ran, n)
	}
}

// PostgreSQL refusing the data (a NUL character) is permanent: no retry
// of the same event can store it.
func TestOnceMakesDataErrorsPermanent(t *testing.T) {
	txr, db := transactor(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE notes (body TEXT)`); err != nil {
		t.Fatal(err)
	}
	_, err := txr.Once(ctx, "q", "e-2", func(ctx context.Context) error {
		return txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			_, err := tx.Postgres().Exec(ctx, `INSERT INTO notes VALUES ($1)`, "a\x00b")
			return err
		})
	})
	if event.ReasonOf(err) != event.ReasonInvalidData {
		t.Fatalf("error %v has reason %q", err, event.ReasonOf(err))
	}
}

func TestRememberReturnsTheEarlierReceipt(t *testing.T) {
	txr, _ := transactor(t)
	ctx := context.Background()
	remember := func(answer string) *handlers.Receipt {
		var earlier *handlers.Receipt
		err := txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			var err error
			earlier, err = tx.Remember(ctx, handlers.Receipt{Consumer: "POST /x", Key: "k", Fingerprint: []byte{1}, Answer: []byte(answer)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return earlier
	}
	if r := remember(`{"n":1}`); r != nil {
		t.Fatalf("first: %+v", r)
	}
	if r := remember(`{"n":2}`); r == nil || string(r.Answer) != `{"n": 1}` || r.Fingerprint[0] != 1 {
		t.Fatalf("second: %+v", r)
	}
}

func TestPruneInboxDeletesOnlyOldClaimsInBatches(t *testing.T) {
	txr, db := transactor(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO moenda_inbox (consumer, event_id, processed_at)
		SELECT 'q', 'old-' || i, now() - interval '8 days' FROM generate_series(1, 5) i
		UNION ALL SELECT 'q', 'new-' || i, now() FROM generate_series(1, 3) i`); err != nil {
		t.Fatal(err)
	}
	n, err := txr.PruneInbox(ctx, time.Now().Add(-7*24*time.Hour), 2)
	if err != nil || n != 5 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM moenda_inbox WHERE event_id LIKE 'new-%'`).Scan(&left); err != nil || left != 3 {
		t.Fatalf("%d recent claims left, %v", left, err)
	}
}

// A handler's own network failure (a mail server away) is not the
// database's: it does not mark the unit of work unavailable, which would
// retry it forever without spending an attempt.
func TestAHandlersNetworkErrorIsNotTheDatabases(t *testing.T) {
	txr, _ := transactor(t)
	_, dialErr := net.DialTimeout("tcp", "127.0.0.1:1", time.Second)
	if dialErr == nil {
		t.Skip("something listens on port 1")
	}
	err := txr.InTx(context.Background(), func(context.Context, handlers.Tx) error { return fmt.Errorf("send: %w", dialErr) })
	if !errors.Is(err, dialErr) || errors.Is(err, handlers.ErrUnavailable) {
		t.Fatalf("the handler's dial error came back as %v (unavailable: %v)", err, errors.Is(err, handlers.ErrUnavailable))
	}
}

// A database that takes no writes (a primary demoted by a failover whose
// address has not moved yet answers 25006) makes a handler's and a
// route's unit of work unavailable, not failed: the event waits without
// spending an attempt, and the route answers 503.
func TestAReadOnlyDatabaseIsUnavailable(t *testing.T) {
	txr, db := transactor(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE effects (event_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := db.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	db.Pool.Reset() // new sessions take the database's setting
	write := func(ctx context.Context) error {
		return txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			_, err := tx.Postgres().Exec(ctx, `INSERT INTO effects VALUES ('e-1')`)
			return err
		})
	}
	var pgErr *pgconn.PgError
	if err := write(ctx); !errors.Is(err, handlers.ErrUnavailable) || !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("a write on a read-only database: %v, want 25006 marked unavailable", err)
	}
	if ran, err := txr.Once(ctx, "q", "e-1", write); ran || !errors.Is(err, handlers.ErrUnavailable) || event.IsPermanent(err) {
		t.Fatalf("a delivery on a read-only database: ran %v, %v, want unavailable", ran, err)
	}
	// A session may still choose to write: the setting is only a default.
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cc.RuntimeParams["default_transaction_read_only"] = "off"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` RESET default_transaction_read_only`); err != nil {
		t.Fatal(err)
	}
	db.Pool.Reset()
	if ran, err := txr.Once(ctx, "q", "e-1", write); !ran || err != nil {
		t.Fatalf("once writable again: ran %v, %v", ran, err)
	}
}
