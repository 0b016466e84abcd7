package amqp

import (
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// headerFrameOverhead is what a content header frame holds besides the
// properties: the frame's type, channel, size and end octet (8), and the
// class, weight, body size and property flags (14).
const headerFrameOverhead = 8 + 14

// fits says why pub cannot travel in frames of frameMax bytes, or nil.
// A message's properties (its headers among them) go in one frame that is
// never split: RabbitMQ answers a larger one by closing the connection, so
// the publisher would dial and fail again on every retry. amqp091 writes a
// short string (a header's name, the correlation or message id, the type)
// of more than 255 bytes as its length modulo 256, a garbled value the
// broker may take. Either is refused before it is sent.
func fits(pub amqp091.Publishing, frameMax int) error {
	size := headerFrameOverhead + 1 + 8 // delivery mode and timestamp
	for _, p := range [...]struct{ name, s string }{{"content type", pub.ContentType}, {"correlation id", pub.CorrelationId},
		{"message id", pub.MessageId}, {"type", pub.Type}} {
		if len(p.s) > 255 {
			return fmt.Errorf("its %s is %d bytes, over AMQP's 255-byte short string", p.name, len(p.s))
		}
		size += 1 + len(p.s)
	}
	size += 4 // the table's length
	largest, largestSize := "", 0
	for k, v := range pub.Headers {
		if len(k) > 255 {
			return fmt.Errorf("the name of a header is %d bytes, over AMQP's 255-byte short string", len(k))
		}
		n := 1 + len(k) + 1 + 9 // a name, a type octet, and any scalar
		if s, ok := v.(string); ok {
			n = 1 + len(k) + 1 + 4 + len(s)
		}
		size += n
		if n > largestSize {
			largest, largestSize = k, n
		}
	}
	if frameMax > 0 && size > frameMax {
		return fmt.Errorf("its properties take %d bytes (header %s %d of them), over the %d-byte frame the broker negotiated (frame_max), and AMQP does not split them",
			size, largest, largestSize, frameMax)
	}
	return nil
}
