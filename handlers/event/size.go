package event

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Size is how many bytes msg takes on a broker, near enough to bound it:
// its body and its metadata (a Kafka record's headers, an AMQP message's
// properties), without the framing of either.
func Size(msg *message.Message) int {
	n := len(msg.Payload)
	for k, v := range msg.Metadata {
		n += len(k) + len(v)
	}
	return n
}

// TooLargeError is an event larger than its outbox takes: a broker would
// refuse it (a Kafka record over its limit), so it is refused where it
// is written and its unit of work fails, rather than stall a relay. HTTP
// routes answer it with 413.
type TooLargeError struct {
	Event string // its name
	Size  int    // encoded, as Size counts
	Limit int
	// Setting names what sets Limit, for the message.
	Setting string
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("event %s encodes to %d bytes, over the limit of %d bytes an event may take (%s); send less in one event",
		e.Event, e.Size, e.Limit, e.Setting)
}
