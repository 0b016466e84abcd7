// Package testenv gives integration tests their own slice of the real
// services on the machine: a fresh PostgreSQL database with the migrations
// applied, and a fresh RabbitMQ virtual host, each removed when the test
// ends. Tests never share broker or database state, so packages can run in
// parallel and a test can restart connections without disturbing others.
// It also holds what those tests do alike on the services: a router
// consuming a queue, a count of a queue or a topic, a child process of the
// test binary.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/testenv/cluster"
	"github.com/moenda/moenda/migrations"
)

// Defaults match the services the README's test command starts; override
// with TEST_POSTGRES_URL and TEST_AMQP_URL.
const (
	defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
)

// LogWriter is where code under test logs: nowhere, unless TEST_LOG=1
// sends it to stderr.
func LogWriter() io.Writer {
	if os.Getenv("TEST_LOG") == "1" {
		return os.Stderr
	}
	return io.Discard
}

// Logger returns a debug logger writing to LogWriter.
func Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(LogWriter(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Database is a fresh PostgreSQL database for one test.
type Database struct {
	URL  string
	Pool *pgxpool.Pool
}

// Postgres creates a database with every migration applied and drops it
// when the test ends.
func Postgres(t testing.TB) Database {
	t.Helper()
	db := EmptyPostgres(t)
	if _, err := migrations.Up(context.Background(), db.Pool, Logger()); err != nil {
		t.Fatalf("testenv: migrate: %v", err)
	}
	return db
}

// EmptyPostgres creates a database with no tables and drops it when the test ends.
func EmptyPostgres(t testing.TB) Database {
	t.Helper()
	return newDatabase(t, false)
}

// ExclusivePostgres is EmptyPostgres for a test that must have the
// PostgreSQL cluster to itself. watermill-sql only reads rows older than
// the oldest transaction open anywhere in the cluster, so a test whose
// subscribers hold transactions open while messages await their ack (the
// universal pub/sub suite) would stall every other test's outbox, and be
// stalled by them. It waits until no other test uses PostgreSQL.
func ExclusivePostgres(t testing.TB) Database {
	t.Helper()
	return newDatabase(t, true)
}

// clusterLock is the advisory lock, in the admin database, that tests hold
// shared while they use PostgreSQL and ExclusivePostgres holds alone.
const clusterLock = 0x6d6f656e // "moen"

// PostgresAlone skips the test unless TEST_POSTGRES_ALONE=1, which
// .ci/test sets where it runs such tests alone, one package at a time. It
// is for a test that holds a write transaction open for seconds, or
// changes the server's settings: a transaction open anywhere holds back
// the polling reader, and every replication slot being created, on the
// whole server.
func PostgresAlone(t testing.TB) {
	t.Helper()
	if os.Getenv("TEST_POSTGRES_ALONE") != "1" {
		t.Skip("holds PostgreSQL-wide resources; set TEST_POSTGRES_ALONE=1 where no other test uses PostgreSQL (.ci/test does)")
	}
}

// SharePostgres is for a test that makes its own databases on the server:
// it holds the cluster lock shared until the test ends and returns the
// server's admin URL.
func SharePostgres(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return lockCluster(ctx, t, false)
}

// lockCluster takes the cluster lock, held until the test ends, and
// returns the admin URL: alone on a session of the test's own, or shared
// through the process's hold.
func lockCluster(ctx context.Context, t testing.TB, exclusive bool) string {
	t.Helper()
	base := os.Getenv("TEST_POSTGRES_URL")
	if base == "" {
		base = defaultPostgresURL
	}
	if !exclusive {
		holdShared(ctx, t, base)
		return base
	}
	admin := adminSession(ctx, t, base)
	// The lock lives as long as this session: until the test ends, after
	// its databases are dropped.
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", clusterLock); err != nil {
		t.Fatalf("testenv: lock: %v", err)
	}
	return base
}

// adminSession connects to the server's admin database.
func adminSession(ctx context.Context, t testing.TB, base string) *pgx.Conn {
	t.Helper()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testenv: PostgreSQL at %s is not reachable (run .ci/test, which starts it): %v", base, err)
	}
	return admin
}

// processHold is this process's shared hold of the cluster lock: one
// session, counted over the tests of the process that use PostgreSQL.
// Were each test's database a shared lock of its own, a test asking for
// a second one while ExclusivePostgres waits would queue behind it, and
// it behind the test's first: a deadlock PostgreSQL cannot see, the two
// sessions being one test's.
var processHold struct {
	sync.Mutex
	n       int
	session *pgx.Conn
}

