package amqp

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

// countedConn counts the writes that reach the socket under a corkedConn.
type countedConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	wrote  bytes.Buffer
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.wrote.Write(p)
	c.mu.Unlock()
	if c.Conn == nil {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *countedConn) count() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.wrote.String()
}

// Corked, a connection writes nothing until it is flushed or holds
// corkLimit bytes, then all of it in order; uncorked, each write goes
// straight through.
func TestCorkedConnHoldsWritesUntilFlushed(t *testing.T) {
	under := &countedConn{}
	c := &corkedConn{Conn: under}
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	c.cork()
	for _, s := range []string{"b", "c", "d"} {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if n, got := under.count(); n != 1 || got != "a" {
		t.Fatalf("corked: %d writes of %q reached the socket, want only the one before the cork", n, got)
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	if n, got := under.count(); n != 2 || got != "abcd" {
		t.Fatalf("flushed: %d writes of %q, want 2 of \"abcd\"", n, got)
	}
	big := bytes.Repeat([]byte("x"), corkLimit)
	if _, err := c.Write(big); err != nil {
		t.Fatal(err)
	}
	if n, _ := under.count(); n != 3 {
		t.Fatalf("corked, %d writes after corkLimit bytes were written, want it written at once", n)
	}
	if _, err := c.Write([]byte("e")); err != nil {
		t.Fatal(err)
	}
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("f")); err != nil {
		t.Fatal(err)
	}
	if n, got := under.count(); n != 5 || got != "abcd"+string(big)+"ef" {
		t.Fatalf("uncorked: %d writes, want 5 in order", n)
	}
}

// A batch of the relay's size reaches the broker in a few writes rather
// than one a message, and every message of it is delivered.
func TestABatchGoesOutInFewWrites(t *testing.T) {
	pub, url, q := declaredPublisher(t, "corked", 256)
	var under *countedConn
	dial := pub.dial
	pub.dial = func(network, addr string) (net.Conn, error) {
		conn, err := dial(network, addr)
		under = &countedConn{Conn: conn}
		return under, err
	}
	topics, msgs := newMessages("corked", 1)
	if err := pub.PublishBatch(context.Background(), topics, msgs); err != nil {
		t.Fatal(err)
	}
	before, _ := under.count()
	topics, msgs = newMessages("corked", 256)
	if err := pub.PublishBatch(context.Background(), topics, msgs); err != nil {
		t.Fatal(err)
	}
	writes, wrote := under.count()
	writes -= before
	if max := len(wrote)/corkLimit + 4; writes > max {
		t.Fatalf("256 messages went out in %d writes, want at most %d", writes, max)
	}
	if got := testenv.ReadyMessages(t, url, q); got != 257 {
		t.Fatalf("%s holds %d messages, want 257", q, got)
	}
}

// A batch that fails while its connection is corked ends, and the next
// one publishes: closing the connection writes a close the broker must
// answer, which a corked connection would hold for ever.
func TestABatchFailingWhileCorkedEnds(t *testing.T) {
	pub, url, q := declaredPublisher(t, "corkfail", 256)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() {
		topics, msgs := newMessages("corkfail", 3)
		done <- pub.PublishBatch(ended, topics, msgs)
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a batch whose context had ended was confirmed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a batch failing while corked still runs after 10 s")
	}
	topics, msgs := newMessages("corkfail", 3)
	if err := pub.PublishBatch(context.Background(), topics, msgs); err != nil {
		t.Fatal(err)
	}
	if got := testenv.ReadyMessages(t, url, q); got < 3 {
		t.Fatalf("%s holds %d messages, want at least the 3 of the second batch", q, got)
	}
}
