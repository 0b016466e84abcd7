package router

import (
	"errors"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/ThreeDotsLabs/watermill/message"
)

// GrowStack hands the message on and returns what the handler returns.
func TestGrowStackHandsTheMessageOn(t *testing.T) {
	in := message.NewMessage("m-1", []byte("body"))
	out := []*message.Message{message.NewMessage("m-2", nil)}
	failed := errors.New("handler failed")
	var got *message.Message
	res, err := GrowStack(func(m *message.Message) ([]*message.Message, error) {
		got = m
		return out, failed
	})(in)
	if got != in || len(res) != 1 || res[0] != out[0] || !errors.Is(err, failed) {
		t.Fatalf("handler got %v; returned %v, %v", got, res, err)
	}
}

// A handler that goes 12 KiB deep, on a goroutine of its own as Watermill
// runs each, has its stack copied under it, unless GrowStack grew it
// first: the address of one of its locals, taken before and after the
// descent, tells. The collector is off meanwhile: it may shrink a stack
// it scans, which would move the local too.
func TestGrowStackSparesTheHandlerACopy(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	copied := func(grow bool) bool {
		var moved bool
		h := func(*message.Message) ([]*message.Message, error) {
			var here byte
			before := uintptr(unsafe.Pointer(&here))
			descend(48)
			moved = uintptr(unsafe.Pointer(&here)) != before
			return nil, nil
		}
		if grow {
			h = GrowStack(h)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = h(message.NewMessage("m-1", nil))
		}()
		<-done
		return moved
	}
	if !copied(false) {
		t.Fatal("the handler's stack was not copied without GrowStack: goroutines start bigger than this test assumes")
	}
	if copied(true) {
		t.Fatal("the handler's stack was copied after GrowStack")
	}
}

// BenchmarkGrowStack is a message handled on a goroutine of its own, as
// Watermill handles each, by a handler whose frames reach 12 KiB deep:
// its stack grown as the handler goes, against grown at the start.
func BenchmarkGrowStack(b *testing.B) {
	deep := func(*message.Message) ([]*message.Message, error) {
		descend(48)
		return nil, nil
	}
	for _, c := range []struct {
		name string
		h    message.HandlerFunc
	}{{"as it goes", deep}, {"at the start", GrowStack(deep)}} {
		b.Run(c.name, func(b *testing.B) {
			msg := message.NewMessage("m-1", nil)
			done := make(chan struct{})
			for b.Loop() {
				go func() {
					_, _ = c.h(msg)
					done <- struct{}{}
				}()
				<-done
			}
		})
	}
}

// descend takes n frames of about 256 bytes each.
//
//go:noinline
func descend(n int) byte {
	var frame [224]byte
	if n > 0 {
		frame[n%len(frame)] = descend(n - 1)
	}
	return frame[n%len(frame)]
}
