package router

import "github.com/ThreeDotsLabs/watermill/message"

// stackPad is the frame growStack asks for: 12 KiB, asked for near the
// stack's base, makes Go give the goroutine a 16 KiB stack at once. The
// chain, with the inbox's transaction in pgx, takes a message's stack to
// 8 KiB; a tracing span's frames take it past that.
const stackPad = 12 << 10

// GrowStack gives the goroutine that handles a message the stack its
// handling reaches, before the rest of the chain runs. Watermill starts a
// goroutine for each message, with a stack of a few KiB, and Go grows a
// stack by copying it to one twice the size, walking every frame on it
// to move its pointers. Left to grow as it went, a message's stack was
// copied deep in the chain, inside pgx: once, and with tracing on twice,
// which made most of a span's cost to the consumer (BENCHMARKS.md,
// "Router: a message's stack grown at the start"). Grown here, it holds
// three frames and the copy is short.
func GrowStack(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		growStack()
		return h(msg)
	}
}

// growStack takes a frame of stackPad bytes, which Go must make room for
// before the function runs.
//
//go:noinline
func growStack() {
	var pad [stackPad]byte
	keep(pad[:])
}

// keep stops the compiler from dropping pad.
//
//go:noinline
func keep([]byte) {}
