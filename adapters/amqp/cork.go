package amqp

import (
	"net"
	"sync"
)

// corkLimit is how much a corked connection holds before it writes:
// about sixteen of a relay's messages of 1 KiB per write(2), and the
// broker has the first of a batch before the rest is marshaled (64 KiB
// drained slower; BENCHMARKS.md, "Relay: a batch in few writes").
const corkLimit = 16 << 10

// corkedConn is the BatchPublisher's connection to the broker. amqp091
// flushes every publish, so a batch of 256 messages costs 256 writes,
// and those writes were the largest part of the relay's CPU per message.
// While corked, what amqp091 writes is held and written in writes of
// corkLimit bytes, and the rest when the publisher flushes or uncorks:
// before it waits for a confirm, since the broker cannot confirm what it
// has not received. Uncorked, writes go straight through, so heartbeats
// and the connection's other traffic between batches are not held.
type corkedConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	held   []byte
}

// dialer is amqp091.Config's Dial.
type dialer func(network, addr string) (net.Conn, error)

// corkedDial dials with dial and hands the connection it made to keep,
// corkable, before the AMQP handshake runs on it.
func corkedDial(dial dialer, keep func(*corkedConn)) dialer {
	return func(network, addr string) (net.Conn, error) {
		conn, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		c := &corkedConn{Conn: conn}
		keep(c)
		return c, nil
	}
}

// Write implements net.Conn: it holds p while the connection is corked.
func (c *corkedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return c.Conn.Write(p)
	}
	c.held = append(c.held, p...)
	if len(c.held) >= corkLimit {
		if err := c.writeHeld(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// cork holds what is written from now on.
func (c *corkedConn) cork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = true
}

// flush writes what is held, and holds on.
func (c *corkedConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeHeld()
}

// uncork writes what is held, and writes through from now on.
func (c *corkedConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	return c.writeHeld()
}

func (c *corkedConn) writeHeld() error {
	if len(c.held) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.held)
	c.held = c.held[:0]
	return err
}