// holdShared adds t to the process's hold, taking the lock shared when
// it is the first, and lets go of it when the last test ends.
func holdShared(ctx context.Context, t testing.TB, base string) {
	t.Helper()
	processHold.Lock()
	defer processHold.Unlock()
	if processHold.n == 0 {
		session := adminSession(ctx, t, base)
		if _, err := session.Exec(ctx, "SELECT pg_advisory_lock_shared($1)", clusterLock); err != nil {
			_ = session.Close(context.Background())
			t.Fatalf("testenv: lock: %v", err)
		}
		processHold.session = session
	}
	processHold.n++
	t.Cleanup(func() {
		processHold.Lock()
		defer processHold.Unlock()
		if processHold.n--; processHold.n == 0 {
			_ = processHold.session.Close(context.Background())
			processHold.session = nil
		}
	})
}

func newDatabase(t testing.TB, exclusive bool) Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base := lockCluster(ctx, t, exclusive)
	name := "moenda_t_" + suffix()
	admin := adminSession(ctx, t, base)
	_, err := admin.Exec(ctx, "CREATE DATABASE "+name)
	_ = admin.Close(ctx)
	if err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		dropDatabase(t, base, name)
	})
	return Database{URL: u.String(), Pool: pool}
}

// NoReplicationRole creates a login role without REPLICATION that may use
// the tables and sequences db has now, and returns its name and db as
// that role; the role is dropped when the test ends (roles are the whole
// server's).
func (db Database) NoReplicationRole(t testing.TB) (string, Database) {
	t.Helper()
	ctx := context.Background()
	role := "moenda_t_norepl_" + strings.TrimPrefix(db.Pool.Config().ConnConfig.Database, "moenda_t_")
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN NOREPLICATION",
		"GRANT ALL ON ALL TABLES IN SCHEMA public TO " + role,
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO " + role,
	} {
		if _, err := db.Pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
		if _, err := db.Pool.Exec(context.Background(), "DROP ROLE "+role); err != nil {
			t.Errorf("testenv: drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	u.User = url.User(role)
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(pool.Close)
	return role, Database{URL: u.String(), Pool: pool}
}

// MissingDatabase names a database that does not exist yet (its name has
// a space, which needs quoting) and returns the admin URL and a URL to it;
// whatever creates it, it is dropped when the test ends.
func MissingDatabase(t testing.TB) (admin, name, dbURL string) {
	t.Helper()
	admin = SharePostgres(t)
	name = Name("moenda_t new")
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	u.Path = "/" + name
	t.Cleanup(func() { dropDatabase(t, admin, name) })
	return admin, name, u.String()
}

// dropDatabase drops name on the server of admin, reporting a failure.
func dropDatabase(t testing.TB, admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Errorf("testenv: drop database %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	// A database with a logical replication slot cannot be dropped: end
	// the streams of its relays and drop their slots first.
	for {
		var left int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT CASE WHEN active THEN pg_terminate_backend(active_pid) ELSE pg_drop_replication_slot(slot_name) IS NULL END
			FROM pg_replication_slots WHERE database = $1) s`, name).Scan(&left)
		if err != nil && !strings.Contains(err.Error(), "is active for PID") {
			t.Errorf("testenv: drop the replication slots of %s: %v", name, err)
			return
		}
		if err == nil && left == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("testenv: drop database %s: %v", name, err)
	}
}

// VHost is a fresh RabbitMQ virtual host for one test.
type VHost struct {
	Name string
	URL  string
}

// RabbitMQ creates a virtual host the guest user may use and deletes it,
// with everything declared in it, when the test ends.
func RabbitMQ(t testing.TB) VHost {
	t.Helper()
	base := os.Getenv("TEST_AMQP_URL")
	if base == "" {
		base = defaultAMQPURL
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	name := "moenda-t-" + suffix()
	api := managementAPI{amqp: u}
	user := u.User.Username()
	if err := api.call("PUT", "vhosts/"+url.PathEscape(name), ""); errors.Is(err, errNoManagementAPI) {
		// Without the management plugin, rabbitmqctl does the same, a
		// second or so of CPU a call.
		Rabbitmqctl(t, "add_vhost", name)
		t.Cleanup(func() { Rabbitmqctl(t, "delete_vhost", name) })
		Rabbitmqctl(t, "set_permissions", "-p", name, user, ".*", ".*", ".*")
	} else if err != nil {
		t.Fatalf("testenv: %v", err)
	} else {
		t.Cleanup(func() {
			if err := api.call("DELETE", "vhosts/"+url.PathEscape(name), ""); err != nil {
				t.Errorf("testenv: %v", err)
			}
		})
		if err := api.call("PUT", "permissions/"+url.PathEscape(name)+"/"+url.PathEscape(user),
			`{"configure":".*","write":".*","read":".*"}`); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	u.Path = "/" + name
	return VHost{Name: name, URL: u.String()}
}

// errNoManagementAPI is a management API that does not answer: the
// plugin is not enabled (.ci/services enables it).
var errNoManagementAPI = errors.New("RabbitMQ's management API does not answer")

// managementAPI calls RabbitMQ's HTTP management API, at
// TEST_RABBITMQ_API_URL or on port 15672 of the AMQP URL's host, with the
// AMQP URL's credentials.
type managementAPI struct{ amqp *url.URL }

func (m managementAPI) call(method, path, body string) error {
	base := os.Getenv("TEST_RABBITMQ_API_URL")
	if base == "" {
		base = "http://" + net.JoinHostPort(m.amqp.Hostname(), "15672")
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(base, "/")+"/api/"+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	pass, _ := m.amqp.User.Password()
	req.SetBasicAuth(m.amqp.User.Username(), pass)
	req.Header.Set("Content-Type", "application/json")
	client := http.Client{Timeout: time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w: %v", errNoManagementAPI, err)
		}
		return fmt.Errorf("management API: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("management API: %s %s: %s: %s", method, path, resp.Status, msg)
	}
	return nil
}

// Channel opens an AMQP channel to url, closed when the test ends.
func Channel(t testing.TB, url string) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return ch
}

// Consume collects every delivery on queue, acking each, until the test
// ends; the returned function lists those received so far. The list
// shares its array with the collector, which only ever appends past its
// end: a wait that asks for it every few milliseconds through a drain of
// 50,000 copies nothing.
func Consume(t testing.TB, url, queue string) func() []amqp091.Delivery {
	t.Helper()
	deliveries, err := Channel(t, url).Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("testenv: consume %s: %v", queue, err)
	}
	var mu sync.Mutex
	var got []amqp091.Delivery
	go func() {
		for d := range deliveries {
			_ = d.Ack(false)
			mu.Lock()
			got = append(got, d)
			mu.Unlock()
		}
	}()
	return func() []amqp091.Delivery {
		mu.Lock()
		defer mu.Unlock()
		return got[:len(got):len(got)]
	}
}

// ReadyMessages is how many messages wait in queue, not delivered.
func ReadyMessages(t testing.TB, url, queue string) int {
	t.Helper()
	state, err := Channel(t, url).QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return state.Messages
}

// RabbitCluster starts a RabbitMQ cluster of n nodes for the test, on
// loopback ports of its own, and kills it when the test ends.
func RabbitCluster(t testing.TB, n int) *cluster.RabbitMQ {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := cluster.StartRabbitMQ(ctx, Logger(), t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// PostgresPair starts a PostgreSQL primary and a standby streaming from
// it (synchronously or not) for the test, on loopback ports of their own,
// and stops both when the test ends.
func PostgresPair(t testing.TB, synchronous bool) *cluster.PostgresPair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := cluster.StartPostgresPair(ctx, Logger(), t.TempDir(), synchronous)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Rabbitmqctl runs rabbitmqctl with args and returns its output.
func Rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := cluster.Rabbitmqctl(context.Background(), args...)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return out
}

// Eventually polls cond until it holds, failing the test when timeout
// passes, as sparingly as await.Sparing: a cond that walks every
// delivery of a long drain takes a tenth of a core, not the drain's.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := await.Sparing(context.Background(), timeout, what, func() (bool, error) { return cond(), nil }); err != nil {
		t.Fatal(err)
	}
}

// Name returns a unique name with prefix, for resources tests create.
func Name(prefix string) string { return fmt.Sprintf("%s-%s", prefix, suffix()) }

// ClosedAddr is a loopback host:port nothing listens on, for a broker
// that is away. It lies below the ephemeral range: a client dialling a
// closed port inside it can, once in a while, connect to itself.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}
